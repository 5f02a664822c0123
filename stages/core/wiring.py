"""The wiring layer: from the configuration and the stage declarations to every rule's inputs,
outputs and params (README "Architecture").

A rule file (`rules/<family>.smk`) is plain Python that declares *steps* with `W.step(...)`: the
rule's name, the stage it runs, its upstream edges and what differs from the stage's declaration.
Everything else is derived here from the step and the stage manifest (`schemas/stages.yaml`,
generated from every `STAGE` declaration): the output paths, the rejects and report sidecars, the
log and benchmark files, the stage's code and prompts as inputs (editing either reruns the rule),
the replay WARCs of a fetching stage, the catalog's tables and each release's upstream rejects.
`rules/steps.smk` turns every step into a Snakemake rule; `python -m stages.core.explain` reads
the same steps without Snakemake.

A rule's params are one merge, in this order (later wins):

  1. the stage's Param defaults: the seed's settings (applied by the stage itself);
  2. the run-wide sections, each mapped onto the params that take it: `llm` (every model param,
     through `llm_settings`), `fetch`, the provider of `retrieval.search_web`, `images.store`;
  3. the shared stage's section, for a stage run under several rules (`images.cache_images`
     for every cache_images rule, `retrieval.fetch_pages` for every fetch_pages rule);
  4. the rule's own section (`<family>.<stage>`), only the keys the stage declares as params;
  5. the rule's wiring: columns, scope and per-job values the rule file fixes (not settable).

The configuration itself is layered by Snakemake: config/config.yaml (run-wide defaults and the
papers' shared tables), then config/demo.yaml when no --configfile is given (the demo's caps),
then each --configfile in order, then --config.
"""
from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable


from .declarations import MANIFEST, load_manifest
from .layout import ROOT, prompt_sources, stage_sources
from .llm.registry import gpus
from .llm.settings import DEFAULTS as LLM_DEFAULTS
from .llm.settings import llm_settings

# Families whose tables are evaluation outputs: the catalog shows them once they exist, and the
# default `release` target never runs an evaluation to build its catalog.
EVALUATION_FAMILIES = ("eval_mcitebench", "eval_mavis", "eval_m2rag", "citeeval", "attribution")
SIDECARS = ("rejects.parquet", "report.json")


class WiringError(ValueError):
    """A rule file and a stage declaration disagree; raised while the DAG is parsed."""


def manifest() -> dict[str, dict]:
    """Every stage's declaration (schemas/stages.yaml), read once per process; no stage is imported."""
    return load_manifest()


def declaration(stage: str) -> dict:
    try:
        return manifest()[stage]
    except KeyError:
        raise WiringError(f"no stage {stage!r} in {MANIFEST.relative_to(ROOT)} (python -m stages.core.declarations --write)") from None


def lookup(config: dict, path: str, default: Any = None) -> Any:
    """config['a']['b'] for 'a.b'; `default` where any part is missing or null."""
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, dict) or node.get(part) is None:
            return default
        node = node[part]
    return node


# --- a merge that remembers where each value came from ---------------------------------------
Layer = tuple[dict, dict[str, str]]  # (values, the origin of each key: a config path, or "wiring")
OPAQUE = ("wiring", "model layer default")  # origins that are not config paths


def at(values: dict, path: str) -> Layer:
    """A config section as a layer: each key's origin is its config path."""
    return values, {key: f"{path}.{key}" for key in values}


def merge(layers: list[Layer], depth: int = 0) -> tuple[dict, dict[str, str]]:
    """Later layers win; nested mappings merge `depth` levels deep (1 for model settings, as
    llm_settings does). Returns the values and the origin of each leaf ("llm.openai.base_url"):
    a mapping whose origin is a config path gets one origin per key."""
    values: dict = {}
    origins: dict[str, str] = {}
    for layer, layer_origins in layers:
        for key, value in (layer or {}).items():
            origin = layer_origins.get(key, "wiring")
            if depth and isinstance(value, dict) and isinstance(values.get(key), dict):
                values[key] = {**values[key], **copy.deepcopy(value)}
                origins.update({f"{key}.{sub}": _sub(origin, sub) for sub in value})
                continue
            values[key] = copy.deepcopy(value)
            for old in [o for o in origins if o == key or o.startswith(f"{key}.")]:
                del origins[old]
            if isinstance(value, dict) and value:
                origins.update({f"{key}.{sub}": _sub(origin, sub) for sub in value})
            else:
                origins[key] = origin
    return values, origins


def _sub(origin: str, key: str) -> str:
    return origin if origin in OPAQUE else f"{origin}.{key}"


def model_settings(config: dict, override: dict | None, override_at: str, image_store: str) -> tuple[dict, dict[str, str]]:
    """A model param: the model layer's defaults, the run's image store, the `llm:` section, then the
    role's override; validated by llm_settings. Origins as in `merge`."""
    values = llm_settings(config.get("llm"), override, image_store=image_store)
    _, origins = merge([(LLM_DEFAULTS, {k: "model layer default" for k in LLM_DEFAULTS}),
                        ({"image_store": image_store}, {"image_store": "images.store"}),
                        at(config.get("llm") or {}, "llm"), at(override or {}, override_at)], depth=1)
    return values, origins


# --- steps -----------------------------------------------------------------------------------
@dataclass
class Edge:
    """An input of a step: paths for a job's wildcards, and the steps they come from."""

    paths: Callable[[dict], list[str]]
    sources: tuple[str, ...] = ()


@dataclass
class Step:
    wiring: "Wiring"
    rule: str
    stage: str
    family: str
    slot: str | None  # the job's slot in file names ("{shard}", "{m}", ...); None: one job
    domain: list[dict]  # the slot's wildcard values, one dict per job
    edges: dict[str, Edge]
    section: str | None  # the rule's own config section
    shared: str | None  # the shared stage's config section
    fixed: dict  # the rule's wiring: params it sets itself
    per_job: Callable[[dict], dict] | None  # params that depend on the job's wildcards
    models: Callable[[dict], dict] | None  # model params for a job: {param: (values, origins)}
    files: dict[str, str]  # output -> file name where it is not "<output>.parquet"
    folder: str  # where the outputs live
    reports: dict[str, dict]  # output -> Snakemake report() keywords
    rerun_on: dict[str, str]  # extra rule params, not passed to the stage: a change reruns the rule
    threads: int
    constraints: dict[str, str]
    prompts: tuple[str, ...] | None  # the declared prompts this rule renders, where it renders only some
    kind: str  # "build" | "evaluation"

    @property
    def name(self) -> str:
        """The rule's name within its family: its folder, log, benchmark and WARC names."""
        return self.rule if self.rule == self.stage else self.rule.removeprefix(f"{self.family}_")

    @property
    def decl(self) -> dict:
        return declaration(self.stage)

    # outputs ----------------------------------------------------------------------------
    def output(self, name: str) -> str | list[str]:
        """The output's path (a pattern with the slot's wildcards), or the list of shard paths of
        a one-job stage that writes every shard of a `many` output."""
        spec = self.decl["outputs"].get(name)
        if spec is None:
            raise WiringError(f"rule {self.rule}: stage {self.stage} has no output {name!r} (it has {sorted(self.decl['outputs'])})")
        if spec.get("table") is None:
            return f"{self.folder}/{self.files[name]}"
        file = self.files.get(name, name)
        if self.slot is None and spec.get("many"):
            return [f"{self.folder}/{file}.{shard}.parquet" for shard in self.wiring.shards]
        return f"{self.folder}/{file}{'.' + self.slot if self.slot else ''}.parquet"

    def outputs(self) -> dict[str, str | list[str]]:
        outs = {name: self.output(name) for name in self.decl["outputs"]}
        first = next(iter(outs.values()))
        first = first[0] if isinstance(first, list) else first
        for sidecar in SIDECARS:
            outs[f"sidecar_{sidecar.split('.')[0]}"] = f"{first}.{sidecar}"
        record = self.record_warc()
        if record:
            outs["sidecar_warc"] = record
        return outs

    def pattern(self, name: str) -> str:
        """The output's path for one job: a one-job stage's `many` output gives its {shard} pattern."""
        path = self.output(name)
        if isinstance(path, list):
            spec = self.decl["outputs"][name]
            return f"{self.folder}/{self.files.get(name, name)}.{{shard}}.parquet" if spec.get("table") else path[0]
        return path

    def every(self, name: str) -> list[str]:
        """The output's paths over all of this step's jobs."""
        path = self.output(name)
        if isinstance(path, list):
            return path
        return [path.format(**wc) for wc in self.domain] if self.slot else [path]

    def sidecar(self, which: str = "rejects") -> list[str]:
        first = next(iter(self.decl["outputs"]))
        suffix = dict(zip(("rejects", "report"), SIDECARS))[which]
        return [f"{p}.{suffix}" for p in self.every(first)[:1 if self.slot is None else None]]

    def tables(self) -> list[str]:
        return [p for name, spec in self.decl["outputs"].items() if spec.get("table") for p in self.every(name)]

    def record_warc(self) -> str | None:
        if "record_warc" not in self.decl["params"] or self.wiring.fetch_mode != "record":
            return None
        return f"{self.wiring.rundir}/warc/{self.family}/{self.name}{'.' + self.slot if self.slot else ''}.warc.gz"

    # inputs -----------------------------------------------------------------------------
    def inputs(self, wildcards: dict) -> dict[str, list[str]]:
        """The stage's inputs for one job: the declared edges, and the replay WARCs of a fetching stage."""
        out = {name: edge.paths(wildcards) for name, edge in self.edges.items()}
        if "warcs" in self.decl["inputs"] and "warcs" not in out:
            out["warcs"] = self.wiring.replay_warcs() if self.wiring.fetch_mode == "replay" else []
        return out

    def code(self) -> list[str]:
        """The stage's import closure and its prompts with their answer schemas: editing any reruns the rule."""
        return stage_sources(self.stage) + prompt_sources(*(self.decl.get("prompts", []) if self.prompts is None else self.prompts))

    def upstream(self) -> list[str]:
        """Every step this one reads from, directly or not."""
        seen: list[str] = []
        todo = [s for e in self.edges.values() for s in e.sources]
        while todo:
            name = todo.pop()
            if name in seen or name not in self.wiring.steps:
                continue
            seen.append(name)
            todo.extend(s for e in self.wiring.steps[name].edges.values() for s in e.sources)
        return seen

    # params -----------------------------------------------------------------------------
    def params(self, wildcards: dict) -> tuple[dict, dict[str, str]]:
        """The job's params and, per param leaf, where its value came from (see the module doc)."""
        config = self.wiring.config
        declared = self.decl["params"]
        layers: list[Layer] = list(self.wiring.run_wide(declared, self.decl["family"]))
        for path in (self.shared, self.section):
            if path:
                section = lookup(config, path, {})
                layers.append(at({k: v for k, v in section.items() if k in declared and k not in self.fixed}, path))
        layers.append((self.fixed, {}))
        if self.per_job:
            layers.append((self.per_job(wildcards), {}))
        record = self.record_warc()
        if record:
            layers.append(({"record_warc": record.format(**wildcards)}, {}))
        values, origins = merge(layers)
        store = self.wiring.image_store
        model_params = {
            name: model_settings(config, lookup(config, f"{self.section}.{name}") if self.section else None,
                                 f"{self.section}.{name}", store)
            for name, spec in declared.items() if spec.get("schema") == "llm"
        }
        if self.models:
            model_params.update(self.models(wildcards))
        for name, (settings, leaf_origins) in model_params.items():
            values[name] = settings
            for old in [o for o in origins if o == name or o.startswith(f"{name}.")]:
                del origins[old]
            origins.update({f"{name}.{k}": v for k, v in leaf_origins.items()})
        unknown = sorted(set(values) - set(declared))
        if unknown:
            raise WiringError(f"rule {self.rule}: sets {unknown}, which stage {self.stage} does not declare as params")
        return values, origins

    def settings(self, wildcards) -> str:
        """The params as inline JSON for the stage's --params (a change reruns the rule)."""
        return json.dumps(self.params(dict(wildcards.items()) if hasattr(wildcards, "items") else wildcards)[0], sort_keys=True)

    def gpu(self, wildcards) -> int:
        values, _ = self.params(dict(wildcards.items()))
        # a role given as keys replacing those of `llm` (score_elements' vision_llm) holds what the merge names
        held = [gpus({**values.get("llm", LLM_DEFAULTS), **v}) for name, v in values.items()
                if self.decl["params"][name].get("schema") == "llm"]
        held += [gpus(a["llm"]) for a in values.get("answerers", []) if isinstance(a, dict) and "llm" in a]
        if str(values.get("device", "")).startswith("cuda"):
            held.append(1)
        return max(held, default=0)

    def log(self) -> str:
        return f"{self.wiring.rundir}/logs/{self.family}/{self.name}{'.' + self.slot if self.slot else ''}.log"

    def benchmark(self) -> str:
        return f"{self.wiring.rundir}/benchmarks/{self.family}/{self.name}{'.' + self.slot if self.slot else ''}.tsv"

    def check(self) -> None:
        """The rule's inputs and outputs are its stage's: fail naming the rule where they are not."""
        declared = self.decl["inputs"]
        unknown = sorted(set(self.edges) - set(declared))
        if unknown:
            raise WiringError(f"rule {self.rule}: inputs {unknown} are not inputs of stage {self.stage} (it takes {sorted(declared)})")
        missing = sorted(n for n, spec in declared.items() if not spec.get("optional") and n not in self.edges
                         and not (n == "warcs"))
        if missing:
            raise WiringError(f"rule {self.rule}: stage {self.stage} needs inputs {missing}, which the rule does not give")
        for name, spec in self.decl["outputs"].items():
            if spec.get("table") is None and name not in self.files:
                raise WiringError(f"rule {self.rule}: output {name!r} of stage {self.stage} is a file; give its file name in files=")
        unknown = sorted(set(self.files) - set(self.decl["outputs"]))
        if unknown:
            raise WiringError(f"rule {self.rule}: files= names {unknown}, which are not outputs of stage {self.stage}")
        unknown = sorted(set(self.fixed) - set(self.decl["params"]))
        if unknown:
            raise WiringError(f"rule {self.rule}: wires params {unknown}, which stage {self.stage} does not declare")
        unknown = sorted(set(self.prompts or ()) - set(self.decl.get("prompts", [])))
        if unknown:
            raise WiringError(f"rule {self.rule}: prompts= names {unknown}, which stage {self.stage} does not render")
        taken = sorted(set(self.rerun_on) & {"module", "io", "settings"})
        if taken:
            raise WiringError(f"rule {self.rule}: rerun_on names {taken}, which are the rule's own params")


class Wiring:
    """The steps of one configuration and the run-wide settings they share. `targets`: the
    Snakemake targets, or a function giving them (Snakemake sets them after the Snakefile is read,
    so the rule files read `W.targets` only inside input functions)."""

    def __init__(self, config: dict, targets: Iterable[str] | Callable[[], Iterable[str]] = ()):
        self.config = config
        self._targets = targets
        self.rundir = f"data/runs/{config['run']}"
        self.shards = [f"{i:05d}" for i in range(config["shards"])]
        self.releases_dir = config.get("releases_dir", "data/releases")
        self.catalog = f"{self.rundir}/catalog.duckdb"
        self.steps: dict[str, Step] = {}
        self.releases: list[str] = []  # release manifests (the `release` target)
        self.evaluations: list[str] = []  # evaluation reports (the `evaluate` target)
        self.reports: list[str] = []  # the report figures (the `report` target)

    @property
    def targets(self) -> set[str]:
        return set(self._targets() if callable(self._targets) else self._targets)

    # run-wide settings ------------------------------------------------------------------
    @property
    def fetch_mode(self) -> str:
        return lookup(self.config, "fetch.mode", "live")

    @property
    def image_store(self) -> str:
        return lookup(self.config, "images.store", "data/cache/images")

    def get(self, path: str, default: Any = None) -> Any:
        return lookup(self.config, path, default)

    def setting(self, stage: str, param: str, section: str) -> Any:
        """One param of a stage as its section sets it, else the stage's default."""
        value = lookup(self.config, f"{section}.{param}")
        return declaration(stage)["params"][param].get("default") if value is None else value

    def model(self, override: dict | None, at_path: str) -> tuple[dict, dict[str, str]]:
        """A model role's settings: the llm: section with this role's override (see model_settings)."""
        return model_settings(self.config, override, at_path, self.image_store)

    def candidates(self, section: str) -> list[dict]:
        """An evaluation's models, one job slot each ("{m}" = 00000 for the first)."""
        return [{"m": f"{i:05d}"} for i in range(len(self.get(f"{section}.models", [])))]

    def candidate(self, section: str, index: int | str, keys: tuple[str, ...] = ("vision",)) -> tuple[dict, dict]:
        """One evaluated model as a stage's params: `model` (its name), `llm` and the given keys it sets."""
        model = self.get(f"{section}.models")[int(index)]
        at_path = f"{section}.models.{int(index)}"
        values = {"model": model["name"], **{k: model[k] for k in keys if model.get(k) is not None}}
        return values, {"llm": self.model(model.get("llm"), f"{at_path}.llm")}

    def judge(self, section: str, keys: tuple[str, ...] = ("vision",), name: str = "judge") -> tuple[dict, dict]:
        """An evaluation's judge as a stage's params: `judge` (its name), `llm` and the given keys it sets."""
        judge = self.get(f"{section}.{name}")
        values = {"judge": judge["name"], **{k: judge[k] for k in keys if judge.get(k) is not None}}
        return values, {"llm": self.model(judge.get("llm"), f"{section}.{name}.llm")}

    def enabled(self, section: str) -> bool:
        return bool(lookup(self.config, f"{section}.enabled", False))

    def replay_warcs(self) -> list[str]:
        return list(lookup(self.config, "fetch.replay_warcs", []))

    def run_wide(self, declared: dict, family: str) -> list[Layer]:
        """Run-wide sections mapped onto the params a stage declares (layer 2 of the merge)."""
        layers: list[Layer] = []
        if "fetch" in declared and self.config.get("fetch") is not None:
            layers.append(({"fetch": {k: v for k, v in self.config["fetch"].items() if k != "replay_warcs"}}, {"fetch": "fetch"}))
        if "provider_settings" in declared:
            search = lookup(self.config, "retrieval.search_web", {})
            provider = search.get("provider", "google")
            layers.append(at({k: search[k] for k in ("provider", "cache_dir", "cache_mode") if k in search}, "retrieval.search_web"))
            layers.append(({"provider_settings": search.get(provider, {})}, {"provider_settings": f"retrieval.search_web.{provider}"}))
        # the run's one image store: `image_store` wherever declared, `store` of the image stages
        for name in ("image_store", "store" if family == "images" else None):
            if name in declared:
                layers.append(({name: self.image_store}, {name: "images.store"}))
        return layers

    # declaring steps --------------------------------------------------------------------
    def step(self, rule: str, *, family: str, stage: str | None = None, slot: str | None = None,
             domain: list[dict] | None = None, inputs: dict[str, Any] | None = None, section: str | None = "",
             shared: str | None = None, wiring: dict | None = None, per_job: Callable[[dict], dict] | None = None,
             models: Callable[[dict], dict] | None = None, files: dict[str, str] | None = None, folder: str | None = None,
             reports: dict[str, dict] | None = None, rerun_on: dict[str, str] | None = None, threads: int = 1,
             constraints: dict[str, str] | None = None, prompts: tuple[str, ...] | None = None) -> Step:
        """Declare one rule. `inputs` maps the stage's inputs to an `out(...)`/`every(...)` edge, a
        path or list of paths, a function of the job's wildcards, or None/[] (not given);
        `section` defaults to "<family>.<stage>"; `prompts` the declared prompts the rule renders,
        where its wiring makes it render only some (editing another then leaves it alone); `rerun_on` names values the stage does not take
        whose change must rerun the rule (a release's content: `release_version`)."""
        stage = stage or rule
        if rule in self.steps:
            raise WiringError(f"rule {rule} is declared twice")
        if slot == "{shard}" and domain is None:
            domain = [{"shard": s} for s in self.shards]
        step = Step(
            wiring=self, rule=rule, stage=stage, family=family, slot=slot, domain=domain or [],
            edges={name: _edge(value) for name, value in (inputs or {}).items() if value not in (None, [])},
            section=f"{family}.{stage}" if section == "" else section, shared=shared, fixed=dict(wiring or {}),
            per_job=per_job, models=models, files=dict(files or {}), folder=folder or "",
            reports=dict(reports or {}), rerun_on=dict(rerun_on or {}), threads=threads, constraints=dict(constraints or {}),
            kind="evaluation" if family in EVALUATION_FAMILIES else "build", prompts=prompts,
        )
        step.folder = step.folder or f"{self.rundir}/{family}/{step.name}"
        step.check()
        self.steps[rule] = step
        return step

    def out(self, rule: str | list[str], name: str) -> Edge:
        """The same job's output of an upstream step, or of several (same slot wildcards)."""
        rules = [rule] if isinstance(rule, str) else rule
        return Edge(lambda wc: [self.steps[r].pattern(name).format(**wc) for r in rules], tuple(rules))

    def every(self, rule: str | list[str], name: str) -> Edge:
        """The output over all jobs of an upstream step, or of several."""
        rules = [rule] if isinstance(rule, str) else rule
        return Edge(lambda wc: [p for r in rules for p in self.steps[r].every(name)], tuple(rules))

    def rejects_upstream(self, rule: str) -> Edge:
        """Every upstream step's rejects sidecars: what a release card counts."""
        return Edge(lambda wc: [p for s in self.steps[rule].upstream() for p in self.steps[s].sidecar("rejects")])

    # derived ----------------------------------------------------------------------------
    def catalog_tables(self, kind: str = "build") -> list[str]:
        return [p for step in self.steps.values() if step.kind == kind for p in step.tables()]

    def check_table_names(self) -> None:
        """The table-name convention: a table output's file name (the output's name unless `files=`
        renames it) is its catalog view in the family's schema, so two outputs of one family may
        share a file name only when they share a table contract (the view is their union, as for
        MAVIS's two cache_images rules)."""
        seen: dict[tuple[str, str], tuple[str, str]] = {}
        for step in self.steps.values():
            for name, spec in step.decl["outputs"].items():
                if not spec.get("table"):
                    continue
                view = (step.family, step.files.get(name, name))
                other = seen.setdefault(view, (step.rule, spec["table"]))
                if other[1] != spec["table"]:
                    raise WiringError(f"rules {other[0]} and {step.rule} both write {view[0]}.{view[1]} with different tables "
                                      f"({other[1]}, {spec['table']}): name one with files= (its catalog view)")

    def producers(self) -> dict[str, str]:
        """Every output file of every step -> "<rule>.<output>"."""
        return {path: f"{step.rule}.{output}" for step in self.steps.values() for output in step.decl["outputs"]
                for path in step.every(output)}

    def build_steps_evaluated(self) -> set[str]:
        """The build steps this run's evaluations read from, directly or not (an evaluation of a
        release given by path reads none)."""
        made = self.producers()
        read = {made[path].split(".")[0] for step in self.steps.values() if step.kind == "evaluation"
                for wildcards in (step.domain or [{}]) for paths in step.inputs(wildcards).values() for path in paths
                if path in made}
        read = {rule for rule in read if self.steps[rule].kind == "build"}
        return read | {up for rule in read for up in self.steps[rule].upstream()}


def _as_list(path: str | list[str], wildcards: dict) -> list[str]:
    return list(path) if isinstance(path, list) else [path.format(**wildcards)]


def _edge(value: Any) -> Edge:
    if isinstance(value, Edge):
        return value
    if callable(value):
        return Edge(lambda wc: _as_list(value(wc), {}))
    paths = [value] if isinstance(value, str) else list(value)
    return Edge(lambda wc: [str(p) for p in paths])


def release_version(given: str | None) -> str:
    """A release an evaluation reads, as a `rerun_on` value: a release folder or file named in the
    config, by its path and a hash of its content (the folder's parquet/ tables and JSONL records;
    its images are named by their hash), so pointing an evaluation at another release, or a release
    whose content changed under old file times, reruns it. This run's own release (given None) is a
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


def rule_files() -> list[Path]:
    """The rule files that declare steps, in the order the Snakefile includes them."""
    order = ["mavis", "images", "retrieval", "m2rag", "openreview", "mcitebench", "eval_mcitebench", "eval_mavis",
             "eval_m2rag", "citeeval", "attribution", "catalog"]  # an evaluation's steps before the steps that read them
    return [ROOT / "rules" / f"{name}.smk" for name in order]


def load_steps(config: dict, targets: Iterable[str] | Callable[[], Iterable[str]] = ()) -> Wiring:
    """Every step of a configuration: each rule file run in a namespace of its own (the Snakefile and
    explain both read the steps here, so what explain shows is what Snakemake runs). `targets`: the
    Snakemake targets (see Wiring)."""
    wiring = Wiring(config, targets)
    for path in rule_files():
        exec(compile(path.read_text(), str(path), "exec"), {"W": wiring, "config": config, "Path": Path, "WiringError": WiringError,
                                                            "release_version": release_version})
    wiring.check_table_names()
    return wiring
