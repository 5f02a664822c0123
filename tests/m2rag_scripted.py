"""A local OpenAI-compatible server on 127.0.0.1 that plays the eval_m2rag candidate and judge by
rule (the prompt's first words decide the answer), and one single-stage generate -> judge run on the
fixture release (tests/m2rag_eval_fixtures.py) that the stage tests of m2rag_generate, m2rag_judge
and m2rag_report share (conftest.py holds the session fixtures)."""
from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

from conftest import run_stage
from local_http import LocalServer, QuietHandler
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


@contextmanager
def scripted_server(override=None):
    """`override(text)`: (HTTP status, body) to answer instead of `rule`, or None to let the rule answer."""
    seen: list[dict] = []

    class Handler(QuietHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            content = body["messages"][-1]["content"]
            text = content if isinstance(content, str) else "".join(p["text"] for p in content if p["type"] == "text")
            seen.append(body)
            has_image = not isinstance(content, str) and any(p["type"] == "image_url" for p in content)
            status, data = (override and override(text)) or (200, json.dumps({
                "choices": [{"message": {"content": rule(text, has_image)}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10}}))
            self.answer(status, data.encode())

    with LocalServer(Handler) as server:
        yield f"{server.url}/v1", seen


def scripted_llm(folder: Path, url: str, **extra) -> dict:
    return {"backend": "openai", "model": "scripted", "openai": {"base_url": url, "max_in_flight": 1},
            "cache": {"path": str(folder / "llm.sqlite"), "mode": "use"}, "image_store": str(folder / "store"), **extra}


def generate_single_stage(folder: Path) -> tuple[Path, list[dict]]:
    """m2rag_generate (single_stage, 16 px thumbnails) on the fixture release: the responses file and
    the request bodies the server saw."""
    release = make_m2rag_release(folder / "rel")
    responses = folder / "responses.parquet"
    with scripted_server() as (url, seen):
        run_stage("m2rag_generate", "--input", f"release={release}", "--output", f"responses={responses}",
                  "--params", json.dumps({"model": "scripted", "approach": "single_stage", "thumbnail": 16,
                                          "llm": scripted_llm(folder, url, max_attempts=2)}))
        return responses, list(seen)


def judge(folder: Path, responses: Path, override=None, name: str = "judgements") -> tuple[Path, list[dict]]:
    """m2rag_judge on those responses (2 attempts: the off-scale relevance score fails twice);
    `override` as in `scripted_server`, with its own cache."""
    judgements = folder / f"{name}.parquet"
    cache = {"path": str(folder / f"{name}.llm.sqlite"), "mode": "use"}
    with scripted_server(override) as (url, seen):
        run_stage("m2rag_judge", "--input", f"responses={responses}", "--output", f"judgements={judgements}",
                  "--params", json.dumps({"judge": "scripted", "llm": scripted_llm(folder, url, max_attempts=2, cache=cache)}))
        return judgements, list(seen)
