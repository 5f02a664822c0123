"""sample_queries through its CLI: seeded (same seed, same sample; another seed, another),
stratified (per_category from each topic 1-10), Others never drawn, short topics take all and
are reported, multi-topic queries drawn once."""
from __future__ import annotations

import json
import random

import pyarrow.parquet as pq

from conftest import run_stage
from stages.core.tables import write_table


def classified(tmp_path, topics_per_query, shards=2):
    paths = []
    rows = [{"id": f"eli5:{i:03d}", "question": f"q{i}?", "body": "", "subreddit": "", "answers": [], "source": "json:train",
             "clear": 1, "clear_analysis": "", "needs_images": 1, "images_analysis": "", "categories": cats,
             "category_names": [f"t{c}" for c in cats], "category_analysis": ""} for i, cats in enumerate(topics_per_query)]
    for s in range(shards):
        path = tmp_path / f"classified.{s}.parquet"
        write_table(path, rows[s::shards], "m2rag_classified_queries")
        paths.append(path)
    return paths


def sample(tmp_path, sources, name="sampled", **params):
    out = tmp_path / f"{name}.parquet"
    run_stage("sample_queries", *[a for p in sources for a in ("--input", f"classified_queries={p}")],
              "--output", f"sampled_queries={out}", "--params", json.dumps(params))
    return pq.read_table(out).to_pylist(), json.loads(out.with_name(out.name + ".report.json").read_text())


def test_seeded_stratified_sample_excludes_others_and_reports_short_topics(tmp_path):
    rng = random.Random(7)
    topics = [[t] for t in range(1, 11) for _ in range(6)]          # 6 queries in each topic 1-10
    topics = [c for c in topics if c != [4]] + [[4]] * 2            # topic 4 has only 2
    topics += [[11]] * 5 + [[2, 3]] * 3                             # Others, and multi-topic queries
    rng.shuffle(topics)
    sources = classified(tmp_path, topics)
    rows, report = sample(tmp_path, sources, per_category=3, seed=1)
    by_id = {f"eli5:{i:03d}": c for i, c in enumerate(topics)}
    # stratified: 3 per topic except topic 4 (2 available, all taken); every row carries its stratum
    counts = {t: sum(r["sample_category"] == t for r in rows) for t in range(1, 11)}
    assert counts == {**{t: 3 for t in range(1, 11)}, 4: 2}
    assert all(r["sample_category"] in by_id[r["id"]] for r in rows)
    assert not any(11 in r["categories"] for r in rows)                           # Others never drawn
    assert len({r["id"] for r in rows}) == len(rows)                              # drawn at most once
    stats = report["stats"]
    assert stats["short_categories"] == 1 and stats["short_category_4"] == 2 and stats["others_only"] == 5
    assert report["rows_in"] == len(topics) == stats["sampled"] + stats["not_sampled"] + stats["others_only"]
    # seeded: the same seed gives the same sample, another seed another one
    again, _ = sample(tmp_path, sources, name="again", per_category=3, seed=1)
    other, _ = sample(tmp_path, sources, name="other", per_category=3, seed=2)
    assert [r["id"] for r in again] == [r["id"] for r in rows]
    assert {r["id"] for r in other} != {r["id"] for r in rows}


def test_short_topics_take_all(tmp_path):
    topics = [[1], [1], [5], [11]]
    rows, report = sample(tmp_path, classified(tmp_path, topics, shards=1), per_category=20)
    assert sorted((r["sample_category"], r["id"]) for r in rows) == [(1, "eli5:000"), (1, "eli5:001"), (5, "eli5:002")]
    assert report["stats"]["short_categories"] == 10 and report["stats"]["short_category_3"] == 0
