"""Release the M2RAG benchmark: the ELI5 queries filtered, classified and sampled as in M2RAG
§4.1 / App. A, with their web pages split into pieces and images, their auxiliary images from image
search, each scored (§4.2-4.3, App. B) and each image captioned (§5.2).

`<releases_dir>/<name>/<version>/`: benchmark.duckdb with the tables `queries` (the sampled
queries when `sampled` is given, else the classified queries; every shard gathered, ordered by
id), `categories` (M2RAG Table 1: id, name, queries over all classified queries; sampled),
`filter_decisions` (step, label, queries: the figure 5 and 6 judgements, from the kept rows and
the filter's rejects) and `reject_counts` (stage, reason, rows); with `pages` and `elements`
also `pages` (the fetched pages of the sampled queries, in rank order), `elements` (ordered text
pieces and image placeholders with their scores and `mode`), `images` (the scored page images:
url, alt, score, mode, sha256, caption and caption_mode from the optional `captions` input, and
`selected`: score >= `min_image_score`, the seed's generation-input minimum, a decision apart from
the score so changing it calls no model), `aux_images` (the scored auxiliary images of image
search, score rows of kind aux_image: query_id, rank, url, title, sha256, score, mode, caption,
caption_mode, selected) and `statistics` (M2RAG Table 4, computed from those tables), plus
`m2rag.jsonl`: one record per query with its pages in rank order, each with its scored pieces and
images (url, sha256, score, caption, file) in page order, and its auxiliary images; every image
file, copied from `image_store`, as `images/<sha256>.<ext>`. The same tables under parquet/, and a
dataset card README.md whose counts are queried from those tables. The version is a content hash
of the inputs and params: an identical rebuild lands in the same folder.

Invariant: query rows in (the sampled ones when given) = query rows released. A released image
missing from the image store stops the stage, naming it.
Params: name, releases_dir, categories (the Table 1 list, for names and zero counts),
min_image_score, image_store.
"""
from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa

from stages.core.dataset_card import reject_rows
from stages.core.images import ImageStore
from stages.core.release import md_table, publish_release, reject_counts
from stages.core.stage import Input, Output, Param, Stage, StageError
from stages.m2rag.categories import CATEGORIES

VERSION = "3"

_DECISIONS = """
with judged as (
    select 'clear question needing rich references (fig. 5)' as step, clear as label, 1::bigint as n from queries
    union all select 'clear question needing rich references (fig. 5)', 0, rows from reject_counts where reason = 'not_clear'
    union all select 'clear question needing rich references (fig. 5)', 1, rows from reject_counts where reason = 'no_images_needed'
    union all select 'answer needs images (fig. 6)', needs_images, 1 from queries
    union all select 'answer needs images (fig. 6)', 0, rows from reject_counts where reason = 'no_images_needed'
)
select step, label::int as label, sum(n)::bigint as queries from judged group by 1, 2 order by 1 desc, 2
"""


# M2RAG Table 4, item by item, over the released tables
STATISTICS = [
    ("Queries", "select count(*)::double from queries"),
    ("Web pages per query", "select count(*)::double / nullif((select count(*) from queries), 0) from pages"),
    ("Text elements per web page", "select count(*) filter (where kind = 'text')::double / nullif((select count(*) from pages), 0) from elements"),
    ("Images per query", "select count(*)::double / nullif((select count(*) from queries), 0) from images"),
    ("Auxiliary images per query", "select count(*)::double / nullif((select count(*) from queries), 0) from aux_images"),
    ("Average score of text elements", "select avg(score)::double from elements where kind = 'text'"),
    ("Average score of image elements", "select avg(score)::double from images"),
    ("Average auxiliary image score", "select avg(score)::double from aux_images"),
]
_CAPTIONS = pa.schema([("owner_id", pa.string()), ("url", pa.string()), ("caption", pa.string()), ("mode", pa.string())])
PAGE_COLUMNS = ["id", "query_id", "rank", "url", "final_url", "title", "chars", "images"]
ELEMENT_COLUMNS = ["element_id", "page_id", "query_id", "order", "kind", "text", "image_url", "placeholder", "score", "analysis", "mode", "image_sha256"]


def build_tables(queries: pa.Table, counts: pa.Table, categories: list[dict], sampled: pa.Table | None = None,
                 pages: pa.Table | None = None, elements: pa.Table | None = None, captions: pa.Table | None = None,
                 min_image_score: int = 3) -> dict[str, pa.Table]:
    con = duckdb.connect()
    con.register("queries", queries)
    con.register("reject_counts", counts)
    con.register("sampled", sampled if sampled is not None else pa.table({"id": pa.array([], pa.string()), "sample_category": pa.array([], pa.int32())}))
    cats = pa.table({"id": pa.array([c["id"] for c in categories], pa.int32()), "name": [c["name"] for c in categories]})
    con.register("cats", cats)
    category_counts = con.sql(
        "select cats.id, cats.name, count(q.id)::bigint as queries, "
        "(select count(*) from sampled s where s.sample_category = cats.id)::bigint as sampled from cats "
        "left join (select id, unnest(categories) as category from queries) q on q.category = cats.id "
        "group by 1, 2 order by 1"
    ).to_arrow_table()
    decisions = con.sql(_DECISIONS).to_arrow_table()
    tables = {"queries": sampled if sampled is not None else queries, "categories": category_counts, "filter_decisions": decisions}
    if pages is not None and elements is not None:
        con.register("raw_pages", pages)
        con.register("raw_elements", elements)
        tables["pages"] = con.sql(
            f"select {', '.join(PAGE_COLUMNS)} from raw_pages where query_id in (select id from sampled) order by query_id, rank, id"
        ).to_arrow_table()
        con.register("pages", tables["pages"])
        tables["elements"] = con.sql(
            f'select {", ".join(chr(34) + c + chr(34) for c in ELEMENT_COLUMNS)} from raw_elements '
            "where kind in ('text', 'image') and page_id in (select id from pages) order by query_id, page_id, \"order\""
        ).to_arrow_table()
        con.register("elements", tables["elements"])
        con.register("captions", captions.select(_CAPTIONS.names) if captions is not None else _CAPTIONS.empty_table())
        tables["images"] = con.sql(
            'select e.element_id, e.page_id, e.query_id, e."order", e.image_url as url, e.text as alt, e.score, e.mode, e.image_sha256 as sha256, '
            f"c.caption, c.mode as caption_mode, e.score >= {int(min_image_score)} as selected "
            "from elements e left join captions c on c.owner_id = e.page_id and c.url = e.image_url "
            "where e.kind = 'image' order by e.query_id, e.page_id, e.\"order\""
        ).to_arrow_table()
        con.register("images", tables["images"])
        tables["aux_images"] = con.sql(
            'select e.query_id, e."order" as rank, e.image_url as url, e.text as title, e.image_sha256 as sha256, e.score, e.mode, '
            f"c.caption, c.mode as caption_mode, e.score >= {int(min_image_score)} as selected, e.element_id as ref_id "
            "from raw_elements e left join captions c on c.owner_id = e.query_id and c.url = e.image_url "
            "where e.kind = 'aux_image' and e.query_id in (select id from sampled) order by e.query_id, e.\"order\", e.image_url"
        ).to_arrow_table()
        con.register("aux_images", tables["aux_images"])
        con.register("queries", tables["queries"])
        values = [con.execute(sql).fetchone()[0] for _, sql in STATISTICS]
        tables["statistics"] = pa.table({"item": [item for item, _ in STATISTICS], "value": pa.array(values, pa.float64())})
    tables["reject_counts"] = counts
    return tables


def image_file(sha256: str, files: dict[str, str]) -> str | None:
    return files.get(sha256) if sha256 else None


def jsonl_records(tables: dict[str, pa.Table], files: dict[str, str]) -> list[dict]:
    """One record per query: its pages in rank order, each with its pieces and images in page
    order, then its auxiliary images in rank order; `files` maps an image's sha256 to its path in
    the release."""
    images = {r["element_id"]: r for r in tables["images"].to_pylist()}
    pieces: dict[str, list[dict]] = {}
    for el in tables["elements"].to_pylist():
        if el["kind"] == "text":
            piece = {"order": el["order"], "kind": "text", "text": el["text"], "score": el["score"], "analysis": el["analysis"]}
        else:
            image = images[el["element_id"]]
            piece = {"order": el["order"], "kind": "image", "placeholder": el["placeholder"], "url": el["image_url"], "alt": el["text"],
                     "score": el["score"], "mode": el["mode"], "sha256": el["image_sha256"] or None, "file": image_file(el["image_sha256"], files),
                     "caption": image["caption"], "caption_mode": image["caption_mode"], "selected": image["selected"]}
        pieces.setdefault(el["page_id"], []).append(piece)
    pages: dict[str, list[dict]] = {}
    for page in tables["pages"].to_pylist():
        pages.setdefault(page["query_id"], []).append(
            {"rank": page["rank"], "url": page["url"], "title": page["title"], "elements": pieces.get(page["id"], [])})
    aux: dict[str, list[dict]] = {}
    for image in tables["aux_images"].to_pylist():
        aux.setdefault(image["query_id"], []).append(
            {"rank": image["rank"], "url": image["url"], "title": image["title"], "sha256": image["sha256"] or None,
             "file": image_file(image["sha256"], files), "score": image["score"], "mode": image["mode"], "caption": image["caption"],
             "caption_mode": image["caption_mode"], "selected": image["selected"]})
    return [{"id": q["id"], "question": q["question"], "categories": q["categories"], "category_names": q["category_names"],
             "sample_category": q.get("sample_category"), "pages": pages.get(q["id"], []), "aux_images": aux.get(q["id"], [])}
            for q in tables["queries"].to_pylist()]


def image_files(tables: dict[str, pa.Table], store: ImageStore) -> dict[str, Path]:
    """sha256 -> stored file of every released image (page and auxiliary)."""
    found = {}
    for table in ("images", "aux_images"):
        for sha in tables[table].column("sha256").to_pylist():
            if sha and sha not in found:
                path = store.find(sha)
                if path is None:
                    raise StageError(f"released image {sha} ({table}) is not in the image store {store.root}")
                found[sha] = path
    return found


def write_exports(tables: dict[str, pa.Table], stored: dict[str, Path]):
    def extra(folder: Path) -> None:
        files = {sha: f"images/{path.name}" for sha, path in stored.items()}
        if stored:
            (folder / "images").mkdir()
        for sha, path in stored.items():
            (folder / files[sha]).write_bytes(path.read_bytes())
        lines = [json.dumps(record, ensure_ascii=False) for record in jsonl_records(tables, files)]
        (folder / "m2rag.jsonl").write_text("".join(line + "\n" for line in lines))
    return extra


def fmt(value) -> str:
    return "n/a" if value is None else f"{value:g}" if float(value).is_integer() else f"{value:.2f}"


def card(name: str, version: str, tables: dict[str, pa.Table], min_image_score: int = 3) -> str:
    rows = lambda t: [list(r.values()) for r in tables[t].to_pylist()]  # noqa: E731
    total = tables["queries"].num_rows
    sampled = "sample_category" in tables["queries"].column_names
    short = [r for r in tables["categories"].to_pylist() if r["id"] != 11 and r["sampled"] < max(
        (c["sampled"] for c in tables["categories"].to_pylist()), default=0)]
    pages = []
    if "statistics" in tables:
        pages = [
            "## Statistics (M2RAG Table 4)",
            md_table(["Item", "Value"], [[r["item"], fmt(r["value"])] for r in tables["statistics"].to_pylist()]),
            "Scores are 0-10 (figure 8 for text pieces, figure 9 for images; an image's `mode` says whether the scorer "
            "saw it or its text stand-in). Auxiliary images come from image search on the query (§4.2.1). Every image "
            "was cached, filtered by size and CLIP score and deduplicated by pHash per query (§4.2.3), and carries a "
            "detailed caption written with its surrounding text (§5.2; `caption_mode` says whether the captioner saw it). "
            f"Images selected for generation (score >= {min_image_score}, the seed's code): "
            f"{sum(tables['images'].column('selected').to_pylist())} of {tables['images'].num_rows} page images, "
            f"{sum(tables['aux_images'].column('selected').to_pylist())} of {tables['aux_images'].num_rows} auxiliary images. "
            "`m2rag.jsonl` holds one record per query: its pages in rank order with their scored pieces and images "
            "in page order, then its auxiliary images; image files are `images/<sha256>.<ext>`.",
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
            md_table(["stage", "reason", "rows", "meaning"], reject_rows(rows("reject_counts"))) if tables["reject_counts"].num_rows else "None.",
            "## Tables",
            md_table(["table", "rows"], [[t, tables[t].num_rows] for t in tables]),
        ]
    ) + "\n"


def run(ctx):
    p = ctx.params
    queries = ctx.read("queries").sort_by("id")
    optional = {name: ctx.read(name) for name in ("sampled", "pages", "elements", "captions") if ctx.has_input(name)}
    sampled = optional.get("sampled")
    if sampled is not None:
        sampled = sampled.sort_by("id")
    ctx.add_input((sampled if sampled is not None else queries).num_rows)
    counts = reject_counts(ctx.count_rows("rejects", ["stage", "reason"]))  # a batch at a time: the rejects may be many
    tables = build_tables(queries, counts, p["categories"], sampled, optional.get("pages"), optional.get("elements"),
                          optional.get("captions"), p["min_image_score"])
    extra = write_exports(tables, image_files(tables, ImageStore(p["image_store"]))) if "elements" in tables else None
    publish_release(ctx, tables, lambda name, version: card(name, version, tables, p["min_image_score"]), extra)


STAGE = Stage(
    name="release_m2rag",
    version=VERSION,
    doc=__doc__,
    inputs={
        "queries": Input("m2rag_classified_queries shards", many=True, table="m2rag_classified_queries"),
        "sampled": Input("m2rag_sampled_queries: the benchmark's queries", many=True, optional=True, table="m2rag_sampled_queries"),
        "pages": Input("retrieval_pages of the sampled queries (fetch_pages)", many=True, optional=True, table="retrieval_pages"),
        "elements": Input("m2rag_scored_elements (score_elements: text pieces, page images, auxiliary images)", many=True, optional=True,
                          table="m2rag_scored_elements"),
        "captions": Input("m2rag_image_captions (caption_images)", many=True, optional=True, table="m2rag_image_captions"),
        "rejects": Input("rejects sidecars of the family's stages, counted in the card", many=True, optional=True, table="rejects"),
    },
    outputs={"manifest": Output(None, "release manifest JSON: name, version, path, table rows")},
    params={
        "name": Param(str, help="release name: data/releases/<name>/<version>/", pattern=Param.PLAIN_NAME),
        "releases_dir": Param(str, "data/releases", "where releases land", folder="writes"),
        "categories": CATEGORIES,
        "min_image_score": Param(int, 3, "images scoring at least this are `selected` as generation input (the seed's code: 3)", min=0, max=10),
        "image_store": Param(str, "data/cache/images", "image store root the released image files are copied from", folder="reads"),
    },
    run=run,
    rejects={},
)

if __name__ == "__main__":
    STAGE.main()
