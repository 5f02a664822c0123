"""extract_atomic_facts (MAVIS Tables 9-10): sentences, subclaims, relevance and provenance through
a rule-answering OpenAI-compatible server on 127.0.0.1, and a real run with the embedded model."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
from pytest_httpserver import HTTPServer

from conftest import run_stage
from mavis_fixtures import answer_by_rule, instance, write_instances
from stages.mavis.extract_atomic_facts import sentences


def _run(tmp_path, instances, llm):
    path = write_instances(tmp_path / "instances.parquet", instances)
    out = tmp_path / "facts.parquet"
    run_stage("extract_atomic_facts", f"--input=instances={path}", f"--output=facts={out}", "--params", json.dumps({"llm": llm}))
    return (pq.read_table(out).to_pylist(), pq.read_table(f"{out}.rejects.parquet").to_pylist(),
            json.loads((tmp_path / "facts.parquet.report.json").read_text()))


def test_sentences_offline():
    assert sentences("The sky is red. It is dusk! Why? ") == ["The sky is red.", "It is dusk!", "Why?"]
    assert sentences("  ") == []


def test_keep_and_reject_paths_through_an_openai_compatible_server(tmp_path, httpserver: HTTPServer):
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(answer_by_rule)
    llm = {"backend": "openai", "model": "rule", "cache": {"path": str(tmp_path / "llm.sqlite")}, "max_attempts": 2,
           "openai": {"base_url": httpserver.url_for("/v1"), "max_retries": 1}}
    instances = [
        instance("p1", "a", "Smoke scatters blue light and the sun is low. I took the photo at dusk. My cat loves sunsets."),
        instance("p1", "b", "This is garbage text. Red light travels further through air."),
        instance("p2", "c", ""),
    ]
    facts, rejects, report = _run(tmp_path, instances, llm)
    assert [(f["fact_id"], f["text"], f["mode"]) for f in facts] == [
        ("reddit:p1/a#0.0", "Smoke scatters blue light.", "title"),
        ("reddit:p1/a#0.1", "the sun is low.", "title"),
        ("reddit:p1/b#1.0", "Red light travels further through air.", "title"),
    ]
    assert all(f["relevance"] == "relevant" and f["verifiable"] == "verifiable" for f in facts)
    assert facts[0]["sentence_text"] == "Smoke scatters blue light and the sun is low." and facts[2]["sentence"] == 1
    assert {r["id"]: r["reason"] for r in rejects} == {
        "reddit:p1/a#1.0": "provided_by_asker",
        "reddit:p1/a#2.0": "irrelevant",
        "reddit:p1/b#0": "invalid_extraction",
        "reddit:p2/c": "no_sentences",
    }
    assert "these are not subclaims" in next(r["detail"] for r in rejects if r["reason"] == "invalid_extraction")
    assert report["rows_in"] == 3 and report["stats"]["sentences"] == 5 and report["stats"]["facts_extracted"] == 5
    # 5 extraction calls (the bad one retried once) + 5 filter calls; a rerun is answered by the cache
    assert report["stats"]["llm_calls"] == 11
    _, _, again = _run(tmp_path, instances, llm)
    assert again["stats"].get("llm_calls", 0) == 0 and again["stats"]["llm_cache_hits"] == 11


def test_runs_with_the_embedded_model(tmp_path):
    instances = [instance("p1", "a", "The red colour comes from wildfire smoke. Smoke particles scatter blue light away.")]
    facts, rejects, report = _run(tmp_path, instances, {"cache": {"path": str(tmp_path / "llm.sqlite")}})
    assert report["rows_in"] == 1 and report["stats"]["sentences"] == 2
    # whatever the tiny model says, every sentence and fact is accounted for, and text-only means the title stand-in
    by_reason = report["rejected_by_reason"]
    assert report["stats"].get("facts_extracted", 0) == len(facts) + sum(
        by_reason.get(r, 0) for r in ("irrelevant", "provided_by_asker", "invalid_filter_answer"))
    assert all(f["mode"] == "title" for f in facts)
    assert {r["reason"] for r in rejects} <= {"invalid_extraction", "irrelevant", "provided_by_asker", "invalid_filter_answer"}
