"""filter_entailment_text through its CLI (MAVIS App. A.3, Table 2): P(yes) of (passage, fact) pairs
from top_logprobs of a local OpenAI-compatible server on 127.0.0.1, and from the embedded model."""
from __future__ import annotations

from pytest_httpserver import HTTPServer

from entailment_fixtures import openai_llm, rule_server, run_scoring


def test_text_scores_from_top_logprobs(tmp_path, httpserver: HTTPServer):
    seen = []
    rule_server(httpserver, seen)
    scores, rejects, report = run_scoring(tmp_path, "filter_entailment_text", openai_llm(tmp_path, httpserver))
    assert {(s["doc_id"], round(s["score"], 3), s["mode"], s["modality"]) for s in scores} == {("c4:a", 0.8, "text", "text"), ("c4:b", 0.1, "text", "text")}
    assert rejects == [] and report["rows_in"] == 2  # image pairs are the other stage's
    assert all("Premise: Volcanic ash" in t or "Premise: Sourdough" in t for t, _ in seen)


def test_embedded_model_scores_text_pairs(tmp_path):
    llm = {"cache": {"path": str(tmp_path / "llm.sqlite")}}
    scores, rejects, report = run_scoring(tmp_path, "filter_entailment_text", llm)
    assert len(scores) + len(rejects) == 2 and report["stats"]["llm_calls"] == 2
    assert all(0.0 <= s["score"] <= 1.0 and s["model"].startswith("SmolLM2") for s in scores)
