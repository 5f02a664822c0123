"""MCiteBench's metrics (mcitebench.txt §4, Figures 3-4; breakdowns as Tables 2 and 4), on a 0-100 scale.

Per response:
- Citation recall (C-R): each sentence that carries citations gets its Table 7 support judgement
  0 / 1 / 2 mapped to 0 / 0.5 / 1; the response's C-R is the mean over those sentences.
- Citation precision (C-P): each cited item of a sentence gets its Table 8 relevance 0 / 1; a
  sentence's precision is the mean over its distinct cited items, the response's C-P the mean over
  its cited sentences. Citations of items that are not in the input are 0 (judge_citations scores
  them without a call).
- Citation F1 (C-F1): harmonic mean of the response's C-R and C-P; the benchmark figure is the
  mean of per-response F1.
- Source precision / recall / F1 (S-P, S-R, S-F1): the response-level citation set (the union of
  all sentences' citations, items not in the input included, so they count as wrong) against the
  ground-truth set (Eq. 1-2). S-EM is 1 when the two sets are equal (Eq. 3).
- Accuracy (Acc): the Table 9 (explanation) or Table 10 (locating) rating 0 / 1 / 2 normalised to
  0 / 50 / 100.

Choices where the seed is silent (and where the reference scorer drops samples):
- Only sentences that carry citations enter C-R and C-P, as in the seed's sentence-citation pairs.
  A response with no citation at all is NOT dropped: its C-R, C-P and C-F1 are 0 (the task asks
  every sentence to cite) and its S-P, S-R, S-F1 and S-EM are 0.
- Duplicate citations count once (citations are sets, per sentence and per response); the reference
  mode scores each occurrence a sentence repeats, as MCiteBench's scorer does.
- A failed judge call is missing, never 0: the judge stages write no row for it (it is a reject
  with the raw answer), so a response's C-R is missing if any support judgement of its cited
  sentences is absent, its C-P if any relevance judgement is absent, its C-F1 if either is
  missing, its Acc if its answer judgement is absent. Means are over the responses where the
  metric is present; every summary row carries the count of responses missing it, and the report
  counts failed judge calls. S-F1 / S-EM never depend on a judge.

Scoring modes: the above is the `strict` mode. `scoring: reference` reproduces the aggregation of
MCiteBench's public scorer (stages/eval_mcitebench/mcitebench_metrics.py: a response without citations is
left out of the citation and source means, a failed judge call scores 0, a failed or empty answer
rating is its -1 sentinel, as is an answer whose question, reference or explanation is empty).
Values are stored unrounded; means are `sum / n`, as the public scorer's. The summary always holds both modes (column `scoring`), so the report
prints both; `scoring` chooses the mode of the per-response scores table and the report's headline.

Inputs: responses (eval_responses), citations (eval_citations), sentences (eval_sentences),
citation_judgements (eval_citation_judgements), answer_judgements (eval_answer_judgements), all
for one candidate model.
Outputs: scores (eval_scores, one row per response, in the chosen mode), summary (eval_summary,
not counted: means per scoring mode and grouping overall / type_source / question_type / source /
modality).
Rejects: not_parsed (split_citations has no row for the response), inconsistent_sentence (a sentence
row whose citations are not the distinct labels of its citations_as_written, in order: crafted input).
Params: scoring (strict | reference).
"""
from __future__ import annotations

import collections
from statistics import mean

from stages.eval_mcitebench.mcitebench_metrics import SUPPORT_CREDIT, harmonic, public_judge_skips, reference_scores, source_scores
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "4"  # 4: unrounded; reference in the public arithmetic, its -1 for an empty question, reference or explanation
SCORING = ("strict", "reference")

METRICS = [
    "citation_recall", "citation_precision", "citation_f1",
    "source_precision", "source_recall", "source_f1", "source_em", "accuracy",
]
def citation_scores(sentences: list[dict], judgements: list[dict]) -> dict:
    """C-R, C-P, C-F1 (0-1 scale, None = missing) of one response, and how many judgements are missing.

    `sentences`: rows with `id` and `citations`; `judgements`: rows with `sentence_id`, `kind`,
    `item` and `score`; a judgement that is absent (its call failed) is missing.
    """
    cited = [s for s in sentences if s["citations"]]
    if not cited:
        return {"recall": 0.0, "precision": 0.0, "f1": 0.0, "missing": 0}
    support = {j["sentence_id"]: j["score"] for j in judgements if j["kind"] == "support"}
    relevance = {(j["sentence_id"], j["item"]): j["score"] for j in judgements if j["kind"] == "relevance"}
    recalls, precisions, missing_r, missing_p = [], [], 0, 0
    for s in cited:
        score = support.get(s["id"])
        if score is None:
            missing_r += 1
        else:
            recalls.append(SUPPORT_CREDIT[score])
        items = list(dict.fromkeys(s["citations"]))
        rel = [relevance.get((s["id"], item)) for item in items]
        missing_p += sum(r is None for r in rel)
        if all(r is not None for r in rel):
            precisions.append(mean(rel))
    recall = mean(recalls) if not missing_r else None
    precision = mean(precisions) if not missing_p else None
    f1 = harmonic(precision, recall) if recall is not None and precision is not None else None
    return {"recall": recall, "precision": precision, "f1": f1, "missing": missing_r + missing_p}


def accuracy(rating: int | None) -> float | None:
    """Table 9/10 rating 0/1/2 normalised to 0-1; None stays missing."""
    return None if rating is None else rating / 2


def _pct(value: float | None) -> float | None:
    return None if value is None else 100 * value


def score_response(response: dict, parsed: dict, sentences: list[dict], judgements: list[dict], answer: dict | None,
                   scoring: str = "strict") -> dict:
    cit = citation_scores(sentences, judgements)
    rating = answer["rating"] if answer else None
    if scoring == "reference":
        metrics = reference_scores(sentences, judgements, parsed["citations"], response["gold"],
                                   None if public_judge_skips(response) else answer)
    else:
        src = source_scores(parsed["citations"], response["gold"])
        metrics = {
            "citation_recall": _pct(cit["recall"]),
            "citation_precision": _pct(cit["precision"]),
            "citation_f1": _pct(cit["f1"]),
            "source_precision": _pct(src["precision"]),
            "source_recall": _pct(src["recall"]),
            "source_f1": _pct(src["f1"]),
            "source_em": _pct(src["em"]),
            "accuracy": _pct(accuracy(rating)),
        }
    return {
        "id": response["id"],
        "model": response["model"],
        "question_id": response["question_id"],
        "question_type": response["question_type"],
        "source": response["source"],
        "modality": response["modality"],
        "n_cited_sentences": sum(1 for s in sentences if s["citations"]),
        **metrics,
        "missing_judgements": cit["missing"],
        "accuracy_missing": rating is None,
        "predicted": list(parsed["citations"]),
        "gold": list(response["gold"]),
    }


def _groups(row: dict) -> list[tuple[str, str]]:
    return [
        ("overall", "all"),
        ("type_source", f"{row['question_type']}/{row['source']}"),
        ("question_type", row["question_type"]),
        ("source", row["source"]),
        ("modality", row["modality"]),
    ]


def summarize(model: str, scores: list[dict], scoring: str = "strict") -> list[dict]:
    """Mean of every metric per group, with the number of responses scored and missing (strict) or
    left out (reference)."""
    buckets: dict[tuple[str, str], list[dict]] = collections.defaultdict(list)
    for row in scores:
        for key in _groups(row):
            buckets[key].append(row)
    out = []
    for (grouping, grp), rows in sorted(buckets.items()):
        for metric in METRICS:
            values = [r[metric] for r in rows if r[metric] is not None]
            out.append({
                "model": model, "scoring": scoring, "grouping": grouping, "grp": grp, "metric": metric,
                "value": sum(values) / len(values) if values else None,  # unrounded, as the public code averages (sum / n)
                "n": len(values), "missing": len(rows) - len(values),
            })
    return out


def run(ctx):
    if ctx.params["scoring"] not in SCORING:
        raise StageError(f"param scoring must be one of {list(SCORING)}, got {ctx.params['scoring']!r}")
    responses = ctx.read_rows("responses")
    parsed = {r["id"]: r for r in ctx.read_rows("citations")}
    sentences = collections.defaultdict(list)
    for s in ctx.read_rows("sentences"):
        sentences[s["response_id"]].append(s)
    judgements = collections.defaultdict(list)
    for j in ctx.read_rows("citation_judgements"):
        judgements[j["response_id"]].append(j)
        ctx.stats[f"citation_judgements_{j['status']}"] += 1
    answers = {}
    for a in ctx.read_rows("answer_judgements"):
        answers[a["id"]] = a
        ctx.stats[f"answer_judgements_{a['status']}"] += 1
    scores: dict[str, dict[str, dict]] = {}  # response id -> scoring mode -> row
    for response in responses:
        with ctx.item(response["id"]):
            if response["id"] not in parsed:
                raise Reject("not_parsed", "split_citations has no row for this response")
            for s in sentences[response["id"]]:  # split_citations writes the one from the other; a crafted row may not
                if s["citations"] != list(dict.fromkeys(s["citations_as_written"])):
                    raise Reject("inconsistent_sentence", f"sentence {s['id']}: citations {s['citations']} are not the distinct labels "
                                                          f"of citations_as_written {s['citations_as_written']}")
            args = (response, parsed[response["id"]], sentences[response["id"]], judgements[response["id"]], answers.get(response["id"]))
            row = score_response(*args)
            ctx.stats["missing_citation_judgements"] += row["missing_judgements"]
            ctx.stats["responses_missing_citation_scores"] += row["citation_f1"] is None
            ctx.stats["responses_missing_accuracy"] += row["accuracy_missing"]
            scores[response["id"]] = {"strict": row, "reference": score_response(*args, scoring="reference")}
    ctx.stats["reference_left_out_uncited"] = sum(1 for s in scores.values() if s["reference"]["citation_f1"] is None)
    ctx.write("scores", [s[ctx.params["scoring"]] for s in scores.values()])
    models = sorted({r["model"] for r in responses})
    for model in models:
        for scoring in SCORING:
            ctx.write("summary", summarize(model, [s[scoring] for s in scores.values() if s[scoring]["model"] == model], scoring))


STAGE = Stage(
    name="score_mcitebench",
    version=VERSION,
    doc=__doc__,
    inputs={
        "responses": Input("eval_responses of one model", table="eval_responses"),
        "citations": Input("eval_citations from split_citations", table="eval_citations"),
        "sentences": Input("eval_sentences from split_citations", table="eval_sentences"),
        "citation_judgements": Input("eval_citation_judgements from judge_citations", table="eval_citation_judgements"),
        "answer_judgements": Input("eval_answer_judgements from judge_answers", table="eval_answer_judgements"),
    },
    outputs={
        "scores": Output("eval_scores", "one row per response"),
        "summary": Output("eval_summary", "means per group", counted=False),
    },
    params={"scoring": Param(str, "strict", "strict (our documented choices) or reference (MCiteBench's public scorer's aggregation): the per-response scores' mode",
                             choices=SCORING)},
    run=run,
    rejects={"not_parsed": "split_citations has no row for the response",
             "inconsistent_sentence": "a sentence whose citations are not the distinct labels of its citations_as_written"},
)

if __name__ == "__main__":
    STAGE.main()
