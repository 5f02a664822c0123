"""Refit EDITDIST's distances (citeeval.txt §4.2, Eq. 3): multiple linear regression of human ratings
on the share of each edit action, min sum_i (r_i - r^_i)^2, by least squares.

Human ratings file (CSV with a header, or JSON lines; UTF-8, a byte-order mark allowed), one
statement per row, named by `id`: the counts of its ground-truth actions `keep`,
`delete_misleading`, `delete_substandard`, `delete_redundant`, `add_evidence`, `add_refinement`,
`add_credibility` (every one a column, or a key of each JSON line: a CSV lacking one fails naming
it; an empty cell or null = 0) and its human `rating`, a 1-5 Likert score normalised as ITERCOE's,
(r - 1) / 4 (`rating_scale: likert5`), or already on [0, 1] (`unit`). Rows without a rating (N/A
statements) are skipped and counted.

Features are |A_k| / |A| per action; a statement with no action has all features 0, and the model
gives it b. The shares of a statement with actions sum to 1, so b is identifiable only when some
rows have no action; without such rows the design is rank-deficient, and the minimum-norm solution
is written with `identifiable: false` (each d_k + b is still determined).

Inputs: ratings (the human ratings file). Outputs: coefficients (JSON: {"coefficients": {...},
"n", "rmse", "rank", "identifiable"}).
Rejects: no_rating (an N/A statement), bad_row (not an object, an action or the rating absent, counts
or a rating that are not finite numbers, or a negative count), bad_json (a JSON line that is not
JSON), rating_out_of_range (off the rating_scale), duplicate_id (an id on several rows: every one of
them, which one is meant being unknown).
Params: rating_scale (likert5 | unit).
"""
from __future__ import annotations

import collections
import json
import math

import numpy as np

from stages.citeeval.citeeval import ACTIONS, likert_to_unit, read_ratings_file
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError
from stages.core.tables import atomic_write_bytes

VERSION = "2"  # 2: action columns required, ratings off the scale and repeated ids rejected, a BOM read
SCALES = {"likert5": (1, 5), "unit": (0, 1)}  # the ratings each rating_scale takes


def read_rows(path: str) -> list:
    """The file's rows (`read_ratings_file`; a CSV must have `rating` and every action column)."""
    return [row for _, row in read_ratings_file(path, "ratings", (*ACTIONS, "rating"))]


def _number(value, what: str) -> float:
    """A finite number (a CSV cell is text); raises ValueError naming `what` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{what} is {value!r:.80}, not a number")
    try:
        number = float(value)
    except OverflowError:  # an integer past a double's range
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(f"{what} is {value!r:.80}, not a finite number")
    return number


def features(counts: dict[str, float]) -> list[float]:
    total = sum(counts.values())
    return [counts[a] / total if total else 0.0 for a in ACTIONS]


def fit(X: np.ndarray, y: np.ndarray) -> tuple[dict[str, float], int, float]:
    """Least squares with an intercept: (coefficients, rank, rmse)."""
    design = np.hstack([X, np.ones((len(X), 1))])
    solution, _, rank, _ = np.linalg.lstsq(design, y, rcond=None)
    rmse = float(np.sqrt(np.mean((design @ solution - y) ** 2)))
    coefficients = {a: float(v) for a, v in zip(ACTIONS, solution[:-1])} | {"intercept": float(solution[-1])}
    return coefficients, int(rank), rmse


def _row_id(row, n: int) -> str:
    row_id = row.get("id") if isinstance(row, dict) else None
    return str(row_id) if isinstance(row_id, (str, int)) and not isinstance(row_id, bool) and row_id != "" else f"row:{n}"


def run(ctx):
    scale = ctx.params["rating_scale"]
    low, high = SCALES[scale]
    rows = read_rows(ctx.input_path("ratings"))
    ids = [_row_id(row, n) for n, row in enumerate(rows, start=1)]
    rows_of = collections.defaultdict(list)
    for n, row_id in enumerate(ids, start=1):
        rows_of[row_id].append(n)
    X, y = [], []
    for n, (row_id, row) in enumerate(zip(ids, rows), start=1):
        with ctx.item(row_id):
            if isinstance(row, ValueError):
                raise Reject("bad_json", f"row {n}: {row.msg} at char {row.pos}" if isinstance(row, json.JSONDecodeError) else f"row {n}: {row}")
            if not isinstance(row, dict):
                raise Reject("bad_row", f"row {n}: a {type(row).__name__}, not an object")
            if len(rows_of[row_id]) > 1:
                raise Reject("duplicate_id", f"row {n}: id {row_id} is on rows {rows_of[row_id]}: none is fitted")
            absent = [a for a in (*ACTIONS, "rating") if a not in row]
            if absent:
                raise Reject("bad_row", f"row {n}: lacks {absent}")
            rating = row["rating"]
            if rating in (None, "", "null", "N/A"):
                raise Reject("no_rating", "an N/A statement: nothing to fit")
            try:
                counts = {a: _number(row[a] or 0, a) for a in ACTIONS}
                value = _number(rating, "rating")
            except ValueError as err:
                raise Reject("bad_row", f"row {n}: {err}") from None
            negative = [a for a, c in counts.items() if c < 0]
            if negative:
                raise Reject("bad_row", f"row {n}: negative action counts {negative}")
            if not low <= value <= high:
                raise Reject("rating_out_of_range", f"row {n}: rating {rating!r} is outside {low}-{high} (rating_scale {scale})")
            X.append(features(counts))
            y.append(likert_to_unit(value) if scale == "likert5" else value)
    if len(y) < len(ACTIONS) + 1:
        raise StageError(f"ratings {ctx.input_path('ratings')}: {len(y)} usable rows, need at least {len(ACTIONS) + 1}")
    coefficients, rank, rmse = fit(np.array(X), np.array(y))
    result = {"coefficients": coefficients, "n": len(y), "rmse": rmse, "rank": rank, "identifiable": rank == len(ACTIONS) + 1}
    ctx.stats["rank"] = rank
    ctx.count_output("coefficients", len(y))
    atomic_write_bytes(ctx.output_path("coefficients"), json.dumps(result, indent=2).encode())


STAGE = Stage(
    name="citeeval_fit",
    version=VERSION,
    doc=__doc__,
    inputs={"ratings": Input("human ratings with action counts (CSV or JSON lines)", kind="file")},
    outputs={"coefficients": Output(None, "fitted Eq. 3 coefficients (JSON)")},
    params={"rating_scale": Param(str, "likert5", "likert5: ratings 1-5, normalised (r-1)/4; unit: already on [0, 1]",
                                  choices=("likert5", "unit"))},
    run=run,
    rejects={
        "no_rating": "an N/A statement: no rating to fit",
        "bad_row": "not an object, lacks an action or the rating, or action counts or a rating that are not finite numbers "
                   "(counts not negative)",
        "bad_json": "a JSON line that is not JSON",
        "rating_out_of_range": "a rating off the rating_scale (1-5 for likert5, 0-1 for unit)",
        "duplicate_id": "an id on more than one row: none of its rows is fitted",
    },
)

if __name__ == "__main__":
    STAGE.main()
