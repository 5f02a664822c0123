"""Shared inputs of the MAVIS entailment stages' tests (App. A.3, Table 2): one fact, two text and two
image documents retrieved for it, and a local OpenAI-compatible server on 127.0.0.1 that answers
P(yes) through top_logprobs by rule (for images it checks the image part arrives as a base64 data
URL of the stored bytes)."""
from __future__ import annotations

import base64
import io
import json
import math

import pyarrow.parquet as pq
from PIL import Image
from werkzeug import Response

from conftest import run_stage
from stages.core.ids import content_id
from stages.core.images import ImageStore
from stages.core.tables import write_table


FACTS = [{"fact_id": "i1#0.0", "instance_id": "i1", "sentence": 0, "sentence_text": "s", "text": "Ash melts inside jet engines.",
          "relevance": "relevant", "verifiable": "verifiable", "mode": "title"}]


def docs():
    return [
        {"doc_id": "c4:a", "modality": "text", "source": "c4", "url": None, "text": "Volcanic ash melts inside jet engines.", "image_sha256": None},
        {"doc_id": "c4:b", "modality": "text", "source": "c4", "url": None, "text": "Sourdough needs wild yeast.", "image_sha256": None},
        {"doc_id": "webimg:1", "modality": "image", "source": "web_image", "url": "https://img.example/1.jpg", "text": "Photo: ash in an engine",
         "image_sha256": None},
        {"doc_id": "webimg:2", "modality": "image", "source": "web_image", "url": "https://img.example/2.jpg", "text": "Photo: a loaf",
         "image_sha256": None},
    ]


PAIRS = [{"fact_id": "i1#0.0", "doc_id": d, "rank": r, "query": FACTS[0]["text"]}
         for d, r in (("c4:a", 1), ("c4:b", 2), ("webimg:1", 1), ("webimg:2", 2))]


def inputs(tmp_path, images=None, images_table="images_deduped"):
    paths = {}
    for name, rows, table in (("facts", FACTS, "mavis_facts"), ("documents", docs(), "mavis_documents"),
                              ("fact_documents", PAIRS, "mavis_fact_documents")):
        paths[name] = tmp_path / f"{name}.parquet"
        write_table(paths[name], rows, table)
    if images is not None:
        paths["images"] = tmp_path / "images.parquet"
        write_table(paths["images"], images, images_table)
    return [f"--input={k}={v}" for k, v in paths.items()]


def run_scoring(tmp_path, stage, llm, images=None, images_table="images_deduped", **params):
    out = tmp_path / f"{stage}.parquet"
    run_stage(stage, *inputs(tmp_path, images, images_table), f"--output=scores={out}", "--params", json.dumps({"llm": llm, **params}))
    return (pq.read_table(out).to_pylist(), pq.read_table(f"{out}.rejects.parquet").to_pylist(),
            json.loads((tmp_path / f"{stage}.parquet.report.json").read_text()))


def logprob_reply(p_yes: float) -> Response:
    top = [{"token": "yes", "logprob": math.log(p_yes)}, {"token": "no", "logprob": math.log(1 - p_yes)}]
    body = {"id": "c", "object": "chat.completion", "model": "rule",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "yes" if p_yes >= 0.5 else "no"},
                         "logprobs": {"content": [{"token": top[0]["token"] if p_yes >= 0.5 else "no", "logprob": -0.1, "top_logprobs": top}]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1}}
    return Response(json.dumps(body), content_type="application/json")


def rule_server(httpserver, seen, stored: bytes | None = None):
    """Entailed when the premise (or the image's stand-in) says 'ash'; an image part must be the
    stored bytes as a base64 data URL; 'loaf' gets a non-answer (invalid after retries)."""
    def handler(request):
        body = request.get_json()
        assert body.get("logprobs") is True and body.get("top_logprobs")
        content = body["messages"][-1]["content"]
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        text = " ".join(p.get("text", "") for p in parts)
        urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
        seen.append((text, urls))
        if urls:
            assert urls == ["data:image/jpeg;base64," + base64.b64encode(stored).decode()]
            return logprob_reply(0.9)
        if "loaf" in text:
            return Response(json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "perhaps"}}]}),
                            content_type="application/json")
        return logprob_reply(0.8 if "ash" in text.split("Hypothesis")[0].split("statement")[0].lower() else 0.1)
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(handler)


def openai_llm(tmp_path, httpserver):
    return {"backend": "openai", "model": "rule-vlm", "cache": {"path": str(tmp_path / "llm.sqlite")}, "max_attempts": 2,
            "image_store": str(tmp_path / "store"), "openai": {"base_url": httpserver.url_for("/v1"), "max_retries": 1}}


def stored_image(tmp_path) -> tuple[str, bytes]:
    buffer = io.BytesIO()
    Image.new("RGB", (120, 90), (200, 60, 30)).save(buffer, "JPEG")
    data = buffer.getvalue()
    return ImageStore(tmp_path / "store").put(data, "jpg"), data


def cached_row(sha, url):
    """An images_cached row of a fact image (owner = the fact); ref_id distinct per url, the key."""
    return {"id": f"img:{sha}", "ref_id": content_id("imgref", "i1#0.0", url), "owner_id": "i1#0.0", "query_id": "i1#0.0", "position": 0,
            "url": url, "final_url": url, "sha256": sha, "format": "jpeg", "source_format": "jpeg", "width": 120, "height": 90, "bytes": 1}


def deduped_row(sha, url):
    return {**cached_row(sha, url), "clip_score": None, "phash": "0" * 16, "duplicates": 0}
