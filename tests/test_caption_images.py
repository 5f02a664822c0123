"""caption_images (M2RAG §5.2) and score_elements' image scoring (figure 9) of page and auxiliary
images, against an OpenAI-compatible server on 127.0.0.1 that checks the image parts it receives:
base64 data URLs holding the stored bytes, or, above llm.image_max_side, a copy scaled to that
longest side; the page context in the caption prompt; an invalid caption rejected with its raw
text. And the embedded text-only model captioning through the text stand-in."""
from __future__ import annotations

import base64
import hashlib
import io
import json

import pyarrow.parquet as pq
from PIL import Image
from pytest_httpserver import HTTPServer
from werkzeug import Response

from conftest import run_stage
from stages.core.images import ImageStore
from stages.core.tables import write_table

MAX_SIDE = 128


def put(store, size, colour):
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, "JPEG")
    return store.put(buffer.getvalue(), "jpg"), buffer.getvalue()


def image_row(owner, query, url, sha, size, data):
    return {"id": f"img:{sha}", "ref_id": f"imgref:{owner}:{url}", "owner_id": owner, "query_id": query, "position": 0, "url": url,
            "final_url": url, "sha256": sha, "format": "jpeg", "source_format": "jpeg", "width": size[0], "height": size[1], "bytes": len(data)}


def ref_row(owner, query, source, position, url, alt, context):
    return {"id": f"ref:{owner}:{url}", "owner_id": owner, "query_id": query, "source": source, "position": position, "url": url,
            "alt": alt, "context": context}


class VisionServer:
    """Answers chat completions by rule and records, per request, the decoded images it was sent."""

    def __init__(self, httpserver: HTTPServer):
        self.requests = []
        httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(self.answer)
        self.url = httpserver.url_for("/v1")

    def answer(self, request):
        content = request.get_json()["messages"][-1]["content"]
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        text = " ".join(p.get("text", "") for p in parts)
        images = []
        for part in parts:
            if part["type"] == "image_url":
                head, data = part["image_url"]["url"].split(",", 1)
                raw = base64.b64decode(data)
                with Image.open(io.BytesIO(raw)) as im:
                    images.append((head, hashlib.sha256(raw).hexdigest(), im.size))
        self.requests.append((text, images))
        if "detailed caption" in text:
            reply = {"caption": "" if "EMPTY" in text else f"A chart seen as {images[0][2][0]}x{images[0][2][1]} pixels."}
        else:
            reply = {"score": 8 if "aux" in text or images else 0}
        body = {"id": "c1", "object": "chat.completion", "model": "vlm",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": json.dumps(reply)}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 3}}
        return Response(json.dumps(body), content_type="application/json")


def fixture_images(tmp_path):
    store = ImageStore(tmp_path / "store")
    big, big_data = put(store, (400, 300), (200, 30, 30))  # scaled to 128x96 before it is sent
    small, small_data = put(store, (64, 48), (30, 200, 30))  # sent as stored
    images = [image_row("page:q1", "q1", "https://x.example/chart.jpg", big, (400, 300), big_data),
              image_row("q1", "q1", "https://aux.example/1.jpg", small, (64, 48), small_data)]
    refs = [ref_row("page:q1", "q1", "page", 1, "https://x.example/chart.jpg", "Chart of rainfall", "Rainfall peaks in July, as the chart shows."),
            ref_row("q1", "q1", "aux", 1, "https://aux.example/1.jpg", "aux picture", "EMPTY snippet")]
    write_table(tmp_path / "images.parquet", images, "images_cached")
    write_table(tmp_path / "refs.parquet", refs, "m2rag_image_refs")
    return store, (big, small)


def llm(tmp_path, store, url):
    return {"backend": "openai", "model": "vlm", "cache": {"path": str(tmp_path / "llm.sqlite")}, "image_store": str(store.root),
            "image_max_side": MAX_SIDE, "max_attempts": 2, "openai": {"base_url": url, "max_retries": 1}}


def test_captions_see_the_scaled_image_and_its_page_context(tmp_path, httpserver: HTTPServer):
    server = VisionServer(httpserver)
    store, (big, small) = fixture_images(tmp_path)
    out = tmp_path / "captions.parquet"
    run_stage("caption_images", "--input", f"images={tmp_path / 'images.parquet'}", "--input", f"refs={tmp_path / 'refs.parquet'}",
              "--output", f"captions={out}", "--params", json.dumps({"llm": llm(tmp_path, store, server.url)}))
    rows = pq.read_table(out).to_pylist()
    rejects = pq.read_table(out.with_name(out.name + ".rejects.parquet")).to_pylist()
    # the page image: captioned as an image, scaled to the configured longest side, with its alt text and surrounding text
    assert [(r["owner_id"], r["sha256"], r["mode"], r["caption"]) for r in rows] == [("page:q1", big, "image", "A chart seen as 128x96 pixels.")]
    page_request = next(t for t, _ in server.requests if "Chart of rainfall" in t)
    assert "Rainfall peaks in July, as the chart shows." in page_request
    # the scaled copy is stored by its own hash: the data URL holds exactly those bytes
    sent = {image for _, images in server.requests for image in images}
    scaled = next(s for _, s, size in sent if size == (128, 96))
    assert ("data:image/jpeg;base64", small, (64, 48)) in sent and store.find(scaled) is not None and scaled != big
    # an empty caption is off-schema: retried (max_attempts 2), then rejected with the raw answer
    assert [(r["id"], r["reason"]) for r in rejects] == [("imgref:q1:https://aux.example/1.jpg", "invalid_answer")]
    assert '"caption": ""' in rejects[0]["detail"]
    report = json.loads(out.with_name(out.name + ".report.json").read_text())
    assert report["rows_in"] == 2 and report["stats"]["llm_calls"] == 3


def test_image_scores_of_kept_page_images_and_auxiliary_images(tmp_path, httpserver: HTTPServer):
    server = VisionServer(httpserver)
    store, (big, small) = fixture_images(tmp_path)
    question = {"id": "q1", "question": "Why does it rain in July?", "body": "", "subreddit": "", "answers": [], "source": "t", "clear": 1,
                "clear_analysis": "", "needs_images": 1, "images_analysis": "", "categories": [2], "category_names": ["Science"],
                "category_analysis": "", "sample_category": 2}
    elements = [{"element_id": f"el:{n}", "page_id": "page:q1", "query_id": "q1", "order": n, "kind": kind, "text": text, "image_url": url,
                 "placeholder": n or None, "chars": len(text)}
                for n, kind, text, url in [(0, "text", "Rain <image_1> <image_2>", ""), (1, "image", "Chart of rainfall", "https://x.example/chart.jpg"),
                                           (2, "image", "A banner", "https://ads.example/banner.jpg")]]
    write_table(tmp_path / "q.parquet", [question], "m2rag_sampled_queries")
    write_table(tmp_path / "e.parquet", elements, "retrieval_elements")
    out = tmp_path / "scored.parquet"
    run_stage("score_elements", "--input", f"elements={tmp_path / 'e.parquet'}", "--input", f"queries={tmp_path / 'q.parquet'}",
              "--input", f"images={tmp_path / 'images.parquet'}", "--input", f"refs={tmp_path / 'refs.parquet'}", "--output", f"scored_elements={out}",
              "--params", json.dumps({"kinds": ["image"], "llm": llm(tmp_path, store, server.url)}))
    rows = {r["kind"]: r for r in pq.read_table(out).to_pylist()}
    rejects = pq.read_table(out.with_name(out.name + ".rejects.parquet")).to_pylist()
    # kinds [image]: the text piece is not scored here; the banner was dropped upstream (not among the kept images)
    assert sorted(rows) == ["aux_image", "image"] and [(r["id"], r["reason"]) for r in rejects] == [("el:2", "image_not_kept")]
    assert (rows["image"]["score"], rows["image"]["mode"], rows["image"]["image_sha256"]) == (8, "image", big)
    aux = rows["aux_image"]
    assert (aux["element_id"], aux["page_id"], aux["order"], aux["text"], aux["image_sha256"], aux["mode"]) == (
        "imgref:q1:https://aux.example/1.jpg", "", 1, "aux picture", small, "image")
    assert sorted(size for _, images in server.requests for _, _, size in images) == [(64, 48), (128, 96)]


def test_embedded_model_captions_through_the_text_stand_in(tmp_path):
    store, _ = fixture_images(tmp_path)
    out = tmp_path / "captions.parquet"
    write_table(tmp_path / "one.parquet", pq.read_table(tmp_path / "images.parquet").to_pylist()[:1], "images_cached")
    run_stage("caption_images", "--input", f"images={tmp_path / 'one.parquet'}", "--input", f"refs={tmp_path / 'refs.parquet'}",
              "--output", f"captions={out}", "--params", json.dumps({"llm": {"cache": {"path": str(tmp_path / "llm.sqlite")}}}))
    rows = pq.read_table(out).to_pylist()
    rejects = pq.read_table(out.with_name(out.name + ".rejects.parquet")).to_pylist()
    assert len(rows) + len(rejects) == 1
    assert all(r["mode"] == "text_stand_in" and r["caption"].strip() for r in rows)
    assert all(r["reason"] == "invalid_answer" for r in rejects)
