"""Edit distance, EDITDIST (citeeval.txt §4.2, Eq. 3): a statement's rating from the ITERCOE edits.

The edits, in the order the model wrote them, are applied to the statement's original citations;
each citation then ends in one state, counted as one action:
- an original citation not deleted: KEEP;
- an original citation deleted for reason r: DELETE r (misleading, substandard, redundant);
- a citation added for reason r that was not an original one: ADD r (evidence, refinement,
  credibility); citation 0 (model knowledge, App. A.3) counts like any added id.
Edits that change nothing are ignored and counted (`ignored_edits`): deleting a citation the
statement does not have, adding one it already has. Deleting a citation added earlier cancels the
addition; adding back a deleted original makes it KEEP again.

Strict rating (`editdist`): Eq. 3 as written, r = sum_k d(a_k) |A_k| / |A| + b, over the strict
edits (`edits`), citation ids matched as written. A statement with citations and no edit is all
KEEP: d(KEEP) + b (0.992085 with the public coefficients). Null when the strict parse of the
judge's answer failed (the statement is then missing in strict).

Reference-compatible rating (`editdist_reference`), CiteEval's public implementation over the
public parser's edits (`reference_edits`, citation ids as the strings written): its original
citations are keyed one too high (citation k as the string "k+1"), so a DELETE of k removes the
citation k - 1 if that one was cited and is skipped otherwise, an ADD of k is skipped when k - 1
was cited, and "07" names no citation; a statement without a parsed edit, or one left with no
action, is 1.0.

Coefficients: the params (default: `edit2esitamted_rating` of the public release's
citeeval_config.json at full precision), or the JSON file citeeval_fit writes (`coefficients`
input) when given; either must give every action and the intercept as a finite number, else the
stage fails in one line naming the file.

Inputs: statements (citeeval_statements), ratings (citeeval_itercoe), coefficients (optional JSON).
Outputs: distances (citeeval_editdist, one row per rating row).
Rejects: unknown_statement (a rating of a statement not in statements), bad_edit (a strict or reference
edit that is not a DELETE or ADD of a citation for reason 1-3: citeeval_itercoe writes none).
Params: coefficients.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from stages.citeeval.citeeval import ACTIONS, ADD_REASONS, DELETE_REASONS, PUBLIC_COEFFICIENTS, eq3
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "4"  # 3: coefficients must be finite numbers (NaN was accepted); 4: reference summed as citation_rater.py


def final_states(originals: list, edits: list[dict]) -> tuple[dict, int]:
    """Each citation's action after the edits (citation key -> action name), and the ignored
    edits. Keys are compared as given: ints in strict, the public code's strings in reference."""
    state = {c: "keep" for c in originals}
    original = set(state)
    ignored = 0
    for edit in edits:
        c = edit["citation"]
        if edit["op"] == "DELETE":
            if c not in state:
                ignored += 1
            elif c in original:
                state[c] = DELETE_REASONS[edit["reason"]]
            else:  # deleting what was added: the addition is undone
                del state[c]
        else:
            if c in original:
                ignored += state[c] == "keep"
                state[c] = "keep"
            elif c in state:
                ignored += 1
            else:
                state[c] = ADD_REASONS[edit["reason"]]
    return state, ignored


def action_counts(states: dict[int, str]) -> dict[str, int]:
    counts = dict.fromkeys(ACTIONS, 0)
    for action in states.values():
        counts[action] += 1
    return counts


def editdist(citations: list[int], edits: list[dict], coefficients: dict[str, float]) -> tuple[float, dict[str, int], int]:
    """Strict Eq. 3 over the strict edits: (rating, action counts, ignored edits)."""
    states, ignored = final_states(citations, edits)
    counts = action_counts(states)
    return eq3(counts, coefficients), counts, ignored


def editdist_reference(citations: list[int], edits: list[dict], coefficients: dict[str, float]) -> float:
    """The public implementation's rating over the public parser's edits (string citation ids):
    originals keyed str(k + 1), 1.0 without edits or actions; each citation's coefficient summed in
    the order of its citation2rating (originals, then additions), / n, + the intercept."""
    if not edits:
        return 1.0
    states, _ = final_states([str(c + 1) for c in citations], edits)
    if not states:
        return 1.0
    total = 0.0  # its arithmetic, in its order (the same value as Eq. 3 to the last bit): sum, / n, + b
    for action in states.values():
        total += coefficients[action]
    return total / len(states) + coefficients["intercept"]


def load_coefficients(ctx) -> dict[str, float]:
    """The params' coefficients, or those of the citeeval_fit output given as `coefficients`; fails
    in one line naming the file (or the params) unless every action and the intercept is a finite number."""
    where = "the params"
    coefficients = ctx.params["coefficients"]
    if ctx.has_input("coefficients"):
        where = path = ctx.input_path("coefficients")
        try:
            fitted = json.loads(Path(path).read_text(encoding="utf-8-sig"))
        except (OSError, ValueError) as err:  # ValueError: not UTF-8, not JSON
            raise StageError(f"coefficients {path}: not a citeeval_fit output: {err}") from None
        coefficients = fitted.get("coefficients") if isinstance(fitted, dict) else None
        if not isinstance(coefficients, dict):
            raise StageError(f"coefficients {path}: not a citeeval_fit output: needs an object with a \"coefficients\" object")
    bad = [k for k in (*ACTIONS, "intercept") if not _finite(coefficients.get(k))]
    if bad:
        raise StageError(f"coefficients of {where}: {bad} are missing or not finite numbers")
    return coefficients


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def run(ctx):
    coefficients = load_coefficients(ctx)
    ctx.stats["coefficients_from_fit"] = int(ctx.has_input("coefficients"))
    citations = {s["id"]: s["citations"] for s in ctx.read_rows("statements")}
    for row in ctx.read_rows("ratings"):
        with ctx.item(row["id"]):
            if row["id"] not in citations:
                raise Reject("unknown_statement", "no statements row for this rating")
            bad = [e for e in [*(row["edits"] or []), *row["reference_edits"]]
                   if e["op"] not in ("DELETE", "ADD") or e["reason"] not in DELETE_REASONS or e["citation"] is None]
            if bad:
                raise Reject("bad_edit", f"edits {bad[:3]} are not DELETE/ADD of a citation for reason 1-3")
            cited = citations[row["id"]]
            counts, strict, ignored = dict.fromkeys(ACTIONS), None, None
            if row["edits"] is not None:
                strict, counts, ignored = editdist(cited, row["edits"], coefficients)
                ctx.stats["ignored_edits"] += ignored
            ctx.stats["strict_missing"] += strict is None
            ctx.write("distances", [{
                "id": row["id"], "response_id": row["response_id"], "model": row["model"], "sentence_id": row["sentence_id"],
                **counts, "n_actions": None if strict is None else sum(counts.values()), "ignored_edits": ignored,
                "editdist": strict, "editdist_reference": editdist_reference(cited, row["reference_edits"], coefficients),
            }])


STAGE = Stage(
    name="citeeval_editdist",
    version=VERSION,
    doc=__doc__,
    inputs={
        "statements": Input("citeeval_statements from citeeval_prepare", table="citeeval_statements"),
        "ratings": Input("citeeval_itercoe: the edits", table="citeeval_itercoe"),
        "coefficients": Input("coefficients JSON from citeeval_fit (overrides the params)", optional=True, kind="file"),
    },
    outputs={"distances": Output("citeeval_editdist", "one row per rated statement")},
    params={"coefficients": Param(dict, dict(PUBLIC_COEFFICIENTS), "Eq. 3 distances d(a_k) of the seven actions and intercept b "
                                  "(default: the fit of CiteEval's public release)",
                                  fields={name: Param(float, help=f"d({name})" if name in ACTIONS else "b")
                                          for name in (*ACTIONS, "intercept")})},
    run=run,
    rejects={"unknown_statement": "a rating names a statement the prepared statements do not hold", "bad_edit": "an edit that is no DELETE/ADD with a reason 1-3"},
)

if __name__ == "__main__":
    STAGE.main()
