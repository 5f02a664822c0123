"""filter_entailment_image through its CLI (MAVIS App. A.3, Table 2): a vision model gets the stored
image as a base64 data URL, a text-only one the image's stand-in (and the prompt says so); an image
the image stages dropped, or a non-answer after retries, is a reject with its reason. By default
(MAVIS §3.2: entailment is the only document filter) the stage reads the cached fact images
directly; the optional M2RAG filters' output is read the same way."""
from __future__ import annotations

from pytest_httpserver import HTTPServer

from entailment_fixtures import cached_row, deduped_row, openai_llm, rule_server, run_scoring, stored_image


def test_image_path_sends_the_stored_image_and_the_stand_in_says_so(tmp_path, httpserver: HTTPServer):
    seen = []
    sha, data = stored_image(tmp_path)
    rule_server(httpserver, seen, stored=data)
    images = [deduped_row(sha, "https://img.example/1.jpg")]  # webimg:2's image was dropped by the image stages
    scores, rejects, _ = run_scoring(tmp_path, "filter_entailment_image", openai_llm(tmp_path, httpserver), images=images, vision=True)
    assert [(s["doc_id"], round(s["score"], 3), s["mode"]) for s in scores] == [("webimg:1", 0.9, "image")]
    assert [(r["id"], r["reason"]) for r in rejects] == [("i1#0.0|webimg:2", "image_not_kept")]
    assert 'entails the statement "Ash melts inside jet engines."' in seen[0][0] and "not shown" not in seen[0][0]

    images.append(deduped_row(sha, "https://img.example/2.jpg"))
    seen.clear()
    scores, rejects, report = run_scoring(tmp_path, "filter_entailment_image", openai_llm(tmp_path, httpserver), images=images, vision=False)
    assert [(s["doc_id"], s["mode"]) for s in scores] == [("webimg:1", "text_stand_in")]
    assert [(r["id"], r["reason"]) for r in rejects] == [("i1#0.0|webimg:2", "invalid_answer")] and "perhaps" in rejects[0]["detail"]
    assert all(urls == [] for _, urls in seen)
    assert any('describes it as: "Photo: ash in an engine"' in text for text, _ in seen)  # requests run concurrently: any order


def test_cached_images_are_read_directly_when_the_filters_are_off(tmp_path, httpserver: HTTPServer):
    """mavis.fact_image_filters false (the default): images_cached rows, without the filters' columns
    (clip_score, phash), are the images; a small image a size filter would drop is scored all the same."""
    seen = []
    sha, data = stored_image(tmp_path)  # 120 x 90, a few hundred bytes: under M2RAG's 1e4 pixels and 20 KB
    rule_server(httpserver, seen, stored=data)
    images = [cached_row(sha, "https://img.example/1.jpg"), cached_row(sha, "https://img.example/2.jpg")]
    scores, rejects, report = run_scoring(tmp_path, "filter_entailment_image", openai_llm(tmp_path, httpserver), images=images,
                                          images_table="images_cached", vision=True)
    assert sorted((s["doc_id"], s["mode"]) for s in scores) == [("webimg:1", "image"), ("webimg:2", "image")] and not rejects
    assert report["rows_in"] == 2 == report["rows_out"]["scores"]
