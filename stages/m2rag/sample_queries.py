"""Sample the benchmark queries (M2RAG §4.1): "20 queries are sampled in each category (other
than 'Others'), resulting in a final benchmark dataset containing 200 queries".

A seeded stratified sample of the classified queries: for each topic 1-10 in turn, the queries
that carry it and were not drawn already are ordered by id, shuffled with a generator seeded by
(seed, topic), and the first `per_category` are taken. A query with several topics is drawn at
most once, for the first topic whose draw picks it (recorded as `sample_category`). Queries
classified "Others" (category 11) alone are never sampled. A topic with fewer than
`per_category` undrawn queries takes them all, and the report says so (stats
`short_category_<id>` = queries it had, `short_categories`); the release card lists them.
The seed leaves the handling of multi-topic queries open: this draw-once rule is ours.

Input: `classified_queries` (m2rag_classified_queries, every shard; a query id repeated across
the shards is the runner's `duplicate_id` reject). Output: `sampled_queries`
(m2rag_sampled_queries): the input columns plus sample_category, ordered by (sample_category, id).
Queries not drawn are counted (stats `not_sampled`, `others_only`); a query with no category at
all (not even 11) is rejected `no_categories`, never counted as Others.
Invariant: queries in = sampled + not_sampled + others_only + rejected.
"""
from __future__ import annotations

import random

from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "1"
OTHERS = 11


def draw(queries: list[dict], per_category: int, seed: int) -> tuple[list[dict], dict[int, int]]:
    """(sampled rows with sample_category, {topic: queries it had} for topics short of per_category)."""
    taken: set[str] = set()
    sampled, short = [], {}
    for topic in range(1, OTHERS):
        pool = sorted((q for q in queries if topic in q["categories"] and q["id"] not in taken), key=lambda q: q["id"])
        random.Random(f"{seed}:{topic}").shuffle(pool)
        if len(pool) < per_category:
            short[topic] = len(pool)
        for query in sorted(pool[:per_category], key=lambda q: q["id"]):
            taken.add(query["id"])
            sampled.append({**query, "sample_category": topic})
    return sampled, short


def run(ctx) -> None:
    p = ctx.params
    queries = []
    for query in ctx.read_rows("classified_queries"):
        with ctx.item(query["id"]):
            if not query["categories"]:
                raise Reject("no_categories", "the classification named no category, not even 11 (Others)")
            queries.append(query)
    sampled, short = draw(queries, p["per_category"], p["seed"])
    ctx.write("sampled_queries", sampled)
    others = sum(1 for q in queries if set(q["categories"]) <= {OTHERS})
    ctx.stats["sampled"] = len(sampled)
    ctx.stats["others_only"] = others
    ctx.stats["not_sampled"] = len(queries) - len(sampled) - others
    ctx.stats["short_categories"] = len(short)
    for topic, had in short.items():
        ctx.stats[f"short_category_{topic}"] = had


def invariant(ctx) -> str | None:
    s = ctx.stats
    if ctx.rows_in != s["sampled"] + s["not_sampled"] + s["others_only"] + ctx.rejected:
        return (f"queries in {ctx.rows_in} != sampled {s['sampled']} + not sampled {s['not_sampled']} + others only "
                f"{s['others_only']} + rejected {ctx.rejected}")
    return None


STAGE = Stage(
    name="sample_queries",
    version=VERSION,
    doc=__doc__,
    inputs={"classified_queries": Input("m2rag_classified_queries shards", many=True, table="m2rag_classified_queries")},
    outputs={"sampled_queries": Output("m2rag_sampled_queries", "the benchmark's queries, per_category per topic 1-10")},
    params={
        "per_category": Param(int, 20, "queries drawn from each of topics 1-10 (M2RAG: 20)", min=1),
        "seed": Param(int, 0, "seed of the draw: the same seed and input give the same sample"),
    },
    run=run,
    invariant=invariant,
    rejects={"no_categories": "the query has no category at all (not even Others)"},  # queries not drawn are counted in stats
)

if __name__ == "__main__":
    STAGE.main()
