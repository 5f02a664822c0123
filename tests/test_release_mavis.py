"""release_mavis: a versioned, complete release whose card numbers are queries over its tables."""
from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from conftest import run_stage
from stages.core.declarations import load_manifest
from stages.core.tables import REJECTS_SCHEMA, write_table


def _question(i, domain, answers=1):
    return {"id": f"reddit:{i}", "subreddit": "s", "domain": domain, "question": "Why?", "body": "", "image_urls": ["u1", "u2"][: 1 + i % 2],
            "answers": answers, "permalink": "", "created_utc": 1, "score": 1}


def _instance(question, c):
    return {**{k: v for k, v in question.items() if k != "answers"}, "id": f"{question['id']}/c{c}", "post_id": question["id"],
            "answer": "one two three", "answer_id": f"reddit:c{c}", "answer_score": 1, "answer_sentences": 3, "answer_rank": 1}


def _fact(instance_id, n):
    return {"fact_id": f"{instance_id}#0.{n}", "instance_id": instance_id, "sentence": 0, "sentence_text": "s", "text": f"fact {n}",
            "relevance": "relevant", "verifiable": "verifiable", "mode": "title"}


def _build(tmp_path, shards, rejects, facts=None, annotations=None):
    args = [f"--input=annotations={annotations}"] if annotations else []
    for i, (questions, instances) in enumerate(shards):
        for table, rows in (("questions", questions), ("instances", instances)):
            path = tmp_path / f"{table}.{i:05d}.parquet"
            write_table(path, rows, f"reddit_{table}")
            args.append(f"--input={table}={path}")
    if facts is not None:
        write_table(tmp_path / "facts.parquet", facts, "mavis_facts")
        args.append(f"--input=facts={tmp_path / 'facts.parquet'}")
    for i, rows in enumerate(rejects):
        path = tmp_path / f"r{i}.rejects.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=REJECTS_SCHEMA), path)
        args.append(f"--input=rejects={path}")
    manifest = tmp_path / "release.json"
    run_stage("release_mavis", *args, f"--output=manifest={manifest}",
              "--params", json.dumps({"name": "demo-rel", "releases_dir": str(tmp_path / "releases")}))
    return json.loads(manifest.read_text())


def _shards():
    q1, q2, q3 = _question(1, "Science", 2), _question(2, "Business"), _question(3, "Science")
    return [([q1, q2], [_instance(q1, 1), _instance(q1, 2), _instance(q2, 3)]), ([q3], [_instance(q3, 4)])]


def test_release_tables_card_and_stable_version(tmp_path):
    shards = _shards()
    rejects = [[{"id": "x", "stage": "filter_questions", "reason": "no_long_answer", "detail": ""}] * 2]
    manifest = _build(tmp_path, shards, rejects)
    folder = Path(manifest["path"])
    assert manifest["tables"] == {"instances": 4, "questions": 3, "facts": 0, "documents": 0, "fact_documents": 0, "images": 0,
                                  "reject_counts": 1}
    con = duckdb.connect(str(folder / "benchmark.duckdb"), read_only=True)
    by_domain = dict(con.execute("select domain, count(*) from instances group by 1").fetchall())
    assert by_domain == {"Science": 3, "Business": 1}
    assert con.execute("select * from reject_counts").fetchall() == [("filter_questions", "no_long_answer", 2)]
    card = (folder / "README.md").read_text()
    assert "| Science | 2 | 3 | 0 |" in card and "| Business | 1 | 1 | 0 |" in card
    meaning = load_manifest()["filter_questions"]["rejects"]["no_long_answer"]  # the card explains each reason as declared
    assert f"| filter_questions | no_long_answer | 2 | {meaning} |" in card
    assert duckdb.connect().execute(f"select count(*) from '{folder}/parquet/instances.parquet'").fetchone()[0] == 4
    # identical inputs and params: identical version; one changed row: a new version
    again = _build(tmp_path, shards, rejects)
    assert again["version"] == manifest["version"]
    shards[1][1][0]["question"] = "Why not?"
    changed = _build(tmp_path, shards, rejects)
    assert changed["version"] != manifest["version"]
    assert sorted(p.name for p in (tmp_path / "releases" / "demo-rel").iterdir()) == sorted({manifest["version"], changed["version"]})


def test_release_keeps_only_released_instances_and_their_facts(tmp_path):
    """A question whose instances were all dropped upstream, and the facts of a dropped instance,
    stay out of the release; the JSONL carries each instance's facts."""
    shards = _shards()
    shards[0][1].pop()  # reddit:2's only instance was dropped (e.g. by the visual-dependency filter)
    facts = [_fact("reddit:1/c1", 0), _fact("reddit:1/c1", 1), _fact("reddit:3/c4", 0), _fact("reddit:2/c3", 0)]
    manifest = _build(tmp_path, shards, [], facts)
    assert manifest["tables"] == {"instances": 3, "questions": 2, "facts": 3, "documents": 0, "fact_documents": 0, "images": 0,
                                  "reject_counts": 0}
    folder = Path(manifest["path"])
    records = [json.loads(line) for line in (folder / "mavis.jsonl").read_text().splitlines()]
    assert [(r["id"], [f["fact_id"] for f in r["facts"]]) for r in records] == [
        ("reddit:1/c1", ["reddit:1/c1#0.0", "reddit:1/c1#0.1"]), ("reddit:1/c2", []), ("reddit:3/c4", ["reddit:3/c4#0.0"])]
    card = (folder / "README.md").read_text()
    # split, Q, I (no post image is in the store in this test), A, D_T/Q, D_I/Q, answer words, facts
    assert "| all | 2 | 0 | 3 | 0.0 | 0.0 | 3.0 | 3 |" in card
