"""MAVIS metrics (mavis.txt §4) on hand-made answers with fixed judge labels; every expected number
is worked out by hand in the test: strict from the paper's formulas, reference from the rules of
MAVIS's public scripts (util.py / groundedness.py / relevance.py / completeness.py / aggregate.py /
fluency.py), each rule quoted where it is used. Plus MAUVE on precomputed features against the
package itself."""
from __future__ import annotations

import numpy as np
import pytest

from stages.eval_mavis.mavis_eval import (harmonic, label_score, mauve_dropped, mauve_text, parse_citations, plain_text, reference_answer,
                                    reference_citations, reference_scores, reference_statements, reference_used, remove_thinking,
                                    response_scores, split_sentences)
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
    got = response_scores(sentences_of(ANSWER, 3), 3, FACTS, RELEVANCE, SUPPORT, SUPPORT_DOC)
    completeness = (1 + 0.5 + 0) / 3  # 0.5
    relevance = (1 + 0.5 + 0 + 1) / 4  # 0.625
    recall = (1 + 0.5 + 0 + 0.5) / 4  # the uncited s2 counts 0: 0.5
    # s0: 1/1 (the duplicate counts once); s1: (1 + 0 for the missing document 5) / 2; s2: 0; s3: (1 + 0) / 2
    precision = (1 + 0.5 + 0 + 0.5) / 4
    assert got["completeness"] == pytest.approx(completeness) and got["relevance"] == pytest.approx(relevance)
    assert got["recall"] == pytest.approx(recall) and got["precision"] == pytest.approx(precision)
    assert got["informativeness_f1"] == pytest.approx(2 * 0.5 * 0.625 / 1.125)
    assert got["groundedness_f1"] == pytest.approx(0.5)


LONG_GOLD = "Nitrogen. " * 60  # 540 characters: groundedness.py keeps gold answers over 500 characters


def test_reference_statements_and_citations_as_the_public_scripts_read_them():
    # util.extract_references: the text before each bracket, its last sentence; "[1][1]" leaves an empty
    # statement before the second bracket, shorter than 5 characters, so its bracket joins the one before
    assert reference_statements(ANSWER, "grounding") == [("Tomatoes need nitrogen", "[1],[1]"), ("Water them at the base", "[2],[5]"),
                                                         ("Yellow lower leaves show a deficiency", "[1, 3]")]
    # relevance.py's own copy skips a bracket with no text before it (its "[1]" is lost, not joined)
    assert reference_statements(ANSWER, "relevance")[0] == ("Tomatoes need nitrogen", "[1]")
    # a leading short statement: kept by util.py (and "Yes", shorter than 5, joins it), dropped by relevance.py
    assert reference_statements("[2] Yes [1]. Cardinals eat seeds [2].", "grounding")[0] == ("", "[2],[1]")
    assert reference_statements("[2] Yes [1]. Cardinals eat seeds [2].", "relevance") == [("Cardinals eat seeds", "[2]")]
    # groundedness.py: refs.replace("[", "").replace("]", "").split(","), int(ref) if ref.strip().isdigit() and ref != '0',
    # documents_id[ref - 1] if ref - 1 < len(documents): duplicates kept, 5 > 3 dropped, " 0" is documents_id[-1]
    assert reference_citations("[1],[1]", 3) == ([1, 1], [], [1, 1])
    assert reference_citations("[2],[5]", 3) == ([2], [5], [2, 5])
    assert reference_citations("[1, 0]", 3) == ([1, 3], [], [1, 0]) and reference_citations("[0]", 3) == ([], [], [])
    assert reference_citations("[1; 2]", 3) == ([], [], [])  # "1; 2" is not digits
    assert reference_citations("[12]", 12) == ([12], [], [12])
    # aggregate.py counts used documents digit by digit: "[12]" is documents 1 and 2; "[2]" after "[1]" is lost
    assert reference_used("A is b [12]. C is d [1][2].", 3) == {1, 2} and reference_used("A is b [3][2].", 3) == {3}
    # "①" and "¹" are digits to str.isdigit, not to int() (nor in aggregate.py's table, as "²" is): no document
    assert reference_used("A is b [\u24601].", 3) == {1} and reference_used("A is b [\u00b9].", 3) == set()
    # the answer the scripts read: after the last </thinking>, then after the last "answer is:"; a failed call is "Error"
    assert reference_answer("<thinking>x [1]</thinking> So the answer is: Red [1].", None) == "Red [1]."
    assert reference_answer("<thinking>never closed [1]", None) == "<thinking>never closed [1]"
    assert reference_answer("HTTP 500", "backend: HTTP 500 from x") == "Error" and reference_answer("", "empty: no text") == ""


def test_reference_scores_by_hand():
    grounding = [{"index": 0, "cited": [1, 1]}, {"index": 1, "cited": [2]}, {"index": 2, "cited": [1, 3]}]
    support = {0: 1.0, 1: 0.5, 2: 0.5}  # key i_0: all cited documents together
    support_doc = {(0, 0): 1.0, (0, 1): 1.0, (2, 0): 1.0, (2, 1): 0.0}  # keys i_1..i_m: each citation alone
    got = reference_scores(ANSWER, LONG_GOLD, [1.0, 0.5, None], [1.0, 0.5, 1.0], grounding, support, support_doc)
    assert got["completeness"] == pytest.approx((1 + 0.5 + 0) / 3)  # the failed call's "Error" label scores 0
    assert got["relevance"] == pytest.approx((1 + 0.5 + 1) / 3)  # the cited statements only
    assert got["recall"] == pytest.approx((1 + 0.5 + 0.5) / 3)
    # precision: s0 (1 + 1) / 2 (the repeat is its own call); s1 one citation: i_1 = i_0 = 0.5; s2 (1 + 0) / 2
    assert got["precision"] == pytest.approx((1 + 0.5 + 0.5) / 3)
    # a short gold answer: groundedness.py, run first, rewrote the answers file without the instance, so
    # completeness.py and relevance.py (its README's order) never see it either; "Error" leaves relevance out
    short = reference_scores(ANSWER, "Nitrogen.", [1.0], [1.0], grounding, support, support_doc)
    assert set(short.values()) == {None} and len(short) == 6
    failed = reference_scores("Error", LONG_GOLD, [0.0, 0.0], [], [], {}, {})
    assert failed["relevance"] is None and failed["informativeness_f1"] is None
    assert (failed["completeness"], failed["recall"], failed["precision"]) == (0.0, 0.0, 0.0)  # nothing cited: 0 and 0
    # no statement: relevance 0 (length 0 -> scores.append(0)); no fact: completeness 0
    assert reference_scores("No citations here.", LONG_GOLD, [], [], [], {}, {})["completeness"] == 0.0
    assert reference_scores("No citations here.", LONG_GOLD, [], [], [], {}, {})["relevance"] == 0.0


def test_mauve_inputs_as_fluency_py():
    # preprocess_text(Q + " " + A): [k] removed, newlines to spaces, whitespace collapsed, " ." -> ".", "**" removed
    assert mauve_text("Why?", "**Red** leaves [1] .\nWater [2][3].") == "Why? Red leaves. Water."
    assert mauve_dropped("Why? An Error occurred") and mauve_dropped("Why? The DOCUMENT says") and mauve_dropped("Why? More Information")
    assert not mauve_dropped("Why? An error occurred")  # "Error" is matched with its capital


def test_one_citation_missing_documents_no_citations_and_empty_answers():
    # one sentence, one citation, partially supported: recall = precision = 0.5
    one = response_scores(sentences_of("Cardinals eat seeds [2].", 2), 1, [1.0], {0: 1.0}, {0: 0.5}, {(0, 2): 0.5})
    assert (one["recall"], one["precision"], one["groundedness_f1"], one["informativeness_f1"]) == (0.5, 0.5, 0.5, 1.0)
    # a citation to a document that does not exist: no judge call, recall 0, precision 0 / 1
    ghost = sentences_of("Cardinals eat seeds [7].", 2)
    assert ghost[0]["cited"] == [] and ghost[0]["unknown"] == [7]
    got = response_scores(ghost, 1, [0.0], {0: 1.0}, {}, {})
    assert (got["recall"], got["precision"]) == (0.0, 0.0)
    # no citation at all: strict 0 over every sentence
    uncited = sentences_of("Cardinals are red. They eat seeds.", 2)
    got = response_scores(uncited, 1, [1.0], {0: 1.0, 1: 1.0}, {}, {})
    assert (got["recall"], got["precision"], got["groundedness_f1"]) == (0.0, 0.0, 0.0)
    # an empty answer (e.g. a CoT answer that is all thinking) scores 0; without facts completeness is n/a
    empty = sentences_of(remove_thinking("<thinking>only reasoning [1]</thinking>"), 2)
    assert empty == []
    got = response_scores(empty, 2, [], {}, {}, {})
    assert got == {"completeness": 0.0, "relevance": 0.0, "recall": 0.0, "precision": 0.0, "informativeness_f1": 0.0, "groundedness_f1": 0.0}
    assert response_scores(empty, 0, [], {}, {}, {})["completeness"] is None
    assert harmonic(0.0, 0.0) == 0.0 and harmonic(None, 1.0) is None


def test_utilisation_statistics_by_hand():
    response = {"documents": [{"number": 1, "modality": "text"}, {"number": 2, "modality": "image"}, {"number": 3, "modality": "text"}]}
    sents = sentences_of(ANSWER, 3)  # cites 1, 2, 3 (and the missing 5)
    used = {n for s in sents for n in s["cited"]}
    got = statistics(response, used, [(n, v) for (_, n), v in SUPPORT_DOC.items()])
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
    from stages.eval_mavis.mavis_retrievers import top_k

    scores = np.array([0.5, 0.9, 0.5, 0.1, 0.9])  # documents sorted by id: index order is id order
    assert top_k(scores, np.arange(5), 3) == [1, 4, 0]
    assert top_k(scores, np.array([0, 2, 3]), 2) == [0, 2]  # e.g. the image documents only
    assert top_k(scores, np.array([], dtype=int), 2) == []


def test_mauve_inputs_of_each_scoring():
    from stages.eval_mavis.mavis_score import mauve_inputs

    long_gold = "Prune in late winter. " * 30  # 660 characters
    docs = [{"number": 1, "modality": "text"}]

    def response(answer, gold=long_gold, text=1, image=1, error=None, documents=docs):
        return {"question": "When to prune?", "gold_answer": gold, "answer": answer, "raw": answer, "error": error, "documents": documents,
                "positive_text_documents": text, "positive_image_documents": image}
    group = [response("Prune in winter [1]."), response("The document says winter [1]."), response("Winter.", gold="Winter."),
             response("Winter [1].", image=0), response("", error="backend: HTTP 500 from x"), response("Winter.", documents=[])]
    gold, model = mauve_inputs(group, "reference")
    # fluency.py keeps instances with a text and an image gold document, retrieved documents and a gold answer over
    # 500 characters: responses 0, 1 and 4, less 4, whose "Error" answer relevance.py (run before it) removed from
    # the file; their model texts "Q A", less those with "document" or "Error"
    assert gold == [mauve_text("When to prune?", long_gold)] * 2
    assert model == ["When to prune? Prune in winter."]
    gold, model = mauve_inputs(group, "strict")  # every answered response, no question prefix; the failed one has no text
    assert len(gold) == len(model) == 5 and model[0] == "Prune in winter."


def test_mauve_through_the_stage_in_both_scorings(tmp_path):
    """mavis_score's CLI on seven answers of one (setting, method), no judgements needed: the MAUVE
    rows of both scorings equal the package's value on texts written here by hand from fluency.py's
    rules, featurised by the same offline MiniLM (the stage's `sentence-encoder`). fluency.py keeps
    instances with a text and an image gold document, retrieved documents and a gold answer over 500
    characters; p is "Q A" of each kept instance, q "Q answer" (the answer after the last "</thinking>"
    and "answer is:"; a failed call is "Error") less texts holding "Error", "document" or "information"
    (any case); preprocess_text drops "[k]", line breaks, " ." and "**" (not " ,"). Seven texts give
    MAUVE two buckets, too coarse to tell the question prefix apart (test_mauve_inputs_of_each_scoring
    pins the texts); the selection, the drops and the counts it does tell."""
    import json

    import mauve
    import pyarrow.parquet as pq

    from conftest import run_stage
    from stages.core.tables import write_table
    from stages.core.text_index import load_encoder
    from stages.eval_mavis.mavis_score import STAGE

    assert STAGE.params["mauve_max_text_length"].default == 512  # fluency.py's max_text_length
    q = "When should I prune my apple tree?"
    gold_a = "Prune apple trees in late winter, while they are dormant. " * 10  # 580 characters
    gold_b = "Cut dead and crossing branches first, then thin the crown. " * 10  # 590 characters
    docs = [{"number": n, "doc_id": f"d:t{n}", "modality": "text", "text": "t", "image_sha256": None, "extraction": None} for n in (1, 2)]

    def response(i, gold, raw, answer, error=None, image=1, documents=docs):
        return {"id": f"r{i}", "model": "m", "instance_id": f"reddit:p{i}/c{i}", "split": "test", "setting": "multi", "method": "vanilla",
                "question": q, "gold_answer": gold, "retriever": "minilm", "vision": True, "documents": documents, "raw": raw,
                "answer": answer, "finish_reason": "stop", "error": error, "positive_text_documents": 1, "positive_image_documents": image}
    rows = [
        response(0, gold_a, "<thinking>Winter [2].</thinking>So the answer is: Prune in **late winter** [1].",
                 "So the answer is: Prune in **late winter** [1]."),
        response(1, gold_b, "Cut the dead wood first [1][2],\nthen thin the crown.", "Cut the dead wood first [1][2],\nthen thin the crown."),
        response(2, gold_a, "The Document says winter [1].", "The Document says winter [1]."),  # instance kept, text dropped
        response(3, "Winter.", "Winter [1].", "Winter [1]."),  # gold answer too short
        response(4, gold_b, "Thin it [1].", "Thin it [1].", image=0),  # no image gold document
        response(5, gold_a, "HTTP 500", "", error="backend: HTTP 500 from x"),  # "Error": relevance.py removed the instance
        response(6, gold_b, "Thin the crown.", "Thin the crown.", documents=[]),  # nothing retrieved
    ]
    paths = {name: tmp_path / f"{name}.parquet" for name in ("responses", "sentences", "judgements", "scores", "summary")}
    write_table(paths["responses"], rows, "mavis_eval_responses")
    write_table(paths["sentences"], [], "mavis_eval_sentences")
    write_table(paths["judgements"], [], "mavis_eval_judgements")
    run_stage("mavis_score", *[f"--input={n}={paths[n]}" for n in ("responses", "sentences", "judgements")],
              *[f"--output={n}={paths[n]}" for n in ("scores", "summary")], "--params", json.dumps({"mauve_featurizer": "sentence-encoder"}))
    got = {r["scoring"]: r for r in pq.read_table(paths["summary"]).to_pylist() if r["metric"] == "mauve"}

    encoder = load_encoder()

    def expected(p_text, q_text):
        features = [encoder.encode(t, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False).astype(np.float32)
                    for t in (p_text, q_text)]
        return mauve.compute_mauve(p_features=features[0], q_features=features[1], mauve_scaling_factor=5.0, seed=25, verbose=False).mauve

    a, b = f"{q} {gold_a.strip()}", f"{q} {gold_b.strip()}"
    reference_q = [f"{q} Prune in late winter.", f"{q} Cut the dead wood first , then thin the crown."]
    assert got["reference"]["value"] == pytest.approx(expected([a, b, a], reference_q), abs=1e-6)
    assert (got["reference"]["n"], got["reference"]["missing"]) == (2, 5)
    # strict (ours): every answered response, gold vs answer, citations and markdown removed, no question prefix
    strict_p = [gold_a.strip(), gold_b.strip(), gold_a.strip(), "Winter.", gold_b.strip(), gold_b.strip()]
    strict_q = ["So the answer is: Prune in late winter.", "Cut the dead wood first, then thin the crown.", "The Document says winter.",
                "Winter.", "Thin it.", "Thin the crown."]
    assert got["strict"]["value"] == pytest.approx(expected(strict_p, strict_q), abs=1e-6)
    assert (got["strict"]["n"], got["strict"]["missing"]) == (6, 1)


def test_mauve_features_are_the_seeds_gpt2_large_folder_by_default(tmp_path):
    """The paper's featurizer is the default; a run without its folder stops at the start, naming
    the setting and the way out, before any scoring."""
    import json

    import pyarrow.parquet as pq
    from conftest import run_stage
    from stages.core.tables import write_table
    from stages.eval_mavis.mavis_score import STAGE

    assert STAGE.params["mauve_featurizer"].default == "models/gpt2-large"
    assert STAGE.params["mauve_device"].default == "cuda"  # fluency.py's device_id 0
    paths = {name: tmp_path / f"{name}.parquet" for name in ("responses", "sentences", "judgements", "scores", "summary")}
    for name in ("responses", "sentences", "judgements"):
        write_table(paths[name], [], f"mavis_eval_{name}")
    args = [*[f"--input={n}={paths[n]}" for n in ("responses", "sentences", "judgements")], *[f"--output={n}={paths[n]}" for n in ("scores", "summary")]]
    failed = run_stage("mavis_score", *args, "--params", "{}", check=False)  # from the repository root, which has no models/gpt2-large
    assert failed.returncode != 0 and "mauve_featurizer 'models/gpt2-large' is not a model folder" in failed.stderr
    assert "sentence-encoder" in failed.stderr and not paths["scores"].exists()
    (tmp_path / "models" / "large-lm").mkdir(parents=True)  # a folder mauve could not load: not GPT-2 or BERT by its name
    failed = run_stage("mavis_score", *args, "--params", json.dumps({"mauve_featurizer": str(tmp_path / "models" / "large-lm")}), check=False)
    assert failed.returncode != 0 and "only GPT-2 and BERT" in failed.stderr
