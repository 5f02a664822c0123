"""score_elements: scores parsed exactly as an integer 0-10 (in range kept; out of range,
non-integer and missing retried then rejected with the raw text), through an OpenAI-compatible
server on 127.0.0.1 that answers by rule and checks that images arrive as base64 data URLs; and
the embedded text-only model scoring an image through its text stand-in."""
from __future__ import annotations

import base64
import hashlib
import io
import json
import re

import pyarrow.parquet as pq
from PIL import Image
from pytest_httpserver import HTTPServer
from werkzeug import Response

from conftest import run_stage
from stages.core.images import ImageStore
from stages.core.tables import write_table

# the query text names the answer the server gives: a score in range, out of range, a non-integer, none
CASES = {"q:in": "7", "q:out": "11", "q:frac": "6.5", "q:missing": "none"}


def query_rows(ids_texts):
    return [{"id": qid, "question": text, "body": "", "subreddit": "", "answers": [], "source": "test", "clear": 1, "clear_analysis": "",
             "needs_images": 1, "images_analysis": "", "categories": [2], "category_names": ["Science"], "category_analysis": "",
             "sample_category": 2} for qid, text in ids_texts]


def element(qid, order, kind, text, url="", n=None):
    return {"element_id": f"el:{qid}:{order}", "page_id": f"page:{qid}", "query_id": qid, "order": order, "kind": kind,
            "text": text, "image_url": url, "placeholder": n, "chars": len(text)}


def score(tmp_path, elements, queries, llm, images=None, check=True):
    el, qs, out = tmp_path / "elements.parquet", tmp_path / "queries.parquet", tmp_path / "scored.parquet"
    write_table(el, elements, "retrieval_elements")
    write_table(qs, queries, "m2rag_sampled_queries")
    args = ["--input", f"elements={el}", "--input", f"queries={qs}", "--output", f"scored_elements={out}", "--params", json.dumps({"llm": llm})]
    if images is not None:
        write_table(tmp_path / "images.parquet", images, "images_cached")
        args += ["--input", f"images={tmp_path / 'images.parquet'}"]
    result = run_stage("score_elements", *args, check=check)
    if not check:
        return result
    rejects = pq.read_table(out.with_name(out.name + ".rejects.parquet")).to_pylist()
    return pq.read_table(out).to_pylist(), rejects, json.loads(out.with_name(out.name + ".report.json").read_text())


def test_scores_parsed_exactly_and_images_sent_as_data_urls(tmp_path, httpserver: HTTPServer):
    store = ImageStore(tmp_path / "images")
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(buffer, "JPEG")
    sha = store.put(buffer.getvalue(), "jpg")
    seen_images = []

    def answer(request):
        content = request.get_json()["messages"][-1]["content"]
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        text = " ".join(part.get("text", "") for part in parts)
        for part in parts:
            if part["type"] == "image_url":
                head, data = part["image_url"]["url"].split(",", 1)
                seen_images.append((head, hashlib.sha256(base64.b64decode(data)).hexdigest()))
        said = re.search(r"ANSWER (\S+)", text.split("# User Query" if "# User Query" in text else "# Question", 1)[1])[1]
        field = {} if said == "none" else {"score": float(said) if "." in said else int(said)}
        reply = {"analysis": "relevant enough", **field} if "# Web Page Text" in text else field
        body = {"id": "c1", "object": "chat.completion", "model": "scorer",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": json.dumps(reply)}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 3}}
        return Response(json.dumps(body), content_type="application/json")

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(answer)
    queries = query_rows([(qid, f"ANSWER {said} why?") for qid, said in CASES.items()])
    elements = [element(qid, 0, "text", f"Some text about {qid} <image_1>.") for qid in CASES]
    elements += [element(qid, 1, "image", "a red square", f"https://x.example/{qid}.jpg", 1) for qid in CASES]
    images = [{"id": f"img:{sha}", "ref_id": f"imgref:{qid}", "owner_id": f"page:{qid}", "query_id": qid, "position": 0,
               "url": f"https://x.example/{qid}.jpg", "final_url": "", "sha256": sha, "format": "jpeg", "source_format": "jpeg",
               "width": 64, "height": 48, "bytes": len(buffer.getvalue())} for qid in CASES]
    llm = {"backend": "openai", "model": "scorer", "cache": {"path": str(tmp_path / "llm.sqlite")}, "image_store": str(store.root),
           "max_attempts": 2, "openai": {"base_url": httpserver.url_for("/v1"), "max_retries": 1}}
    rows, rejects, report = score(tmp_path, elements, queries, llm, images)

    # in range: kept with its score; the text piece keeps its analysis; the image was seen as an image
    assert sorted((r["kind"], r["score"], r["mode"]) for r in rows) == [("image", 7, "image"), ("text", 7, "text")]
    text_row = next(r for r in rows if r["kind"] == "text")
    assert text_row["analysis"] == "relevant enough" and next(r for r in rows if r["kind"] == "image")["image_sha256"] == sha
    # out of range, non-integer, missing: invalid, retried (max_attempts 2), rejected with the raw answer
    assert sorted(r["id"] for r in rejects) == sorted(f"el:{q}:{o}" for q in ("q:out", "q:frac", "q:missing") for o in (0, 1))
    assert all(r["reason"] == "invalid_answer" and "schema:" in r["detail"] and "raw: {" in r["detail"] for r in rejects)
    assert any('"score": 11' in r["detail"] for r in rejects) and any('"score": 6.5' in r["detail"] for r in rejects)
    assert report["rows_in"] == 8 and report["stats"]["llm_invalid"] == 12 and report["stats"]["llm_calls"] == 2 + 2 * 6
    # every image request carried the stored JPEG as a base64 data URL
    assert seen_images and set(seen_images) == {("data:image/jpeg;base64", sha)}


def test_text_only_scorer_uses_the_image_text_stand_in(tmp_path):
    queries = query_rows([("q:sky", "Why is the sky blue?")])
    elements = [element("q:sky", 0, "text", "Sunlight scatters off air molecules; blue light scatters most. <image_1> So the sky looks blue."),
                element("q:sky", 1, "image", "Diagram of Rayleigh scattering", "https://x.example/sky.jpg", 1),
                element("q:other", 0, "text", "An element of a query that is not sampled.")]
    rows, rejects, report = score(tmp_path, elements, queries, {"cache": {"path": str(tmp_path / "llm.sqlite")}})
    assert [r["reason"] for r in rejects] == ["unknown_query"]
    by_kind = {r["kind"]: r for r in rows}
    assert by_kind["image"]["mode"] == "text_stand_in" and by_kind["text"]["mode"] == "text" and by_kind["image"]["image_sha256"] == ""
    assert all(isinstance(r["score"], int) and 0 <= r["score"] <= 10 for r in rows) and by_kind["text"]["analysis"]
    assert report["rows_in"] == 3 == len(rows) + report["rejected"]
