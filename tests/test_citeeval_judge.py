"""The Table 10 / Table 11 stages through the real model client (openai backend) against a local
OpenAI-compatible server that answers by rule (tests/citeeval_judge.py): XML tags parsed, missing or
malformed tags invalid -> retried -> rejected with the raw text, never defaulted."""
from __future__ import annotations

import json
import re

import pyarrow.parquet as pq
import pytest

from citeeval_judge import RuleJudge
from conftest import run_stage
from stages.citeeval.citeeval_context import parse_categories
from stages.citeeval.citeeval_itercoe import parse_edits_and_ratings
from stages.core.tables import write_table

PASSAGES = [{"id": k, "title": "", "text": f"passage {k} about light", "mode": "text"} for k in (1, 2, 3)]
RESPONSES = {  # id -> (query, statements as (sentence, citations))
    "ok": ("Why is the sky blue?", [("Hello, you asked why the sky is blue.", []), ("Air scatters blue light most.", [1, 2]),
                                    ("Shorter waves scatter more strongly.", [])]),
    "bad": ("MALFORMED question?", [("Nobody knows this for sure.", []), ("Air scatters blue light.", [3])]),
    "flaky": ("FLAKY question?", [("Air scatters blue light.", [3])]),
}


@pytest.fixture
def judge():
    server = RuleJudge()
    yield server
    server.close()


def tables(tmp_path):
    prepared, statements = [], []
    for rid, (query, rows) in RESPONSES.items():
        prepared.append({"id": rid, "model": "m", "source": "test", "query": query, "passages": PASSAGES, "mode": "text",
                         "prediction": " ".join(s for s, _ in rows), "thinking_dropped": False, "unanswerable": False,
                         "n_statements": len(rows), "dropped_citations": []})
        statements += [{"id": f"{rid}/{i}", "response_id": rid, "model": "m", "sentence_id": i, "sentence": s, "citations": c,
                        "dropped": [], "unanswerable": False} for i, (s, c) in enumerate(rows, start=1)]
    write_table(tmp_path / "prepared.parquet", prepared, "citeeval_prepared")
    write_table(tmp_path / "statements.parquet", statements, "citeeval_statements")
    return ["--input", f"responses={tmp_path / 'prepared.parquet'}", "--input", f"statements={tmp_path / 'statements.parquet'}"]


def test_context_and_itercoe_through_the_client(judge, tmp_path):
    base = tables(tmp_path)
    params = json.dumps({"judge": "rule", "llm": judge.llm(tmp_path)})
    run_stage("citeeval_context", *base, "--output", f"contexts={tmp_path / 'contexts.parquet'}", "--params", params)
    contexts = {r["id"]: r for r in pq.read_table(tmp_path / "contexts.parquet").to_pylist()}
    assert {k: (v["context"], v["rule"]) for k, v in contexts.items()} == {
        "ok/1": (1, "model"), "ok/2": (2, "cited"), "ok/3": (2, "model"), "bad/2": (2, "cited"), "flaky/1": (2, "cited")}
    assert not contexts["ok/1"]["applicable"] and contexts["ok/2"]["model_context"] == 2
    rejects = pq.read_table(tmp_path / "contexts.parquet.rejects.parquet").to_pylist()
    assert [(r["id"], r["reason"]) for r in rejects] == [("bad/1", "invalid_answer")]
    assert "no <category" in rejects[0]["detail"] and "The citations look fine." in rejects[0]["detail"]
    context_calls = [p for p in judge.requests if "<categories>" in p]
    assert sum("MALFORMED" in p for p in context_calls) == 3 and len(context_calls) == 4  # flaky: all cited, no call

    judge.requests.clear()
    run_stage("citeeval_itercoe", *base, "--input", f"contexts={tmp_path / 'contexts.parquet'}",
              "--output", f"ratings={tmp_path / 'ratings.parquet'}", "--params", params)
    ratings = {r["id"]: r for r in pq.read_table(tmp_path / "ratings.parquet").to_pylist()}
    assert {k: (v["rating"], v["itercoe"], v["edits"]) for k, v in ratings.items()} == {
        "ok/2": (4, 0.75, [{"op": "DELETE", "citation": 2, "reason": 3}]),
        "ok/3": (2, 0.25, [{"op": "ADD", "citation": 1, "reason": 1}]),
        "flaky/1": (5, 1.0, []),
    }
    rejects = pq.read_table(tmp_path / "ratings.parquet.rejects.parquet").to_pylist()
    assert [(r["id"], r["reason"]) for r in rejects] == [("bad/2", "invalid_answer")]
    assert "missing tags" in rejects[0]["detail"] and "raw: <thinking>" in rejects[0]["detail"]
    assert sum("FLAKY" in p for p in judge.requests) == 2  # malformed rating, retried once
    report = json.loads((tmp_path / "ratings.parquet.report.json").read_text())
    assert report["stats"]["llm_invalid"] == 4 and report["stats"]["llm_failed"] == 1  # bad: 3 tries; flaky: 1


@pytest.mark.parametrize("text, problem", [
    ('<category sentence_id="1"> 2 </category>', "sentence(s) [2]"),
    ('<category sentence_id="1"> 2 </category><category sentence_id="2"> 7 </category>', "not 1-4"),
    ('<category sentence_id="1"> 2 </category><category sentence_id="2"> 3 </category><category sentence_id="2">4</category>', "two categories"),
    ('<category sentence_id="1"> 2 <category sentence_id="2"> 3 </category>', "not 1-4"),
    ("1. Query\n2. Retrieval", "sentence(s) [1, 2]"),
])
def test_malformed_categories(text, problem):
    with pytest.raises(ValueError, match=re.escape(problem)):
        parse_categories(text, 2)


def test_categories_parse():
    text = '<thinking>x</thinking>\n<category sentence_id="1"> 2 (Retrieval) </category>\n<category sentence_id="2">4</category>'
    assert parse_categories(text, 2) == {1: 2, 2: 4}


@pytest.mark.parametrize("text, problem", [
    ('<editing sentence_id="1"> N/A </editing>', "rating 1"),
    ('<rating sentence_id="1"> 4 </rating>', "editing 1"),
    ('<editing sentence_id="1"> N/A </editing><rating sentence_id="1"> 4/5 </rating>', "not one of 1-5"),
    ('<editing sentence_id="1"> delete 2 </editing><rating sentence_id="1"> 4 </rating>', "neither N/A nor edit tags"),
    ('<editing sentence_id="1"><DELETE citation="2"> DELETE REASON 4 </DELETE></editing><rating sentence_id="1">3</rating>', "neither"),
    ('<editing sentence_id="1"><DELETE citation="2"> ADD REASON 1 </DELETE></editing><rating sentence_id="1">3</rating>', "mismatched"),
    ('<editing sentence_id="1"><ADD citation="2"> ADD REASON 1 <ADD></editing><rating sentence_id="1">3</rating>', "neither"),
])
def test_malformed_edits_and_ratings(text, problem):
    with pytest.raises(ValueError, match=problem):
        parse_edits_and_ratings(text, [1])


def test_edits_and_ratings_parse():
    text = ('<thinking>t</thinking><editing sentence_id="2">\n<DELETE citation="6"> DELETE REASON 1 </DELETE>\n'
            '<ADD citation="7">ADD REASON 3</ADD>\n</editing>\n<rating sentence_id="2"> 2 </rating>'
            '<editing sentence_id="9">N/A</editing><rating sentence_id="9">x</rating>')  # sentence 9 was not asked: ignored
    assert parse_edits_and_ratings(text, [2]) == {2: {"rating": 2, "edits": [
        {"op": "DELETE", "citation": 6, "reason": 1}, {"op": "ADD", "citation": 7, "reason": 3}]}}
