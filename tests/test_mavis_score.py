"""MAVIS metrics (mavis.txt §4) on hand-made answers with fixed judge labels; every expected number
is worked out by hand in the test. Plus MAUVE on precomputed features against the package itself."""
from __future__ import annotations

import numpy as np
import pytest

from stages.core.mavis_eval import (harmonic, label_score, parse_citations, plain_text, remove_thinking, response_scores,
                                    split_sentences)
from stages.eval_mavis.mavis_generate_queries import parse_queries
from stages.eval_mavis.mavis_score import mauve_value, statistics


def sentences_of(answer: str, n_documents: int) -> list[dict]:
    out = []
    for i, sentence in enumerate(split_sentences(answer)):
        cited, unknown, _ = parse_citations(sentence, n_documents)
        out.append({"index": i, "cited": cited, "unknown": unknown})
    return out


# 3 documents. s0: one document cited twice; s1: document 2 and a document 5 that does not exist;
# s2: no citation; s3: two documents in one bracket.
ANSWER = ("Tomatoes need nitrogen [1][1]. Water them at the base [2][5]. They are lovely plants. "
          "Yellow lower leaves show a deficiency [1, 3].")
RELEVANCE = {0: 1.0, 1: 0.5, 2: 0.0, 3: 1.0}
SUPPORT = {0: 1.0, 1: 0.5, 3: 0.5}  # all cited documents together (Table 12)
SUPPORT_DOC = {(0, 1): 1.0, (1, 2): 1.0, (3, 1): 1.0, (3, 3): 0.0}  # each cited document alone
FACTS = [1.0, 0.5, 0.0]


def test_sentences_and_citations_parse_as_documented():
    sents = sentences_of(ANSWER, 3)
    assert [(s["cited"], s["unknown"]) for s in sents] == [([1], []), ([2], [5]), ([], []), ([1, 3], [])]
    assert parse_citations("A [12] b [0] c [1, 2] [2]; d [3; 1].", 12) == ([12, 1, 2, 3], [0], [12, 0, 1, 2, 2, 3, 1])
    assert parse_citations("A [12] b [0].", 3) == ([], [12, 0], [12, 0])  # [12] is never documents 1 and 2
    assert split_sentences("A is b.\n[1][2]\nC is d [2].") == ["A is b. [1][2]", "C is d [2]."]  # a markers-only line joins
    assert remove_thinking("<thinking>Doc [1] says x.</thinking>\nThe answer [1].") == "The answer [1]."
    assert remove_thinking("Start. <thinking>never closed [2]") == "Start."
    assert plain_text("## Why\n**Bold** claim [1].\n- an [item](http://x.test) [2][3]") == "Why Bold claim. an item"
    assert [label_score(x) for x in ("fully supported", "partially relevant", "not addressed")] == [1.0, 0.5, 0.0]


def test_strict_scores_by_hand():
    got = response_scores(sentences_of(ANSWER, 3), 3, FACTS, RELEVANCE, SUPPORT, SUPPORT_DOC, "strict")
    completeness = (1 + 0.5 + 0) / 3  # 0.5
    relevance = (1 + 0.5 + 0 + 1) / 4  # 0.625
    recall = (1 + 0.5 + 0 + 0.5) / 4  # the uncited s2 counts 0: 0.5
    # s0: 1/1 (the duplicate counts once); s1: (1 + 0 for the missing document 5) / 2; s2: 0; s3: (1 + 0) / 2
    precision = (1 + 0.5 + 0 + 0.5) / 4
    assert got["completeness"] == pytest.approx(completeness) and got["relevance"] == pytest.approx(relevance)
    assert got["recall"] == pytest.approx(recall) and got["precision"] == pytest.approx(precision)
    assert got["informativeness_f1"] == pytest.approx(2 * 0.5 * 0.625 / 1.125)
    assert got["groundedness_f1"] == pytest.approx(0.5)


def test_reference_scores_by_hand():
    got = response_scores(sentences_of(ANSWER, 3), 3, FACTS, RELEVANCE, SUPPORT, SUPPORT_DOC, "reference")
    # only the cited sentences s0, s1, s3 count for groundedness
    assert got["recall"] == pytest.approx((1 + 0.5 + 0.5) / 3)
    assert got["precision"] == pytest.approx((1 + 0.5 + 0.5) / 3)
    assert got["relevance"] == pytest.approx(0.625) and got["completeness"] == pytest.approx(0.5)


def test_failed_judge_call_is_missing_in_strict_and_zero_in_reference():
    relevance = {**RELEVANCE, 1: None}
    support_doc = {**SUPPORT_DOC, (3, 3): None}
    facts = [1.0, None, 0.0]
    strict = response_scores(sentences_of(ANSWER, 3), 3, facts, relevance, SUPPORT, support_doc, "strict")
    assert strict["relevance"] is None and strict["completeness"] is None and strict["precision"] is None
    assert strict["informativeness_f1"] is None and strict["groundedness_f1"] is None
    assert strict["recall"] == pytest.approx(0.5)  # its calls all answered
    reference = response_scores(sentences_of(ANSWER, 3), 3, facts, relevance, SUPPORT, support_doc, "reference")
    assert reference["relevance"] == pytest.approx((1 + 0 + 0 + 1) / 4)
    assert reference["completeness"] == pytest.approx((1 + 0 + 0) / 3)
    assert reference["precision"] == pytest.approx((1 + 0.5 + 0.5) / 3)  # s3: (1 + 0 for the failure) / 2


def test_one_citation_missing_documents_no_citations_and_empty_answers():
    # one sentence, one citation, partially supported: recall = precision = 0.5
    one = response_scores(sentences_of("Cardinals eat seeds [2].", 2), 1, [1.0], {0: 1.0}, {0: 0.5}, {(0, 2): 0.5}, "strict")
    assert (one["recall"], one["precision"], one["groundedness_f1"], one["informativeness_f1"]) == (0.5, 0.5, 0.5, 1.0)
    # a citation to a document that does not exist: no judge call, recall 0, precision 0 / 1
    ghost = sentences_of("Cardinals eat seeds [7].", 2)
    assert ghost[0]["cited"] == [] and ghost[0]["unknown"] == [7]
    for scoring in ("strict", "reference"):
        got = response_scores(ghost, 1, [0.0], {0: 1.0}, {}, {}, scoring)
        assert (got["recall"], got["precision"]) == (0.0, 0.0)
    # no citation at all: strict 0 over every sentence; reference 0 as the public code (nothing cited)
    uncited = sentences_of("Cardinals are red. They eat seeds.", 2)
    for scoring in ("strict", "reference"):
        got = response_scores(uncited, 1, [1.0], {0: 1.0, 1: 1.0}, {}, {}, scoring)
        assert (got["recall"], got["precision"], got["groundedness_f1"]) == (0.0, 0.0, 0.0)
    # an empty answer (e.g. a CoT answer that is all thinking) scores 0; without facts completeness is n/a
    empty = sentences_of(remove_thinking("<thinking>only reasoning [1]</thinking>"), 2)
    assert empty == []
    got = response_scores(empty, 2, [], {}, {}, {}, "strict")
    assert got == {"completeness": 0.0, "relevance": 0.0, "recall": 0.0, "precision": 0.0, "informativeness_f1": 0.0, "groundedness_f1": 0.0}
    assert response_scores(empty, 0, [], {}, {}, {}, "strict")["completeness"] is None
    assert harmonic(0.0, 0.0) == 0.0 and harmonic(None, 1.0) is None


def test_utilisation_statistics_by_hand():
    response = {"documents": [{"number": 1, "modality": "text"}, {"number": 2, "modality": "image"}, {"number": 3, "modality": "text"}]}
    sents = sentences_of(ANSWER, 3)  # cites 1, 2, 3 (and the missing 5)
    modalities = {d["number"]: d["modality"] for d in response["documents"]}
    got = statistics(response, sents, SUPPORT_DOC, modalities)
    assert (got["retrieved_text"], got["retrieved_image"], got["used_text"], got["used_image"]) == (2.0, 1.0, 2.0, 1.0)
    assert got["utilisation_text"] == 1.0 and got["utilisation_image"] == 1.0
    assert got["precision_text"] == pytest.approx((1.0 + 1.0 + 0.0) / 3)  # (0,1), (3,1), (3,3)
    assert got["precision_image"] == 1.0  # (1,2)


def test_query_list_parsing():
    assert parse_queries('"yellow tomato leaves", "nitrogen deficiency tomato", "extra"', 2) == ["yellow tomato leaves", "nitrogen deficiency tomato"]
    assert parse_queries("1. cardinal bird\n2. cardinal diet, cardinal bird", 5) == ["cardinal bird", "cardinal diet"]
    assert parse_queries("  ,  ", 1) == []


def test_mauve_on_precomputed_features_is_the_package_value():
    import mauve

    rng = np.random.default_rng(7)
    p = rng.normal(size=(30, 16)).astype(np.float32)
    q = (rng.normal(size=(30, 16)) + 0.4).astype(np.float32)
    features = {f"p{i}": p[i] for i in range(30)} | {f"q{i}": q[i] for i in range(30)}
    params = {"mauve_featurizer": "sentence-encoder", "mauve_scaling": 5.0, "mauve_seed": 25, "mauve_max_text_length": 1024, "mauve_device": "cpu"}
    ours = mauve_value([f"p{i}" for i in range(30)], [f"q{i}" for i in range(30)], params, lambda texts: np.stack([features[t] for t in texts]))
    expected = mauve.compute_mauve(p_features=p, q_features=q, mauve_scaling_factor=5.0, seed=25).mauve
    assert ours == pytest.approx(expected) and 0 < ours < 1
    assert mauve_value(["one"], ["two"], params, lambda texts: np.zeros((len(texts), 4))) is None  # too few answers


def test_top_k_breaks_ties_by_document_id_within_the_setting():
    from stages.eval_mavis.mavis_retrieve import top_k

    scores = np.array([0.5, 0.9, 0.5, 0.1, 0.9])  # documents sorted by id: index order is id order
    assert top_k(scores, np.arange(5), 3) == [1, 4, 0]
    assert top_k(scores, np.array([0, 2, 3]), 2) == [0, 2]  # e.g. the image documents only
    assert top_k(scores, np.array([], dtype=int), 2) == []
