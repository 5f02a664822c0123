"""retrieve_text: each query's top-k over every shard of the index, merged by score (the same
ranking as a brute-force BM25 over each shard, merged), passage texts carried, a query that
matches nothing a no_match reject."""
from __future__ import annotations

import json

import pyarrow.parquet as pq

from conftest import run_stage
from stages.core.text_index import IndexSettings, merge_topk
from text_index_fixtures import assert_same_ranking, brute_top, build, corpus, write_corpus


def test_shards_are_merged_by_score(tmp_path):
    files = [tmp_path / "part-0.jsonl.gz", tmp_path / "part-1.jsonl.gz"]
    write_corpus(files[0], corpus(120, 2))
    write_corpus(files[1], corpus(120, 3))
    manifests = [build(files, tmp_path / f"index.{s}.parquet", s, 2, tmp_path / "store") for s in range(2)]

    queries = [{"id": f"q{i}", "text": t} for i, t in enumerate(["volcano eruption magma", "blue sky scattering", "w3 w17 w40", "w250 w260 w270", "nothing"])]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    out = tmp_path / "passages.parquet"
    run_stage("retrieve_text", "--input", f"queries={tmp_path / 'q.jsonl'}", "--input", f"index={tmp_path / 'index.0.parquet'}",
              "--input", f"index={tmp_path / 'index.1.parquet'}", "--output", f"passages={out}", "--params", '{"top_k": 7}')
    got = pq.read_table(out).to_pylist()
    settings = IndexSettings(passage_words=40)
    shard_texts = [pq.read_table(f"{m['path']}/passages.parquet").to_pylist() for m in manifests]
    for query in queries[:4]:
        per_shard = [brute_top(query["text"], [p["text"] for p in texts], 7, settings) for texts in shard_texts]
        want = merge_topk(per_shard, 7)
        rows = sorted((r for r in got if r["query_id"] == query["id"]), key=lambda r: r["rank"])
        assert [r["rank"] for r in rows] == list(range(1, 8))
        assert_same_ranking([(r["score"], (r["shard"], r["passage_id"])) for r in rows],
                            [(s, (sh, shard_texts[sh][i]["passage_id"])) for s, sh, i in want])
        assert {r["shard"] for r in rows} == {0, 1} or query["text"].startswith("w2")  # both shards contribute
        assert all(r["text"] == next(p["text"] for t in shard_texts for p in t if p["passage_id"] == r["passage_id"]) for r in rows)
    assert [(r["id"], r["reason"]) for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()] == [("q4", "no_match")]
