"""citeeval_fit: Eq. 3 refitted by least squares from human ratings (CSV of action counts and a 1-5
rating), through the stage's real CLI on synthetic ratings drawn from known coefficients."""
from __future__ import annotations

import csv
import json
import random

import pyarrow.parquet as pq
import pytest

from conftest import run_stage
from stages.citeeval.citeeval import ACTIONS, PUBLIC_COEFFICIENTS, eq3

# The known coefficients the synthetic ratings are drawn from: the public ones with d(KEEP) and b
# moved so that every rating stays on the 1-5 scale the stage takes (the public b < 0 rates a
# statement without actions below 1), noise of 0.02 included (b and max d + b are 5 sd from the ends).
C = {**PUBLIC_COEFFICIENTS, "keep": 0.8, "intercept": 0.1}


def synthetic(rows: int, seed: int, zero_rows: bool, noise: float) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(rows):
        if zero_rows and i % 10 == 0:
            counts = dict.fromkeys(ACTIONS, 0)
        else:
            counts = {a: rng.choice([0, 0, 1, 2]) for a in ACTIONS}
            counts["keep"] += 1
        rating = 1 + 4 * (eq3(counts, C) + rng.gauss(0, noise))  # back on the 1-5 scale
        out.append({"id": f"s{i}", **counts, "rating": rating})
    return out


def fit(tmp_path, rows: list[dict]) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "human.csv"
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    out = tmp_path / "coefficients.json"
    run_stage("citeeval_fit", "--input", f"ratings={path}", "--output", f"coefficients={out}")
    return json.loads(out.read_text())


def test_refit_recovers_known_coefficients(tmp_path):
    exact = fit(tmp_path, synthetic(300, 1, zero_rows=True, noise=0.0))
    assert exact["identifiable"] and exact["rmse"] < 1e-9
    for key, value in C.items():
        assert exact["coefficients"][key] == pytest.approx(value, abs=1e-9), key
    noisy = fit(tmp_path, synthetic(3000, 2, zero_rows=True, noise=0.02))
    for key, value in C.items():
        assert noisy["coefficients"][key] == pytest.approx(value, abs=0.03), key


def test_refit_without_actionless_rows_is_flagged(tmp_path):
    got = fit(tmp_path, synthetic(200, 3, zero_rows=False, noise=0.0) + [{"id": "na", **dict.fromkeys(ACTIONS, 1), "rating": ""}])
    assert not got["identifiable"] and got["rank"] == len(ACTIONS)
    for key in ACTIONS:  # only d_k + b is determined by the shares
        assert got["coefficients"][key] + got["coefficients"]["intercept"] == pytest.approx(C[key] + C["intercept"], abs=1e-9)


def test_bad_json_lines_are_each_a_reject_and_the_fit_is_the_good_rows(tmp_path):
    """JSON lines: a line that is not JSON, one that is not an object, a count or rating that is not
    a finite number (NaN, "inf", an object, 10^400) and a negative count are each their row's reject; the
    coefficients are those of the good rows alone."""
    good = synthetic(120, 4, zero_rows=True, noise=0.0)
    rest = "".join(f', "{a}": 0' for a in ACTIONS[1:])  # the other actions, so that only `keep` or the rating is wrong
    bad = ['{"id": "b1", "keep": 1', "[1, 2]", '{"id": "b3", "keep": NaN%s, "rating": 3}' % rest, '{"id": "b4", "keep": 1%s, "rating": "inf"}' % rest,
           '{"id": "b5", "keep": {"x": 1}%s, "rating": 3}' % rest, '{"id": "b6", "keep": -2%s, "rating": 3}' % rest,
           '{"id": "b7", "keep": 1' + "0" * 400 + rest + ', "rating": 3}', '{"id": "b8", "keep": 1' + "0" * 5000 + rest + ', "rating": 3}']
    path = tmp_path / "human.jsonl"
    path.write_text("\n".join([json.dumps(row) for row in good[:60]] + bad + [json.dumps(row) for row in good[60:]]) + "\n")
    out = tmp_path / "coefficients.json"
    run_stage("citeeval_fit", "--input", f"ratings={path}", "--output", f"coefficients={out}")
    got = json.loads(out.read_text())
    assert got["n"] == 120 and got["identifiable"]
    assert got["coefficients"] == pytest.approx(fit(tmp_path / "alone", good)["coefficients"], abs=1e-9)
    rejects = {r["id"]: r["reason"] for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()}
    details = {r["id"]: r["detail"] for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()}
    assert all(what in details[i] for i, what in [("b3", "keep is nan"), ("b4", "rating is 'inf'"), ("b5", "keep is {'x': 1}"),
                                                   ("b6", "negative action counts ['keep']"), ("b7", "keep is 1000")])
    assert rejects == {"row:61": "bad_json", "row:62": "bad_row", "b3": "bad_row", "b4": "bad_row", "b5": "bad_row", "b6": "bad_row",
                       "b7": "bad_row", "row:68": "bad_json"}  # past a double's range; past Python's digit limit


def _csv(path, rows, fields):
    with path.open("w", newline="", encoding="utf-8-sig") as fh:  # utf-8-sig: with a byte-order mark, as spreadsheets save
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def test_a_byte_order_mark_is_read_and_bad_rows_are_rejected(tmp_path):
    """A BOM before the first column (here `keep`) is read; a rating off the 1-5 scale and every row
    of a repeated id are rejects; the fit is that of the other rows."""
    good = synthetic(120, 5, zero_rows=True, noise=0.0)
    rows = good + [{**good[0], "id": "far", "rating": 99}, {**good[1], "id": "dup"}, {**good[2], "id": "dup", "rating": 2}]
    _csv(tmp_path / "human.csv", rows, ["keep", *(k for k in rows[0] if k != "keep")])
    out = tmp_path / "coefficients.json"
    run_stage("citeeval_fit", "--input", f"ratings={tmp_path / 'human.csv'}", "--output", f"coefficients={out}")
    got = json.loads(out.read_text())
    assert got["n"] == 120 and got["coefficients"]["keep"] == pytest.approx(C["keep"], abs=1e-9)
    rejects = [(r["id"], r["reason"]) for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()]
    assert rejects == [("far", "rating_out_of_range"), ("dup", "duplicate_id"), ("dup", "duplicate_id")]


@pytest.mark.parametrize("rename, absent", [({"keep": None}, "['keep']"), ({"add_evidence": "add_evidense"}, "['add_evidence']"),
                                            ({"rating": None, "delete_redundant": None}, "['delete_redundant', 'rating']")])
def test_a_missing_action_column_fails_in_one_line(tmp_path, rename, absent):
    rows = [{rename.get(k, k): v for k, v in row.items() if rename.get(k, k)} for row in synthetic(20, 6, zero_rows=True, noise=0.0)]
    _csv(tmp_path / "human.csv", rows, list(rows[0]))
    result = run_stage("citeeval_fit", "--input", f"ratings={tmp_path / 'human.csv'}", "--output", f"coefficients={tmp_path / 'c.json'}",
                       check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"{tmp_path / 'human.csv'}: lacks the columns {absent}" in result.stderr


def test_json_lines_need_every_action_and_the_scale(tmp_path):
    good = synthetic(60, 7, zero_rows=True, noise=0.0)
    bad = [{k: v for k, v in good[0].items() if k != "add_credibility"} | {"id": "short"}, {**good[1], "id": "low", "rating": 0.5}]
    path = tmp_path / "human.jsonl"
    path.write_text("\ufeff" + "".join(json.dumps(row) + "\n" for row in bad + good), encoding="utf-8")
    out = tmp_path / "coefficients.json"
    run_stage("citeeval_fit", "--input", f"ratings={path}", "--output", f"coefficients={out}")
    assert json.loads(out.read_text())["n"] == 60
    rejects = {r["id"]: (r["reason"], r["detail"]) for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()}
    assert rejects == {"short": ("bad_row", "row 1: lacks ['add_credibility']"),
                       "low": ("rating_out_of_range", "row 2: rating 0.5 is outside 1-5 (rating_scale likert5)")}
