"""citeeval_fit: Eq. 3 refitted by least squares from human ratings (CSV of action counts and a 1-5
rating), through the stage's real CLI on synthetic ratings drawn from known coefficients."""
from __future__ import annotations

import csv
import json
import random

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
