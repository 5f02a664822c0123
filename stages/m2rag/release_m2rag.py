"""Release the M2RAG query set: the ELI5 queries filtered and classified as in M2RAG §4.1 / App. A.

`<releases_dir>/<name>/<version>/`: benchmark.duckdb with the tables `queries` (the classified
queries, every shard gathered, ordered by id), `categories` (M2RAG Table 1: id, name, queries),
`filter_decisions` (step, label, queries: the figure 5 and 6 judgements, from the kept rows and
the filter's rejects) and `reject_counts` (stage, reason, rows), the same tables under parquet/,
and a dataset card README.md whose counts are queried from those tables. The version is a
content hash of the inputs and params: an identical rebuild lands in the same folder.

Invariant: query rows in = query rows released.
Params: name, releases_dir, categories (the Table 1 list, for names and zero counts).
"""
from __future__ import annotations

import duckdb
import pyarrow as pa

from stages.core.release import md_table, publish_release, reject_counts
from stages.core.stage import Input, Output, Param, Stage

VERSION = "1"

_DECISIONS = """
with judged as (
    select 'clear question needing rich references (fig. 5)' as step, clear as label from queries
    union all select 'clear question needing rich references (fig. 5)', 0 from rejects where reason = 'not_clear'
    union all select 'clear question needing rich references (fig. 5)', 1 from rejects where reason = 'no_images_needed'
    union all select 'answer needs images (fig. 6)', needs_images from queries
    union all select 'answer needs images (fig. 6)', 0 from rejects where reason = 'no_images_needed'
)
select step, label::int as label, count(*)::bigint as queries from judged group by 1, 2 order by 1 desc, 2
"""


def build_tables(queries: pa.Table, rejects: pa.Table, categories: list[dict]) -> dict[str, pa.Table]:
    con = duckdb.connect()
    con.register("queries", queries)
    con.register("rejects", rejects)
    cats = pa.table({"id": pa.array([c["id"] for c in categories], pa.int32()), "name": [c["name"] for c in categories]})
    con.register("cats", cats)
    category_counts = con.execute(
        "select cats.id, cats.name, count(q.id)::bigint as queries from cats "
        "left join (select id, unnest(categories) as category from queries) q on q.category = cats.id "
        "group by 1, 2 order by 1"
    ).to_arrow_table()
    decisions = con.execute(_DECISIONS).to_arrow_table()
    return {"queries": queries, "categories": category_counts, "filter_decisions": decisions, "reject_counts": reject_counts(rejects)}


def card(name: str, version: str, tables: dict[str, pa.Table]) -> str:
    rows = lambda t: [list(r.values()) for r in tables[t].to_pylist()]  # noqa: E731
    total = tables["queries"].num_rows
    return "\n\n".join(
        [
            f"# {name} {version}",
            "User queries for multi-modal RAG, built as in M2RAG §4.1 and App. A: ELI5 questions are kept when "
            "a model judges them clear questions that need rich references (figure 5) and whose answers gain from "
            "images (figure 6), then classified into the eleven topics of Table 1 (figure 7; 1-10 combinable, 11 "
            "Others alone). Every judgement keeps the model's brief analysis. Built by citeforge; query with "
            "`duckdb benchmark.duckdb`.",
            f"**{total} queries.**",
            "## Queries per category (M2RAG Table 1)",
            md_table(["ID", "Category Name", "Num. Samples"], rows("categories")),
            "## Filter decisions (M2RAG figures 5 and 6)",
            md_table(["step", "label", "queries"], rows("filter_decisions")) if tables["filter_decisions"].num_rows else "None.",
            "## Rows dropped, by stage and reason",
            md_table(["stage", "reason", "rows"], rows("reject_counts")) if tables["reject_counts"].num_rows else "None.",
            "## Tables",
            md_table(["table", "rows"], [[t, tables[t].num_rows] for t in tables]),
        ]
    ) + "\n"


def run(ctx):
    queries = ctx.read("queries").sort_by("id")
    ctx.add_input(queries.num_rows)
    tables = build_tables(queries, ctx.read("rejects"), ctx.params["categories"])
    publish_release(ctx, tables, lambda name, version: card(name, version, tables))


STAGE = Stage(
    name="release_m2rag",
    version=VERSION,
    doc=__doc__,
    inputs={
        "queries": Input("m2rag_classified_queries shards", many=True, table="m2rag_classified_queries"),
        "rejects": Input("rejects sidecars of the family's stages, counted in the card", many=True, optional=True, table="rejects"),
    },
    outputs={"manifest": Output(None, "release manifest JSON: name, version, path, table rows")},
    params={
        "name": Param(str, help="release name: data/releases/<name>/<version>/", pattern=Param.PLAIN_NAME),
        "releases_dir": Param(str, "data/releases", "where releases land"),
        "categories": Param(list, help="M2RAG Table 1 categories [{id, name, description}]", items=dict),
    },
    run=run,
)

if __name__ == "__main__":
    STAGE.main()
