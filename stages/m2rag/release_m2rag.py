"""Release the M2RAG benchmark: the ELI5 queries filtered, classified and sampled as in M2RAG
§4.1 / App. A, with their web pages split into pieces and images, each scored (§4.2-4.3, App. B).

`<releases_dir>/<name>/<version>/`: benchmark.duckdb with the tables `queries` (the sampled
queries when `sampled` is given, else the classified queries; every shard gathered, ordered by
id), `categories` (M2RAG Table 1: id, name, queries over all classified queries; sampled),
`filter_decisions` (step, label, queries: the figure 5 and 6 judgements, from the kept rows and
the filter's rejects) and `reject_counts` (stage, reason, rows); with `pages` and `elements`
also `pages` (the fetched pages of the sampled queries, in rank order), `elements` (ordered text
pieces and image placeholders with their scores and `mode`), `images` (the image elements: url,
score, mode, sha256 where the scorer saw a stored image) and `statistics` (M2RAG Table 4, computed
from those tables), plus `m2rag.jsonl`: one record per query with its pages in rank order, each
with its scored pieces and images in page order. The same tables under parquet/, and a dataset
card README.md whose counts are queried from those tables. Not built yet: auxiliary images
(Table 4's auxiliary rows read "not built") and cached image files. The version is a
content hash of the inputs and params: an identical rebuild lands in the same folder.

Invariant: query rows in (the sampled ones when given) = query rows released.
Params: name, releases_dir, categories (the Table 1 list, for names and zero counts).
"""
from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa

from stages.core.release import md_table, publish_release, reject_counts
from stages.core.stage import Input, Output, Param, Stage

VERSION = "2"

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


# M2RAG Table 4, item by item, over the released tables (auxiliary images are not built yet)
STATISTICS = [
    ("Queries", "select count(*)::double from queries"),
    ("Web pages per query", "select count(*)::double / nullif((select count(*) from queries), 0) from pages"),
    ("Text elements per web page", "select count(*) filter (where kind = 'text')::double / nullif((select count(*) from pages), 0) from elements"),
    ("Images per query", "select count(*)::double / nullif((select count(*) from queries), 0) from images"),
    ("Average score of text elements", "select avg(score)::double from elements where kind = 'text'"),
    ("Average score of image elements", "select avg(score)::double from images"),
]
PAGE_COLUMNS = ["id", "query_id", "rank", "url", "final_url", "title", "chars", "images"]
ELEMENT_COLUMNS = ["element_id", "page_id", "query_id", "order", "kind", "text", "image_url", "placeholder", "score", "analysis", "mode", "image_sha256"]


def build_tables(queries: pa.Table, rejects: pa.Table, categories: list[dict], sampled: pa.Table | None = None,
                 pages: pa.Table | None = None, elements: pa.Table | None = None) -> dict[str, pa.Table]:
    con = duckdb.connect()
    con.register("queries", queries)
    con.register("rejects", rejects)
    con.register("sampled", sampled if sampled is not None else pa.table({"id": pa.array([], pa.string()), "sample_category": pa.array([], pa.int32())}))
    cats = pa.table({"id": pa.array([c["id"] for c in categories], pa.int32()), "name": [c["name"] for c in categories]})
    con.register("cats", cats)
    category_counts = con.execute(
        "select cats.id, cats.name, count(q.id)::bigint as queries, "
        "(select count(*) from sampled s where s.sample_category = cats.id)::bigint as sampled from cats "
        "left join (select id, unnest(categories) as category from queries) q on q.category = cats.id "
        "group by 1, 2 order by 1"
    ).to_arrow_table()
    decisions = con.execute(_DECISIONS).to_arrow_table()
    tables = {"queries": sampled if sampled is not None else queries, "categories": category_counts, "filter_decisions": decisions}
    if pages is not None and elements is not None:
        con.register("raw_pages", pages)
        con.register("raw_elements", elements)
        tables["pages"] = con.execute(
            f"select {', '.join(PAGE_COLUMNS)} from raw_pages where query_id in (select id from sampled) order by query_id, rank, id"
        ).to_arrow_table()
        con.register("pages", tables["pages"])
        tables["elements"] = con.execute(
            f'select {", ".join(chr(34) + c + chr(34) for c in ELEMENT_COLUMNS)} from raw_elements '
            'where page_id in (select id from pages) order by query_id, page_id, "order"'
        ).to_arrow_table()
        con.register("elements", tables["elements"])
        tables["images"] = con.execute(
            'select element_id, page_id, query_id, "order", image_url as url, text as alt, score, mode, image_sha256 as sha256 '
            "from elements where kind = 'image' order by query_id, page_id, \"order\""
        ).to_arrow_table()
        con.register("images", tables["images"])
        con.register("queries", tables["queries"])
        values = [con.execute(sql).fetchone()[0] for _, sql in STATISTICS]
        tables["statistics"] = pa.table({"item": [item for item, _ in STATISTICS], "value": pa.array(values, pa.float64())})
    tables["reject_counts"] = reject_counts(rejects)
    return tables


def jsonl_records(tables: dict[str, pa.Table]) -> list[dict]:
    """One record per query: its pages in rank order, each with its pieces and images in page order."""
    pieces: dict[str, list[dict]] = {}
    for el in tables["elements"].to_pylist():
        if el["kind"] == "text":
            piece = {"order": el["order"], "kind": "text", "text": el["text"], "score": el["score"], "analysis": el["analysis"]}
        else:
            piece = {"order": el["order"], "kind": "image", "placeholder": el["placeholder"], "url": el["image_url"], "alt": el["text"],
                     "score": el["score"], "mode": el["mode"], "sha256": el["image_sha256"] or None}
        pieces.setdefault(el["page_id"], []).append(piece)
    pages: dict[str, list[dict]] = {}
    for page in tables["pages"].to_pylist():
        pages.setdefault(page["query_id"], []).append(
            {"rank": page["rank"], "url": page["url"], "title": page["title"], "elements": pieces.get(page["id"], [])})
    return [{"id": q["id"], "question": q["question"], "categories": q["categories"], "category_names": q["category_names"],
             "sample_category": q.get("sample_category"), "pages": pages.get(q["id"], [])} for q in tables["queries"].to_pylist()]


def write_jsonl(tables: dict[str, pa.Table]):
    def extra(folder: Path) -> None:
        lines = [json.dumps(record, ensure_ascii=False) for record in jsonl_records(tables)]
        (folder / "m2rag.jsonl").write_text("".join(line + "\n" for line in lines))
    return extra


def fmt(value) -> str:
    return "n/a" if value is None else f"{value:g}" if float(value).is_integer() else f"{value:.2f}"


def card(name: str, version: str, tables: dict[str, pa.Table]) -> str:
    rows = lambda t: [list(r.values()) for r in tables[t].to_pylist()]  # noqa: E731
    total = tables["queries"].num_rows
    sampled = "sample_category" in tables["queries"].column_names
    short = [r for r in tables["categories"].to_pylist() if r["id"] != 11 and r["sampled"] < max(
        (c["sampled"] for c in tables["categories"].to_pylist()), default=0)]
    pages = []
    if "statistics" in tables:
        pages = [
            "## Statistics (M2RAG Table 4)",
            md_table(["Item", "Value"], [[r["item"], fmt(r["value"])] for r in tables["statistics"].to_pylist()]
                     + [["Auxiliary images per query", "not built"], ["Average auxiliary image score", "not built"]]),
            "Scores are 0-10 (figure 8 for text pieces, figure 9 for images; an image's `mode` says whether the scorer "
            "saw it or its text stand-in). `m2rag.jsonl` holds one record per query: its pages in rank order with "
            "their scored pieces and images in page order.",
        ]
    return "\n\n".join(
        [
            f"# {name} {version}",
            "User queries for multi-modal RAG, built as in M2RAG §4.1 and App. A: ELI5 questions are kept when "
            "a model judges them clear questions that need rich references (figure 5) and whose answers gain from "
            "images (figure 6), then classified into the eleven topics of Table 1 (figure 7; 1-10 combinable, 11 "
            "Others alone). Every judgement keeps the model's brief analysis. Built by citeforge; query with "
            "`duckdb benchmark.duckdb`.",
            f"**{total} queries{' sampled (M2RAG §4.1: a seeded per-topic sample of topics 1-10, Others excluded)' if sampled else ''}.**",
            "## Queries per category (M2RAG Table 1)",
            md_table(["ID", "Category Name", "Num. Samples", "Sampled"], rows("categories")),
            *(["Topics with fewer queries than the others, all taken: " + ", ".join(f"{r['id']} {r['name']} ({r['sampled']})" for r in short) + "."]
              if sampled and short else []),
            *pages,
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
    optional = {name: ctx.read(name) for name in ("sampled", "pages", "elements") if ctx.has_input(name)}
    sampled = optional.get("sampled")
    if sampled is not None:
        sampled = sampled.sort_by("id")
    ctx.add_input((sampled if sampled is not None else queries).num_rows)
    tables = build_tables(queries, ctx.read("rejects"), ctx.params["categories"], sampled, optional.get("pages"), optional.get("elements"))
    extra = write_jsonl(tables) if "elements" in tables else None
    publish_release(ctx, tables, lambda name, version: card(name, version, tables), extra)


STAGE = Stage(
    name="release_m2rag",
    version=VERSION,
    doc=__doc__,
    inputs={
        "queries": Input("m2rag_classified_queries shards", many=True, table="m2rag_classified_queries"),
        "sampled": Input("m2rag_sampled_queries: the benchmark's queries", many=True, optional=True, table="m2rag_sampled_queries"),
        "pages": Input("retrieval_pages of the sampled queries (fetch_pages)", many=True, optional=True, table="retrieval_pages"),
        "elements": Input("m2rag_scored_elements (score_elements)", many=True, optional=True, table="m2rag_scored_elements"),
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
