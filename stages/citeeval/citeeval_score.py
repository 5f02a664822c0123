"""CiteEval-Auto ratings per statement and response, Full and Cited scenarios, strict and
reference-compatible, and the meta-evaluation against human ratings (citeeval.txt §2.4 scenarios,
§4.2, Table 3 correlations, Table 4 |R| and M).

Statement: CiteEval-Auto = (ITERCOE + EDITDIST) / 2, both on [0, 1] (§4.2 ensemble; ITERCOE's
(r - 1) / 4, EDITDIST's Eq. 3). Response: the mean over its rated statements. Both components come
from one ITERCOE answer, so a statement has both or neither; the response rating of each component
follows the same rules.

Scenarios (§2.4):
- Full: the statements applicable for evaluation (context 2, retrieval; every cited statement is)
  count; an uncited one is rated by the model like any other (ITERCOE may add citations).
- Cited: only cited statements count; uncited ones are N/A whatever their context.

Edge cases (strict, the main numbers):
- A response none of whose statements counts and none of whose statements is an uncited
  retrieval statement (all query/response/model context, e.g. "No answer is found") is N/A in
  both scenarios: `not_applicable`, no rating, left out of the means and counted.
- Cited: a response with no cited statement but with uncited retrieval statements rates 0.0
  (`uncited_zero`): it had citable content and cited none.
- A counted statement without rating (its ITERCOE answer failed) makes the response `missing`;
  so does, in Full, an uncited statement without context (its attribution failed: it might have
  counted), and in Cited only when the response has no cited statement (it decides between N/A
  and 0.0). No partial means: a failure never raises or lowers a response's rating; missing
  responses are counted, never scored 0.

Reference-compatible (`mode` reference), CiteEval's public implementation: a statement without a
context is retrieval (its default category 2); a counted cited statement without ITERCOE rating
is 1.0; EDITDIST uses its `editdist_reference` (off-by-one citation keys, no edit = 1.0); in Full
an uncited retrieval statement is 0.0 without asking the model; a response with nothing to rate is
1.0, and in Cited one with uncited retrieval statements only is 0.0.

Statistics per response (Table 4): |R| statements, and the share M of statements without citation.

Meta-evaluation (given `human`: CSV or JSON lines with response_id, sentence_id and rating, a 1-5
Likert score or empty for N/A; normalised (r - 1) / 4): Pearson, Spearman and Kendall's tau between
CiteEval-Auto (and each component) and the human ratings, at statement level (statements where
both are present) and response level (human response rating = mean of the scenario's statements'
human ratings), per scenario and mode.

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
import csv
import json
from statistics import mean

from scipy.stats import kendalltau, pearsonr, spearmanr

from stages.core.citeeval import likert_to_unit
from stages.core.stage import Input, Output, Stage, StageError

VERSION = "1"
MEASURES = ("citeeval_auto", "itercoe", "editdist")
SCENARIOS = ("full", "cited")
MODES = ("strict", "reference")


def statement_values(statement: dict, context: dict | None, rating: dict | None, distance: dict | None, mode: str) -> dict:
    """One statement's ratings in one mode, and what the scenarios need to know about it."""
    cited = bool(statement["citations"])
    category = context["context"] if context else (2 if mode == "reference" else None)
    applicable = category == 2
    itercoe = editdist = None
    if applicable and mode == "reference" and not cited:
        itercoe = editdist = 0.0  # the public code rates an uncited retrieval statement 0, unasked
    elif applicable and rating is not None and distance is not None:
        itercoe, editdist = rating["itercoe"], distance["editdist" if mode == "strict" else "editdist_reference"]
    elif applicable and mode == "reference":
        itercoe = editdist = 1.0  # its default for a missing rating
    auto = (itercoe + editdist) / 2 if itercoe is not None and editdist is not None else None
    return {"itercoe": itercoe, "editdist": editdist, "citeeval_auto": auto, "cited": cited, "applicable": applicable,
            "context": category if context else None, "context_missing": category is None,
            "uncited_retrieval": applicable and not cited}


def response_rating(values: list[dict], scenario: str, mode: str) -> tuple[str, dict]:
    """(status, {measure: rating}) of one response from its statements' values."""
    counted = [v for v in values if counts_in(v, scenario)]
    undecided = any(v["context_missing"] for v in values)  # an uncited statement whose attribution failed
    if not counted:
        if scenario == "cited" and any(v["uncited_retrieval"] for v in values):
            return "uncited_zero", dict.fromkeys(MEASURES, 0.0)
        if undecided:
            return "missing", dict.fromkeys(MEASURES)
        return ("rated", dict.fromkeys(MEASURES, 1.0)) if mode == "reference" else ("not_applicable", dict.fromkeys(MEASURES))
    if (scenario == "full" and undecided) or any(v["citeeval_auto"] is None for v in counted):
        return "missing", dict.fromkeys(MEASURES)
    return "rated", {m: mean(v[m] for v in counted) for m in MEASURES}


def counts_in(v: dict, scenario: str) -> bool:
    return v["applicable"] and (scenario == "full" or v["cited"])


def read_human(path: str) -> dict[tuple[str, int], float | None]:
    try:
        with open(path, encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()] if path.endswith((".jsonl", ".json")) else list(csv.DictReader(fh))
        out = {}
        for row in rows:
            rating = row.get("rating")
            out[(str(row["response_id"]), int(row["sentence_id"]))] = (
                None if rating in (None, "", "null", "N/A") else likert_to_unit(float(rating)))
        return out
    except (OSError, ValueError, KeyError) as err:
        raise StageError(f"human ratings {path}: {err}") from None


def correlations(xs: list[float], ys: list[float]) -> dict:
    """Pearson, Spearman, Kendall (None when fewer than 3 pairs or a side is constant)."""
    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return {"pearson": None, "spearman": None, "kendall": None, "n": len(xs)}
    return {"pearson": float(pearsonr(xs, ys).statistic), "spearman": float(spearmanr(xs, ys).statistic),
            "kendall": float(kendalltau(xs, ys).statistic), "n": len(xs)}


def run(ctx):
    responses = ctx.read_rows("responses")
    contexts = {c["id"]: c for c in ctx.read_rows("contexts")}
    ratings = {r["id"]: r for r in ctx.read_rows("ratings")}
    distances = {d["id"]: d for d in ctx.read_rows("distances")}
    statements: dict[str, list[dict]] = collections.defaultdict(list)
    for s in ctx.read_rows("statements"):
        statements[s["response_id"]].append(s)
    human = read_human(ctx.input_path("human")) if ctx.has_input("human") else {}
    pairs: dict[tuple, tuple[list, list]] = collections.defaultdict(lambda: ([], []))
    summary: dict[tuple, list] = collections.defaultdict(list)
    for response in responses:
        ctx.add_input()
        rows = sorted(statements[response["id"]], key=lambda s: s["sentence_id"])
        n, uncited = len(rows), sum(1 for s in rows if not s["citations"])
        values = {mode: [statement_values(s, contexts.get(s["id"]), ratings.get(s["id"]), distances.get(s["id"]), mode) for s in rows]
                  for mode in MODES}
        humans = [human.get((response["id"], s["sentence_id"])) for s in rows]
        for s, strict, reference, h in zip(rows, values["strict"], values["reference"], humans):
            ctx.write("statements", [{
                "id": s["id"], "response_id": response["id"], "model": response["model"], "sentence_id": s["sentence_id"],
                "cited": strict["cited"], "context": strict["context"], "applicable": strict["applicable"],
                **{m: strict[m] for m in MEASURES}, **{f"{m}_reference": reference[m] for m in MEASURES}, "human": h,
            }])
        for mode in MODES:
            for scenario in SCENARIOS:
                for v, h in zip(values[mode], humans):
                    if h is not None and v["citeeval_auto"] is not None and counts_in(v, scenario):
                        for m in MEASURES:
                            pairs[(response["model"], "statement", scenario, mode, m)][0].append(v[m])
                            pairs[(response["model"], "statement", scenario, mode, m)][1].append(h)
                status, rating = response_rating(values[mode], scenario, mode)
                shown = [h for s, h in zip(rows, humans) if h is not None and (scenario == "full" or s["citations"])]
                human_rating = mean(shown) if shown else None
                ctx.stats[f"{scenario}_{mode}_{status}"] += 1
                ctx.write("responses", [{
                    "id": response["id"], "model": response["model"], "source": response["source"], "shown_as": response["mode"],
                    "scenario": scenario, "mode": mode, "status": status, **rating, "n_statements": n, "n_uncited": uncited,
                    "missing_ratio": uncited / n if n else None,
                    "n_counted": sum(1 for v in values[mode] if counts_in(v, scenario)), "human": human_rating,
                }])
                summary[(response["model"], scenario, mode)].append((status, rating, n, uncited))
                if human_rating is not None and rating["citeeval_auto"] is not None:
                    for m in MEASURES:
                        pairs[(response["model"], "response", scenario, mode, m)][0].append(rating[m])
                        pairs[(response["model"], "response", scenario, mode, m)][1].append(human_rating)
    for (model, scenario, mode), rows in summary.items():
        statuses = collections.Counter(status for status, _, _, _ in rows)
        figures = {m: [r[m] for _, r, _, _ in rows if r[m] is not None] for m in MEASURES}
        figures["statements_per_response"] = [n for _, _, n, _ in rows]
        figures["missing_citation_ratio"] = [u / n for _, _, n, u in rows if n]
        for metric, values_ in figures.items():
            ctx.write("summary", [{"model": model, "scenario": scenario, "mode": mode, "metric": metric,
                                   "value": mean(values_) if values_ else None, "n": len(values_)}])
        for status in ("rated", "not_applicable", "missing", "uncited_zero"):
            ctx.write("summary", [{"model": model, "scenario": scenario, "mode": mode, "metric": f"responses_{status}",
                                   "value": float(statuses[status]), "n": len(rows)}])
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
        "summary": Output("citeeval_summary", "means per scenario and mode", counted=False),
        "meta": Output("citeeval_meta", "correlations with human ratings", counted=False),
    },
    params={},
    run=run,
    invariant=_one_row_per_response_scenario_mode,
)

if __name__ == "__main__":
    STAGE.main()
