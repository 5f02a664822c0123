"""mavis_retrieval_quality (mavis.txt Table 3) through its CLI on the tiny fixture release with the
packaged MiniLM: a query that is a document's own text ranks that document first, so NDCG and
recall at small cut-offs follow by hand from pytrec_eval's definitions (binary gains, ideal DCG over
the gold documents, recall over the gold documents); the test split gets its own row; an instance
without gold documents is rejected; the metric functions are checked on a ranking by hand."""
from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import run_stage
from mavis_eval_fixtures import TEXTS, build_release
from stages.core.tables import write_table
from stages.eval_mavis.mavis_retrieval_quality import ndcg_at, recall_at

TOMATO, BIRD = "reddit:p1/c1", "reddit:p2/c2"


def test_ndcg_and_recall_by_hand():
    ranked, gold = ["a", "x", "b", "y"], {"a", "b"}
    # DCG@3 = 1/log2(2) + 1/log2(4) = 1.5; ideal: both gold first, 1/log2(2) + 1/log2(3)
    assert ndcg_at(ranked, gold, 3) == pytest.approx(1.5 / (1 + 1 / math.log2(3)))
    assert ndcg_at(ranked, gold, 1) == 1.0 and ndcg_at(["x", "a"], gold, 1) == 0.0
    assert recall_at(ranked, gold, 2) == 0.5 and recall_at(ranked, gold, 4) == 1.0


def test_table_3_through_the_cli(tmp_path):
    manifest = build_release(tmp_path / "rel" / "v1")
    parquet = tmp_path / "rel" / "v1" / "parquet"
    instances = pq.read_table(parquet / "instances.parquet")
    split = pa.array(["test" if i == TOMATO else "train" for i in instances.column("id").to_pylist()])
    pq.write_table(instances.drop(["split"]).append_column("split", split), parquet / "instances.parquet")
    facts = {f["instance_id"]: f["fact_id"] for f in pq.read_table(parquet / "facts.parquet").to_pylist()}
    gold = [(TOMATO, "d:t1", True), (TOMATO, "d:i1", True), (TOMATO, "d:t2", False), (BIRD, "d:t3", True)]
    pq.write_table(pa.Table.from_pylist([{"fact_id": facts[i], "doc_id": d, "rank": 1, "query": "q", "score": 1.0, "entailed": e}
                                         for i, d, e in gold]), parquet / "fact_documents.parquet")
    text = dict(TEXTS)
    queries = tmp_path / "queries.parquet"
    rows = [(TOMATO, 0, text["d:t1"]), (TOMATO, 1, text["d:t1"]), (BIRD, 0, text["d:t4"]), ("reddit:p9/c9", 0, "anything")]
    write_table(queries, [{"id": f"mq:{i}:{k}", "model": "cand", "instance_id": i, "split": "test" if i == TOMATO else "train",
                           "query_index": k, "query": q, "raw": q, "vision": False}
                          for i, k, q in rows], "mavis_eval_queries")
    quality, summary = tmp_path / "quality.parquet", tmp_path / "summary.parquet"
    run_stage("mavis_retrieval_quality", f"--input=queries={queries}", f"--input=release={manifest}", f"--output=quality={quality}",
              f"--output=summary={summary}", "--params", json.dumps({"ndcg_k": 1, "recall_k": 6}))
    got = {r["instance_id"]: r for r in pq.read_table(quality).to_pylist()}
    # tomato: its two queries are d:t1's text, so d:t1 ranks first: NDCG@1 = 1 / 1; all 6 documents hold both gold ones
    assert (got[TOMATO]["ndcg"], got[TOMATO]["recall"], got[TOMATO]["positives"], got[TOMATO]["queries"]) == (1.0, 1.0, 2, 2)
    # bird: its query is d:t4's text, d:t4 is not gold: NDCG@1 = 0; recall@6 = 1 / 1
    assert (got[BIRD]["ndcg"], got[BIRD]["recall"]) == (0.0, 1.0)
    assert got[TOMATO]["retriever"].startswith("minilm:")
    by_split = {r["split"]: r for r in pq.read_table(summary).to_pylist()}
    assert (by_split["all"]["instances"], by_split["all"]["ndcg"], by_split["all"]["recall"]) == (2, 0.5, 1.0)
    assert (by_split["test"]["instances"], by_split["test"]["ndcg"]) == (1, 1.0)  # the annotated split alone
    rejects = pq.read_table(f"{quality}.rejects.parquet").to_pylist()
    assert [(r["id"], r["reason"]) for r in rejects] == [("cand/reddit:p9/c9", "no_positives")]
