"""release_m2rag through its CLI on hand-made classified queries and rejects: Table 1 counts,
filter decisions, reject counts, the card, and a stable version."""
from __future__ import annotations

import json

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from conftest import run_stage
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
