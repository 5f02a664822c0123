"""The eval_m2rag stages through their CLIs against a local OpenAI-compatible server on 127.0.0.1
that plays candidate and judge by rule (the prompt's first words decide the answer), on the
fixture release: images reach a vision model in place as base64 data URLs of thumbnails, an image
without a released file is shown by its caption, a placeholder to no image is counted and not
judged, an off-scale judge score is retried then kept as a failed (missing) judgement with its raw
text, and the report's numbers follow by hand."""
from __future__ import annotations

import base64
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import duckdb
import pyarrow.parquet as pq
import pytest
from PIL import Image

from conftest import run_stage
from m2rag_eval_fixtures import make_m2rag_release

ANSWER = ("Blue light is scattered most by the air.\n\n![scattering diagram](image_1)\n\n"
          "Shorter wavelengths scatter more. ![nothing](image_9)\n\nSo the sky looks blue.")


def rule(text: str, has_image: bool) -> str:
    """The scripted answer to one rendered prompt (and whether an image came with it)."""
    if "# Answer segments" in text:  # multi-stage step 2
        return json.dumps({"placements": [{"segment": 2, "images": [3]}]})
    if "Rewrite the segment" in text:  # step 3
        return "Shorter wavelengths scatter more, as the photo below shows."
    if text.startswith("# Question") and text.endswith("Write the answer to the question."):  # step 1: text only
        return "Blue light is scattered most.\n\nShorter wavelengths scatter more.\n\nSo the sky looks blue."
    if text.startswith("# Question"):
        return ANSWER
    if "Rate the fluency" in text:
        return json.dumps({"explanation": "clear", "score": 8})
    if "Rate how relevant" in text:
        return json.dumps({"explanation": "8/10", "score": 11})  # off the scale: invalid every time
    if "verify whether the context was useful" in text:
        return json.dumps({"reason": "r", "verdict": 0 if "Page 2" in text else 1})
    if "break each sentence" in text:
        return json.dumps({"statements": ["Blue light scatters most.", "The sky is green."]})
    if "Judge the faithfulness" in text:
        return json.dumps({"verdicts": [{"reason": "r", "verdict": 1}, {"reason": "r", "verdict": 0}]})
    if "Rate how coherent" in text:
        return json.dumps({"explanation": "fits", "score": 6})
    if "Rate how much the image helps" in text:
        return json.dumps({"explanation": "helps", "score": 4})
    if "explicitly referred to" in text:
        return json.dumps({"explanation": "no mention", "score": 0})
    if "should be inserted" in text:
        return json.dumps({"explanation": "adds", "score": 1 if has_image else 0})
    raise AssertionError(f"unexpected prompt: {text[:200]}")


@pytest.fixture
def server():
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            content = body["messages"][-1]["content"]
            text = content if isinstance(content, str) else "".join(p["text"] for p in content if p["type"] == "text")
            seen.append(body)
            has_image = not isinstance(content, str) and any(p["type"] == "image_url" for p in content)
            data = json.dumps({"choices": [{"message": {"content": rule(text, has_image)}, "finish_reason": "stop"}],
                               "usage": {"prompt_tokens": 100, "completion_tokens": 10}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", seen
    httpd.shutdown()


def test_generate_judge_report_with_images(tmp_path, server):
    url, seen = server
    release = make_m2rag_release(tmp_path / "rel")
    llm = {"backend": "openai", "model": "scripted", "openai": {"base_url": url, "concurrency": 1},
           "cache": {"path": str(tmp_path / "llm.sqlite"), "mode": "use"}, "image_store": str(tmp_path / "store"), "max_attempts": 2}
    responses = tmp_path / "responses.parquet"
    run_stage("m2rag_generate", "--input", f"release={release}", "--output", f"responses={responses}",
              "--params", json.dumps({"model": "scripted", "approach": "single_stage", "llm": llm, "thumbnail": 16}))
    [body] = seen
    parts = body["messages"][-1]["content"]
    kinds = [p["type"] for p in parts]
    # page 1's image in page 1, the auxiliary image in its own section; page 2's image has no file: its caption stands in
    assert kinds == ["text", "image_url", "text", "image_url", "text"]
    assert "Page 2" not in parts[0]["text"] and "Page 2" in parts[2]["text"] and "panel 2" in parts[2]["text"]
    assert "# Additional images" in parts[2]["text"]
    for part in (parts[1], parts[3]):
        head, data = part["image_url"]["url"].split(",", 1)
        assert head == "data:image/png;base64"
        assert max(Image.open(io.BytesIO(base64.b64decode(data))).size) <= 16  # a thumbnail of the 40 x 40 image
    [row] = pq.read_table(responses).to_pylist()
    assert row["vision"] and [i["shown"] for i in row["inputs"]] == ["image", "caption", "image"]
    assert [o["n"] for o in row["output_images"]] == [1] and row["unresolved"] == ["![nothing](image_9)"]
    assert (row["calls"], row["prompt_tokens"], row["completion_tokens"]) == (1, 100, 10)

    judgements = tmp_path / "judgements.parquet"
    seen.clear()
    run_stage("m2rag_judge", "--input", f"responses={responses}", "--output", f"judgements={judgements}",
              "--params", json.dumps({"judge": "scripted", "llm": llm}))
    rows = pq.read_table(judgements).to_pylist()
    by = {(r["metric"], r["position"]): r for r in rows}
    assert by[("fluency", 0)]["score"] == 8
    relevance = by[("relevance", 0)]
    assert relevance["status"] == "failed" and relevance["score"] is None and '"score": 11' in relevance["raw"]
    rejects = pq.read_table(f"{judgements}.rejects.parquet").to_pylist()
    assert [r["reason"] for r in rejects] == ["invalid_answer"] and "raw:" in rejects[0]["detail"]
    # contexts: page 1, page 2, the caption of image_1; only image_1 is judged (image_9 points to no image)
    assert [by[("context_precision", k)]["score"] for k in range(3)] == [1, 0, 1]
    assert [by[("faithfulness", k)]["score"] for k in range(2)] == [1, 0]
    assert {m for m, _ in by if m.startswith("image_") and m != "image_recall"} == {"image_coherence", "image_helpfulness", "image_reference"}
    assert by[("image_coherence", 0)]["mode"] == "vision"
    image_calls = [b for b in seen if "Rate how coherent" in json.dumps(b)]
    assert [p["type"] for p in image_calls[0]["messages"][-1]["content"]].count("image_url") == 1
    # recall: unused inputs 2 (no file: its caption, not wanted) and 3 (aux, seen: wanted)
    assert (by[("image_recall", 2)]["score"], by[("image_recall", 2)]["mode"]) == (0, "caption")
    assert by[("image_recall", 3)]["score"] == 1

    report, db = tmp_path / "report.md", tmp_path / "evaluation.duckdb"
    run_stage("m2rag_report", "--input", f"responses={responses}", "--input", f"judgements={judgements}",
              "--output", f"report={report}", "--output", f"db={db}")
    con = duckdb.connect(str(db), read_only=True)
    got = dict(con.execute("select metric, value from summary where scoring = 'strict'").fetchall())
    assert got["fluency"] == 0.8 and got["relevance"] is None  # failed: missing, never 0
    assert got["context_precision"] == pytest.approx(5 / 6) and got["faithfulness"] == 0.5
    assert (got["image_coherence"], got["image_helpfulness"], got["image_reference"]) == (0.6, 0.4, 0.0)
    assert got["image_recall"] == 0.5  # used 1, unused 3 wanted
    assert got["image_recall_count"] == 0.5  # inputs scored >= 8: 1 (9.0, used) and 3 (8.0, not)
    seven = [0.8, 5 / 6, 0.5, 0.6, 0.4, 0.0, 0.5]
    assert got["overall"] == pytest.approx(sum(seven) / 7) and got["overall_over"] == 7
    ref = dict(con.execute("select metric, value from summary where scoring = 'reference'").fetchall())
    assert ref["relevance"] == pytest.approx(1.1)  # the public parser: last integer of the raw text, 11
    text = report.read_text()
    assert "strict scoring" in text and "reference scoring" in text and "(1 missing)" in text


def test_multi_stage_places_and_refines(tmp_path, server):
    url, seen = server
    release = make_m2rag_release(tmp_path / "rel")
    llm = {"backend": "openai", "model": "scripted", "openai": {"base_url": url, "concurrency": 1},
           "cache": {"path": str(tmp_path / "llm.sqlite"), "mode": "use"}, "image_store": str(tmp_path / "store")}
    responses = tmp_path / "responses.parquet"
    run_stage("m2rag_generate", "--input", f"release={release}", "--output", f"responses={responses}",
              "--params", json.dumps({"model": "scripted", "approach": "multi_stage", "llm": llm}))
    [row] = pq.read_table(responses).to_pylist()
    assert row["response"] == ("Blue light is scattered most.\n\nShorter wavelengths scatter more, as the photo below shows.\n\n"
                               "![A photo of a clear blue sky at noon](image_3)\n\nSo the sky looks blue.")
    assert [o["n"] for o in row["output_images"]] == [3] and json.loads(row["placements_json"]) == {"2": [3]}
    assert (row["calls"], row["prompt_tokens"], row["completion_tokens"]) == (3, 300, 30)  # text, interleave, one refinement
    refine_call = seen[-1]["messages"][-1]["content"]
    assert [p["type"] for p in refine_call].count("image_url") == 1  # the chosen image, shown to the vision model
