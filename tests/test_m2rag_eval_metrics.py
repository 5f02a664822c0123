"""Hand-computed cases for the M2RAG evaluation arithmetic (stages/eval_m2rag/m2rag_eval.py): score
normalisation (clamped as the public evaluator), RAGAS context precision and faithfulness, image
recall both ways, placeholders, answers without images, failed judge calls (never a score), the
strict and reference-compatible aggregations, evaluate.py's average lines, Figure 3's per-topic
overall, and App. E input selection on the fixture release."""
from __future__ import annotations

import pytest

from m2rag_eval_fixtures import make_m2rag_release
from stages.eval_m2rag.m2rag_eval import (Selection, aggregate, by_topic, context_precision, document_with_captions, faithfulness,
                                    image_contexts, image_recall_count, image_recall_judge, image_recall_public, normalise, read_release, reference_score,
                                    group_inputs, resolve_placeholders, response_scores, select_inputs, strip_placeholders)


def test_normalise():
    assert normalise(7, 10) == 0.7
    assert normalise(0, 10) == 0.0 and normalise(10, 10) == 1.0
    assert normalise(1, 1) == 1.0
    assert normalise(None, 10) is None  # a failed call stays missing
    # the public evaluator: normed_score = max(lower, min(upper, score)) / upper
    assert normalise(12, 10) == 1.0 and normalise(11, 10) == 1.0 and normalise(-3, 10) == 0.0


def test_context_precision_by_hand():
    # verdicts 1,0,1: precision@1 = 1, precision@3 = 2/3; (1 + 2/3) / 2 = 5/6
    assert context_precision([1, 0, 1]) == pytest.approx(5 / 6)
    # 0,1,1: precision@2 = 1/2, precision@3 = 2/3; (1/2 + 2/3) / 2 = 7/12
    assert context_precision([0, 1, 1]) == pytest.approx(7 / 12)
    assert context_precision([1, 1]) == 2 / (2 + 1e-10) < 1 and context_precision([1]) == 1 / (1 + 1e-10)  # RAGAS adds 1e-10
    assert context_precision([0, 0, 0]) == 0.0  # RAGAS: numerator 0 over 0 + 1e-10
    assert context_precision([]) == 0.0  # no context: RAGAS's empty sum 0 over 1e-10


def test_faithfulness_by_hand():
    assert faithfulness([1, 1, 0, 1]) == 0.75
    assert faithfulness([0]) == 0.0
    assert faithfulness([]) is None  # RAGAS NaN: no statement


def test_image_recall_both_ways():
    # judge: used {1, 3}; unused 2 judged worth inserting, 4 not: 2 / (2 + 1)
    assert image_recall_judge({1, 3}, {2: 1, 4: 0}) == pytest.approx(2 / 3)
    assert image_recall_judge(set(), {2: 1}) == 0.0
    assert image_recall_judge(set(), {2: 0}) is None  # nothing used, nothing wanted
    # the public code: inputs scored >= 8 are {1, 2}; the answer used 1 and 3 -> 1/2
    assert image_recall_count({1, 3}, {1: 9.0, 2: 8.0, 3: 5.0}) == 0.5
    # no input image scored >= 8: evaluate.py's `multi_modal_scores["image_recall"] = [1.0]`
    assert image_recall_count({3}, {1: 7.9, 3: 5.0}) == 1.0 and image_recall_count(set(), {}) == 1.0


def test_placeholders_and_no_image():
    text = "Intro.\n\n![sky](image_2)\n\nMiddle ![x](image_9) and ![y](https://a.b/c.png).\n\n![again](image_1)\nEnd."
    found, unresolved = resolve_placeholders(text, n_inputs=3)
    assert [f["n"] for f in found] == [2, 1]
    assert unresolved == ["![x](image_9)", "![y](https://a.b/c.png)"]  # point to no input image
    assert strip_placeholders(text) == "Intro.\n\nMiddle  and .\n\nEnd."
    (above1, below1), (above2, below2) = image_contexts(text, found, chars=0)
    assert above1 == "Intro." and below1.startswith("Middle") and below1.endswith("End.")
    assert above2.endswith("and .") and below2 == "End."
    assert image_contexts(text, found, chars=4)[0] == ("tro.", "Midd")
    assert document_with_captions(text, found, {2: "blue sky", 1: "diagram"}).count("<image>: ") == 2
    assert resolve_placeholders("No images here.", 3) == ([], [])


def test_placeholders_as_models_write_them():
    """Every markdown image is either placed or counted unresolved, never left in the text unseen: a
    title, brackets inside the caption, the pseudo url in another case or with an extension. An
    image placed twice is placed once (the public handle_output_images drops the repeat)."""
    text = ('![c](image_3 "t") ![a [b] c](image_2) ![d](Image-1) ![e](<image_4.png>) ![f](image_3) '
            "![g](https://x.org/img2.png) ![h](image_12)")
    found, unresolved = resolve_placeholders(text, n_inputs=4)
    assert [f["n"] for f in found] == [3, 2, 1, 4]
    assert unresolved == ["![f](image_3)", "![g](https://x.org/img2.png)", "![h](image_12)"]
    assert strip_placeholders(text) == ""
    assert text[found[1]["start"]:found[1]["end"]] == "![a [b] c](image_2)"


def test_reference_score_reads_the_judges_reply_as_the_public_code_and_never_an_error_body():
    """few_shot_evaluator.py's extract_score_from_str: the last run of digits of the reply, 0 when
    there is none, clamped to 0-10 then / 10; a call with no judge's reply has no score."""
    judged = {"status": "judged", "score": 7.0, "raw": '{"explanation": "8/10 overall", "score": 7}', "error": None}
    assert reference_score(judged, 10) == 0.7  # the score field comes last: the same number
    refused = {"status": "failed", "score": None, "raw": '{"explanation": "8/10", "score": 11}', "error": "schema: 11 is greater than the maximum of 10"}
    assert reference_score(refused, 10) == 1.0  # the judge's number, clamped: max(0, min(10, 11)) / 10
    body = '{"error": {"message": "maximum context length is 128000 tokens; your messages resulted in 130512 tokens"}}'
    assert reference_score({"status": "failed", "score": None, "raw": body, "error": "backend: HTTP 400 from x"}, 10) is None
    cut = {"status": "failed", "score": None, "raw": "7 " * 10, "error": "too_long: the answer has 9000 characters"}
    assert reference_score(cut, 10) is None  # only part of the reply was kept
    text = {"status": "failed", "score": None, "error": "non_json: Expecting value"}
    assert reference_score(text | {"raw": "The text is fluent.\n8"}, 10) == 0.8  # the seed's two-line answer
    assert reference_score(text | {"raw": "Good. 8/10"}, 10) == 1.0  # the last number, as the public code reads it
    assert reference_score(text | {"raw": "Fluent, but no score."}, 10) == 0.0  # its default
    assert reference_score(text | {"raw": "score: -3"}, 10) == 0.3  # digits only, no sign
    assert reference_score(text | {"raw": "\u0668"}, 10) == 0.8  # \\d and int() read any decimal digit
    assert reference_score({"status": "failed", "score": None, "raw": '{"score": "high"}', "error": "schema: 'high' is not of type 'integer'"}, 10) == 0.0
    huge = {"status": "failed", "score": None, "raw": '{"score": 1' + "0" * 400 + "}", "error": "schema: too large"}
    assert reference_score(huge, 10) == 1.0  # clamped as the public code clamps
    assert reference_score(huge | {"raw": "9" * 5000}, 10) == 1.0  # past int()'s digit limit: over the scale
    assert reference_score(huge | {"raw": '{"score": NaN}'}, 10) == 0.0


def _judgement(metric, position, score, status="judged", raw=None, error=None):
    return {"metric": metric, "position": position, "score": score, "status": status, "error": error,
            "raw": raw if raw is not None else f'{{"score": {int(score) if score is not None else "?"}}}'}


def _response(used, inputs, urls=None):
    return {"output_images": [{"n": n, "start": 0, "end": 0} for n in used],
            "inputs": [{"n": n, "score": s, "url": (urls or {}).get(n, f"https://img.example/{n}.jpg")} for n, s in inputs.items()]}


def test_response_scores_strict_and_reference():
    response = _response([1], {1: 9.0, 2: 8.0})
    rows = [_judgement("fluency", 0, None, "failed", raw='{"explanation": "x", "score": 12}', error="schema: 12 is greater than the maximum of 10"),
            _judgement("relevance", 0, None, "failed", raw="Error: 130512 tokens", error="backend: HTTP 400 from x"),
            _judgement("context_precision", 0, 1), _judgement("context_precision", 1, 0), _judgement("context_precision", 2, 1),
            _judgement("faithfulness", 0, None, "failed", raw="not json", error="non_json: Expecting value"),
            _judgement("image_coherence", 0, 6), _judgement("image_helpfulness", 0, 4),
            _judgement("image_reference", 0, None, "failed", raw="?", error="non_json: Expecting value"),
            _judgement("image_recall", 2, 1)]
    s = response_scores(response, rows)
    strict, ref = s["strict"], s["reference"]
    assert strict["fluency"] is None and strict["relevance"] is None  # a failed call is missing, never 0
    assert ref["fluency"] == 1.0  # the judge's 12, clamped to 10
    assert ref["relevance"] is None  # the error body's numbers are never a score
    assert strict["context_precision"] == pytest.approx(5 / 6) == ref["context_precision"]
    assert strict["faithfulness"] is None and ref["faithfulness"] is None  # a failed RAGAS call: no score in either mode
    assert strict["image_coherence"] == [0.6] and strict["image_reference"] == [None]
    assert ref["image_reference"] == [0.0]  # a reply without a number: the public default 0
    assert strict["image_recall"] == 0.5  # used 1; unused 2 wanted -> 1 / 2
    assert strict["image_recall_count"] == 0.5 == ref["image_recall"]  # 1 of the two inputs scored >= 8


def test_reference_image_recall_counts_urls_as_the_public_code():
    """evaluate.py lists the urls of the input images scored >= 8 (a url twice is listed twice) and
    divides the set of those the answer used by the list's length; strict counts distinct inputs."""
    urls = {1: "u1", 2: "u1", 3: "u3"}  # the same image on two pages
    s = response_scores(_response([1, 2], {1: 9.0, 2: 9.0, 3: 9.0}, urls), [])
    assert s["reference"]["image_recall"] == pytest.approx(1 / 3)  # {u1} / [u1, u1, u3]
    assert s["strict"]["image_recall_count"] == pytest.approx(2 / 3)
    s = response_scores(_response([1], {1: 9.0, 2: 9.0, 3: 9.0}, urls), [])
    assert s["reference"]["image_recall"] == pytest.approx(1 / 3) and s["strict"]["image_recall_count"] == pytest.approx(1 / 3)
    s = response_scores(_response([3], {1: 9.0, 2: 9.0, 3: 5.0}, urls), [])
    assert s["reference"]["image_recall"] == 0.0 and s["strict"]["image_recall_count"] == 0.0
    assert image_recall_public({"u3"}, [("u1", None), ("u3", 7.9)]) == 1.0  # nothing scored >= 8 (a missing score is not)


def test_no_context_no_statement_and_no_positive_image():
    # no context rows: RAGAS context precision 0 in both modes; statements call answered with none:
    # faithfulness NaN -> strict missing, reference 1.0 (the public clamp: max(0, min(1, nan)) = 1)
    response = _response([], {1: 5.0})
    s = response_scores(response, [_judgement("fluency", 0, 7), _judgement("relevance", 0, 9)])
    assert s["strict"]["context_precision"] == 0.0 == s["reference"]["context_precision"]
    assert s["strict"]["faithfulness"] is None and s["reference"]["faithfulness"] == 1.0
    # no input image scored >= 8: the public recall is [1.0] for the query, so the query stays in the mean
    assert s["reference"]["image_recall"] == 1.0
    agg = aggregate([s, response_scores(_response([1], {1: 9.0}), [])], "reference")
    assert agg["image_recall"] == pytest.approx((1.0 + 1.0) / 2) and agg["image_recall_missing"] == 0


def test_by_topic_is_figure_3():
    def scored(value):  # every metric `value`, one output image
        one = {m: value for m in ("fluency", "relevance", "context_precision", "faithfulness", "image_recall", "image_recall_count")}
        return {"strict": {**one, "image_coherence": [value], "image_helpfulness": [value], "image_reference": [value]}}
    systems = {("a", "single_stage"): [("Sports", scored(0.8)), ("Sports", scored(0.4)), ("Health", scored(1.0))],
               ("b", "single_stage"): [("Sports", scored(0.2))]}
    got = by_topic(systems, "strict")
    # Sports: system a's overall over its two queries is 0.6, system b's 0.2; Figure 3 averages them: 0.4
    assert got["Sports"]["systems"] == {("a", "single_stage"): pytest.approx(0.6), ("b", "single_stage"): pytest.approx(0.2)}
    assert got["Sports"]["average"] == pytest.approx(0.4) and got["Health"]["average"] == pytest.approx(1.0)


def test_aggregate_means_and_overall():
    a = {"strict": {"fluency": 0.8, "relevance": 0.6, "context_precision": 1.0, "faithfulness": 0.5, "image_coherence": [0.6, 0.8],
                    "image_helpfulness": [0.4, None], "image_reference": [1.0, 0.0], "image_recall": 1.0, "image_recall_count": 1.0}}
    b = {"strict": {"fluency": 0.6, "relevance": None, "context_precision": 0.0, "faithfulness": 1.0, "image_coherence": [1.0],
                    "image_helpfulness": [0.7], "image_reference": [0.5], "image_recall": 0.5, "image_recall_count": None}}
    agg = aggregate([a, b], "strict")
    assert agg["fluency"] == pytest.approx(0.7) and agg["relevance"] == 0.6 and agg["relevance_missing"] == 1
    assert agg["image_coherence"] == pytest.approx(0.8)  # over the three output images, not per query
    assert agg["image_helpfulness"] == pytest.approx(0.55) and agg["image_helpfulness_missing"] == 1
    assert agg["image_reference"] == pytest.approx(0.5)
    assert agg["image_recall"] == 0.75 and agg["image_recall_count"] == 1.0
    eight = [0.7, 0.6, 0.5, 0.75, 0.8, 0.55, 0.5, 0.75]
    assert agg["overall"] == pytest.approx(sum(eight) / 8) and agg["overall_over"] == 8


def test_overall_without_output_images():
    text_only = {"fluency": 0.8, "relevance": 0.8, "context_precision": 0.5, "faithfulness": 1.0, "image_coherence": [],
                 "image_helpfulness": [], "image_reference": [], "image_recall": 0.0, "image_recall_count": 0.0}
    strict = aggregate([{"strict": text_only}], "strict")
    assert strict["image_coherence"] is None and strict["overall_over"] == 5
    assert strict["overall"] == pytest.approx((0.8 + 0.8 + 0.5 + 1.0 + 0.0) / 5)
    ref = aggregate([{"reference": dict(text_only, image_recall=0.0)}], "reference")
    assert ref["overall"] is None  # the public code's NaN
    assert ref["image_precision_average"] is None and ref["text_average"] == pytest.approx((0.8 + 0.8 + 0.5 + 1.0) / 4)


@pytest.mark.parametrize("aux,captions", [(True, True), (False, False)])
def test_select_inputs_app_e(tmp_path, aux, captions):
    folder = make_m2rag_release(tmp_path / "rel", aux=aux, captions=captions, manifest=False)
    tables = read_release(folder)
    pages, images = select_inputs("eli5:q0", group_inputs(tables), Selection(text_per_page=2, min_text_score=3, min_image_score=3, max_page_images=1,
                                                               max_aux_images=5, max_images=2))
    assert [p["rank"] for p in pages] == [1, 2]
    # top 2 pieces per page (the 1.0 advertisement is below the minimum), page order kept, image in place
    assert [b["text"] is None for b in pages[0]["blocks"]] == [False, True, False]
    assert images[0]["score"] == 9.0 and images[0]["source"] == "page"
    if aux:  # page 2's image (5) loses to the auxiliary one (8) under max_images = 2; the aux image scored 2 is below 3
        assert [b["text"] is None for b in pages[1]["blocks"]] == [False, False]
        assert [(i["n"], i["source"], i["score"]) for i in images] == [(1, "page", 9.0), (2, "aux", 8.0)]
        assert images[0]["caption_mode"] == "model"
    else:  # a release without aux_images and captions: none, both pages' images, alt text stands in
        assert [b["text"] is None for b in pages[1]["blocks"]] == [False, True, False]
        assert [(i["n"], i["page_rank"]) for i in images] == [(1, 1), (2, 2)]
        assert images[0]["caption"] == "diagram 1 of light scattering" and images[0]["caption_mode"] == "alt"


def test_select_inputs_caps_each_page_then_all_by_score():
    """The seed's code (filter_images_and_reorganize_webpages, max_images_per_sample 5): 5 images of
    each page and 5 auxiliary ones, then the best 10 of them by score, ties to the earlier. Two
    pages of six images scored 9 and five auxiliary images scored 8 give ten page images."""
    pages = [{"id": f"p{r}", "query_id": "q", "rank": r, "title": "", "url": ""} for r in (1, 2)]
    images = [{"element_id": f"p{r}e{k}", "page_id": f"p{r}", "order": k, "score": 9, "url": f"p{r}/{k}", "sha256": None}
              for r in (1, 2) for k in range(6)]
    aux = [{"query_id": "q", "url": f"aux/{k}", "sha256": None, "score": 8} for k in range(5)]
    tables = {"pages": pages, "elements": [dict(i, kind="image", text="") for i in images], "images": images, "aux_images": aux}
    _, chosen = select_inputs("q", group_inputs(tables), Selection())
    assert [i["url"] for i in chosen] == [f"p{r}/{k}" for r in (1, 2) for k in range(5)]
    aux[4]["score"] = 9.5  # the best of all now: nine page images (page 2's last loses the tie) and one auxiliary
    _, chosen = select_inputs("q", group_inputs(tables), Selection())
    assert [i["url"] for i in chosen] == [*(f"p1/{k}" for k in range(5)), *(f"p2/{k}" for k in range(4)), "aux/4"]
    images[0]["score"] = 2  # below min_image_score: page 1's sixth image takes its place
    _, chosen = select_inputs("q", group_inputs(tables), Selection())
    assert [i["url"] for i in chosen][:5] == [f"p1/{k}" for k in range(1, 6)]


def test_separate_places_images_by_caption_similarity():
    """MuRAR-style placement (§5.1) with the packaged all-MiniLM-L6-v2: each image after the segment
    closest to its caption, none below the similarity floor."""
    from stages.core.text_index import load_encoder
    from stages.eval_m2rag.m2rag_generate import place_by_similarity

    segments = ["The ocean looks blue because water absorbs red light.", "Bees make honey from the nectar of flowers."]
    images = [{"n": 1, "caption": "A honey bee collecting nectar on a flower"}, {"n": 2, "caption": "Waves on a deep blue ocean"},
              {"n": 3, "caption": "Quarterly tax form instructions"}]
    assert place_by_similarity(load_encoder(), segments, images, min_similarity=0.3) == {2: [1], 1: [2]}


def test_an_image_hash_not_in_hex_is_no_stored_file():
    """select_inputs reads a release without a contract: an image sha256 that is not one in hex is
    "" (shown by its caption), as the m2rag_responses contract takes."""
    tables = {"pages": [{"id": "p", "query_id": "q", "rank": 1, "title": "t", "url": "u"}],
              "elements": [{"element_id": f"e{k}", "page_id": "p", "order": k, "kind": "image", "text": "", "score": 5} for k in range(3)],
              "images": [{"element_id": f"e{k}", "page_id": "p", "order": k, "score": 5, "url": f"i{k}", "sha256": sha}
                         for k, sha in enumerate(("cd" * 32, "../x", None))],
              "aux_images": []}
    _, images = select_inputs("q", group_inputs(tables), Selection(max_page_images=3, max_images=3))
    assert [i["sha256"] for i in images] == ["cd" * 32, "", ""]
