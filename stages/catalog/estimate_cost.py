"""estimate_cost: what a run's model calls would cost, before any is made (README "A real run").

`snakemake estimate --configfile <recipe>` runs only the free steps (stages/core/estimate.py:
harvests and listings from files or archives, deterministic filters) whose outputs the model steps'
counts need, then this stage. Per model step (rule) it gives the items the step would work on, the
model calls, prompt and completion tokens, and the price (`prices`: USD per million input and
output tokens, by model name) or the GPU-hours (`throughput`: prefill and output tokens per second
of a server, by endpoint URL or, for in-process backends, by model, times its `gpus`;
`usd_per_hour` prices a GPU-hour).

Projection (written under the table): a step's items are what it works on (its reports' rows in),
all jobs together: given (`given`: `<rule>` a step's items, one job's for a job per evaluated
model; `<rule>.<output>` the rows an output holds; e.g. a count a seed paper reports), or the rows
of its first input times its items per row. Those rows are given, counted in a free step's
outputs, or projected: the upstream step's items times its rows out per item. A job per evaluated
model reads all of its input; a positive `limit` param caps a job's items. Calls = items x calls
per item; tokens = calls x tokens per call; the calls are split over the step's model roles by
their measured shares. The per-item figures are the profile's (config/estimate_profile.yaml,
measured in a run by scripts/make_estimate_profile.py).

Inputs `tables` (the counted outputs), `profile`. Params `plan` (the wiring's), `given`, `prices`,
`throughput`. Outputs `estimate` (JSON, read by the budget check) and `table` (Markdown, also
printed). Nothing is rejected: rows in = model steps = rows of `estimate`.
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from stages.core.estimate import settings_digest, unused_given
from stages.core.stage import Input, Output, Param, Stage, StageError
from stages.core.tables import atomic_write_bytes

VERSION = "1"
METHOD = (
    "**How this is projected.** Items: what a step works on (its reports' rows in), all jobs together: *given* in "
    "`estimate.given`, or the rows of its first input (*counted* in the outputs of a free step this estimate ran, "
    "given, or *projected*: the upstream step's items x its rows out per item) times the step's items per row of "
    "that input; a job per evaluated model reads all of it, a positive `limit` caps a job's items. Calls = items x "
    "calls per item; tokens = calls x tokens per call; calls split over the step's models by their measured shares. "
    "Per-item figures come from the profile {profile} ({source}). Price: USD per million input and output tokens of "
    "the model (`estimate.prices`); GPU-hours: prompt tokens / prefill rate + completion tokens / output rate of the "
    "server, times its GPUs (`estimate.throughput`), priced where it gives usd_per_hour. Cache hits, retries of "
    "invalid answers beyond the profile's rate and rate-limit waits are not counted."
)


def count_rows(paths: list[str]) -> int:
    return sum(pq.read_metadata(p).num_rows for p in paths)


class Projection:
    def __init__(self, plan: dict, counted: dict[str, int], given: dict[str, int], profile: dict):
        self.steps, self.counted, self.given, self.profile = plan["steps"], counted, given, profile
        self._items: dict[str, tuple[float | None, str]] = {}

    def rows(self, key: str) -> tuple[float | None, str]:
        """Rows of `<rule>.<output>` and how they are known: given, counted, projected or unknown."""
        if key in self.given:
            return float(self.given[key]), "given"
        if key in self.counted:
            return float(self.counted[key]), "counted"
        rule, output = key.split(".", 1)
        items, basis = self.items(rule) if rule in self.steps else (None, "unknown")
        ratio = self.profile.get(rule, {}).get("out_per_item", {}).get(output)
        if items is None or ratio is None:
            return None, "unknown"
        return items * ratio, "projected" if basis != "unknown" else basis

    def items(self, rule: str) -> tuple[float | None, str]:
        """The items a step works on (its reports' rows in), all jobs together: given, or the rows of
        its first input times its items per row (a job per evaluated model reads all of it), a
        positive `limit` capping each job's."""
        if rule not in self._items:
            step, jobs = self.steps[rule], self.steps[rule]["jobs"]
            if rule in self.given:
                per_job, basis = [float(self.given[rule]) if step["repeated"] else self.given[rule] / len(jobs)] * len(jobs), "given"
            else:
                known = [self.rows(key) for key in step["input"]]
                ratio = self.profile.get(rule, {}).get("items_per_row", 1.0)
                if not known or any(n is None for n, _ in known):
                    self._items[rule] = (None, "unknown")
                    return self._items[rule]
                rows = sum(n for n, _ in known) * ratio
                bases = {b for _, b in known}
                basis = "projected" if "projected" in bases or rule not in self.profile else "given" if "given" in bases else "counted"
                per_job = [rows if step["repeated"] else rows / len(jobs)] * len(jobs)
            per_job = [min(n, job["limit"]) if job["limit"] else n for n, job in zip(per_job, jobs)]
            self._items[rule] = (sum(per_job), basis)
        return self._items[rule]


def price(role: dict, calls: float, prompt: float, completion: float, prices: dict, throughput: dict) -> dict:
    """One role's share of a step: USD from the model's token prices, else GPU-hours from its server's rates."""
    out = {**role, "calls": round(calls), "prompt_tokens": round(prompt), "completion_tokens": round(completion), "usd": None, "gpu_hours": None}
    if role["model"] in prices:
        rate = prices[role["model"]]
        out["usd"] = (prompt * rate["input_per_mtok"] + completion * rate["output_per_mtok"]) / 1e6
    server = throughput.get(role["endpoint"]) or throughput.get(role["model"])
    if server and out["usd"] is None:
        hours = (prompt / server["prefill_tokens_per_s"] + completion / server["output_tokens_per_s"]) / 3600
        out["gpu_hours"] = hours * server.get("gpus", 1)
        if server.get("usd_per_hour") is not None:
            out["usd"] = out["gpu_hours"] * server["usd_per_hour"]
    return out


def estimate_step(rule: str, step: dict, projection: Projection, profile: dict, prices: dict, throughput: dict) -> dict:
    items, basis = projection.items(rule)
    figures = profile.get(rule) if "calls_per_item" in profile.get(rule, {}) else None
    row = {"stage": step["stage"], "family": step["family"], "basis": basis, "profiled": bool(figures),
           "items": None if items is None else round(items), "calls": None, "prompt_tokens": None,
           "completion_tokens": None, "usd": None, "gpu_hours": None, "roles": []}
    if items is None or not figures:
        return row
    jobs = step["jobs"]
    for job in jobs:  # each job works on the same number of items (a job per evaluated model) or a fair part
        calls = items / len(jobs) * figures["calls_per_item"]
        shares = figures.get("roles") or {}
        total = sum(shares.get(r["role"], 0) for r in job["roles"]) or None
        for role in job["roles"]:
            share = shares.get(role["role"], 0) / total if total else 1 / len(job["roles"])
            row["roles"].append(price(role, calls * share, calls * share * figures["prompt_tokens_per_call"],
                                      calls * share * figures["completion_tokens_per_call"], prices, throughput))
    for key in ("calls", "prompt_tokens", "completion_tokens"):
        row[key] = sum(r[key] for r in row["roles"])
    for key in ("usd", "gpu_hours"):
        values = [r[key] for r in row["roles"] if r[key] is not None]
        row[key] = round(sum(values), 4) if values else None
    row["unpriced"] = sorted({r["model"] for r in row["roles"] if r["usd"] is None and r["gpu_hours"] is None})
    return row


def _n(value, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}" if value >= 1 or not digits else f"{value:.2g}"


def table(rows: dict[str, dict], other_gpu: list[str], profile_path: str, source: str, unused: list[str]) -> str:
    head = "| step | stage | items | basis | model calls | prompt tokens | completion tokens | USD | GPU-hours | models |"
    lines = [head, "|" + "---|" * 10]
    for rule, r in rows.items():
        models = ", ".join(sorted({m["model"] for m in r["roles"]}))
        lines.append(f"| {rule} | {r['stage']} | {_n(r['items'])} | {r['basis']} | {_n(r['calls'])} | {_n(r['prompt_tokens'])} | "
                     f"{_n(r['completion_tokens'])} | {_n(r['usd'], 2)} | {_n(r['gpu_hours'], 1)} | {models} |")
    usd = sum(r["usd"] or 0 for r in rows.values())
    hours = sum(r["gpu_hours"] or 0 for r in rows.values())
    calls = sum(r["calls"] or 0 for r in rows.values())
    lines.append(f"| **total** | | | | {_n(calls)} | | | {_n(usd, 2)} | {_n(hours, 1)} | |")
    notes = ["", METHOD.format(profile=profile_path, source=source)]
    for rules, why in (([r for r, row in rows.items() if not row["profiled"]], "no figures in the profile"),
                       ([r for r, row in rows.items() if row["profiled"] and row["items"] is None], "no count upstream")):
        if rules:
            notes.append(f"No calls projected ({why}): {', '.join(rules)}.")
    unpriced = sorted({m for r in rows.values() for m in r.get("unpriced", [])})
    if unpriced:
        notes.append(f"No price or throughput for: {', '.join(unpriced)}.")
    if other_gpu:
        notes.append(f"GPU steps without model calls, not estimated: {', '.join(other_gpu)}.")
    if unused:
        notes.append(f"Given for steps this run does not have (their family is off), not used: {', '.join(unused)}.")
    return "\n".join(lines + notes) + "\n"


PROFILE_NUMBERS = ("rows_in", "items", "items_per_row", "calls_per_item", "prompt_tokens_per_call", "completion_tokens_per_call")
PROFILE_SHARES = ("out_per_item", "roles")  # name -> a number each


def shown(value) -> str:
    """A bad figure for an error line: a scalar's repr cut short, a container only by its type (a
    few bytes of YAML aliases can nest into a list far too big to repr)."""
    return f"{value!r:.80}" if value is None or isinstance(value, (str, int, float)) else f"a {type(value).__name__}"


def read_profile(path: str) -> tuple[bytes, dict]:
    """The profile's bytes and its mapping, every figure checked: a file a person edits by hand
    (or a folder named by mistake) fails with one line naming the file and the key, not later in
    the arithmetic."""
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise StageError(f"profile {path}: cannot read it ({err.strerror or err})") from None
    try:
        profile = yaml.safe_load(raw) or {}
    except (yaml.YAMLError, ValueError, RecursionError) as err:  # ValueError: an int of over 4300 digits, a date like 2001-13-45
        raise StageError(f"profile {path}: not YAML ({(str(err).splitlines() or [type(err).__name__])[0]:.200})") from None
    if not isinstance(profile, dict) or not isinstance(profile.get("rules", {}), dict) or not isinstance(profile.get("source", ""), str):
        raise StageError(f"profile {path}: expected a mapping with `source` (text) and `rules` (rule -> figures)")

    def number(value, where: str) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1e300 < value < 1e300 or value < 0:  # NaN fails too
            raise StageError(f"profile {path}: {where} is {shown(value)}, not a number >= 0")

    for rule, figures in profile.get("rules", {}).items():
        if not isinstance(figures, dict):
            raise StageError(f"profile {path}: rules.{rule} is {shown(figures)}, not a mapping of figures")
        for key, value in figures.items():
            if key in PROFILE_NUMBERS:
                number(value, f"rules.{rule}.{key}")
            elif key in PROFILE_SHARES and isinstance(value, dict):
                for name, share in value.items():
                    number(share, f"rules.{rule}.{key}.{name}")
            else:
                raise StageError(f"profile {path}: rules.{rule}.{key} is not a figure the estimate reads "
                                 f"(numbers: {', '.join(PROFILE_NUMBERS)}; mappings of numbers: {', '.join(PROFILE_SHARES)})")
    return raw, profile


def run(ctx) -> None:
    p = ctx.params
    plan = p["plan"]
    profile_path = ctx.input_path("profile")
    profile_bytes, profile = read_profile(profile_path)
    inputs = set(ctx.input_paths("tables")) if ctx.has_input("tables") else set()
    counted = {}
    for key, paths in plan["measured"].items():
        missing = sorted(set(paths) - inputs)
        if missing:
            raise StageError(f"plan.measured[{key}] names {missing[0]}, which is not an input")
        counted[key] = count_rows(paths)
    try:
        unused = unused_given(p["given"], plan["steps"])
    except ValueError as err:
        raise StageError(str(err)) from None
    projection = Projection(plan, counted, p["given"], profile.get("rules", {}))
    models = [rule for rule in plan["order"] if plan["steps"][rule]["kind"] == "model"]
    ctx.add_input(len(models))
    rows = {rule: estimate_step(rule, plan["steps"][rule], projection, profile.get("rules", {}), p["prices"], p["throughput"])
            for rule in models}
    other_gpu = [rule for rule in plan["order"] if plan["steps"][rule]["kind"] == "other" and plan["steps"][rule]["gpu"]]
    text = table(rows, other_gpu, profile_path, profile.get("source", "unknown source"), unused)
    result = {"digest": settings_digest(p, profile_bytes), "counted": counted, "order": models, "steps": rows,
              "total_usd": round(sum(r["usd"] or 0 for r in rows.values()), 2),
              "total_gpu_hours": round(sum(r["gpu_hours"] or 0 for r in rows.values()), 2)}
    atomic_write_bytes(ctx.output_path("estimate"), json.dumps(result, indent=1).encode())
    atomic_write_bytes(ctx.output_path("table"), text.encode())
    ctx.count_output("estimate", len(rows))
    print(text)


STAGE = Stage(
    name="estimate_cost",
    version=VERSION,
    doc=__doc__,
    inputs={
        "tables": Input("the free steps' outputs whose rows the estimate counts (plan.measured)", many=True, optional=True, kind="file"),
        "profile": Input("per-step figures measured in a run (YAML: rules.<rule>.{items_per_row, calls_per_item, ...})", kind="file"),
    },
    outputs={
        "estimate": Output(None, "JSON: per model step items, calls, tokens, USD or GPU-hours, and their basis"),
        "table": Output(None, "the same as a Markdown table with the projection method under it", counted=False),
    },
    params={
        "plan": Param(dict, {"order": [], "steps": {}, "measured": {}}, "the wiring's plan (stages/core/estimate.py): steps, first inputs, jobs, roles",
                      fields={"order": Param(list, help="the steps in declaration order", items=str),
                              "steps": Param(dict, help="per step: kind, gpu, first input, outputs, jobs", items=dict),
                              "measured": Param(dict, help="'<rule>.<output>' -> the files whose rows are counted", items=list)}),
        "given": Param(dict, {}, "counts given by hand (e.g. what a seed paper reports): '<rule>' the items a step works on "
                       "(one job's, for a job per evaluated model), '<rule>.<output>' the rows an output holds", items=Param(int, min=0)),
        "prices": Param(dict, {}, "USD per million tokens by model name: {input_per_mtok, output_per_mtok}", items=Param(
            dict, fields={"input_per_mtok": Param(float, help="USD per million prompt tokens", min=0),
                          "output_per_mtok": Param(float, help="USD per million completion tokens", min=0)})),
        "throughput": Param(dict, {}, "a model server's rates by endpoint URL (or model, for in-process backends)", items=Param(
            dict, fields={"output_tokens_per_s": Param(float, help="completion tokens per second", above=0),
                          "prefill_tokens_per_s": Param(float, help="prompt tokens per second", above=0),
                          "gpus": Param(int, 1, "GPUs the server holds (GPU-hours = its hours x gpus)", min=1),
                          "usd_per_hour": Param(float, None, "what a GPU-hour costs (optional)", min=0)})),
    },
    run=run,
)

if __name__ == "__main__":
    STAGE.main()
