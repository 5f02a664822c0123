"""release_mavis: a versioned, complete release whose card numbers are queries over its tables."""
from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from conftest import run_stage
from stages.core.tables import REJECTS_SCHEMA, write_table


def _question(i, domain):
    return {"id": f"reddit:{i}", "subreddit": "s", "domain": domain, "question": "Why?", "body": "", "image_urls": ["u1", "u2"][: 1 + i % 2],
            "answer": "a", "answer_id": f"reddit:c{i}", "answer_score": 1, "answer_sentences": 3, "permalink": "", "created_utc": 1, "score": 1}


def _build(tmp_path, shards, rejects):
    args = []
    for i, rows in enumerate(shards):
        path = tmp_path / f"questions.{i:05d}.parquet"
        write_table(path, rows, "reddit_questions")
        args.append(f"--input=questions={path}")
    for i, rows in enumerate(rejects):
        path = tmp_path / f"r{i}.rejects.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=REJECTS_SCHEMA), path)
        args.append(f"--input=rejects={path}")
    manifest = tmp_path / "release.json"
    run_stage("release_mavis", *args, f"--output=manifest={manifest}",
              "--params", json.dumps({"name": "demo-rel", "releases_dir": str(tmp_path / "releases")}))
    return json.loads(manifest.read_text())


def test_release_tables_card_and_stable_version(tmp_path):
    shards = [[_question(1, "Science"), _question(2, "Business")], [_question(3, "Science")]]
    rejects = [[{"id": "x", "stage": "filter_questions", "reason": "no_long_answer", "detail": ""}] * 2]
    manifest = _build(tmp_path, shards, rejects)
    folder = Path(manifest["path"])
    assert manifest["tables"] == {"questions": 3, "reject_counts": 1}
    con = duckdb.connect(str(folder / "benchmark.duckdb"), read_only=True)
    by_domain = dict(con.execute("select domain, count(*) from questions group by 1").fetchall())
    assert by_domain == {"Science": 2, "Business": 1}
    assert con.execute("select * from reject_counts").fetchall() == [("filter_questions", "no_long_answer", 2)]
    card = (folder / "README.md").read_text()
    for domain, n in by_domain.items():
        assert re.search(rf"\| {re.escape(domain)} \| {n} \|", card)
    assert "| filter_questions | no_long_answer | 2 |" in card
    assert duckdb.connect().execute(f"select count(*) from '{folder}/parquet/questions.parquet'").fetchone()[0] == 3
    # identical inputs and params: identical version; one changed row: a new version
    again = _build(tmp_path, shards, rejects)
    assert again["version"] == manifest["version"]
    shards[1][0]["question"] = "Why not?"
    changed = _build(tmp_path, shards, rejects)
    assert changed["version"] != manifest["version"]
    assert sorted(p.name for p in (tmp_path / "releases" / "demo-rel").iterdir()) == sorted({manifest["version"], changed["version"]})
