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
| empty question, reference answer or (locating) explanation | judged | rating -1 without a call (`public_judge_skips`) |
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

from stages.core.schema_check import read_json

SUPPORT_CREDIT = {0: 0.0, 1: 0.5, 2: 1.0}
SENTINEL = -1  # the reference scorer's answer_rating for a failed call or an empty response


def public_judge_skips(response: dict) -> bool:
    """Whether the public answer judge (eval_ans_acc/eval_response_acc.py) rates the response -1
    without a call: a field it sends that is empty after strip or not text (its `.strip()` fails,
    which it also rates -1): the question, the reference answer, the response, and for a locating
    question `meta_data.explanation`."""
    fields = [response.get("question"), response.get("answer"), response.get("response")]
    if response.get("question_type") == "locating":
        try:
            meta = read_json(response.get("meta_json") or "{}")
        except ValueError:
            meta = None
        fields.append(meta.get("explanation", "") if isinstance(meta, dict) else None)
    return any(not isinstance(value, str) or not value.strip() for value in fields)


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
    if cited:  # the public scorer's arithmetic, in its order (its floats to the last bit): sums over counts, in percent
        support = {j["sentence_id"]: j["score"] for j in judgements if j["kind"] == "support"}
        relevance = {(j["sentence_id"], j["item"]): j["score"] for j in judgements if j["kind"] == "relevance"}
        supports = [support.get(s["id"], 0) for s in cited]
        recall = (sum(supports) / len(supports) / 2) * 100
        per_sentence = [[relevance.get((s["id"], c), 0) for c in s["citations_as_written"]] for s in cited]
        precision = sum(sum(v) / len(v) for v in per_sentence) / len(per_sentence) * 100
        truth, pred = set(gold), set(predicted)
        hit = len(truth & pred)
        s_recall = hit / len(truth) * 100 if truth else 0.0
        s_precision = hit / len(pred) * 100 if pred else 0.0
        out.update(citation_recall=recall, citation_precision=precision, citation_f1=harmonic(recall / 100, precision / 100) * 100,
                   source_precision=s_precision, source_recall=s_recall, source_f1=harmonic(s_recall, s_precision),
                   source_em=100.0 if truth and truth == pred else 0.0)
    rating = SENTINEL if answer is None or answer["status"] == "empty_response" or answer["rating"] is None else answer["rating"]
    out["accuracy"] = 100 * rating / 2
    return out
