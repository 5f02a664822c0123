"""filter_entailment_text / filter_entailment_image (MAVIS App. A.3, Table 2) and decide_entailment:
P(yes) scores from a local OpenAI-compatible server on 127.0.0.1 (top_logprobs; for images it
checks the image part arrives as a base64 data URL of the stored bytes) and from the embedded
model; the threshold decision downstream re-asks no model."""
from __future__ import annotations

import base64
import io
import json
import math

import pyarrow.parquet as pq
from PIL import Image
from pytest_httpserver import HTTPServer
from werkzeug import Response

from conftest import run_stage
from stages.core.images import ImageStore
from stages.core.tables import write_table

FACTS = [{"fact_id": "i1#0.0", "instance_id": "i1", "sentence": 0, "sentence_text": "s", "text": "Ash melts inside jet engines.",
          "relevance": "relevant", "verifiable": "verifiable", "mode": "title"}]


def _docs(sha=None):
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


def _inputs(tmp_path, images=None):
    paths = {}
    for name, rows, table in (("facts", FACTS, "mavis_facts"), ("documents", _docs(), "mavis_documents"),
                              ("fact_documents", PAIRS, "mavis_fact_documents")):
        paths[name] = tmp_path / f"{name}.parquet"
        write_table(paths[name], rows, table)
    if images is not None:
        paths["images"] = tmp_path / "images.parquet"
        write_table(paths["images"], images, "images_deduped")
    return [f"--input={k}={v}" for k, v in paths.items()]


def _score(tmp_path, stage, llm, images=None, **params):
    out = tmp_path / f"{stage}.parquet"
    run_stage(stage, *_inputs(tmp_path, images), f"--output=scores={out}", "--params", json.dumps({"llm": llm, **params}))
    return (pq.read_table(out).to_pylist(), pq.read_table(f"{out}.rejects.parquet").to_pylist(),
            json.loads((tmp_path / f"{stage}.parquet.report.json").read_text()))


def _logprob_reply(p_yes: float) -> Response:
    top = [{"token": "yes", "logprob": math.log(p_yes)}, {"token": "no", "logprob": math.log(1 - p_yes)}]
    body = {"id": "c", "object": "chat.completion", "model": "rule",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "yes" if p_yes >= 0.5 else "no"},
                         "logprobs": {"content": [{"token": top[0]["token"] if p_yes >= 0.5 else "no", "logprob": -0.1, "top_logprobs": top}]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1}}
    return Response(json.dumps(body), content_type="application/json")


def _server(httpserver, seen, stored: bytes | None = None):
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
            return _logprob_reply(0.9)
        if "loaf" in text:
            return Response(json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "perhaps"}}]}),
                            content_type="application/json")
        return _logprob_reply(0.8 if "ash" in text.split("Hypothesis")[0].split("statement")[0].lower() else 0.1)
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(handler)


def _openai(tmp_path, httpserver):
    return {"backend": "openai", "model": "rule-vlm", "cache": {"path": str(tmp_path / "llm.sqlite")}, "max_attempts": 2,
            "image_store": str(tmp_path / "store"), "openai": {"base_url": httpserver.url_for("/v1"), "max_retries": 1}}


def _stored(tmp_path) -> tuple[str, bytes]:
    buffer = io.BytesIO()
    Image.new("RGB", (120, 90), (200, 60, 30)).save(buffer, "JPEG")
    data = buffer.getvalue()
    return ImageStore(tmp_path / "store").put(data, "jpg"), data


def _deduped(sha, url):
    return {"id": f"img:{sha}", "ref_id": "imgref:1", "owner_id": "i1#0.0", "query_id": "i1#0.0", "position": 0, "url": url,
            "final_url": url, "sha256": sha, "format": "jpeg", "source_format": "jpeg", "width": 120, "height": 90, "bytes": 1,
            "clip_score": None, "phash": "0" * 16, "duplicates": 0}


def test_text_scores_from_top_logprobs_and_threshold_downstream(tmp_path, httpserver: HTTPServer):
    seen = []
    _server(httpserver, seen)
    scores, rejects, report = _score(tmp_path, "filter_entailment_text", _openai(tmp_path, httpserver))
    assert {(s["doc_id"], round(s["score"], 3), s["mode"], s["modality"]) for s in scores} == {("c4:a", 0.8, "text", "text"), ("c4:b", 0.1, "text", "text")}
    assert rejects == [] and report["rows_in"] == 2  # image pairs are the other stage's
    assert all("Premise: Volcanic ash" in t or "Premise: Sourdough" in t for t, _ in seen)

    def decide(**thresholds):
        out = tmp_path / "judged.parquet"
        run_stage("decide_entailment", f"--input=fact_documents={tmp_path / 'fact_documents.parquet'}",
                  f"--input=scores={tmp_path / 'filter_entailment_text.parquet'}", f"--output=judged={out}",
                  "--params", json.dumps(thresholds))
        return {r["doc_id"]: r["entailed"] for r in pq.read_table(out).to_pylist()}

    assert decide() == {"c4:a": True, "c4:b": False}
    calls = len(seen)
    assert decide(text_threshold=0.05) == {"c4:a": True, "c4:b": True} and len(seen) == calls  # no model asked


def test_image_path_sends_the_stored_image_and_the_stand_in_says_so(tmp_path, httpserver: HTTPServer):
    seen = []
    sha, data = _stored(tmp_path)
    _server(httpserver, seen, stored=data)
    images = [_deduped(sha, "https://img.example/1.jpg")]  # webimg:2's image was dropped by the image stages
    scores, rejects, _ = _score(tmp_path, "filter_entailment_image", _openai(tmp_path, httpserver), images=images, vision=True)
    assert [(s["doc_id"], round(s["score"], 3), s["mode"]) for s in scores] == [("webimg:1", 0.9, "image")]
    assert [(r["id"], r["reason"]) for r in rejects] == [("i1#0.0|webimg:2", "image_not_kept")]
    assert 'entails the statement "Ash melts inside jet engines."' in seen[0][0] and "not shown" not in seen[0][0]

    images.append(_deduped(sha, "https://img.example/2.jpg"))
    seen.clear()
    scores, rejects, report = _score(tmp_path, "filter_entailment_image", _openai(tmp_path, httpserver), images=images, vision=False)
    assert [(s["doc_id"], s["mode"]) for s in scores] == [("webimg:1", "text_stand_in")]
    assert [(r["id"], r["reason"]) for r in rejects] == [("i1#0.0|webimg:2", "invalid_answer")] and "perhaps" in rejects[0]["detail"]
    assert all(urls == [] for _, urls in seen) and 'describes it as: "Photo: ash in an engine"' in seen[0][0]


def test_embedded_model_scores_text_pairs(tmp_path):
    llm = {"cache": {"path": str(tmp_path / "llm.sqlite")}}
    scores, rejects, report = _score(tmp_path, "filter_entailment_text", llm)
    assert len(scores) + len(rejects) == 2 and report["stats"]["llm_calls"] == 2
    assert all(0.0 <= s["score"] <= 1.0 and s["model"].startswith("SmolLM2") for s in scores)
