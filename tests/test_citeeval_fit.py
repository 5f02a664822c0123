"""citeeval_fit: Eq. 3 refitted by least squares from human ratings (CSV of action counts and a 1-5
rating), through the stage's real CLI on synthetic ratings drawn from known coefficients."""
from __future__ import annotations

import csv
import json
import random

import pyarrow.parquet as pq
import pytest

from conftest import run_stage
from stages.citeeval.citeeval import ACTIONS, PUBLIC_COEFFICIENTS as C, eq3


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
    bad = ['{"id": "b1", "keep": 1', "[1, 2]", '{"id": "b3", "keep": NaN, "rating": 3}', '{"id": "b4", "keep": 1, "rating": "inf"}',
           '{"id": "b5", "keep": {"x": 1}, "rating": 3}', '{"id": "b6", "keep": -2, "rating": 3}',
           '{"id": "b7", "keep": 1' + "0" * 400 + ', "rating": 3}', '{"id": "b8", "keep": 1' + "0" * 5000 + ', "rating": 3}']
    path = tmp_path / "human.jsonl"
    path.write_text("\n".join([json.dumps(row) for row in good[:60]] + bad + [json.dumps(row) for row in good[60:]]) + "\n")
    out = tmp_path / "coefficients.json"
    run_stage("citeeval_fit", "--input", f"ratings={path}", "--output", f"coefficients={out}")
    got = json.loads(out.read_text())
    assert got["n"] == 120 and got["identifiable"]
    assert got["coefficients"] == pytest.approx(fit(tmp_path / "alone", good)["coefficients"], abs=1e-9)
    rejects = {r["id"]: r["reason"] for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()}
    assert rejects == {"row:61": "bad_json", "row:62": "bad_row", "b3": "bad_row", "b4": "bad_row", "b5": "bad_row", "b6": "bad_row",
                       "b7": "bad_row", "row:68": "bad_json"}  # past a double's range; past Python's digit limit
