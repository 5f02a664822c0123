"""citeeval_context (CiteEval-Auto context attribution, seed Table 10) through the real model client
(openai backend) against a local OpenAI-compatible server that answers by rule
(tests/citeeval_judge.py): the judge's <category> tags parsed, a cited statement is retrieval
without a call, missing or malformed tags invalid -> retried -> a null strict context with the raw
text, beside the public parser's tag-by-tag reading (its default 2 for a lost tag)."""
from __future__ import annotations

import json
import re

import pyarrow.parquet as pq
import pytest

from citeeval_judge import RuleJudge, prepared_tables
from conftest import run_stage
from stages.citeeval.citeeval_context import parse_categories, parse_reference


@pytest.fixture
def judge():
    server = RuleJudge()
    yield server
    server.close()


def test_context_through_the_client(judge, tmp_path):
    base = prepared_tables(tmp_path)
    params = json.dumps({"judge": "rule", "llm": judge.llm(tmp_path)})
    run_stage("citeeval_context", *base, "--output", f"contexts={tmp_path / 'contexts.parquet'}", "--params", params)
    contexts = {r["id"]: r for r in pq.read_table(tmp_path / "contexts.parquet").to_pylist()}
    assert {k: (v["context"], v["reference_context"], v["rule"]) for k, v in contexts.items()} == {
        "ok/1": (1, 1, "model"), "ok/2": (2, 2, "cited"), "ok/3": (2, 2, "model"),
        "bad/1": (None, 2, "model"),  # no tag at all: strict has no context, the public parser its default 2
        "bad/2": (None, 2, "cited"),  # cited: strict is the judge's (none here), the public rule's 2
        "flaky/1": (2, 2, "cited")}
    assert not contexts["ok/1"]["applicable"] and contexts["ok/2"]["model_context"] == 2 and contexts["bad/1"]["applicable"] is None
    assert "no <category" in contexts["bad/1"]["invalid"] and "The citations look fine." in contexts["bad/1"]["invalid"]
    report = json.loads((tmp_path / "contexts.parquet.report.json").read_text())
    assert report["rejected"] == 0 and report["stats"]["context_invalid"] == 2
    context_calls = [p for p in judge.requests if "<categories>" in p]
    assert sum("MALFORMED" in p for p in context_calls) == 3 and len(context_calls) == 5  # every cited statement is asked about too


def test_a_cited_statement_is_attributed_by_the_judge_in_strict_and_evaluated_in_reference(judge, tmp_path):
    """§4.1 attributes every statement, citations removed, and §4.2 masks the N/A ones: a cited
    statement the judge gives to model knowledge is N/A in strict; the public code evaluates every
    cited statement (reference 2). A failed call leaves a cited statement its reference context."""
    responses = {"sum": ("Why is the sky blue?", [("Air scatters blue light.", [1]), ("In summary, it is physics.", [2])]),
                 "down": ("DOWN question?", [("Air scatters blue light.", [1]), ("Nobody knows.", [])])}
    base = prepared_tables(tmp_path, responses)
    params = json.dumps({"judge": "rule", "llm": judge.llm(tmp_path)})
    run_stage("citeeval_context", *base, "--output", f"contexts={tmp_path / 'contexts.parquet'}", "--params", params)
    contexts = {r["id"]: r for r in pq.read_table(tmp_path / "contexts.parquet").to_pylist()}
    assert {k: (v["context"], v["applicable"], v["reference_context"], v["rule"]) for k, v in contexts.items()} == {
        "sum/1": (2, True, 2, "cited"), "sum/2": (4, False, 2, "cited"), "down/1": (None, None, 2, "cited")}
    assert contexts["down/1"]["invalid"]  # the failed call's reason
    report = json.loads((tmp_path / "contexts.parquet.report.json").read_text())
    assert report["rejected_by_reason"] == {"failed_call": 1}  # down/2: uncited, no answer in either mode


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


def test_public_reading_tag_by_tag():
    """context_attributor.parse_response: only `<category sentence_id="i">` with double quotes and
    digits; a value outside 1-4 is read by its first character, else the default 2; the last tag of
    a sentence wins; a sentence without a readable tag is left to the default (2) by the caller."""
    text = ('<category sentence_id="1"> 4 </category>'        # 4
            '<category sentence_id="2"> 31 </category>'       # "31" -> "3"
            '<category sentence_id="3"> 7 </category>'        # "7" -> "7"[0] = "7", still not 1-4 -> 2
            "<category sentence_id='4'> 1 </category>"        # single quotes: not read
            '<category sentence_id="5"> 1 (Query) </category>'  # not digits only: not read
            '<category sentence_id="6"> 1 </category><category sentence_id="6"> 3 </category>')  # last wins: 3
    assert parse_reference(text) == {"1": 4, "2": 3, "3": 2, "6": 3}
