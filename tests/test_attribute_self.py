"""attribute_self through its CLI (cite-while-you-generate.txt §4.2 "Model self-attribution", App. E):
the summariser's App. E answer, from an OpenAI-compatible server on 127.0.0.1 answering by rule,
becomes source ids per summary sentence (1-based numbering read as such, IMG for the image); an
answer citing an unknown source is rejected with its reason and raw text; then the embedded SmolLM2
through the llm layer, where whatever it answers is either parsed ids or a counted reject."""
import json

import pyarrow.parquet as pq
import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Response

from attribution_fixtures import generation, make_items, write_generations
from conftest import run_stage

TEXT_GEN = generation("b", "text") | {"has_image": False, "source_labels": [0, 1, 2], "pooled": [[0.3, 0.3, 0.4]] * 4}


def _reply(content: str) -> Response:
    body = {"id": "c", "object": "chat.completion", "model": "rule",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 20}}
    return Response(json.dumps(body), content_type="application/json")


def _attribute(tmp_path, llm, **params):
    items = make_items(tmp_path)
    gens = write_generations(tmp_path / "gens.parquet", [generation(), TEXT_GEN])
    cites = tmp_path / "cites.parquet"
    run_stage("attribute_self", "--input", f"generations={gens}", "--input", f"source_items={items}",
              "--output", f"citations={cites}", "--params", json.dumps({"llm": llm, **params}))
    return (pq.read_table(cites).to_pylist(), pq.read_table(f"{cites}.rejects.parquet").to_pylist(),
            json.loads(open(f"{cites}.report.json").read()))


def test_answers_become_source_ids_and_an_unknown_id_is_rejected(tmp_path, httpserver: HTTPServer):
    seen = []

    def by_rule(request):
        content = request.get_json()["messages"][-1]["content"]
        seen.append(content)
        text = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
        asked = text.split("Now do the same for these.", 1)[1]
        if "<image>" in asked:  # the item with an image: 1-based numbering, IMG and ids out of order
            return _reply(json.dumps({"attributions": [{"sentence": 1, "sources": [1, 0]}, {"sentence": 2, "sources": ["IMG", 2]}]}))
        return _reply(json.dumps({"attributions": [{"sentence": 0, "sources": [0]}, {"sentence": 1, "sources": [7]}]}))

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(by_rule)
    llm = {"backend": "openai", "model": "rule", "cache": {"path": str(tmp_path / "llm.sqlite")}, "max_attempts": 1,
           "openai": {"base_url": httpserver.url_for("/v1"), "max_retries": 1}}
    rows, rejects, report = _attribute(tmp_path, llm)
    assert [(r["generation_id"], r["sentence_index"], r["sources"], r["method"]) for r in rows] == [
        ("gen:a:img_raw", 0, ["0", "1"], "self"), ("gen:a:img_raw", 1, ["2", "IMG"], "self")]
    assert [r["sentence"] for r in rows] == generation()["summary_sentences"]
    assert [(r["id"], r["reason"]) for r in rejects] == [("gen:b:text", "invalid_answer")]
    assert "7" in rejects[0]["detail"] and "not a source id" in rejects[0]["detail"]
    assert report["rows_in"] == 2 == report["stats"]["generations_attributed"] + report["rejected"]
    # App. E's "one associated image": sent with the prompt to a model that takes images, the
    # description line naming it (the item has no description); the text-only generation goes as text
    assert len(seen) == 2 and sum(isinstance(c, str) for c in seen) == 1
    with_image = next(c for c in seen if isinstance(c, list))
    assert [p["type"] for p in with_image].count("image_url") == 1
    assert with_image[0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert "Image: the attached image" in " ".join(p.get("text", "") for p in with_image)
    # vision: false (or a backend that takes no images): the description alone, said to be missing
    seen.clear()
    (tmp_path / "text_only").mkdir()
    _attribute(tmp_path / "text_only", {**llm, "cache": {"path": str(tmp_path / "llm2.sqlite")}}, vision=False)
    assert len(seen) == 2 and all(isinstance(c, str) for c in seen)
    assert any("Image: (no description given)" in c for c in seen)


def test_embedded_model_answers_are_parsed_or_rejected(tmp_path):
    llm = {"cache": {"path": str(tmp_path / "llm.sqlite")}, "max_attempts": 1}
    rows, rejects, report = _attribute(tmp_path, llm, max_tokens=60)
    assert report["rows_in"] == 2 == report["stats"].get("generations_attributed", 0) + report["rejected"]
    assert report["stats"]["llm_calls"] == 2
    assert all(r["reason"] == "invalid_answer" and "raw: " in r["detail"] for r in rejects)  # the raw answer kept
    attributed = {r["generation_id"] for r in rows}
    assert len(attributed) + len(rejects) == 2
    for row in rows:  # every parsed citation names a source sentence of its generation (IMG only with the image)
        allowed = {"0", "1", "2"} | ({"IMG"} if row["generation_id"] == "gen:a:img_raw" else set())
        assert set(row["sources"]) <= allowed


def test_an_unreadable_image_rejects_its_generation(tmp_path, httpserver: HTTPServer):
    """The item's image is read to be sent: gone since attribution_inputs listed it, or not an image,
    its generation is an image_unreadable reject naming the file; the text-only generation is asked."""
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_response(
        _reply(json.dumps({"attributions": [{"sentence": 0, "sources": [0]}, {"sentence": 1, "sources": [1]}]})))
    items = make_items(tmp_path)
    (tmp_path / "eye.png").unlink()
    gens = write_generations(tmp_path / "gens.parquet", [generation(), TEXT_GEN])
    cites = tmp_path / "cites.parquet"
    llm = {"backend": "openai", "model": "rule", "cache": {"path": str(tmp_path / "llm.sqlite")}, "max_attempts": 1,
           "openai": {"base_url": httpserver.url_for("/v1"), "max_retries": 1}}
    run_stage("attribute_self", "--input", f"generations={gens}", "--input", f"source_items={items}",
              "--output", f"citations={cites}", "--params", json.dumps({"llm": llm}))
    rejects = pq.read_table(f"{cites}.rejects.parquet").to_pylist()
    assert [(r["id"], r["reason"]) for r in rejects] == [("gen:a:img_raw", "image_unreadable")]
    assert "eye.png" in rejects[0]["detail"]
    assert {r["generation_id"] for r in pq.read_table(cites).to_pylist()} == {"gen:b:text"}
    assert len(httpserver.log) == 1
    (tmp_path / "eye.png").write_bytes(b"not an image")  # there, but not an image: the same reject, saying why
    run_stage("attribute_self", "--input", f"generations={gens}", "--input", f"source_items={items}",
              "--output", f"citations={tmp_path / 'again.parquet'}", "--params", json.dumps({"llm": llm}))
    [again] = pq.read_table(f"{tmp_path / 'again.parquet'}.rejects.parquet").to_pylist()
    assert again["reason"] == "image_unreadable" and "not_an_image" in again["detail"]


def test_an_image_path_with_a_nul_is_image_unreadable():
    """Found by the contract fuzz (seed 2718): a NUL in the item's image path raised ValueError from
    the file system layer, a traceback instead of the generation's reject."""
    from stages.attribution.attribution import cite_images
    from stages.core.stage import Reject

    with pytest.raises(Reject) as bad:
        cite_images({"has_image": True}, {"image": "items/a\x00b.png"}, store=None, vision=True)
    assert bad.value.reason == "image_unreadable" and "null byte" in bad.value.detail
