# Helpers shared by the family rule files; no pipeline logic lives here.
import hashlib
import json
import re
import shlex
from pathlib import Path

from stages.core.layout import prompt_sources, stage_module, stage_path, stage_sources
from stages.core.llm import gpus, llm_settings  # a model stage's `llm` param; the GPUs its backend holds

RUN = config["run"]
RUNDIR = f"data/runs/{RUN}"
SHARDS = [f"{i:05d}" for i in range(config["shards"])]
RELEASES_DIR = config.get("releases_dir", "data/releases")
CATALOG_FILE = f"{RUNDIR}/catalog.duckdb"

RELEASES = []  # release manifests, appended by each enabled family
EVALUATIONS = []  # evaluation reports, appended by each family that can be evaluated
CATALOG_TABLES = []  # stage outputs the catalog exposes, appended by each family
EVAL_TABLES = []  # evaluation outputs the catalog exposes (catalog_evaluations: all of them under `evaluate`, else those that exist)


def stage_code(name):
    """The stage module and every stages/ module it imports, as inputs: editing any of them reruns
    the rule (Snakemake can't see imports; stages/core/layout.py scans them)."""
    return stage_sources(name)


def prompt_files(*names):
    """Prompt files and the answer schemas they name, as inputs: editing either reruns the rule."""
    return prompt_sources(*names)


def stage_version(name):
    """The stage's VERSION, read from its source without importing it (no heavy imports at DAG time)."""
    match = re.search(r'^VERSION = "([^"]+)"', stage_path(name).read_text(), re.M)
    return match.group(1) if match else "0"


def settings(value):
    """Params for a stage as inline JSON (Snakemake reruns a rule when its params change)."""
    return json.dumps(value, sort_keys=True)


def release_version(given):
    """What an evaluation reads, as a rule param: a release folder or file named in the config, by
    its path and a hash of its content (the folder's parquet/ tables and JSONL records; its images
    are named by their hash), so pointing an evaluation at another release, or a release whose
    content changed under old file times, reruns it. This run's own release (given None) is a
    manifest input its release rule rewrites: nothing to add."""
    if not given:
        return ""
    path = Path(given)
    folder = path.parent if path.suffix == ".duckdb" else path  # a MAVIS folder may be named by its benchmark.duckdb
    files = sorted(folder.glob("parquet/*.parquet")) + sorted(folder.glob("*.jsonl")) if folder.is_dir() else [path]
    digest = hashlib.sha256()
    for file in files:
        if file.is_file():
            digest.update(file.name.encode() + b"\0" + hashlib.sha256(file.read_bytes()).digest())
    return f"{path.resolve()}:{digest.hexdigest()[:16]}"


def catalog_evaluations(wildcards=None):
    """The evaluation outputs the catalog exposes: every one when `evaluate` is a target (they are
    built first, so `evaluate` leaves the catalog current), else those that exist (the `release`
    target never runs an evaluation for its catalog, and after `evaluate` it sees the same inputs,
    so `snakemake -n release` stays a no-op)."""
    targets = workflow.dag_settings.targets if workflow.dag_settings else set()
    return list(EVAL_TABLES) if "evaluate" in targets else [p for p in EVAL_TABLES if Path(p).exists()]


def stage_io(wildcards, input, output):
    """--input/--output flags from the rule's named inputs and outputs. Inputs named `stage` or
    `prompts` are listed only so that editing them reruns the rule; outputs named `sidecar_*` are
    the runner's rejects/report files, declared so downstream rules can depend on them."""
    args = []
    for flag, files in (("--input", input), ("--output", output)):
        for name, value in files.items():
            if name in ("stage", "prompts") or name.startswith("sidecar_"):
                continue
            for path in [value] if isinstance(value, str) else value:
                args += [flag, f"{name}={path}"]
    return " ".join(shlex.quote(a) for a in args)


def stage_shell(name):
    """The one shape of every stage rule's command."""
    return f"python -m {stage_module(name)} {{params.io}} --params {{params.settings:q}} > {{log}} 2>&1"


def run_path(family, stage, table, shard=None):
    """data/runs/<run>/<family>/<stage>/<table>[.<shard>].parquet: the catalog reads the family
    and table name back from this layout."""
    suffix = f".{shard}" if shard is not None else ""
    return f"{RUNDIR}/{family}/{stage}/{table}{suffix}.parquet"


def log_path(family, stage, shard=None):
    return f"{RUNDIR}/logs/{family}/{stage}{'.' + shard if shard else ''}.log"


def bench_path(family, stage, shard=None):
    return f"{RUNDIR}/benchmarks/{family}/{stage}{'.' + shard if shard else ''}.tsv"


rule build_catalog:
    input:
        stage=stage_code("build_catalog"),
        tables=lambda w: CATALOG_TABLES + catalog_evaluations(),
    output:
        catalog=CATALOG_FILE,
    params:
        io=stage_io,
        version=stage_version("build_catalog"),
        settings=settings({}),
    log:
        f"{RUNDIR}/logs/build_catalog.log",
    benchmark:
        f"{RUNDIR}/benchmarks/build_catalog.tsv"
    shell:
        stage_shell("build_catalog")
