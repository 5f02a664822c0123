"""citeeval_itercoe (CiteEval-Auto ITERCOE, seed Table 11) through the real model client (openai
backend) against a local OpenAI-compatible server that answers by rule (tests/citeeval_judge.py):
the judge's DELETE/ADD edits and 1-5 rating parsed and normalised (r - 1) / 4, only cited
statements asked, missing or malformed tags invalid -> retried -> null strict columns with the raw
text; beside them CiteEval's public parser's tag-by-tag reading of the same answer."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from citeeval_judge import RuleJudge, prepared_tables
from conftest import run_stage
from stages.citeeval.citeeval_itercoe import parse_edits_and_ratings, parse_reference


@pytest.fixture
def judge():
    server = RuleJudge()
    yield server
    server.close()


def test_itercoe_through_the_client(judge, tmp_path):
    base = prepared_tables(tmp_path)
    params = json.dumps({"judge": "rule", "llm": judge.llm(tmp_path)})
    run_stage("citeeval_itercoe", *base, "--output", f"ratings={tmp_path / 'ratings.parquet'}", "--params", params)
    ratings = {r["id"]: r for r in pq.read_table(tmp_path / "ratings.parquet").to_pylist()}
    assert {k: (v["rating"], v["itercoe"], v["edits"], v["reference_rating"], v["reference_edits"]) for k, v in ratings.items()} == {
        "ok/2": (4, 0.75, [{"op": "DELETE", "citation": 2, "reason": 3}], 4, [{"op": "DELETE", "citation": "2", "reason": 3}]),
        "bad/2": (None, None, None, None, []),  # no tag at all: neither reading has a rating
        "flaky/1": (5, 1.0, [], 5, []),
    }  # ok/1 and ok/3 are uncited: never asked
    assert "missing tags" in ratings["bad/2"]["invalid"] and "raw: <thinking>" in ratings["bad/2"]["invalid"]
    assert all("Hello" not in p.split("<citations>")[1] for p in judge.requests)
    assert sum("FLAKY" in p for p in judge.requests) == 2  # malformed rating, retried once
    report = json.loads((tmp_path / "ratings.parquet.report.json").read_text())
    assert report["stats"]["llm_invalid"] == 4 and report["stats"]["llm_failed"] == 1  # bad: 3 tries; flaky: 1
    assert report["rejected"] == 0 and report["stats"]["strict_invalid"] == 1


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


def test_public_reading_tag_by_tag():
    """citation_editor.parse_edits / parse_ratings: each tag read on its own, only in its exact form
    (double quotes, case as shown); a rating is any digits (7 stays 7), the last one wins; edits of
    one sentence accumulate over its editing tags; citation ids stay strings; an edit with a reason
    outside 1-3 (the public code's assertion error) is dropped and counted."""
    text = ('<editing sentence_id="1"> <DELETE citation="2"> DELETE REASON 3 </DELETE> </editing>'
            '<rating sentence_id="1"> 4 </rating>'
            "<editing sentence_id='2'> <ADD citation=\"5\"> ADD REASON 1 </ADD> </editing>"  # single-quoted: lost
            '<rating sentence_id="2"> 5/5 </rating>'                                             # not digits only: lost
            '<editing sentence_id="3"> <add citation="4"> ADD REASON 1 </add> </editing>'       # lower case: lost
            '<rating sentence_id="3"> 7 </rating>'                                               # kept as 7
            '<editing sentence_id="4"> <ADD citation="07"> REASON 2 </ADD> <DELETE citation="1"> DELETE REASON 4 </DELETE> </editing>'
            '<editing sentence_id="4"> N/A </editing>'
            '<editing sentence_id="4"> <DELETE citation="3"> DELETE REASON 1 </DELETE> </editing>'
            '<rating sentence_id="4"> 2 </rating><rating sentence_id="4"> 3 </rating>')
    edits, ratings, dropped = parse_reference(text)
    assert ratings == {"1": 4, "3": 7, "4": 3}
    assert edits == {"1": [{"op": "DELETE", "citation": "2", "reason": 3}],
                     "4": [{"op": "ADD", "citation": "07", "reason": 2}, {"op": "DELETE", "citation": "3", "reason": 1}]}
    assert dropped == 1
