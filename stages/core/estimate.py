"""The bill before the run (README "Real run"): the steps `snakemake estimate` runs, the plan of
the model steps it projects (stages/catalog/estimate_cost.py does the arithmetic) and the budget
check the Snakefile makes before any job runs. Everything here is derived from the steps and their
stages' declarations (schemas/stages.yaml) at DAG-parse time.

A step is *free* when its stage declares no model param (`schema: llm`), holds no GPU under the
run's settings, goes to no network -- no fetch layer outside replay (a `fetch` param), no API
harvest outside replay (a `mode` param), no Hub dataset (an optional `data_files` input the step
leaves empty) -- and every step it reads from is free: harvests and listings from files or
archives, and the deterministic filters after them.

A step's *first input* is the first input its stage declares that the step reads from other
steps; rows flow along it. The estimate counts, for every model step, the rows of its first input:
given by hand (`estimate.given`: `<rule>` the rows the step reads, `<rule>.<output>` the rows an
output holds; e.g. a count a seed paper reports), else counted in the outputs of a free step
(which the estimate target runs), else projected from the step upstream (its rows in times its
rows out per row in, from the profile).
"""
from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path

from .declarations import load_manifest
from .explain import model_roles
from .wiring import Step, Wiring, WiringError

ESTIMATE = "estimate_cost"


def network(step: Step, values: dict) -> bool:
    """Whether the step, with these params, would go to the network."""
    declared = step.decl["params"]
    if "fetch" in declared and (values.get("fetch") or {}).get("mode", "live") != "replay":
        return True
    if "mode" in declared and values.get("mode", declared["mode"].get("default")) != "replay":
        return True
    return "data_files" in step.decl["inputs"] and not step.inputs(step.domain[0] if step.slot else {}).get("data_files")


def reads(step: Step, made: dict[str, str]) -> dict[str, list[str]]:
    """Per input of the step, the "<rule>.<output>"s its jobs read (files no step makes are sources)."""
    out: dict[str, list[str]] = {}
    for wc in step.domain if step.slot else [{}]:
        for name, paths in step.inputs(wc).items():
            keys = out.setdefault(name, [])
            keys += [key for key in dict.fromkeys(made[p] for p in paths if p in made) if key not in keys]
    return out


def plan(wiring: Wiring) -> dict:
    """Per step (not the catalog's): its kind (model | free | other), its first input (the
    "<rule>.<output>"s its stage's first declared input reads from other steps, summed), whether every
    job reads all of it (`repeated`: one job per evaluated model), whether it holds a GPU, and per job
    its `limit` and model roles; the steps in declaration order (`order`: the params' JSON sorts
    mappings); then the free steps' outputs the estimate counts (`measured`)."""
    made = wiring.producers()
    given = wiring.get("estimate.given", {}) or {}
    steps: dict[str, dict] = {}
    free: set[str] = set()
    for name, step in wiring.steps.items():
        if step.family in ("catalog", "reports"):
            continue
        jobs = step.domain if step.slot else [{}]
        inputs = reads(step, made)
        first = next((inputs[n] for n in step.decl["inputs"] if inputs.get(n)), [])
        values = [step.params(wc)[0] for wc in jobs]
        model = any(spec.get("schema") == "llm" for spec in step.decl["params"].values())
        gpu = step.gpu(jobs[0]) > 0
        if not (model or gpu or network(step, values[0])) and all(key.split(".")[0] in free for keys in inputs.values() for key in keys):
            free.add(name)
        read = [sorted(p for paths in step.inputs(wc).values() for p in paths if made.get(p) in first) for wc in jobs]
        steps[name] = {
            "stage": step.stage, "family": step.family, "kind": "model" if model else "free" if name in free else "other",
            "outputs": sorted(step.decl["outputs"]),
            "gpu": gpu, "input": first, "repeated": len(jobs) > 1 and all(r == read[0] for r in read),
            "jobs": [{"wildcards": wc, "limit": v.get("limit") or 0,
                      "roles": [{"role": role, "backend": s.get("backend"), "model": s.get("model"),
                                 "endpoint": (s.get("openai") or {}).get("base_url") if s.get("backend") == "openai" else "in process"}
                                for param, spec in step.decl["params"].items() for role, s in model_roles(param, spec, v.get(param))]}
                     for wc, v in zip(jobs, values)],
        }

    measured: dict[str, list[str]] = {}

    def need(rule: str) -> None:
        """Count what `rule`'s first input needs: a free step's outputs, or further upstream."""
        if rule in given:
            return
        for key in steps[rule]["input"]:
            up, output = key.split(".", 1)
            if key in given or key in measured:
                continue
            if up in free:
                measured[key] = wiring.steps[up].every(output)
            elif up in steps:
                need(up)

    try:  # before any free step runs for a count that was meant to be given
        unused_given(given, steps)
    except ValueError as err:
        raise WiringError(f"estimate.{err}") from None
    for name, entry in steps.items():
        if entry["kind"] == "model":
            need(name)
    return {"order": list(steps), "steps": steps, "measured": measured}


def unused_given(given: dict, steps: dict[str, dict]) -> list[str]:
    """The `estimate.given` keys naming a step of a family this run leaves off (not used); a key
    naming neither a step of the plan nor such a step, or an output its step lacks, is a ValueError:
    a misspelt key would be ignored and the step projected as if nothing were given. A step of a
    family left off is a rule named after a stage no step of the run uses (m2rag_search_web,
    judge_answers_swap: a stage's name with a prefix or suffix)."""
    manifest = load_manifest()
    running = {step["stage"] for step in steps.values()}
    absent = [name for name, entry in manifest.items() if name not in running and entry["family"] not in ("catalog", "reports")]
    unused = []
    for key in given:
        rule, _, output = key.partition(".")
        if rule not in steps:
            if any(rule == s or rule.endswith(f"_{s}") or rule.startswith(f"{s}_") for s in absent):
                unused.append(key)
                continue
            near = difflib.get_close_matches(rule, steps, 1)
            raise ValueError(f"given: {key!r} names no step of this run" + (f" (did you mean {near[0]!r}?)" if near else ""))
        if output and output not in steps[rule]["outputs"]:
            raise ValueError(f"given: {key!r}: step {rule} has no output {output!r} (its outputs: {', '.join(steps[rule]['outputs'])})")
    return unused


def measured_steps(wiring: Wiring, the_plan: dict) -> list[str]:
    """The free steps the estimate target runs: those whose outputs it counts, and their upstream."""
    rules = {key.split(".", 1)[0] for key in the_plan["measured"]}
    return [name for name in wiring.steps if name in rules or any(name in wiring.steps[r].upstream() for r in rules)]


def settings_digest(params: dict, profile: bytes) -> str:
    """What an estimate was made from: its params (plan, prices, throughput, given) and the profile."""
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode() + profile).hexdigest()[:16]


def last_estimate(wiring: Wiring) -> tuple[Path, dict | None, str | None]:
    """The last `snakemake estimate` output of this run, and why it is not an estimate of these
    settings (None when it is): missing, or made from other params or another profile."""
    step = wiring.steps[ESTIMATE]
    path = Path(step.output("estimate"))
    if not path.exists():
        return path, None, f"there is no estimate of this run ({path})"
    estimate = json.loads(path.read_text())
    values, _ = step.params({})
    params = {**{name: spec.get("default") for name, spec in step.decl["params"].items()}, **values}  # as the stage sees them
    profile = Path(step.inputs({})["profile"][0])
    if estimate.get("digest") != settings_digest(params, profile.read_bytes() if profile.exists() else b""):
        return path, estimate, f"{path} was made with other settings or another profile"
    return path, estimate, None


def over_budget(wiring: Wiring, budget: float, running: set[str]) -> str | None:
    """One line naming the first model step of `running` (the rules about to run) whose projected cost
    exceeds `budget` (USD), or why the check cannot be made; None when every one fits or none is a
    model step. Reads the last `snakemake estimate` output."""
    if not any(rule in running for rule, step in wiring.steps.items()
               if any(spec.get("schema") == "llm" for spec in step.decl["params"].values())):
        return None
    command = "snakemake estimate with the same --configfile"
    path, estimate, why = last_estimate(wiring)
    if why:
        return f"budget: estimate.budget is {budget:g} USD but {why}; run {command} {'first' if estimate is None else 'again'}"
    for rule in [r for r in estimate["order"] if r in running]:
        row = estimate["steps"][rule]
        if (row.get("usd") or 0) > budget:
            return (f"budget: stopping before {rule} (stage {row['stage']}): projected {row['usd']:,.4g} USD "
                    f"({row['calls']:,} model calls), over estimate.budget {budget:,.4g} USD ({path})")
    return None
