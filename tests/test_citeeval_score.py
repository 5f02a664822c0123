"""citeeval_score: Full and Cited scenarios with their edge cases, strict and reference-compatible,
system scores at statement and response level, |R| and M, and the meta-evaluation, through the
stage's CLI on hand-made tables (citeeval.txt §2.4, §4; CiteEval's public rating_utils.rate and
evaluate_all_systems.py for the reference mode)."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from scipy.stats import kendalltau, pearsonr, spearmanr

from conftest import run_stage
from stages.citeeval.citeeval import ACTIONS, PUBLIC_COEFFICIENTS as C
from stages.core.tables import write_table

KEEP1 = C["keep"] + C["intercept"]  # a cited statement the judge left alone: Eq. 3 with one KEEP
NO_ROW = "no row"  # a failed call: the judge stage wrote no row (a reject)


def build(tmp_path, spec: dict) -> list[str]:
    """spec: response id -> (statements, prepared flags). A statement: (citations, context, rating,
    editdist, overrides): context NO_ROW / None (strict parse invalid) / 1-4, rating NO_ROW / None
    (strict parse invalid) / 1-5; overrides set reference_context, reference_rating,
    editdist_reference (default: the strict value, the rating, 1.0)."""
    prepared, statements, contexts, ratings, distances = [], [], [], [], []
    for rid, (rows, flags) in spec.items():
        prepared.append({"id": rid, "model": "m", "source": "test", "query": "q", "passages": [], "mode": "text",
                         "prediction": "p", "thinking_dropped": False, "unanswerable": False, "n_statements": len(rows),
                         "dropped_citations": [], "empty": not rows, "thinking_unclosed": False, "no_answer_reference": False, **flags})
        for i, (citations, context, rating, dist, over) in enumerate(rows, start=1):
            ids = {"id": f"{rid}/{i}", "response_id": rid, "model": "m", "sentence_id": i}
            statements.append({**ids, "sentence": "s", "citations": citations, "dropped": [], "unanswerable": False})
            if context != NO_ROW:
                contexts.append({**ids, "context": context, "model_context": context, "rule": "cited" if citations else "model",
                                 "applicable": None if context is None else context == 2,
                                 "reference_context": over.get("reference_context", context), "invalid": None, "judge": "j"})
            if rating != NO_ROW:
                ratings.append({**ids, "rating": rating, "itercoe": None if rating is None else (rating - 1) / 4,
                                "edits": None if rating is None else [], "invalid": None,
                                "reference_rating": over.get("reference_rating", rating), "reference_edits": [], "judge": "j"})
                distances.append({**ids, **dict.fromkeys(ACTIONS, 0), "n_actions": 0, "ignored_edits": 0, "editdist": dist,
                                  "editdist_reference": over.get("editdist_reference", 1.0)})
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


def s_(citations, context, rating=NO_ROW, dist=None, **over):
    return (citations, context, rating, dist, over)


SPEC = {
    # cited (5, KEEP1), uncited retrieval, model-knowledge statement (N/A)
    "mixed": ([s_([1], 2, 5, KEEP1), s_([], 2), s_([], 4)], {}),
    "all_na": ([s_([], 1), s_([], 3)], {}),                                     # only non-applicable statements
    "uncited_only": ([s_([], 2), s_([], 4)], {}),                                # applicable statements all uncited
    # the strict parse of the ITERCOE answer failed; the public parser read sentence 1's rating 4 and lost sentence 2's
    "lost_tag": ([s_([1], 2, None, None, reference_rating=4), s_([2], 2, None, None, reference_rating=None)], {}),
    "failed_call": ([s_([1], 2, NO_ROW), s_([], 4)], {}),                         # the ITERCOE call failed
    "failed_context": ([s_([1], 2, 5, KEEP1), s_([], NO_ROW)], {}),               # an uncited statement's context call failed
    # the strict context parse failed; the public parser lost the tag: its default 2
    "invalid_context": ([s_([1], 2, 5, KEEP1), s_([], None, reference_context=2)], {}),
    "empty": ([], {}),
    # the public "no answer" regex matched ("The passages do not mention ... [1]"): rewritten, one N/A statement
    "no_answer": ([s_([1], 2, 5, KEEP1), s_([], 2)], {"no_answer_reference": True}),
    "unclosed": ([], {"thinking_unclosed": True}),                               # the public code would rate its thinking text
}
A1 = (1.0 + KEEP1) / 2  # strict CiteEval-Auto of a cited statement rated 5 and left alone


def test_strict_scenarios_and_edge_cases(tmp_path):
    got, tables = score(tmp_path, SPEC)

    def s(rid, scenario):
        r = got[(rid, scenario, "strict")]
        return r["status"], r["citeeval_auto"], r["statement_weight"]

    # Full: the uncited retrieval statement scores 0 (§2.4), not the judge's rating
    assert s("mixed", "full") == ("rated", pytest.approx((A1 + 0.0) / 2), 2)
    assert got[("mixed", "full", "strict")]["itercoe"] == pytest.approx((1.0 + 0.0) / 2)
    assert s("mixed", "cited") == ("rated", pytest.approx(A1), 1)
    assert s("uncited_only", "full") == ("rated", 0.0, 1)
    assert s("uncited_only", "cited") == ("not_applicable", None, 0)  # §2.4: uncited statements are N/A in Cited, citable or not
    for scenario in ("full", "cited"):
        assert s("all_na", scenario) == ("not_applicable", None, 0)
        assert s("lost_tag", scenario)[:2] == ("missing", None)
        assert s("failed_call", scenario)[:2] == ("missing", None)
        assert s("empty", scenario) == ("empty", None, 0)
        assert s("unclosed", scenario) == ("empty", None, 0)
    assert s("failed_context", "full")[:2] == ("missing", None)  # the uncited statement might have counted
    assert s("failed_context", "cited") == ("rated", pytest.approx(A1), 1)  # it is N/A in Cited anyway
    assert s("invalid_context", "full")[:2] == ("missing", None)
    assert s("no_answer", "full") == ("rated", pytest.approx(A1 / 2), 2)  # strict does not rewrite
    r = got[("mixed", "full", "strict")]
    assert (r["n_statements"], r["n_uncited"], r["missing_ratio"]) == (3, 2, pytest.approx(2 / 3))

    summary = {(r["scenario"], r["mode"], r["metric"]): r for r in tables["summary"]}
    # rated in Full: mixed A1/2 (2 counted statements), uncited_only 0 (1), no_answer A1/2 (2)
    assert summary[("full", "strict", "citeeval_auto")]["value"] == pytest.approx((A1 / 2 + 0.0 + A1 / 2) / 3)
    assert summary[("full", "strict", "citeeval_auto_statement")]["value"] == pytest.approx((2 * A1 / 2 + 0.0 + 2 * A1 / 2) / 5)
    assert summary[("full", "strict", "citeeval_auto_statement")]["n"] == 5
    assert summary[("full", "strict", "responses_missing")]["value"] == 4
    assert summary[("cited", "strict", "responses_missing")]["value"] == 2
    assert summary[("cited", "strict", "responses_uncited_zero")]["value"] == 0  # N/A in strict Cited (reference: below)
    assert summary[("full", "strict", "responses_empty")]["value"] == 2
    # |R| over all 10 responses (empty ones 0); M over the 8 with statements
    assert summary[("full", "strict", "statements_per_response")]["value"] == pytest.approx((3 + 2 + 2 + 2 + 2 + 2 + 2 + 0 + 2 + 0) / 10)
    assert summary[("full", "strict", "missing_citation_ratio")]["value"] == pytest.approx(
        (2 / 3 + 1 + 1 + 0 + 1 / 2 + 1 / 2 + 1 / 2 + 1 / 2) / 8)
    assert tables["meta"] == []


def test_reference_reproduces_the_public_code(tmp_path):
    """Per response, the public sentence ratings (rating_utils.rate: None = N/A; ITERCOE (r - 1) / 4
    of the rating tag, 1.0 for a lost tag; EDITDIST editdist_reference; an uncited statement of
    context 2 is 0.0), the answer_rating (mean of non-None, 1.0 if none), then
    evaluate_all_systems.py's statement level: every sentence, None replaced by its response's rating."""
    got, tables = score(tmp_path, SPEC)

    def s(rid, scenario):
        r = got[(rid, scenario, "reference")]
        return r["status"], r["citeeval_auto"], r["statement_weight"]

    # Full, sentence ratings (CiteEval-Auto) -> response rating:
    #   mixed [1.0, 0.0, None] -> 0.5;  all_na [None, None] -> 1.0;  uncited_only [0.0, None] -> 0.0
    #   lost_tag [((4-1)/4 + 1.0)/2 = 0.875, (1.0 + 1.0)/2 = 1.0] -> 0.9375;  invalid_context [1.0, 0.0] -> 0.5
    #   empty [] -> 1.0;  no_answer ["No answer is found." of context 3: None] -> 1.0
    full = {"mixed": (0.5, 3), "all_na": (1.0, 2), "uncited_only": (0.0, 2), "lost_tag": (0.9375, 2), "invalid_context": (0.5, 2),
            "empty": (1.0, 0), "no_answer": (1.0, 1)}
    for rid, (rating, n) in full.items():
        assert s(rid, "full")[1:] == (pytest.approx(rating), n), rid
    assert s("lost_tag", "full")[0] == "rated" and s("no_answer", "full")[0] == "no_answer" and s("all_na", "full")[0] == "not_applicable"
    assert got[("lost_tag", "full", "reference")]["itercoe"] == pytest.approx((0.75 + 1.0) / 2)
    # a failed call, a failed context call and an unclosed thinking block are not reproduced: missing
    for rid in ("failed_call", "failed_context", "unclosed"):
        assert s(rid, "full")[:2] == ("missing", None), rid
    # Cited: uncited ratings masked; all masked or N/A with one masked -> 0.0
    #   mixed [1.0, masked, None] -> 1.0;  uncited_only [masked, None] -> 0.0;  invalid_context [1.0, masked] -> 1.0
    #   failed_context: its cited sentence 1.0, the uncited one N/A in Cited whatever its context -> 1.0
    assert s("mixed", "cited") == ("rated", 1.0, 3)
    assert s("uncited_only", "cited") == ("uncited_zero", 0.0, 2)
    assert s("invalid_context", "cited") == ("rated", 1.0, 2)
    assert s("failed_context", "cited") == ("rated", 1.0, 2)

    summary = {(r["scenario"], r["mode"], r["metric"]): r for r in tables["summary"]}
    # response level: the mean of the 7 response ratings; statement level: sum of n_i * r_i over sum of n_i
    assert summary[("full", "reference", "citeeval_auto")]["value"] == pytest.approx((0.5 + 1.0 + 0.0 + 0.9375 + 0.5 + 1.0 + 1.0) / 7)
    assert summary[("full", "reference", "citeeval_auto_statement")]["value"] == pytest.approx(
        (3 * 0.5 + 2 * 1.0 + 2 * 0.0 + 2 * 0.9375 + 2 * 0.5 + 0 * 1.0 + 1 * 1.0) / (3 + 2 + 2 + 2 + 2 + 0 + 1))
    # |R|: every response (empty 0, rewritten 1); M = 1 - cited share, an empty response's share 0
    assert summary[("full", "reference", "statements_per_response")]["value"] == pytest.approx(
        (3 + 2 + 2 + 2 + 2 + 2 + 2 + 0 + 1 + 0) / 10)
    assert summary[("full", "reference", "missing_citation_ratio")]["value"] == pytest.approx(
        (2 / 3 + 1 + 1 + 0 + 1 / 2 + 1 / 2 + 1 / 2 + 1 + 1 + 1) / 10)
    stmt = {r["id"]: r for r in tables["statements"]}
    assert stmt["mixed/2"]["citeeval_auto_reference"] == 0.0 and stmt["no_answer/1"]["citeeval_auto_reference"] is None


def test_meta_evaluation_against_human_ratings(tmp_path):
    model = [5, 4, 2, 1, 3, 5]
    spec = {f"r{i}": ([s_([1], 2, r, KEEP1 * r / 5), s_([2], 2, 6 - r if i % 2 else r, 0.5)], {}) for i, r in enumerate(model)}
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


def _score_with(tmp_path, name: str, text: str):
    """The stage run with `text` as its human ratings file `name` (six responses r0-r5 of two statements)."""
    args = build(tmp_path, {f"r{i}": ([s_([1], 2, r, KEEP1 * r / 5), s_([2], 2, r, 0.5)], {}) for i, r in enumerate([5, 4, 2, 1, 3, 5])})
    (tmp_path / name).write_text(text, encoding="utf-8")
    outs = {n: tmp_path / f"out_{n}.parquet" for n in ("responses", "statements", "summary", "meta")}
    return run_stage("citeeval_score", *args, "--input", f"human={tmp_path / name}",
                     *[x for n, p in outs.items() for x in ("--output", f"{n}={p}")], check=False), outs


def test_bad_human_rating_rows_are_rejects_with_their_line(tmp_path):
    good = [json.dumps({"response_id": "r1", "sentence_id": 2, "rating": 4}), json.dumps({"response_id": "r2", "sentence_id": "1", "rating": None})]
    bad = ["[1, 2]", "{", json.dumps({"response_id": "r0", "sentence_id": None, "rating": 3}),
           json.dumps({"response_id": "r0", "sentence_id": 1.7, "rating": 3}), json.dumps({"response_id": {"a": 1}, "sentence_id": 1, "rating": 3}),
           json.dumps({"response_id": "r0", "sentence_id": 2}),
           json.dumps({"response_id": "r0", "sentence_id": 1, "rating": [3]}), json.dumps({"response_id": "r0", "sentence_id": 1, "rating": "nan"}),
           json.dumps({"response_id": "r0", "sentence_id": 1, "rating": 99}), json.dumps({"response_id": "r0", "sentence_id": 1, "rating": True}),
           json.dumps({"response_id": "zzz", "sentence_id": 9, "rating": 3}),
           json.dumps({"response_id": "r3", "sentence_id": 1, "rating": 5}), json.dumps({"response_id": "r3", "sentence_id": 1, "rating": 1})]
    result, outs = _score_with(tmp_path, "human.jsonl", "\ufeff" + "\n".join(good + bad) + "\n")
    assert result.returncode == 0, result.stderr
    rejects = [(r["id"], r["reason"]) for r in pq.read_table(f"{outs['responses']}.rejects.parquet").to_pylist()]
    assert rejects == [("human line 3", "human_bad_row"), ("human line 4", "human_bad_row"), ("human line 5", "human_bad_row"),
                       ("human line 6", "human_bad_row"), ("human line 7", "human_bad_row"), ("human line 8", "human_bad_row"),
                       ("human line 9", "human_bad_rating"), ("human line 10", "human_bad_rating"), ("human line 11", "human_bad_rating"),
                       ("human line 12", "human_bad_rating"),
                       ("human line 14", "human_duplicate"), ("human line 15", "human_duplicate")]  # line 13: another job's response
    human = {(s["response_id"], s["sentence_id"]): s["human"] for s in pq.read_table(outs["statements"]).to_pylist() if s["human"] is not None}
    assert human == {("r1", 2): 0.75}  # r2's sentence 1 is N/A; r3's sentence 1, rated twice, is taken from neither line
    report = json.loads((tmp_path / "out_responses.parquet.report.json").read_text())
    assert report["rows_in"] == 6 and report["stats"]["human_ratings"] == 2 and report["rejected_by_reason"]["human_duplicate"] == 2
    assert report["stats"]["human_ratings_of_other_responses"] == 1


def test_a_human_ratings_csv_with_a_bom_and_short_rows(tmp_path):
    result, outs = _score_with(tmp_path, "human.csv", "\ufeffresponse_id,sentence_id,rating\r\nr0,1,3\r\nr0\r\nr1,1,\r\n")
    assert result.returncode == 0, result.stderr
    human = {(s["response_id"], s["sentence_id"]): s["human"] for s in pq.read_table(outs["statements"]).to_pylist()}
    assert human[("r0", 1)] == 0.5 and human[("r1", 1)] is None
    rejects = pq.read_table(f"{outs['responses']}.rejects.parquet").to_pylist()
    assert [(r["id"], r["reason"], r["detail"]) for r in rejects] == [("human line 3", "human_bad_row", "sentence_id '' is not a whole number >= 1")]


@pytest.mark.parametrize("name, text, problem", [
    ("human.csv", "", "no rating rows"),
    ("human.csv", "response_id,sentence_id,rating\n", "no rating rows"),
    ("human.csv", "response_id,rating\nr0,3\n", "lacks the columns ['sentence_id'] (has ['response_id', 'rating'])"),
    ("human.jsonl", json.dumps({"response_id": "r0", "sentence_id": 1, "rating": 99}) + "\n",
     "no row can be read ({'human_bad_rating': 1}; line 1: rating 99 is not a 1-5 score"),
])
def test_an_unusable_human_ratings_file_fails_in_one_line(tmp_path, name, text, problem):
    result, outs = _score_with(tmp_path, name, text)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"human ratings {tmp_path / name}: {problem}" in result.stderr
    assert not outs["responses"].exists()


def test_a_human_ratings_csv_not_in_utf8_fails_in_one_line(tmp_path):
    args = build(tmp_path, {"r0": ([s_([1], 2, 5, KEEP1)], {})})
    (tmp_path / "human.csv").write_bytes("response_id,sentence_id,rating\nr\u00e9,1,3\n".encode("latin-1"))
    result = run_stage("citeeval_score", *args, "--input", f"human={tmp_path / 'human.csv'}",
                       *[x for n in ("responses", "statements", "summary", "meta") for x in ("--output", f"{n}={tmp_path / n}.parquet")], check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"{tmp_path / 'human.csv'}: not UTF-8 (byte 0xe9 on line 2)" in result.stderr
