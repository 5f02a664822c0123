"""retrieve_text: the top text passages for every query (MAVIS §3.2 Step 2: "Using each atomic fact
as a query, we retrieved the top five passages from each source", the text source being C4).

Inputs: `queries` (Parquet or JSON lines with id_column and text_column) and `index`
(retrieval_text_index rows from build_text_index, one file per shard). Every shard answers top_k
for every query (BM25 from its memory-mapped bm25s matrix, or dense FAISS search); the shards'
lists are merged by score (ties: lower shard, then earlier passage) into the final top_k
(stages.core.text_index.merge_topk). BM25 scores use each shard's own statistics, as in a
sharded Lucene index.

Output `passages` (retrieval_passages): (query_id, rank, passage_id, score, text, shard).
Rejects: `null_column`, `bad_value` (a null, empty or non-text id, a null or non-text text: the
runner's contract reasons, stages.core.queries), `empty_query` (blank text), `duplicate_query`, `no_match` (no passage shares a term with
the query). Invariant: queries in = queries with passages + rejected.
"""
from __future__ import annotations

from stages.core.ids import content_id
from stages.core.queries import check_query, read_queries
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError
from stages.core.text_index import ShardIndex, hit_passages, merge_topk

VERSION = "1"


def run(ctx) -> None:
    p = ctx.params
    if p["top_k"] < 1:
        raise StageError(f"param top_k must be >= 1, got {p['top_k']}")
    try:
        queries = read_queries(ctx.input_paths("queries"), p["id_column"], p["text_column"])
    except ValueError as err:
        raise StageError(str(err)) from None
    manifests = sorted(ctx.read_rows("index"), key=lambda r: r["shard"])
    if not manifests:
        raise StageError("input index lists no shard")
    methods = {m["method"] for m in manifests}
    if len(methods) > 1 or len({m["shards"] for m in manifests}) > 1 or len(manifests) != manifests[0]["shards"]:
        raise StageError(f"index shards do not form one index: methods {sorted(methods)}, shards {[(m['shard'], m['shards']) for m in manifests]}")

    seen: set[str] = set()
    asked: list[tuple[str, str]] = []
    for query_id, text, where in queries:
        with ctx.item(query_id if isinstance(query_id, str) and query_id else where):
            check_query(query_id, text, where, seen, p["id_column"], p["text_column"], "asked")
            asked.append((query_id, text))

    texts = [text for _, text in asked]
    per_query: list[list[list[tuple[float, int]]]] = [[] for _ in asked]
    shards, encoder = [], None
    for manifest in manifests:
        try:
            shard = ShardIndex(manifest["path"], encoder=encoder)
        except ValueError as err:
            raise StageError(f"shard {manifest['shard']}: {err}") from None
        encoder = getattr(shard, "encoder", None)  # dense: one model for every shard
        for hits, shard_hits in zip(per_query, shard.search(texts, p["top_k"])):
            hits.append(shard_hits)
        shards.append(shard)

    writer = ctx.writer("passages")
    best = [merge_topk(hits, p["top_k"]) for hits in per_query]
    for (query_id, text), merged, passages in zip(asked, best, hit_passages(shards, best)):
        with ctx.item(query_id, counted=False):
            if not merged:
                raise Reject("no_match", f"no passage of {len(shards)} shard(s) matches {text[:200]!r}")
            rows = []
            for rank, ((score, shard_no, _), passage) in enumerate(zip(merged, passages), 1):
                rows.append({
                    "id": content_id("hit", query_id, passage["passage_id"]), "query_id": query_id, "rank": rank,
                    "passage_id": passage["passage_id"], "score": score, "text": passage["text"], "shard": manifests[shard_no]["shard"],
                })
            writer.write_many(rows)
            ctx.stats["queries_answered"] += 1


def invariant(ctx) -> str | None:
    answered = ctx.stats["queries_answered"]
    if ctx.rows_in != answered + ctx.rejected:
        return f"queries in {ctx.rows_in} != queries answered {answered} + rejected {ctx.rejected}"
    return None


STAGE = Stage(
    name="retrieve_text",
    version=VERSION,
    doc=__doc__,
    inputs={
        "queries": Input("queries: Parquet or JSON lines with id_column and text_column", many=True, kind="file"),
        "index": Input("the index shards (build_text_index outputs)", many=True, table="retrieval_text_index"),
    },
    outputs={"passages": Output("retrieval_passages", "top passages per query, shards merged", counted=False)},
    params={
        "top_k": Param(int, 5, "passages per query (MAVIS: 5)", min=1),
        "id_column": Param(str, "id", "query id column"),
        "text_column": Param(str, "text", "query text column"),
    },
    run=run,
    invariant=invariant,
    rejects={
        "empty_query": "the query has no text",
        "duplicate_query": "a query id seen before (the first row is asked)",
        "no_match": "no passage shares a term with the query",
    },
)

if __name__ == "__main__":
    STAGE.main()
