"""EDITDIST (CiteEval Eq. 3) by hand, strict and reference-compatible; ITERCOE's normalisation; the
stage with the public and with fitted coefficients (citeeval.txt §4.2; the refit itself:
tests/test_citeeval_fit.py). The hand values use the public release's `edit2esitamted_rating`
(src/modules/citeeval_config.json, citeeval-auto-12272024), copied here digit for digit."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from conftest import run_stage
from stages.citeeval.citeeval_editdist import editdist, editdist_reference
from stages.citeeval.citeeval import ACTIONS, PUBLIC_COEFFICIENTS as C, likert_to_unit
from stages.core.tables import write_table


# citeeval_config.json's values as published
KEEP, MISLEADING, SUBSTANDARD, REDUNDANT = 1.00298631, 0.06935712, 0.79767963, 0.5318322
EVIDENCE, REFINEMENT, CREDIBILITY, B = 0.0, 0.01623296, 0.43404136, -0.010901728784493359


def delete(c, r):
    return {"op": "DELETE", "citation": c, "reason": r}


def add(c, r):
    return {"op": "ADD", "citation": c, "reason": r}


def public(edits):
    """The same edits as the public parser keeps them: citation ids as strings."""
    return [{**e, "citation": str(e["citation"])} for e in edits]


def test_public_coefficients_at_full_precision():
    assert C == {"keep": KEEP, "delete_misleading": MISLEADING, "delete_substandard": SUBSTANDARD, "delete_redundant": REDUNDANT,
                 "add_evidence": EVIDENCE, "add_refinement": REFINEMENT, "add_credibility": CREDIBILITY, "intercept": B}


# (citations, edits, strict by hand, reference by hand)
CASES = {
    "only keeps": ([1, 2], [], KEEP + B, 1.0),
    "only deletes": ([1, 2], [delete(1, 1), delete(2, 3)], (MISLEADING + REDUNDANT) / 2 + B,
                     # public: keys "2", "3"; DELETE 1 misses, DELETE 2 hits the key of citation 1
                     (KEEP + REDUNDANT) / 2 + B),
    "mixed (the seed's example)": ([1, 6], [delete(6, 1), add(7, 3)], (KEEP + MISLEADING + CREDIBILITY) / 3 + B,
                                   # public: keys "2", "7"; DELETE 6 misses, ADD 7 is taken as already cited
                                   KEEP + B),
    "no actions": ([], [], B, 1.0),
    "uncited, one addition": ([], [add(1, 1)], EVIDENCE + B, EVIDENCE + B),
    "substandard swapped for refinement": ([3], [delete(3, 2), add(4, 2)], (SUBSTANDARD + REFINEMENT) / 2 + B,
                                           # public: key "4"; DELETE 3 misses, ADD 4 taken as cited
                                           KEEP + B),
}


@pytest.mark.parametrize("name", list(CASES))
def test_editdist_by_hand(name):
    citations, edits, strict, reference = CASES[name]
    assert editdist(citations, edits, C)[0] == pytest.approx(strict, abs=1e-15)
    assert editdist_reference(citations, public(edits), C) == pytest.approx(reference, abs=1e-15)


def test_reference_keys_are_the_strings_written():
    # public: citation 6 is keyed "7"; "07" is another string, so DELETE "07" misses (1 KEEP) and
    # ADD "07" is a new citation: (KEEP + CREDIBILITY) / 2 + b
    assert editdist_reference([6], [{"op": "DELETE", "citation": "07", "reason": 1}], C) == pytest.approx(KEEP + B, abs=1e-15)
    assert editdist_reference([6], [{"op": "ADD", "citation": "07", "reason": 3}], C) == pytest.approx((KEEP + CREDIBILITY) / 2 + B, abs=1e-15)


def test_edits_that_change_nothing_are_ignored():
    rating, counts, ignored = editdist([1], [delete(5, 1), add(1, 3), add(2, 1), delete(2, 2)], C)
    assert counts == {**dict.fromkeys(ACTIONS, 0), "keep": 1} and ignored == 2  # 2 added then deleted: cancelled
    assert rating == pytest.approx(KEEP + B)
    _, counts, _ = editdist([1, 2], [delete(1, 3), add(1, 3)], C)  # deleted, then added back: kept
    assert counts["keep"] == 2 and counts["delete_redundant"] == 0


def test_likert_normalisation():
    assert [likert_to_unit(r) for r in (1, 2, 3, 4, 5)] == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_editdist_stage_with_fitted_coefficients(tmp_path):
    statements = [{"id": f"s{i}", "response_id": "r", "model": "m", "sentence_id": i, "sentence": "A claim.", "citations": [1, 2],
                   "dropped": [], "unanswerable": False} for i in (1, 2)]
    ratings = [{"id": "s1", "response_id": "r", "model": "m", "sentence_id": 1, "rating": 4, "itercoe": 0.75,
                "edits": [delete(2, 3)], "invalid": None, "reference_rating": 4, "reference_edits": public([delete(2, 3)]), "judge": "j"},
               # the strict parse failed: strict EDITDIST is null, the public reading (no edit) is 1.0
               {"id": "s2", "response_id": "r", "model": "m", "sentence_id": 2, "rating": None, "itercoe": None, "edits": None,
                "invalid": "malformed: ... | raw: ...", "reference_rating": None, "reference_edits": [], "judge": "j"}]
    write_table(tmp_path / "st.parquet", statements, "citeeval_statements")
    write_table(tmp_path / "ra.parquet", ratings, "citeeval_itercoe")
    fitted = {**dict.fromkeys(ACTIONS, 0.0), "keep": 1.0, "delete_redundant": 0.5, "intercept": 0.0}
    (tmp_path / "coef.json").write_text(json.dumps({"coefficients": fitted}))
    base = ["--input", f"statements={tmp_path / 'st.parquet'}", "--input", f"ratings={tmp_path / 'ra.parquet'}"]
    run_stage("citeeval_editdist", *base, "--output", f"distances={tmp_path / 'd1.parquet'}")
    run_stage("citeeval_editdist", *base, "--input", f"coefficients={tmp_path / 'coef.json'}", "--output", f"distances={tmp_path / 'd2.parquet'}")
    (default, invalid), (refit, _) = pq.read_table(tmp_path / "d1.parquet").to_pylist(), pq.read_table(tmp_path / "d2.parquet").to_pylist()
    assert (default["keep"], default["delete_redundant"], default["n_actions"]) == (1, 1, 2)
    # the stage's default coefficients are the published ones: (1.00298631 + 0.5318322) / 2 - 0.010901728784493359
    assert default["editdist"] == pytest.approx((KEEP + REDUNDANT) / 2 + B, abs=1e-15)
    assert refit["editdist"] == pytest.approx(0.75)
    # public keys: citation 2 stored as "3"; DELETE 2 hits citation 1's key
    assert default["editdist_reference"] == pytest.approx((REDUNDANT + KEEP) / 2 + B, abs=1e-15)
    assert (invalid["editdist"], invalid["n_actions"], invalid["editdist_reference"]) == (None, None, 1.0)


@pytest.mark.parametrize("text, problem", [
    ("[1, 2]", 'needs an object with a "coefficients" object'),
    ('{"coefficients": [1]}', 'needs an object with a "coefficients" object'),
    ('{"coefficients": {"keep": NaN}}', "missing or not finite numbers"),
    ("\ufeff" + json.dumps({"coefficients": {**dict.fromkeys(ACTIONS, 1.0), "intercept": True}}), "['intercept'] are missing or not finite"),
    ("{", "not a citeeval_fit output"),
])
def test_a_bad_coefficients_file_fails_in_one_line(tmp_path, text, problem):
    write_table(tmp_path / "st.parquet", [], "citeeval_statements")
    write_table(tmp_path / "ra.parquet", [], "citeeval_itercoe")
    (tmp_path / "coef.json").write_text(text, encoding="utf-8")
    result = run_stage("citeeval_editdist", "--input", f"statements={tmp_path / 'st.parquet'}", "--input", f"ratings={tmp_path / 'ra.parquet'}",
                       "--input", f"coefficients={tmp_path / 'coef.json'}", "--output", f"distances={tmp_path / 'd.parquet'}", check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert str(tmp_path / "coef.json") in result.stderr and problem in result.stderr
    assert not (tmp_path / "d.parquet").exists()


def test_reference_rating_is_the_public_arithmetic_to_the_last_bit():
    """citation_rater.py sums each citation's coefficient in its dict's order, divides by the count and
    adds the intercept; Eq. 3 written as a sum of coefficient x count / total differs in the last bit
    for a quarter of edit sets. Citation [4] kept, [7] added for credibility, [8] for refinement: the
    public code gives 0.4735184812155066 (Eq. 3 as a weighted sum: 0.47351848121550666)."""
    edits = [{"op": "ADD", "citation": "7", "reason": 3}, {"op": "ADD", "citation": "8", "reason": 2}]
    assert editdist_reference([3], edits, C) == 0.4735184812155066
