"""CiteEval-Auto's shared vocabulary (citeeval.txt §3.1, §4.2, Eq. 3): the edit actions, Eq. 3 itself,
the `[k]` citation marker (with `split_lists`, the one rewrite of "[1, 2]" into it) and what counts as
a judge's answer. Used by the CiteEval stages (context, itercoe, editdist, fit, prepare, the adapters
of each evaluation); no stage imports another.

Eq. 3 rates a statement from the actions that turn its citations into good ones:

    r = sum_k d(a_k) * |A_k| / |A| + b

over the seven action types: KEEP (an original citation left as it is), DELETE for reasons 1-3
(misleading, substandard, redundant) and ADD for reasons 1-3 (evidence, refinement, credibility).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from stages.core.review import read_csv
from stages.core.stage import StageError

# Action types in a fixed order: the columns of the fit and the keys of the coefficients.
ACTIONS = ("keep", "delete_misleading", "delete_substandard", "delete_redundant",
           "add_evidence", "add_refinement", "add_credibility")
DELETE_REASONS = {1: "delete_misleading", 2: "delete_substandard", 3: "delete_redundant"}
ADD_REASONS = {1: "add_evidence", 2: "add_refinement", 3: "add_credibility"}

# Fitted on CiteBench's metric development set: `edit2esitamted_rating` of the public release's
# src/modules/citeeval_config.json (version citeeval-auto-12272024), at its full precision.
PUBLIC_COEFFICIENTS = {
    "keep": 1.00298631, "delete_misleading": 0.06935712, "delete_substandard": 0.79767963, "delete_redundant": 0.5318322,
    "add_evidence": 0.0, "add_refinement": 0.01623296, "add_credibility": 0.43404136, "intercept": -0.010901728784493359,
}

# A response's status per scenario and mode in citeeval_score (its docstring says when each applies).
STATUSES = ("rated", "not_applicable", "uncited_zero", "no_answer", "empty", "missing")

CITATION = re.compile(r"\[(\d+)\]")  # the seed's citation regex (App. C.2)
_LIST = re.compile(r"\[(\d+(?:\s*[,;]\s*\d+)+)\]")


def split_lists(response: str) -> str:
    """ "[1, 2]" / "[1; 2]" -> "[1][2]": the one form CITATION reads."""
    return _LIST.sub(lambda m: "".join(f"[{n}]" for n in re.split(r"\s*[,;]\s*", m.group(1))), response)


def row_mode(passages: list[dict]) -> str:
    """A citeeval_responses row's `mode`: text when every passage is text, else the stand-ins
    its passages use (caption, label, extraction...), sorted and joined by "+"."""
    stand_ins = sorted({p["mode"] for p in passages if p["mode"] != "text"})
    return "+".join(stand_ins) if stand_ins else "text"


def eq3(counts: dict[str, int], coefficients: dict[str, float]) -> float:
    """Eq. 3 for one statement's action counts. With no action at all (an uncited statement the
    model left alone) the sum is empty and the rating is the intercept b."""
    total = sum(counts.get(a, 0) for a in ACTIONS)
    if total == 0:
        return coefficients["intercept"]
    return sum(coefficients[a] * counts.get(a, 0) / total for a in ACTIONS) + coefficients["intercept"]


def has_text(answer) -> bool:
    """The judge answered with text (valid, or still malformed for the stage's parse after the
    client's retries: the client's error then starts "malformed: "), as opposed to a failed call,
    whose `raw` may be an HTTP error body and is never read for a rating."""
    return answer.ok or (answer.error or "").startswith("malformed: ")


def likert_to_unit(rating: int | float) -> float:
    """A 1-5 Likert rating on [0, 1]: (r - 1) / 4, so 1 -> 0, 3 -> 0.5, 5 -> 1 (linear, the ends kept)."""
    return (rating - 1) / 4


def read_ratings_file(path: str, what: str, columns: tuple[str, ...]) -> list[tuple[int, object]]:
    """(line, row) of a ratings file a person gives: a CSV through the shared sheet reader
    (stages/core/review.py), whose header must hold `columns` (an empty file has no row), or JSON
    lines (.jsonl, .json), a row being the line's JSON value or the ValueError of a line that does
    not parse (one bad line is one reject). UTF-8, a byte-order mark allowed; a file that cannot
    be read fails in one line naming it as `what`."""
    if not path.endswith((".jsonl", ".json")):
        try:
            header, rows = read_csv(path)
        except StageError as err:
            raise StageError(f"{what}: {err}") from None
        absent = [c for c in columns if c not in header]
        if header and absent:
            raise StageError(f"{what} {path}: lacks the columns {absent} (has {header})")
        return list(enumerate(rows, start=2))
    try:
        lines = Path(path).read_text(encoding="utf-8-sig").split("\n")
    except (OSError, UnicodeDecodeError) as err:
        raise StageError(f"{what} {path}: cannot read: {err}") from None
    return [(n, _json_line(line)) for n, line in enumerate(lines, start=1) if line.strip()]


def _json_line(line: str):
    try:
        return json.loads(line)
    except ValueError as err:  # not JSON, or an integer past Python's digit limit
        return err
