"""CiteEval-Auto ratings per statement and response, Full and Cited scenarios, strict and
reference-compatible, system scores at statement and response level, and the meta-evaluation
against human ratings (citeeval.txt §2.4 scenarios, §4.2, Table 3 correlations, Table 4 |R| and M).

Statement: CiteEval-Auto = (ITERCOE + EDITDIST) / 2, both on [0, 1] (§4.2 ensemble; ITERCOE's
(r - 1) / 4, EDITDIST's Eq. 3). Response: the mean over the statements the scenario counts.

Scenarios (§2.4): Full counts every statement that requires a citation (context 2, retrieval; in
strict a cited statement too only when the judge attributes it to retrieval, §4.1-4.2; in
reference every cited one), "amongst which the uncited ones are penalized": an uncited one scores
0 (ITERCOE = EDITDIST = 0, no judge rating asked). Cited counts only cited statements; uncited ones
are N/A whatever their context.

Strict (the paper's formula, our documented policies):
- A response with nothing that counts (all query/response/model context, e.g. "No answer is
  found") is `not_applicable`: no rating, left out of the means, counted.
- Cited: a response with no cited statement is `not_applicable` too, whatever its uncited
  statements' contexts: "statements without citations, no matter whether citable, are treated as
  N/A" (§2.4). (The public code rates it 0.0 when one of them needed a citation: reference mode.)
- An `empty` response (no statement left after the thinking block) has no rating, counted.
- A counted cited statement whose ITERCOE answer failed or was invalid makes the response
  `missing`; so does a statement without context that might have counted (its attribution
  failed): in Full any, in Cited a cited one (an uncited one is N/A there either way). No partial means: missing responses are
  counted, never scored 0.
- System scores: the response-level mean over rated responses, and beside it the statement-level
  mean over the counted statements of those responses (each response weighs its counted
  statements; `statement_weight`).

Reference-compatible (`mode` reference), CiteEval's public code (rating_utils.rate,
evaluate_all_systems.py), statement by statement:
- ratings from the public parsers' readings of the same judge answers (citeeval_context,
  citeeval_itercoe): a cited statement's ITERCOE is (r - 1) / 4 of its rating tag (unclamped), 1.0
  when its tag was lost; EDITDIST is `editdist_reference`; an uncited statement of context 2 (the
  public default for a lost tag) is 0.0, any other context N/A;
- a response is the mean of its non-N/A statements, 1.0 when all are N/A; in Cited, uncited
  statements are masked, and a response whose statements are all masked or N/A, at least one
  masked, is 0.0;
- a response the public "no answer" regex matches is one uncited statement "No answer is found."
  of context 3 (the prompt's tie rule): 1.0, one statement (`no_answer`);
- an empty response has no statement and rates 1.0 (`empty`): in the response-level mean, not in
  the statement-level one;
- system score: the statement-level mean (the evaluate_all_systems.py default): every statement of
  every response, an N/A one standing in with its response's rating, i.e. responses weighted by
  their statement count; the response-level mean (its --response_level) beside it;
- |R| counts every response (empty ones as 0) and M is 1 minus the mean cited share, an empty
  response's share being 0.
Where the public code cannot be followed: a failed judge call (no answer text) never yields a
rating (`missing`; the public code would rate an exception string), and a response with an
unclosed `<thinking>` that the regex does not rewrite is `missing` (the public code rates its
thinking text, which has no statements here).

Statistics per response (Table 4): |R| statements, and the share M of statements without citation.

Meta-evaluation (given `human`: CSV or JSON lines, UTF-8 with an optional byte-order mark, with
response_id, sentence_id and rating, a 1-5 Likert score or empty for N/A; normalised (r - 1) / 4):
Pearson, Spearman and Kendall's tau between
CiteEval-Auto (and each component) and the human ratings, at statement level (statements where
both are present) and response level (human response rating = mean of the scenario's statements'
human ratings), per scenario and mode.

Human ratings rows are checked, each bad one a reject named `human line <n>` (they are not
responses: rows in counts responses only, the invariant is per response): `human_bad_row` (not an
object with the three fields, a sentence_id that is not a whole number >= 1), `human_bad_rating`
(not 1-5 or empty), `human_duplicate` (a statement rated on several rows: every one of them, none
taken); the ratings taken are counted in the stats (`human_ratings`), and so are the rows of
statements these responses do not have (`human_ratings_of_other_responses`: the file goes to every
citeeval_score job, one per evaluation read). An empty file, a CSV without the three columns or
one none of whose rows can be read fails in one line.

Inputs: responses (citeeval_prepared), statements, contexts, ratings (citeeval_itercoe), distances
(citeeval_editdist), human (optional file).
Outputs: responses (citeeval_response_scores: one row per response, scenario and mode; counted
as one per response), statements (citeeval_statement_scores), summary (citeeval_summary), meta
(citeeval_meta). The summary and the meta-evaluation are per `model` value of the responses: one
input may hold several (a CiteEval file's systems; an evaluation's configurations, e.g. MAVIS's
"<model> [setting, method]").
"""
from __future__ import annotations

import collections
import math
from statistics import mean

from scipy.stats import kendalltau, pearsonr, spearmanr

from stages.citeeval.citeeval import STATUSES, likert_to_unit, read_ratings_file
from stages.core.stage import Input, Output, Reject, Stage, StageError

VERSION = "4"  # 4: a cited statement without a context makes a Cited response missing (strict attributes cited statements too)
MEASURES = ("citeeval_auto", "itercoe", "editdist")
SCENARIOS = ("full", "cited")
MODES = ("strict", "reference")


def _value(cited: bool, requires: bool, undecided: bool, itercoe: float | None, editdist: float | None) -> dict:
    auto = (itercoe + editdist) / 2 if itercoe is not None and editdist is not None else None
    return {"cited": cited, "requires": requires, "undecided": undecided, "itercoe": itercoe, "editdist": editdist,
            "citeeval_auto": auto}


def strict_statement(statement: dict, context: dict | None, rating: dict | None, distance: dict | None) -> dict:
    cited = bool(statement["citations"])
    category = context["context"] if context else None
    requires = category == 2
    itercoe = editdist = None
    if requires and not cited:
        itercoe = editdist = 0.0  # §2.4 Full: penalised, not rated
    elif requires and rating and distance and rating["itercoe"] is not None and distance["editdist"] is not None:
        itercoe, editdist = rating["itercoe"], distance["editdist"]
    return _value(cited, requires, category is None, itercoe, editdist)


def reference_statement(statement: dict, context: dict | None, rating: dict | None, distance: dict | None) -> dict:
    cited = bool(statement["citations"])
    if cited:  # always evaluated; a failed call (no row) has no answer to read
        if rating is None or distance is None:
            return _value(True, True, False, None, None)
        r = rating["reference_rating"]
        return _value(True, True, False, 1.0 if r is None else (r - 1) * 0.25, distance["editdist_reference"])
    requires = context is not None and context["reference_context"] == 2
    return _value(False, requires, context is None, 0.0 if requires else None, 0.0 if requires else None)


def _rated(counted: list[dict]) -> tuple[str, dict]:
    if any(v["citeeval_auto"] is None for v in counted):
        return "missing", dict.fromkeys(MEASURES)
    return "rated", {m: sum(v[m] for v in counted) / len(counted) for m in MEASURES}  # sum / n, as the public code


def strict_response(values: list[dict], scenario: str, empty: bool) -> tuple[str, dict, int]:
    """(status, {measure: rating}, statement weight) of one response in strict mode."""
    none = dict.fromkeys(MEASURES)
    if empty:
        return "empty", none, 0
    counted = [v for v in values if counts_in(v, scenario)]
    # a statement whose context is unknown may count: in Cited only a cited one (uncited statements
    # are N/A whatever their context, §2.4)
    undecided = any(v["undecided"] and (scenario == "full" or v["cited"]) for v in values)
    if undecided:
        return "missing", none, 0
    if not counted:
        return "not_applicable", none, 0
    status, rating = _rated(counted)
    return status, rating, len(counted) if status == "rated" else 0


def reference_response(values: list[dict], scenario: str, response: dict) -> tuple[str, dict, int]:
    """(status, {measure: rating}, statement weight) of one response as the public code rates it."""
    one = dict.fromkeys(MEASURES, 1.0)
    if response["no_answer_reference"]:
        return "no_answer", one, 1
    if response["thinking_unclosed"]:
        return "missing", dict.fromkeys(MEASURES), 0
    if not values:
        return "empty", one, 0
    kept = [v for v in values if counts_in(v, scenario)]
    if kept:
        if scenario == "full" and any(v["undecided"] for v in values):
            return "missing", dict.fromkeys(MEASURES), 0
        status, rating = _rated(kept)
        return status, rating, len(values) if status == "rated" else 0
    if any(v["undecided"] for v in values):
        return "missing", dict.fromkeys(MEASURES), 0
    if scenario == "cited" and any(v["requires"] for v in values):  # all masked or N/A, at least one masked
        return "uncited_zero", dict.fromkeys(MEASURES, 0.0), len(values)
    return "not_applicable", one, len(values)


def counts_in(v: dict, scenario: str) -> bool:
    return v["requires"] and (scenario == "full" or v["cited"])


def statistics(values: list[dict], mode: str, response: dict) -> tuple[int, int, float | None]:
    """|R|, uncited statements and M of one response in one mode."""
    if mode == "reference" and response["no_answer_reference"]:
        return 1, 1, 1.0
    n, uncited = len(values), sum(1 for v in values if not v["cited"])
    if n == 0:
        return 0, 0, (1.0 if mode == "reference" else None)  # the public cited share of an empty response is 0
    return n, uncited, uncited / n


HUMAN_COLUMNS = ("response_id", "sentence_id", "rating")
NOT_RATED = (None, "", "null", "N/A")  # a rating left empty: the statement is N/A


def human_rows(path: str) -> list[tuple[int, object]]:
    """(line, row) of a human ratings file (`read_ratings_file`); one without a row fails in one line."""
    rows = read_ratings_file(path, "human ratings", HUMAN_COLUMNS)
    if not rows:
        raise StageError(f"human ratings {path}: no rating rows")
    return rows


def _whole(value) -> int | None:
    """A sentence id: a whole number (1, 1.0, "1"), else None (1.7, true, null)."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def human_rating(row) -> tuple[tuple[str, int], float | None]:
    """((response_id, sentence_id), rating on [0, 1] or None for N/A) of one row; Reject naming
    the field otherwise."""
    if isinstance(row, ValueError):
        raise Reject("human_bad_row", f"not JSON: {row}")
    if not isinstance(row, dict):
        raise Reject("human_bad_row", f"a JSON {type(row).__name__}, not an object")
    absent = [c for c in HUMAN_COLUMNS if c not in row]
    if absent:
        raise Reject("human_bad_row", f"lacks {absent} (an N/A rating is null or empty)")
    response_id, sentence_id, rating = (row[c] for c in HUMAN_COLUMNS)
    if isinstance(response_id, int) and not isinstance(response_id, bool):
        response_id = str(response_id)
    if not isinstance(response_id, str) or not response_id.strip():
        raise Reject("human_bad_row", f"response_id {response_id!r:.80} is not an id")
    number = _whole(sentence_id)
    if number is None or number < 1:
        raise Reject("human_bad_row", f"sentence_id {sentence_id!r:.80} is not a whole number >= 1")
    key = (response_id.strip(), number)
    if rating in NOT_RATED:
        return key, None
    try:
        value = float(rating) if isinstance(rating, (int, float, str)) and not isinstance(rating, bool) else math.nan
    except (ValueError, OverflowError):
        value = math.nan
    if not 1 <= value <= 5:  # NaN fails too
        raise Reject("human_bad_rating", f"rating {rating!r:.80} is not a 1-5 score (or empty for N/A)")
    return key, likert_to_unit(value)


def read_human(ctx, path: str, statements: set[tuple[str, int]]) -> dict[tuple[str, int], float | None]:
    """(response_id, sentence_id) -> human rating on [0, 1] (None: N/A) from the human ratings file.
    A row that cannot be read, whose rating is off the scale, or that rates a statement another row
    rates too (each such row: which is meant is unknown) is rejected with its line; a file none of
    whose rows can be read fails in one line. The file goes to every citeeval_score job (one per
    evaluation read), so a row of another job's responses is only counted."""
    found: dict[tuple[str, int], list[tuple[int, float | None]]] = collections.defaultdict(list)
    problems = []
    elsewhere = 0
    for line, row in human_rows(path):
        try:
            key, rating = human_rating(row)
        except Reject as rejected:
            problems.append((line, rejected.reason, rejected.detail))
            continue
        if key in statements:
            found[key].append((line, rating))
        else:
            elsewhere += 1
    for (response_id, sentence_id), given in found.items():
        if len(given) > 1:
            lines = [line for line, _ in given]
            problems += [(line, "human_duplicate", f"response {response_id!r:.80} sentence {sentence_id} is rated on lines {lines}: none is taken")
                         for line in lines]
    human = {key: given[0][1] for key, given in found.items() if len(given) == 1}
    if not found and not elsewhere:
        counts = collections.Counter(reason for _, reason, _ in problems)
        line, _, detail = problems[0]
        raise StageError(f"human ratings {path}: no row can be read ({dict(counts)}; line {line}: {detail})")
    for line, reason, detail in sorted(problems):
        ctx.reject(f"human line {line}", reason, detail)
    ctx.stats["human_ratings"] = len(human)
    ctx.stats["human_ratings_of_other_responses"] = elsewhere
    return human


def correlations(xs: list[float], ys: list[float]) -> dict:
    """Pearson, Spearman, Kendall (None when fewer than 3 pairs or a side is constant)."""
    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return {"pearson": None, "spearman": None, "kendall": None, "n": len(xs)}
    return {"pearson": float(pearsonr(xs, ys).statistic), "spearman": float(spearmanr(xs, ys).statistic),
            "kendall": float(kendalltau(xs, ys).statistic), "n": len(xs)}


def system_scores(rows: list[dict]) -> list[tuple[str, float | None, int]]:
    """(metric, value, n) of one model, scenario and mode from its response rows: per measure the
    response-level mean and the statement-level (weighted) mean, |R|, M and the status counts."""
    out = []
    for m in MEASURES:
        rated = [r for r in rows if r[m] is not None]
        out.append((m, sum(r[m] for r in rated) / len(rated) if rated else None, len(rated)))
        weight = sum(r["statement_weight"] for r in rated)
        out.append((f"{m}_statement", sum(r[m] * r["statement_weight"] for r in rated) / weight if weight else None, weight))
    out.append(("statements_per_response", mean(r["n_statements"] for r in rows) if rows else None, len(rows)))
    ratios = [r["missing_ratio"] for r in rows if r["missing_ratio"] is not None]
    out.append(("missing_citation_ratio", mean(ratios) if ratios else None, len(ratios)))
    statuses = collections.Counter(r["status"] for r in rows)
    out += [(f"responses_{status}", float(statuses[status]), len(rows)) for status in STATUSES]
    return out


def run(ctx):
    responses = ctx.read_rows("responses")
    contexts = {c["id"]: c for c in ctx.read_rows("contexts")}
    ratings = {r["id"]: r for r in ctx.read_rows("ratings")}
    distances = {d["id"]: d for d in ctx.read_rows("distances")}
    statements: dict[str, list[dict]] = collections.defaultdict(list)
    for s in ctx.read_rows("statements"):
        statements[s["response_id"]].append(s)
    known = {(r["id"], s["sentence_id"]) for r in responses for s in statements[r["id"]]}
    human = read_human(ctx, ctx.input_path("human"), known) if ctx.has_input("human") else {}
    pairs: dict[tuple, tuple[list, list]] = collections.defaultdict(lambda: ([], []))
    by_group: dict[tuple, list[dict]] = collections.defaultdict(list)
    for response in responses:
        ctx.add_input()
        rows = sorted(statements[response["id"]], key=lambda s: s["sentence_id"])
        found = [(s, contexts.get(s["id"]), ratings.get(s["id"]), distances.get(s["id"])) for s in rows]
        values = {"strict": [strict_statement(*f) for f in found], "reference": [reference_statement(*f) for f in found]}
        # the public code reads a rewritten or unclosed-thinking response as other statements than ours
        ours = not (response["no_answer_reference"] or response["thinking_unclosed"])
        humans = [human.get((response["id"], s["sentence_id"])) for s in rows]
        for s, strict, reference, h in zip(rows, values["strict"], values["reference"], humans):
            ctx.write("statements", [{
                "id": s["id"], "response_id": response["id"], "model": response["model"], "sentence_id": s["sentence_id"],
                "cited": strict["cited"], "context": (contexts.get(s["id"]) or {}).get("context"), "applicable": strict["requires"],
                **{m: strict[m] for m in MEASURES}, **{f"{m}_reference": reference[m] if ours else None for m in MEASURES}, "human": h,
            }])
        for mode in MODES:
            n, uncited, missing_ratio = statistics(values[mode], mode, response)
            for scenario in SCENARIOS:
                if mode == "strict":
                    status, rating, weight = strict_response(values[mode], scenario, response["empty"])
                else:
                    status, rating, weight = reference_response(values[mode], scenario, response)
                if mode == "strict" or ours:
                    for v, h in zip(values[mode], humans):
                        if h is not None and v["citeeval_auto"] is not None and counts_in(v, scenario):
                            for m in MEASURES:
                                pairs[(response["model"], "statement", scenario, mode, m)][0].append(v[m])
                                pairs[(response["model"], "statement", scenario, mode, m)][1].append(h)
                shown = [h for s, h in zip(rows, humans) if h is not None and (scenario == "full" or s["citations"])]
                human_rating = mean(shown) if shown else None
                ctx.stats[f"{scenario}_{mode}_{status}"] += 1
                row = {
                    "id": response["id"], "model": response["model"], "source": response["source"], "shown_as": response["mode"],
                    "scenario": scenario, "mode": mode, "status": status, **rating, "statement_weight": weight,
                    "n_statements": n, "n_uncited": uncited, "missing_ratio": missing_ratio,
                    "n_counted": sum(1 for v in values[mode] if counts_in(v, scenario)), "human": human_rating,
                }
                ctx.write("responses", [row])
                by_group[(response["model"], scenario, mode)].append(row)
                if human_rating is not None and rating["citeeval_auto"] is not None:
                    for m in MEASURES:
                        pairs[(response["model"], "response", scenario, mode, m)][0].append(rating[m])
                        pairs[(response["model"], "response", scenario, mode, m)][1].append(human_rating)
    for (model, scenario, mode), rows in by_group.items():
        ctx.write("summary", [{"model": model, "scenario": scenario, "mode": mode, "metric": metric, "value": value, "n": n}
                              for metric, value, n in system_scores(rows)])
    for (model, level, scenario, mode, m), (xs, ys) in sorted(pairs.items()):
        ctx.write("meta", [{"model": model, "level": level, "scenario": scenario, "mode": mode, "measure": m, **correlations(xs, ys)}])


def _one_row_per_response_scenario_mode(ctx):
    expected = ctx.rows_in * len(SCENARIOS) * len(MODES)
    if ctx.rows_out("responses") != expected:
        return f"{ctx.rows_in} responses should give {expected} response_scores rows, got {ctx.rows_out('responses')}"
    return None


STAGE = Stage(
    name="citeeval_score",
    version=VERSION,
    doc=__doc__,
    inputs={
        "responses": Input("citeeval_prepared", table="citeeval_prepared"),
        "statements": Input("citeeval_statements", table="citeeval_statements"),
        "contexts": Input("citeeval_contexts", table="citeeval_contexts"),
        "ratings": Input("citeeval_itercoe", table="citeeval_itercoe"),
        "distances": Input("citeeval_editdist", table="citeeval_editdist"),
        "human": Input("human ratings: response_id, sentence_id, rating (CSV or JSON lines)", optional=True, kind="file"),
    },
    outputs={
        "responses": Output("citeeval_response_scores", "one row per response, scenario and mode"),
        "statements": Output("citeeval_statement_scores", "one row per statement", counted=False),
        "summary": Output("citeeval_summary", "system scores per scenario and mode", counted=False),
        "meta": Output("citeeval_meta", "correlations with human ratings", counted=False),
    },
    params={},
    run=run,
    invariant=_one_row_per_response_scenario_mode,
    rejects={
        "human_bad_row": "a human ratings row that is not an object with response_id, sentence_id (a whole number >= 1) and rating",
        "human_bad_rating": "a human rating that is not a 1-5 score (nor empty for N/A)",
        "human_duplicate": "a statement rated on more than one row of the human ratings: none of them is taken",
    },
)

if __name__ == "__main__":
    STAGE.main()
