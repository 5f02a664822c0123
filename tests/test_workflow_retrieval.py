"""The retrieval rules in the demo DAG: replayed offline from the bundled WARC and corpus, and the
text index reused from data/cache by a later run."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from tests.conftest import run_snakemake

TARGETS = ["data/runs/demo/retrieval/split_pages/elements.parquet", "data/runs/demo/retrieval/retrieve_text/passages.parquet"]


@pytest.mark.slow
def test_retrieval_rules_replay_the_demo_offline_and_reuse_the_index(workflow_copy):
    run_snakemake(workflow_copy, *TARGETS)
    run = workflow_copy / "data/runs/demo/retrieval"
    results = pq.read_table(run / "search_web/results.parquet").to_pylist()
    assert {(r["kind"], r["provider"]) for r in results} == {("page", "google"), ("image", "google")}
    assert all(r["width"] and r["page_url"] for r in results if r["kind"] == "image")
    report = json.loads((run / "fetch_pages/pages.parquet.report.json").read_text())
    assert report["rows_out"]["pages"] > 0 and {"http_403", "http_404", "not_html", "undecodable", "broken_html", "empty_page"} <= set(report["rejected_by_reason"])
    elements = pq.read_table(run / "split_pages/elements.parquet").to_pylist()
    assert {e["kind"] for e in elements} == {"text", "image"} and all(e["chars"] <= 1000 for e in elements if e["kind"] == "text")
    passages = pq.read_table(run / "retrieve_text/passages.parquet").to_pylist()
    volcano = [p for p in passages if p["query_id"] == "demo:volcano"]
    assert len(volcano) == 5 and "volcano" in volcano[0]["text"].lower()
    shards = [pq.read_table(run / f"build_text_index/text_index.0000{s}.parquet").to_pylist()[0] for s in range(2)]
    assert not any(s["reused"] for s in shards) and sum(s["passages"] for s in shards) > 3000

    first = pq.read_table(run / "retrieve_text/passages.parquet")
    run_snakemake(workflow_copy, *TARGETS, "--forcerun", "build_text_index")  # a later run finds the shards built
    again = [pq.read_table(run / f"build_text_index/text_index.0000{s}.parquet").to_pylist()[0] for s in range(2)]
    assert all(s["reused"] for s in again) and [s["key"] for s in again] == [s["key"] for s in shards]
    assert pq.read_table(run / "retrieve_text/passages.parquet").equals(first)
