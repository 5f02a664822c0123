"""citeeval_itercoe (CiteEval-Auto ITERCOE, seed Table 11) through the real model client (openai
backend) against a local OpenAI-compatible server that answers by rule (tests/citeeval_judge.py):
the judge's DELETE/ADD edits and 1-5 rating parsed and normalised (r - 1) / 4, only applicable
statements asked, missing or malformed tags invalid -> retried -> rejected with the raw text."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from citeeval_judge import RuleJudge, prepared_tables
from conftest import run_stage
from stages.citeeval.citeeval_itercoe import parse_edits_and_ratings
from stages.core.tables import write_table


@pytest.fixture
def judge():
    server = RuleJudge()
    yield server
    server.close()


CONTEXTS = {  # what citeeval_context makes of RESPONSES with the rule judge (tests/test_citeeval_context.py)
    "ok/1": (1, 1, "model", False), "ok/2": (2, 2, "cited", True), "ok/3": (2, 2, "model", True),
    "bad/2": (2, None, "cited", True), "flaky/1": (2, None, "cited", True),
}


def contexts_table(tmp_path) -> list[str]:
    rows = [{"id": sid, "response_id": sid.split("/")[0], "model": "m", "sentence_id": int(sid.split("/")[1]), "context": context,
             "model_context": model_context, "rule": rule, "applicable": applicable, "judge": "rule"}
            for sid, (context, model_context, rule, applicable) in CONTEXTS.items()]
    write_table(tmp_path / "contexts.parquet", rows, "citeeval_contexts")
    return ["--input", f"contexts={tmp_path / 'contexts.parquet'}"]


def test_itercoe_through_the_client(judge, tmp_path):
    base = prepared_tables(tmp_path)
    params = json.dumps({"judge": "rule", "llm": judge.llm(tmp_path)})
    run_stage("citeeval_itercoe", *base, *contexts_table(tmp_path),
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
