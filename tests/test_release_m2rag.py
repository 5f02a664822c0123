"""release_m2rag through its CLI on hand-made classified queries and rejects: Table 1 counts,
filter decisions, reject counts, the card, and a stable version; on hand-made pages, scored
elements, auxiliary images and captions: the tables, the image files, the JSONL round trip, and the
card's Table 4 equal to DuckDB queries over the released tables."""
from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from conftest import run_stage
from stages.core.images import ImageStore
from stages.core.tables import REJECTS_SCHEMA, write_table

CATEGORIES = [{"id": 1, "name": "Society & Culture"}, {"id": 2, "name": "Science & Mathematics"}, {"id": 11, "name": "Others"}]


def row(i, categories, clear=1, needs_images=1):
    names = {c["id"]: c["name"] for c in CATEGORIES}
    return {"id": f"eli5:{i}", "question": f"Why {i}?", "body": "", "subreddit": "", "answers": [], "source": "json:train",
            "clear": clear, "clear_analysis": "a", "needs_images": needs_images, "images_analysis": "b",
            "categories": categories, "category_names": [names[c] for c in categories], "category_analysis": "c"}


def test_release_tables_card_and_version(tmp_path):
    shards = [tmp_path / "c.00000.parquet", tmp_path / "c.00001.parquet"]
    write_table(shards[0], [row(1, [1, 2]), row(2, [2])], "m2rag_classified_queries")
    write_table(shards[1], [row(3, [11], clear=0, needs_images=0)], "m2rag_classified_queries")
    rejects = tmp_path / "f.rejects.parquet"
    pq.write_table(pa.Table.from_pylist([
        {"id": "eli5:4", "stage": "filter_queries", "reason": "not_clear", "detail": "too short"},
        {"id": "eli5:5", "stage": "filter_queries", "reason": "no_images_needed", "detail": "text suffices"},
        {"id": "eli5:6", "stage": "classify_queries", "reason": "invalid_answer", "detail": "non_json | raw: {"},
    ], schema=REJECTS_SCHEMA), rejects)
    manifests = []
    for n in range(2):
        manifest = tmp_path / f"release{n}.json"
        run_stage("release_m2rag", *[a for s in shards for a in ("--input", f"queries={s}")], "--input", f"rejects={rejects}",
                  "--output", f"manifest={manifest}",
                  "--params", json.dumps({"name": "m2rag-test", "releases_dir": str(tmp_path / "rel"), "categories": CATEGORIES}))
        manifests.append(json.loads(manifest.read_text()))
    assert manifests[0]["version"] == manifests[1]["version"]  # identical inputs, identical version
    folder = manifests[0]["path"]
    con = duckdb.connect(f"{folder}/benchmark.duckdb", read_only=True)
    assert con.execute("select id, name, queries from categories order by id").fetchall() == [
        (1, "Society & Culture", 1), (2, "Science & Mathematics", 2), (11, "Others", 1)]
    decisions = {(s[:6], l): n for s, l, n in con.execute("select step, label, queries from filter_decisions").fetchall()}
    assert decisions == {("clear ", 1): 3, ("clear ", 0): 2, ("answer", 1): 2, ("answer", 0): 2}
    assert con.execute("select count(*) from queries").fetchone()[0] == 3 == manifests[0]["tables"]["queries"]
    card = open(f"{folder}/README.md").read()
    assert "| ID | Category Name | Num. Samples |" in card and "| 2 | Science & Mathematics | 2 |" in card
    assert "| classify_queries | invalid_answer | 1 |" in card


def test_a_category_without_its_name_is_one_line_before_the_release(tmp_path):
    """The release reads the same Table 1 declaration as classify_queries: a category record
    missing a field is the param's error, not a KeyError mid-build."""
    shard = tmp_path / "c.00000.parquet"
    write_table(shard, [row(1, [1])], "m2rag_classified_queries")
    bad = run_stage("release_m2rag", "--input", f"queries={shard}", "--output", f"manifest={tmp_path / 'm.json'}",
                    "--params", json.dumps({"name": "t", "releases_dir": str(tmp_path / "rel"), "categories": [{"id": 1}]}), check=False)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr and "categories" in bad.stderr and "'name'" in bad.stderr, bad.stderr
    assert not (tmp_path / "rel").exists()


def test_benchmark_tables_jsonl_and_table4_equal_duckdb_queries(tmp_path):
    classified = [row(1, [1, 2]), row(2, [2]), row(3, [11]), row(4, [1])]
    write_table(tmp_path / "c.parquet", classified, "m2rag_classified_queries")
    write_table(tmp_path / "s.parquet", [{**classified[0], "sample_category": 1}, {**classified[1], "sample_category": 2}], "m2rag_sampled_queries")
    store = ImageStore(tmp_path / "store")

    def stored(seed, fmt="JPEG"):
        buffer = io.BytesIO()
        Image.new("RGB", (40 + seed, 30), (seed * 20 % 256, 90, 160)).save(buffer, fmt)
        return store.put(buffer.getvalue(), "jpg" if fmt == "JPEG" else "png")

    def page(qid, rank):
        return {"id": f"page:{qid}:{rank}", "query_id": qid, "result_id": f"r:{qid}:{rank}", "rank": rank, "url": f"https://p{rank}.example/{qid}",
                "final_url": f"https://p{rank}.example/{qid}", "status": 200, "content_type": "text/html", "charset": "utf-8", "sha256": "0" * 64,
                "title": f"Page {rank}", "markdown": "x", "chars": 1, "images": 1, "reader": "local"}

    def el(page_id, qid, order, kind, score, n=None):
        url = "" if kind == "text" else f"https://i.example/{page_id or qid}/{order}.jpg"
        return {"element_id": f"el:{page_id or qid}:{order}", "page_id": page_id, "query_id": qid, "order": order, "kind": kind,
                "text": f"piece {order}" if kind == "text" else "alt", "image_url": url,
                "placeholder": n, "chars": 7, "score": score, "analysis": "ok" if kind == "text" else "",
                "mode": kind if kind == "text" else "text_stand_in", "image_sha256": "" if kind == "text" else stored(order + 5 * len(qid + page_id))}

    pages = [page("eli5:1", 2), page("eli5:1", 1), page("eli5:2", 1), page("eli5:4", 1)]  # eli5:4 is not sampled: left out
    text = [el("page:eli5:1:1", "eli5:1", 0, "text", 8), el("page:eli5:1:2", "eli5:1", 0, "text", 1), el("page:eli5:2:1", "eli5:2", 0, "text", 3),
            el("page:eli5:4:1", "eli5:4", 0, "text", 5)]
    images = [el("page:eli5:1:1", "eli5:1", 1, "image", 6, 1), el("page:eli5:2:1", "eli5:2", 1, "image", 9, 1),
              el("page:eli5:2:1", "eli5:2", 2, "image", 2, 2),
              el("", "eli5:1", 1, "aux_image", 4), el("", "eli5:1", 2, "aux_image", 1), el("", "eli5:4", 1, "aux_image", 7)]
    captions = [{"ref_id": f"imgref:{e['element_id']}", "owner_id": e["page_id"] or e["query_id"], "query_id": e["query_id"], "url": e["image_url"],
                 "sha256": e["image_sha256"], "caption": f"A detailed caption of {e['image_url']}", "mode": "text_stand_in"} for e in images[:-2]]
    write_table(tmp_path / "p.parquet", pages, "retrieval_pages")
    write_table(tmp_path / "et.parquet", text, "m2rag_scored_elements")  # the two scorer rules' outputs
    write_table(tmp_path / "ei.parquet", images, "m2rag_scored_elements")
    write_table(tmp_path / "cap.parquet", captions, "m2rag_image_captions")
    manifest = tmp_path / "release.json"
    run_stage("release_m2rag", "--input", f"queries={tmp_path / 'c.parquet'}", "--input", f"sampled={tmp_path / 's.parquet'}",
              "--input", f"pages={tmp_path / 'p.parquet'}", "--input", f"elements={tmp_path / 'et.parquet'}", "--input", f"elements={tmp_path / 'ei.parquet'}",
              "--input", f"captions={tmp_path / 'cap.parquet'}", "--output", f"manifest={manifest}",
              "--params", json.dumps({"name": "m2rag-test", "releases_dir": str(tmp_path / "rel"), "categories": CATEGORIES,
                                      "image_store": str(store.root), "min_image_score": 4}))
    folder = json.loads(manifest.read_text())["path"]
    con = duckdb.connect(f"{folder}/benchmark.duckdb", read_only=True)
    one = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
    assert one("select count(*) from queries") == 2 and one("select count(*) from pages") == 3 and one("select count(*) from images") == 3
    assert one("select count(*) from aux_images") == 2 and one("select count(*) from elements where kind not in ('text', 'image')") == 0
    # the threshold is a decision apart from the score; captions joined by (owner, url), none where captioning failed
    assert con.execute("select score, selected from images order by score").fetchall() == [(2, False), (6, True), (9, True)]
    assert con.execute("select rank, score, selected, caption is null from aux_images order by rank").fetchall() == [(1, 4, True, False), (2, 1, False, True)]
    assert one("select count(*) from images where caption like 'A detailed caption of ' || url") == 3
    # Table 4 in the card: each value equals a DuckDB query over the released tables
    card = open(f"{folder}/README.md").read()
    expected = {
        "Queries": one("select count(*) from queries"),
        "Web pages per query": one("select count(*) from pages") / one("select count(*) from queries"),
        "Text elements per web page": one("select count(*) from elements where kind = 'text'") / one("select count(*) from pages"),
        "Images per query": one("select count(*) from elements where kind = 'image'") / one("select count(distinct id) from queries"),
        "Auxiliary images per query": one("select count(*) from aux_images") / one("select count(*) from queries"),
        "Average score of text elements": one("select avg(score) from elements where kind = 'text'"),
        "Average score of image elements": one("select avg(score) from images"),
        "Average auxiliary image score": one("select avg(score) from aux_images"),
    }
    for item, value in expected.items():
        shown = f"{value:g}" if float(value).is_integer() else f"{value:.2f}"
        assert f"| {item} | {shown} |" in card, item
    assert "not built" not in card and "| 1 | Society & Culture | 2 | 1 |" in card
    selected = (one("select count(*) from images where selected"), one("select count(*) from aux_images where selected"))
    assert f"score >= 4, the seed's code): {selected[0]} of 3 page images, {selected[1]} of 2 auxiliary images" in card
    # every released image's file, named by its sha256, holds the stored bytes
    shas = {r[0] for r in con.execute("select sha256 from images union select sha256 from aux_images").fetchall()}
    files = {p.name.split(".")[0]: p for p in (Path(folder) / "images").iterdir()}
    assert set(files) == shas and all(hashlib.sha256(p.read_bytes()).hexdigest() == p.name.split(".")[0] for p in files.values())
    # JSONL round trip: one record per query, pages in rank order, elements in page order, aux images in rank order, as in the tables
    records = [json.loads(line) for line in open(f"{folder}/m2rag.jsonl")]
    assert [r["id"] for r in records] == [r[0] for r in con.execute("select id from queries order by id").fetchall()]
    first = records[0]
    assert [p["rank"] for p in first["pages"]] == [1, 2] and [e["order"] for e in first["pages"][0]["elements"]] == [0, 1]
    from_jsonl = sorted((r["id"], p["url"], e["order"], e["kind"], e["score"]) for r in records for p in r["pages"] for e in p["elements"])
    from_tables = con.execute('select e.query_id, p.url, e."order", e.kind, e.score from elements e join pages p on p.id = e.page_id order by all').fetchall()
    assert from_jsonl == [tuple(t) for t in from_tables]
    jsonl_images = sorted((e["url"], e["sha256"], e["score"], e["caption"], e["file"]) for r in records for p in r["pages"] for e in p["elements"]
                          if e["kind"] == "image")
    assert jsonl_images == sorted((u, s, sc, c, f"images/{files[s].name}") for u, s, sc, c in con.execute("select url, sha256, score, caption from images").fetchall())
    jsonl_aux = sorted((r["id"], a["rank"], a["url"], a["sha256"], a["score"], a["caption"], a["selected"]) for r in records for a in r["aux_images"])
    assert jsonl_aux == sorted(con.execute("select query_id, rank, url, sha256, score, caption, selected from aux_images").fetchall())
    image = first["pages"][0]["elements"][1]
    assert image["kind"] == "image" and image["placeholder"] == 1 and image["mode"] == "text_stand_in" and image["url"].startswith("https://i.example/")


def test_a_rebuild_of_the_same_version_is_byte_identical(tmp_path):
    """Every file of the release, benchmark.duckdb included, whatever thread finished first: the
    queries table spans two DuckDB row groups (122,880 rows each)."""
    shard = tmp_path / "c.00000.parquet"
    write_table(shard, [row(i, [1 + i % 2]) for i in range(130_000)], "m2rag_classified_queries")
    rejects = tmp_path / "none.rejects.parquet"
    pq.write_table(REJECTS_SCHEMA.empty_table(), rejects)
    folders = []
    for n in range(2):
        manifest = tmp_path / f"release{n}.json"
        run_stage("release_m2rag", "--input", f"queries={shard}", "--input", f"rejects={rejects}", "--output", f"manifest={manifest}",
                  "--params", json.dumps({"name": "m2rag-test", "releases_dir": str(tmp_path / f"rel{n}"), "categories": CATEGORIES}))
        folders.append(Path(json.loads(manifest.read_text())["path"]))
    files = [sorted(p.relative_to(f) for p in f.rglob("*") if p.is_file()) for f in folders]
    assert files[0] == files[1] and Path("benchmark.duckdb") in files[0]
    for name in files[0]:
        assert (folders[0] / name).read_bytes() == (folders[1] / name).read_bytes(), name
    con = duckdb.connect(str(folders[0] / "benchmark.duckdb"), read_only=True)
    assert con.execute("select count(*) from queries").fetchone()[0] == 130_000
