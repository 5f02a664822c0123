"""citeeval_score: Full and Cited scenarios with their edge cases, strict and reference-compatible, |R|
and M, and the meta-evaluation, through the stage's CLI on hand-made tables (citeeval.txt §2.4, §4)."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from scipy.stats import kendalltau, pearsonr, spearmanr

from conftest import run_stage
from stages.core.citeeval import PUBLIC_COEFFICIENTS as C
from stages.core.tables import write_table

KEEP1 = C["keep"] + C["intercept"]  # a cited statement the judge left alone: Eq. 3 with one KEEP


def build(tmp_path, spec: dict[str, list[tuple]]):
    """spec: response id -> statements (citations, context or None, ITERCOE rating 1-5 or None, editdist or None)."""
    prepared, statements, contexts, ratings, distances = [], [], [], [], []
    for rid, rows in spec.items():
        prepared.append({"id": rid, "model": "m", "source": "test", "query": "q", "passages": [], "mode": "text",
                         "prediction": "p", "thinking_dropped": False, "unanswerable": False, "n_statements": len(rows),
                         "dropped_citations": []})
        for i, (citations, context, rating, dist) in enumerate(rows, start=1):
            sid = f"{rid}/{i}"
            statements.append({"id": sid, "response_id": rid, "model": "m", "sentence_id": i, "sentence": "s",
                               "citations": citations, "dropped": [], "unanswerable": False})
            if context is not None:
                contexts.append({"id": sid, "response_id": rid, "model": "m", "sentence_id": i, "context": context,
                                 "model_context": None, "rule": "model", "applicable": context == 2, "judge": "j"})
            if rating is not None:
                ratings.append({"id": sid, "response_id": rid, "model": "m", "sentence_id": i, "rating": rating,
                                "itercoe": (rating - 1) / 4, "edits": [], "judge": "j"})
                distances.append({"id": sid, "response_id": rid, "model": "m", "sentence_id": i,
                                  **dict.fromkeys(["keep", "delete_misleading", "delete_substandard", "delete_redundant",
                                                   "add_evidence", "add_refinement", "add_credibility"], 0),
                                  "n_actions": 0, "ignored_edits": 0, "editdist": dist, "editdist_reference": 1.0})
    args = []
    for name, rows, table in [("responses", prepared, "citeeval_prepared"), ("statements", statements, "citeeval_statements"),
                              ("contexts", contexts, "citeeval_contexts"), ("ratings", ratings, "citeeval_itercoe"),
                              ("distances", distances, "citeeval_editdist")]:
        write_table(tmp_path / f"{name}.parquet", rows, table)
        args += ["--input", f"{name}={tmp_path / f'{name}.parquet'}"]
    return args


def score(tmp_path, spec, human=None):
    args = build(tmp_path, spec)
    if human is not None:
        (tmp_path / "human.jsonl").write_text("".join(json.dumps(h) + "\n" for h in human))
        args += ["--input", f"human={tmp_path / 'human.jsonl'}"]
    outs = {n: tmp_path / f"out_{n}.parquet" for n in ("responses", "statements", "summary", "meta")}
    run_stage("citeeval_score", *args, *[x for n, p in outs.items() for x in ("--output", f"{n}={p}")])
    got = {(r["id"], r["scenario"], r["mode"]): r for r in pq.read_table(outs["responses"]).to_pylist()}
    return got, {n: pq.read_table(p).to_pylist() for n, p in outs.items()}


SPEC = {
    # cited (5, KEEP1), uncited retrieval (2 -> 0.25, Eq. 3 with no action: b), model-knowledge statement (N/A)
    "mixed": [([1], 2, 5, KEEP1), ([], 2, 2, C["intercept"]), ([], 4, None, None)],
    "all_na": [([], 1, None, None), ([], 3, None, None)],                      # only non-applicable statements
    "uncited_only": [([], 2, 3, C["intercept"]), ([], 4, None, None)],        # applicable statements all uncited
    "failed_rating": [([1], 2, 4, KEEP1), ([2], 2, None, None)],              # a cited statement's ITERCOE failed
    "failed_context": [([1], 2, 5, KEEP1), ([], None, None, None)],           # an uncited statement's attribution failed
}


def test_scenarios_and_edge_cases(tmp_path):
    got, tables = score(tmp_path, SPEC)
    s = lambda rid, sc, mode="strict": got[(rid, sc, mode)]  # noqa: E731
    auto_cited = (1.0 + KEEP1) / 2
    auto_uncited = (0.25 + C["intercept"]) / 2
    assert s("mixed", "full")["citeeval_auto"] == pytest.approx((auto_cited + auto_uncited) / 2)
    assert s("mixed", "full")["itercoe"] == pytest.approx((1.0 + 0.25) / 2)
    assert s("mixed", "cited")["citeeval_auto"] == pytest.approx(auto_cited)
    assert (s("mixed", "full")["n_statements"], s("mixed", "full")["n_uncited"]) == (3, 2)
    assert s("mixed", "full")["missing_ratio"] == pytest.approx(2 / 3)
    for scenario in ("full", "cited"):
        assert (s("all_na", scenario)["status"], s("all_na", scenario)["citeeval_auto"]) == ("not_applicable", None)
        assert s("failed_rating", scenario)["status"] == "missing" and s("failed_rating", scenario)["citeeval_auto"] is None
    assert s("failed_context", "full")["status"] == "missing"  # the uncited statement might have counted
    assert s("failed_context", "cited")["citeeval_auto"] == pytest.approx(auto_cited)  # it is N/A in Cited anyway
    assert s("uncited_only", "full")["citeeval_auto"] == pytest.approx((0.5 + C["intercept"]) / 2)
    assert (s("uncited_only", "cited")["status"], s("uncited_only", "cited")["citeeval_auto"]) == ("uncited_zero", 0.0)
    # reference-compatible: nothing to rate = 1.0, uncited retrieval = 0.0, failed rating = 1.0, failed context = retrieval
    assert s("all_na", "full", "reference")["citeeval_auto"] == 1.0
    assert s("mixed", "full", "reference")["citeeval_auto"] == pytest.approx(((1.0 + 1.0) / 2 + 0.0) / 2)
    assert s("failed_rating", "cited", "reference")["citeeval_auto"] == pytest.approx(((0.75 + 1.0) / 2 + 1.0) / 2)
    assert s("failed_context", "full", "reference")["citeeval_auto"] == pytest.approx(((1.0 + 1.0) / 2 + 0.0) / 2)
    assert s("uncited_only", "cited", "reference")["citeeval_auto"] == 0.0
    summary = {(r["scenario"], r["mode"], r["metric"]): r for r in tables["summary"]}
    rated = [s(r, "full")["citeeval_auto"] for r in ("mixed", "uncited_only")]
    assert summary[("full", "strict", "citeeval_auto")]["value"] == pytest.approx(sum(rated) / 2)
    assert summary[("full", "strict", "responses_missing")]["value"] == 2
    assert summary[("cited", "strict", "responses_missing")]["value"] == 1
    assert summary[("cited", "strict", "responses_uncited_zero")]["value"] == 1
    assert summary[("full", "strict", "statements_per_response")]["value"] == pytest.approx((3 + 2 + 2 + 2 + 2) / 5)
    assert tables["meta"] == []


def test_meta_evaluation_against_human_ratings(tmp_path):
    model = [5, 4, 2, 1, 3, 5]
    spec = {f"r{i}": [([1], 2, r, KEEP1 * r / 5), ([2], 2, 6 - r if i % 2 else r, 0.5)] for i, r in enumerate(model)}
    human = [{"response_id": f"r{i}", "sentence_id": j, "rating": h} for i, (a, b) in enumerate([(5, 4), (4, 4), (1, 2), (2, 1), (3, 3), (5, 5)])
             for j, h in ((1, a), (2, b))]
    got, tables = score(tmp_path, spec, human)
    stmt = tables["statements"]
    xs = [r["citeeval_auto"] for r in stmt]
    ys = [r["human"] for r in stmt]
    meta = {(m["level"], m["scenario"], m["mode"], m["measure"]): m for m in tables["meta"]}
    row = meta[("statement", "full", "strict", "citeeval_auto")]
    assert row["n"] == 12
    assert row["pearson"] == pytest.approx(pearsonr(xs, ys).statistic)
    assert row["spearman"] == pytest.approx(spearmanr(xs, ys).statistic)
    assert row["kendall"] == pytest.approx(kendalltau(xs, ys).statistic)
    resp = meta[("response", "full", "strict", "citeeval_auto")]
    rx = [got[(f"r{i}", "full", "strict")]["citeeval_auto"] for i in range(6)]
    ry = [got[(f"r{i}", "full", "strict")]["human"] for i in range(6)]
    assert resp["n"] == 6 and resp["pearson"] == pytest.approx(pearsonr(rx, ry).statistic)
