"""Measure the per-step figures `snakemake estimate` projects with, from a finished run.

    python scripts/make_estimate_profile.py --configfile config/recipe_real.yaml config/rehearsal.yaml \
        data/runs/iclr2025/rehearsal/endpoints.yaml --counts data/runs/iclr2025/rehearsal/counts.json \
        --source "the rehearsal (scripts/rehearse.py)" [--out config/estimate_profile.yaml]

The run is read through the same plan the estimate uses (stages/core/estimate.py), so a step's
first input and its jobs are the estimate's. For every step with a first input, over all its jobs:
`rows_in` (the rows of that input its jobs read: Parquet row counts, or a release's report),
`items` (what the step worked on: its reports' rows in) and `items_per_row`, `out_per_item`
(rows of each output per item); for a model step `calls_per_item`, `prompt_tokens_per_call` and
`completion_tokens_per_call` (its reports' llm_* figures: calls per item counts the requests, the
calls sent and the call-cache hits, so measure a run that started with no call cache; tokens are
per call sent) and, with --counts (the stand-ins' counts.json of a rehearsal), `roles`: each model
role's share of the requests (each prompt's requests split as its stand-ins answered its calls).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stages.core.estimate import plan  # noqa: E402
from stages.core.explain import layered_config  # noqa: E402
from stages.core.wiring import load_steps  # noqa: E402


def rows(path: str, key: str) -> int | None:
    """A step output's rows: a Parquet file's, or what its step's report counts (a release manifest);
    None for a file nothing counts (a report, a plot)."""
    if path.endswith(".parquet"):
        return pq.read_metadata(path).num_rows
    report = Path(f"{path}.report.json")
    return json.loads(report.read_text())["rows_out"].get(key.split(".", 1)[1]) if report.exists() else None


def requests(reports: list[dict]) -> dict[str, int]:
    """Per prompt, the requests a step's jobs made: the calls they sent and those answered from the
    call cache. A rehearsal starts with no cache, so its hits are repeats inside the run, which the
    generated sources have many of (the same question text in many posts) and real sources few:
    counting them keeps the bill an upper bound."""
    out: dict[str, int] = {}
    for report in reports:
        for key, n in report["stats"].items():
            for kind in ("llm_calls[", "llm_cache_hits["):
                if key.startswith(kind):
                    out[key[len(kind):-1]] = out.get(key[len(kind):-1], 0) + n
    return out


def profile(configfiles: list[str], counts: dict | None) -> dict:
    config, _ = layered_config(configfiles, [])
    wiring = load_steps(config)
    made = wiring.producers()
    out: dict[str, dict] = {}
    for rule, entry in plan(wiring)["steps"].items():
        step = wiring.steps[rule]
        if not entry["input"] or not Path(step.sidecar("report")[0]).exists():
            continue
        jobs = step.domain if step.slot else [{}]
        read = [rows(p, made[p]) for wc in jobs for paths in step.inputs(wc).values() for p in paths if made.get(p) in entry["input"]]
        reports = [json.loads(Path(p).read_text()) for p in step.sidecar("report")]
        items = sum(r["rows_in"] for r in reports)
        if not read or None in read or not sum(read) or not items:
            continue
        written = {name: [rows(p, f"{rule}.{name}") for p in step.every(name)] for name in step.decl["outputs"]}
        figures: dict = {"rows_in": sum(read), "items": items, "items_per_row": round(items / sum(read), 4),
                         "out_per_item": {name: round(sum(n) / items, 4) for name, n in written.items() if None not in n}}
        sent = sum(r["stats"].get("llm_calls", 0) for r in reports)
        asked = requests(reports)
        if entry["kind"] == "model" and sent:  # a step answered from a warm cache alone tells nothing
            figures["calls_per_item"] = round(sum(asked.values()) / items, 4)
            figures["prompt_tokens_per_call"] = round(sum(r["stats"].get("llm_prompt_tokens", 0) for r in reports) / sent, 1)
            figures["completion_tokens_per_call"] = round(sum(r["stats"].get("llm_completion_tokens", 0) for r in reports) / sent, 1)
            if counts:
                answered: dict[str, dict[str, int]] = {}  # role -> prompt -> calls its stand-in answered
                for job in entry["jobs"]:
                    for role in job["roles"]:
                        by_prompt = counts.get(role["endpoint"], {}).get("models", {}).get(role["model"], {})
                        for p in asked:
                            answered.setdefault(role["role"], {})[p] = answered.get(role["role"], {}).get(p, 0) + by_prompt.get(p, 0)
                # each prompt's requests split among the roles as their stand-ins answered its sent calls
                weight = {role: sum(n * by[p] / sum(a[p] for a in answered.values()) for p, n in asked.items()
                                    if sum(a[p] for a in answered.values())) for role, by in answered.items()}
                total = sum(weight.values())
                if total and len(weight) > 1:
                    figures["roles"] = {role: round(n / total, 4) for role, n in weight.items()}
        out[rule] = figures
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", nargs="+", required=True, help="the run's config files (as given to Snakemake)")
    parser.add_argument("--counts", type=Path, help="the stand-ins' counts.json (a rehearsal): each model role's share of a step's calls")
    parser.add_argument("--source", required=True, help="what the run was, for the profile's header")
    parser.add_argument("--out", type=Path, default=Path("config/estimate_profile.yaml"))
    args = parser.parse_args()
    counts = json.loads(args.counts.read_text()) if args.counts else None
    rules = profile(args.configfile, counts)
    header = ("# Per-step figures `snakemake estimate` projects with (stages/catalog/estimate_cost.py), measured by\n"
              "# scripts/make_estimate_profile.py: rows_in = rows of the step's first input its jobs read, items = what\n"
              "# the step worked on (its reports' rows in); rows out per item; calls per item, tokens per call and each\n"
              "# model role's share of the calls for model steps.\n")
    args.out.write_text(header + yaml.safe_dump({"source": args.source, "rules": rules}, sort_keys=False, width=120))
    print(f"wrote {len(rules)} steps to {args.out}")


if __name__ == "__main__":
    main()
