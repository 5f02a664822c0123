"""Release quotas (MCiteBench §3.6, Table 1): a seeded stratified sample of questions that targets
configured counts on several dimensions at once (the seed: 3,000 questions; 2,000 explanation and
1,000 locating; 2,538 single- and 462 multi-source; 1,243 text, 941 figure, 533 table and 283
mixed evidence).

    quotas = {"total": 3000, "seed": 0,
              "question_type": {"explanation": 2000, "locating": 1000},
              "source_type": {"single": 2538, "multi": 462},
              "evidence_modality": {"text": 1243, "figure": 941, "table": 533, "mixed": 283}}

Marginal targets on several dimensions cannot always be met together, and a pool may lack a
stratum. The sampler is greedy and deterministic: candidates are visited in an order seeded by
(`seed`, question id), scarcest strata first (a stratum's supply over its target); a first pass
takes a question only while every one of its strata is under target; a second pass fills up to
`total` with the questions that overshoot the fewest targets. `achieved` reports, per dimension
and value, the target and the count reached, so the card can show both.
"""
from __future__ import annotations

import collections

from .ids import seeded_rng

DIMENSIONS = ("question_type", "source_type", "evidence_modality")


def check_quotas(quotas: dict) -> list[str]:
    """Problems with a quotas mapping (empty when it is usable)."""
    problems = [f"unknown quota key {k!r}" for k in quotas if k not in (*DIMENSIONS, "total", "seed")]
    for dim in DIMENSIONS:
        for value, n in (quotas.get(dim) or {}).items():
            if not isinstance(n, int) or n < 0:
                problems.append(f"quota {dim}.{value} must be a count >= 0, got {n!r}")
    total = quotas.get("total")
    if total is not None and (not isinstance(total, int) or total < 0):
        problems.append(f"quota total must be a count >= 0, got {total!r}")
    return problems


def _total(quotas: dict, dimensions: tuple[str, ...]) -> int:
    if quotas.get("total") is not None:
        return quotas["total"]
    sums = [sum(quotas[d].values()) for d in dimensions if quotas.get(d)]
    return max(sums) if sums else 0


def sample(questions: list[dict], quotas: dict, dimensions: tuple[str, ...] = DIMENSIONS) -> tuple[list[dict], list[dict]]:
    """(chosen questions in input order, achieved rows: dimension, value, target, available, achieved).
    `dimensions`: the item keys quotas may target (MCiteBench's by default; MAVIS's annotation
    subset balances `domain`)."""
    targets = {d: dict(quotas[d]) for d in dimensions if quotas.get(d)}
    total = _total(quotas, dimensions)
    supply = {d: collections.Counter(q[d] for q in questions) for d in targets}
    rng = seeded_rng(quotas.get("seed", 0), "release-quotas")
    order = sorted(questions, key=lambda q: q["id"])
    rng.shuffle(order)

    def scarcity(q):  # lower = rarer relative to what is wanted; strata without a target come last
        ratios = [supply[d][q[d]] / targets[d][q[d]] for d in targets if targets[d].get(q[d])]
        return min(ratios) if ratios else float("inf")

    order.sort(key=scarcity)  # stable: the seeded order breaks ties
    counts = {d: collections.Counter() for d in targets}
    chosen: set[str] = set()

    def take(q):
        chosen.add(q["id"])
        for d in targets:
            counts[d][q[d]] += 1

    def overshoot(q):
        return sum(1 for d in targets if counts[d][q[d]] >= targets[d].get(q[d], 0))

    for q in order:
        if len(chosen) < total and overshoot(q) == 0:
            take(q)
    rest = [q for q in order if q["id"] not in chosen]
    while len(chosen) < total and rest:
        best = min(range(len(rest)), key=lambda i: overshoot(rest[i]))
        take(rest.pop(best))
    picked = [q for q in questions if q["id"] in chosen]
    achieved = [{"dimension": "total", "value": "all", "target": total, "available": len(questions), "achieved": len(picked)}]
    for d, wanted in targets.items():
        got = collections.Counter(q[d] for q in picked)
        for value in sorted(set(wanted) | set(got)):
            achieved.append({"dimension": d, "value": value, "target": wanted.get(value, 0),
                             "available": supply[d][value], "achieved": got[value]})
    return picked, achieved
