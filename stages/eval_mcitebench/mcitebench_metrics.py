"""MCiteBench's metric formulas (mcitebench.txt §4, Eq. 1-3) shared by score_mcitebench's two
aggregations, and the reference aggregation: MCiteBench's public scorer's, reproduced so that our
numbers can be set beside the paper's (`scoring: reference`, Table 2).

Our documented strict mode (score_mcitebench) and the reference scorer agree on the per-sentence
formulas (support 0/1/2 -> 0/0.5/1, relevance 0/1, harmonic means, source sets) and differ in what
enters a mean:

| case | strict (ours) | reference |
|---|---|---|
| response without any citation (or empty) | kept: C-R, C-P, C-F1, S-P, S-R, S-F1, S-EM all 0 | dropped from the citation and the source means |
| failed citation judge call | the response's C-R / C-P / C-F1 missing | scored 0 |
| failed answer judge call | Acc missing | rating -1 (the scorer's sentinel), i.e. -50 in the mean |
| empty response | Acc 0 (rated 0 without a call) | rating -1: -50 in the mean |
| a citation repeated in a sentence ("[1][1][3]") | counts once: C-P of the distinct items | each occurrence scored: C-P (1 + 1 + 0) / 3 |

Read from the public scorer (evaluation/eval_citation_f1_source_f1_em: judge_entailment.py,
calculate_citation_source_score.py; eval_ans_acc): its extraction lists a sentence's citations as
written, repeats kept, and judge_entailment.py scores relevance once per listed citation, so a
sentence's precision is the mean over occurrences (`citations_as_written`); support is one
judgement of the sentence's items (a repeated item shown twice to its judge; ours shows it once);
an item that is not in the input scores 0 in both; a sentence none of whose items is in the input
has support 0. Citation strings the extraction would list but our grammar does not read (sections,
"Line 3") are not citations here. The source metrics use sets, so repeats never matter there.
Aggregation: the public tables hold explanation/single, explanation/multi and locating/single
(our `type_source` groups of those names are value for value the same; the other groups are ours).

`reference_scores(...)` gives one response's metrics on the 0-100 scale; None means the reference
scorer leaves the response out of that mean.
"""
from __future__ import annotations

from statistics import mean

SUPPORT_CREDIT = {0: 0.0, 1: 0.5, 2: 1.0}
SENTINEL = -1  # the reference scorer's answer_rating for a failed call or an empty response


def harmonic(p: float, r: float) -> float:
    return 0.0 if p + r == 0 else 2 * p * r / (p + r)


def source_scores(predicted: list[str], gold: list[str]) -> dict:
    """S-P, S-R, S-F1, S-EM (0-1 scale) of a response-level citation set against the ground truth."""
    pred, truth = set(predicted), set(gold)
    hit = len(pred & truth)
    precision = hit / len(pred) if pred else 0.0
    recall = hit / len(truth) if truth else 0.0
    return {"precision": precision, "recall": recall, "f1": harmonic(precision, recall),
            "em": 1.0 if truth and pred == truth else 0.0}


def reference_scores(sentences: list[dict], judgements: list[dict], predicted: list[str], gold: list[str],
                     answer: dict | None) -> dict:
    """One response under the reference aggregation (0-100; None = left out of the mean).

    `sentences`: rows with `id`, `citations` and `citations_as_written`; `judgements`: rows with
    `sentence_id`, `kind`, `item`, `score` (a failed call has no row and scores 0); `answer`: the
    answer judgement row (`rating`, `status`) or None when the call failed.
    """
    cited = [s for s in sentences if s["citations"]]
    out: dict[str, float | None] = dict.fromkeys(
        ("citation_recall", "citation_precision", "citation_f1", "source_precision", "source_recall", "source_f1", "source_em"))
    if cited:
        support = {j["sentence_id"]: j["score"] for j in judgements if j["kind"] == "support"}
        relevance = {(j["sentence_id"], j["item"]): j["score"] for j in judgements if j["kind"] == "relevance"}
        recall = mean(SUPPORT_CREDIT[support.get(s["id"], 0)] for s in cited)
        precision = mean(mean(relevance.get((s["id"], c), 0) for c in s["citations_as_written"]) for s in cited)
        src = source_scores(predicted, gold)
        out.update(citation_recall=100 * recall, citation_precision=100 * precision, citation_f1=100 * harmonic(precision, recall),
                   source_precision=100 * src["precision"], source_recall=100 * src["recall"], source_f1=100 * src["f1"],
                   source_em=100 * src["em"])
    rating = SENTINEL if answer is None or answer["status"] == "empty_response" or answer["rating"] is None else answer["rating"]
    out["accuracy"] = 100 * rating / 2
    return out
