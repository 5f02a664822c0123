"""Rehearse the real recipe on this machine: every endpoint stood in for on 127.0.0.1, every source
replayed from generated archives, then `snakemake release evaluate` with the recipe's settings.

    python scripts/rehearse.py [--recipe config/recipe_real.yaml] [--overlay config/rehearsal.yaml] [--cores 2]
                               [--sources data/cache/rehearsal] [--targets release evaluate] [--port-base 0] [-- <snakemake args>]

1. The sources (scripts/make_rehearsal_sources.py; cached: a second run with the same generators
   does nothing): 2,000 Reddit posts with their images, 200 ELI5 questions over the ten topics,
   20 OpenReview forums with PDFs, the search answers and pages, a C4-like corpus.
2. The stand-ins (scripts/rehearsal_servers.py), one per endpoint of the recipe and one per model
   of its in-process backends, answering at once; their ports go into a generated overlay,
   `endpoints.yaml`, and each hosted endpoint's key variable is set to the value its stand-in
   expects (so a role sending another endpoint's key is refused).
3. Snakemake with `--configfile <recipe> <overlay> endpoints.yaml`, in three runs, because two
   sources of the recipe come out of the run itself:
   a. up to extract_atomic_facts. The MAVIS fact-image searches are queries made of the facts, so
      their archive (scripts/make_mavis_fact_sample.py) is written now and added to the replay list;
      the post images fetched before it came from the other archives, so no run counts the longer
      list as a reason to fetch them again (--rerun-triggers params code software-env: a changed
      param or code still reruns a job), and the archive is dated to before the first run (an input
      newer than a job's outputs reruns the job). A rehearsal whose sources changed starts afresh:
      delete data/runs/<run>;
   b. up to sample_annotation's sheet. The annotators' filled copy is the MAVIS test split the
      evaluation reads: a stand-in annotator marks every fact relevant and every shown document
      grounded, and the overlay names the file (`mavis.annotations`);
   c. the targets (release evaluate).
Into data/runs/<run>/rehearsal/: endpoints.yaml, endpoints.json (the map of roles to stand-ins),
counts.json (the calls each stand-in answered, per model and prompt, and those it refused),
annotations.csv, mavis_facts.warc.gz and phases.json (each run's command and seconds). It exits
with Snakemake's status; the stand-ins stop with it.
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stages.core.explain import layered_config  # noqa: E402
from stages.core.wiring import load_steps  # noqa: E402


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def annotate(sheet: Path, out: Path) -> int:
    """The stand-in annotator: every fact relevant, every shown document grounded (App. A.5's two questions)."""
    with sheet.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        columns, rows = reader.fieldnames, list(reader)
    for row in rows:
        row["relevant"] = "yes"
        for column in columns:
            if column.startswith("grounded_") and row.get(f"doc_{column.removeprefix('grounded_')}"):
                row[column] = "yes"
    with out.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return len(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="config/recipe_real.yaml")
    parser.add_argument("--overlay", default="config/rehearsal.yaml")
    parser.add_argument("--sources", default="data/cache/rehearsal", help="where the generated sources are (the overlay's paths)")
    parser.add_argument("--cores", default="2")
    parser.add_argument("--targets", nargs="+", default=["release", "evaluate"])
    parser.add_argument("--port-base", type=int, default=0, help="the stand-ins' first port (0: free ports). The ports are the "
                        "model steps' base_url params: keep them to resume a rehearsal without rerunning those steps")
    parser.add_argument("snakemake", nargs="*", help="more Snakemake arguments (after --)")
    args = parser.parse_args(argv)
    base = str(REPO / "config" / "config.yaml")
    subprocess.run([sys.executable, str(REPO / "scripts" / "make_rehearsal_sources.py"), "--out", args.sources,
                    "--config", base, "--config", args.recipe], check=True)

    servers = _script("rehearsal_servers")
    recipe = servers.load_recipe([base, args.recipe, args.overlay])
    stand_ins = servers.StandIns(recipe, port_base=args.port_base, latency_scale=0, serve_in_process=True).start()
    try:
        out = Path(f"data/runs/{recipe['run']}/rehearsal")
        out.mkdir(parents=True, exist_ok=True)
        endpoint_map = stand_ins.endpoint_map()
        (out / "endpoints.json").write_text(json.dumps(endpoint_map, indent=1))
        generated = stand_ins.overlay()
        env = {**os.environ, **endpoint_map["env"]}
        google = recipe["retrieval"]["search_web"]["google"]
        if google.get("engine_id_env") and not google.get("engine_id"):  # the engine id the search archives were made with
            env.setdefault(google["engine_id_env"], "rehearsal-engine")
        configfiles = [args.recipe, args.overlay, str(out / "endpoints.yaml")]
        phases: list[dict] = []

        def write_overlay() -> None:
            (out / "endpoints.yaml").write_text(yaml.safe_dump(generated, sort_keys=False))

        def snakemake(name: str, targets: list[str], *extra: str) -> int:
            write_overlay()
            command = [sys.executable, "-m", "snakemake", "--cores", args.cores, *targets, "--configfile", *configfiles, *extra,
                       *args.snakemake]
            start = time.perf_counter()
            code = subprocess.run(command, env=env).returncode
            phases.append({"phase": name, "command": command, "seconds": round(time.perf_counter() - start, 1), "status": code})
            (out / "phases.json").write_text(json.dumps(phases, indent=1))
            (out / "counts.json").write_text(json.dumps(stand_ins.counts, indent=1, sort_keys=True))
            return code

        def outputs(rule: str, name: str) -> list[str]:
            write_overlay()
            config, _ = layered_config(configfiles, [])
            return load_steps(config).steps[rule].every(name)

        triggers = ("--rerun-triggers", "params", "code", "software-env")
        facts = outputs("extract_atomic_facts", "facts")
        started = time.time()
        if snakemake("facts", facts, *triggers):
            return 1
        archive = out / "mavis_facts.warc.gz"
        subprocess.run([sys.executable, str(REPO / "scripts" / "make_mavis_fact_sample.py"), "--config", base, "--config", args.recipe,
                        "--config", args.overlay, "--facts", str(Path(facts[0]).parent / "facts.*.parquet"), "--out", str(archive)],
                       env=env, check=True)
        os.utime(archive, (started, started))  # older than the post images fetched without it: Snakemake refetches nothing
        overlay = yaml.safe_load(Path(args.overlay).read_text())
        generated["fetch"] = {"replay_warcs": [*overlay["fetch"]["replay_warcs"], str(archive)]}
        sheet = outputs("sample_annotation", "sheet")
        if snakemake("annotation sheet", sheet, *triggers):
            return 1
        annotate(Path(sheet[0]), out / "annotations.csv")
        generated.setdefault("mavis", {})["annotations"] = str(out / "annotations.csv")
        return snakemake("targets", args.targets, *triggers)
    finally:
        stand_ins.stop()


if __name__ == "__main__":
    sys.exit(main())
