"""CiteEval-Auto's reference-compatible mode end to end, judge answers to ratings: citeeval_context ->
citeeval_itercoe -> citeeval_editdist -> citeeval_score through their CLIs and the real model
client, against the rule-answering judge (tests/citeeval_judge.py) writing tags malformed for one
sentence only. The public code reads each tag on its own, so one malformed tag loses that
statement's reading alone; strict rejects the whole answer; a failed call is read by neither."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from citeeval_judge import REFERENCE_RESPONSES, RuleJudge, prepared_tables
from conftest import run_stage

# citeeval_config.json's published values
KEEP, MISLEADING, REDUNDANT, B = 1.00298631, 0.06935712, 0.5318322, -0.010901728784493359


@pytest.fixture
def judge():
    server = RuleJudge()
    yield server
    server.close()


def test_tag_by_tag_through_the_chain(judge, tmp_path):
    base = prepared_tables(tmp_path, REFERENCE_RESPONSES)
    params = json.dumps({"judge": "rule", "llm": judge.llm(tmp_path)})
    paths = {n: tmp_path / f"{n}.parquet" for n in ("contexts", "ratings", "distances")}
    run_stage("citeeval_context", *base, "--output", f"contexts={paths['contexts']}", "--params", params)
    run_stage("citeeval_itercoe", *base, "--output", f"ratings={paths['ratings']}", "--params", params)
    run_stage("citeeval_editdist", *base[2:], "--input", f"ratings={paths['ratings']}", "--output", f"distances={paths['distances']}")
    outs = {n: tmp_path / f"score_{n}.parquet" for n in ("responses", "statements", "summary", "meta")}
    run_stage("citeeval_score", *base, "--input", f"contexts={paths['contexts']}", "--input", f"ratings={paths['ratings']}",
              "--input", f"distances={paths['distances']}", *[x for n, p in outs.items() for x in ("--output", f"{n}={p}")])
    got = {(r["id"], r["scenario"], r["mode"]): r for r in pq.read_table(outs["responses"]).to_pylist()}

    # partial: sentence 1 cites [1, 2], the judge deletes 2 (redundant) and rates 4, well formed;
    # sentence 2 cites [3], its editing tag is single-quoted and its rating "5/5": both lost.
    #   ITERCOE: (4 - 1) / 4 = 0.75 and 1.0 (lost rating)
    #   EDITDIST: sentence 1's citations are keyed "2", "3"; DELETE "2" hits citation 1's key ->
    #     {"2": DELETE_3, "3": KEEP} -> (0.5318322 + 1.00298631) / 2 - 0.0109017...; sentence 2: no edit -> 1.0
    s1 = (0.75 + (REDUNDANT + KEEP) / 2 + B) / 2
    s2 = (1.0 + 1.0) / 2
    for scenario in ("full", "cited"):
        assert got[("partial", scenario, "reference")]["citeeval_auto"] == pytest.approx((s1 + s2) / 2, abs=1e-12)
        assert got[("partial", scenario, "strict")]["status"] == "missing"  # strict: the whole answer is invalid

    # halfcat: three uncited statements, categories "1", "5" (-> "5"[0] = "5", not 1-4 -> default 2), "31" (-> "3");
    # Full: [None, 0.0, None] -> 0.0; Cited: the 0.0 is masked, all masked or N/A -> 0.0
    assert (got[("halfcat", "full", "reference")]["status"], got[("halfcat", "full", "reference")]["citeeval_auto"]) == ("rated", 0.0)
    assert (got[("halfcat", "cited", "reference")]["status"], got[("halfcat", "cited", "reference")]["citeeval_auto"]) == ("uncited_zero", 0.0)
    assert got[("halfcat", "full", "strict")]["status"] == "missing"

    # down: both calls answered HTTP 400 with rating tags in the body: never read, in either mode
    for key in [("down", sc, mode) for sc in ("full", "cited") for mode in ("strict", "reference")]:
        assert (got[key]["status"], got[key]["citeeval_auto"]) == ("missing", None), key
    for name in ("contexts", "ratings"):
        rejects = pq.read_table(f"{paths[name]}.rejects.parquet").to_pylist()
        assert {(r["id"], r["reason"]) for r in rejects} == {("down/2" if name == "contexts" else "down/1", "failed_call")}
