"""EDITDIST (CiteEval Eq. 3) by hand, strict and reference-compatible; ITERCOE's normalisation; the
stage with the public and with fitted coefficients (citeeval.txt §4.2; the refit itself:
tests/test_citeeval_fit.py)."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from conftest import run_stage
from stages.citeeval.citeeval_editdist import editdist, editdist_reference
from stages.core.citeeval import ACTIONS, PUBLIC_COEFFICIENTS as C, likert_to_unit
from stages.core.tables import write_table


def delete(c, r):
    return {"op": "DELETE", "citation": c, "reason": r}


def add(c, r):
    return {"op": "ADD", "citation": c, "reason": r}


# (citations, edits, strict by hand, reference by hand)
CASES = {
    "only keeps": ([1, 2], [], 1.0030 - 0.0109, 1.0),
    "only deletes": ([1, 2], [delete(1, 1), delete(2, 3)], (0.0694 + 0.5318) / 2 - 0.0109,
                     # public: keys 2, 3; DELETE 1 misses, DELETE 2 hits the key of citation 1
                     (1.0030 + 0.5318) / 2 - 0.0109),
    "mixed (the seed's example)": ([1, 6], [delete(6, 1), add(7, 3)], (1.0030 + 0.0694 + 0.4340) / 3 - 0.0109,
                                   # public: keys 2, 7; DELETE 6 misses, ADD 7 is taken as already cited
                                   1.0030 - 0.0109),
    "no actions": ([], [], -0.0109, 1.0),
    "uncited, one addition": ([], [add(1, 1)], 0.0 - 0.0109, 0.0 - 0.0109),
    "substandard swapped for refinement": ([3], [delete(3, 2), add(4, 2)], (0.7977 + 0.0162) / 2 - 0.0109,
                                           # public: key 4; DELETE 3 misses, ADD 4 taken as cited
                                           1.0030 - 0.0109),
}


@pytest.mark.parametrize("name", list(CASES))
def test_editdist_by_hand(name):
    citations, edits, strict, reference = CASES[name]
    assert editdist(citations, edits, C)[0] == pytest.approx(strict, abs=1e-12)
    assert editdist_reference(citations, edits, C) == pytest.approx(reference, abs=1e-12)


def test_edits_that_change_nothing_are_ignored():
    rating, counts, ignored = editdist([1], [delete(5, 1), add(1, 3), add(2, 1), delete(2, 2)], C)
    assert counts == {**dict.fromkeys(ACTIONS, 0), "keep": 1} and ignored == 2  # 2 added then deleted: cancelled
    assert rating == pytest.approx(1.0030 - 0.0109)
    _, counts, _ = editdist([1, 2], [delete(1, 3), add(1, 3)], C)  # deleted, then added back: kept
    assert counts["keep"] == 2 and counts["delete_redundant"] == 0


def test_likert_normalisation():
    assert [likert_to_unit(r) for r in (1, 2, 3, 4, 5)] == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_editdist_stage_with_fitted_coefficients(tmp_path):
    statements = [{"id": "s1", "response_id": "r", "model": "m", "sentence_id": 1, "sentence": "A claim.", "citations": [1, 2],
                   "dropped": [], "unanswerable": False}]
    ratings = [{"id": "s1", "response_id": "r", "model": "m", "sentence_id": 1, "rating": 4, "itercoe": 0.75,
                "edits": [delete(2, 3)], "judge": "j"}]
    write_table(tmp_path / "st.parquet", statements, "citeeval_statements")
    write_table(tmp_path / "ra.parquet", ratings, "citeeval_itercoe")
    fitted = {**dict.fromkeys(ACTIONS, 0.0), "keep": 1.0, "delete_redundant": 0.5, "intercept": 0.0}
    (tmp_path / "coef.json").write_text(json.dumps({"coefficients": fitted}))
    base = ["--input", f"statements={tmp_path / 'st.parquet'}", "--input", f"ratings={tmp_path / 'ra.parquet'}"]
    run_stage("citeeval_editdist", *base, "--output", f"distances={tmp_path / 'd1.parquet'}")
    run_stage("citeeval_editdist", *base, "--input", f"coefficients={tmp_path / 'coef.json'}", "--output", f"distances={tmp_path / 'd2.parquet'}")
    public, refit = pq.read_table(tmp_path / "d1.parquet").to_pylist()[0], pq.read_table(tmp_path / "d2.parquet").to_pylist()[0]
    assert (public["keep"], public["delete_redundant"], public["n_actions"]) == (1, 1, 2)
    assert public["editdist"] == pytest.approx((1.0030 + 0.5318) / 2 - 0.0109)
    assert refit["editdist"] == pytest.approx(0.75)
    # public keys: citation 2 stored as 3; DELETE 2 hits citation 1's key
    assert public["editdist_reference"] == pytest.approx((0.5318 + 1.0030) / 2 - 0.0109)
