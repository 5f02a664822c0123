"""Analyses of an MCiteBench evaluation that the report prints beside Tables 2-4 (mcitebench.txt
§5.3 RQ2 / Figure 5, App. C.3 / Table 12, App. D.1 / Table 13): pure functions over the
evaluation's rows, so report_mcitebench stays a layout of tables.

- `rq2_rows`: S-EM by evidence-modality combination over multi-source explanation questions with
  exactly two gold items (Figure 5): "text+text", "text+figure", "figure+table", ...; a response
  whose S-EM is missing (reference scoring leaves uncited responses out) is counted, not averaged.
- `agreement_table`: the judge against human labels (Table 12).
- `swap_rows` / `ranking_agrees`: each model's scores under two judges and whether the models rank
  the same under both (Table 13).
"""
from __future__ import annotations

import collections
from statistics import mean

MODALITY_ORDER = {"text": 0, "figure": 1, "table": 2}


def combination(response: dict) -> str | None:
    """"text+figure" for a two-gold-item response (modalities of its gold items, sorted); else None."""
    gold = [i["modality"] for i in response["items"] if i["is_evidence"]]
    if response["question_type"] != "explanation" or len(gold) != 2:
        return None
    return "+".join(sorted(gold, key=lambda m: (MODALITY_ORDER.get(m, 9), m)))


def rq2_rows(responses: list[dict], scores: list[dict]) -> list[dict]:
    """Per model and modality combination: mean S-EM (0-100), responses averaged and left out."""
    combos = {r["id"]: combination(r) for r in responses}
    cells: dict[tuple[str, str], list] = collections.defaultdict(list)
    for s in scores:
        combo = combos.get(s["id"])
        if combo:
            cells[(s["model"], combo)].append(s["source_em"])
    return [{"model": model, "combination": combo, "sem": mean(v for v in values if v is not None) if any(v is not None for v in values) else None,
             "n": sum(v is not None for v in values), "left_out": sum(v is None for v in values)}
            for (model, combo), values in sorted(cells.items())]


def agreement_rows(rows: list[dict]) -> list[list]:
    """Table 12's layout: judge, scope, kind, n, F1, recall, precision, exact agreement."""
    fmt = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
    order = {"subjective": 0, "objective": 1, "all": 2}
    return [[r["judge"], r["scope"], r["kind"], r["n"], fmt(r["f1"]), fmt(r["recall"]), fmt(r["precision"]), fmt(r["exact"])]
            for r in sorted(rows, key=lambda r: (r["judge"], order.get(r["scope"], 9), r["kind"]))]


def swap_rows(first: dict, second: dict, models: list[str], metrics: list[str]) -> list[dict]:
    """Each model's overall value of each metric under the two judges' summaries ((model, metric) -> value)."""
    return [{"model": m, **{f"{metric}@{i}": summary.get((m, metric)) for metric in metrics for i, summary in enumerate((first, second))}}
            for m in models]


def ranking_agrees(rows: list[dict], metric: str) -> bool | None:
    """Whether the models rank the same by `metric` under both judges (None: a value is missing)."""
    if any(r[f"{metric}@0"] is None or r[f"{metric}@1"] is None for r in rows):
        return None
    rank = lambda i: [r["model"] for r in sorted(rows, key=lambda r: (-r[f"{metric}@{i}"], r["model"]))]  # noqa: E731
    return rank(0) == rank(1)
