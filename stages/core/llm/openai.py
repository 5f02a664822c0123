"""The openai backend: any OpenAI-compatible /chat/completions endpoint (hosted, `vllm serve`,
llama_cpp.server), `concurrency` requests in flight, retries on 429/5xx/timeouts honouring
Retry-After (stages.core.retry), the key from the environment variable `api_key_env` names. Images
go as data URLs before the last user message's text, or in place where the text marks their slots
(IMAGE_SLOT); the vllm backend sends the same messages."""
from __future__ import annotations

import base64
import os
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Iterator

import requests

from stages.core.retry import RetriesExhausted, RetryPolicy, read_body, with_retries

from .calls import Call, Result, yes_probability
from .settings import LLMError

_MIME = {"jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "gif": "image/gif", "webp": "image/webp"}


def _data_url(sha: str, path: Path) -> str:
    mime = _MIME.get(path.suffix.lstrip(".").lower(), "application/octet-stream")
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


# A prompt that places its images in the text (M2RAG §5.2: image tokens at their original positions)
# writes this marker once per attached image, in the order of the request's images.
IMAGE_SLOT = "<|image|>"


def openai_messages(call: Call) -> list[dict]:
    """Chat messages in the OpenAI shape, images as data URLs before the last user message's text,
    or, when that text holds one IMAGE_SLOT per image, each image in its slot."""
    messages = [dict(m) for m in call.messages]
    if call.images:
        last = messages[-1]
        images = [{"type": "image_url", "image_url": {"url": _data_url(sha, path)}} for sha, path in call.images]
        pieces = last["content"].split(IMAGE_SLOT)
        if len(pieces) == len(images) + 1:
            parts = [{"type": "text", "text": pieces[0]}] if pieces[0] else []
            for image, text in zip(images, pieces[1:]):
                parts += [image] + ([{"type": "text", "text": text}] if text else [])
            last["content"] = parts
        else:
            last["content"] = images + [{"type": "text", "text": last["content"]}]
    return messages


class OpenAIBackend:
    @staticmethod
    def model_id(settings: dict) -> str:
        return settings["model"]

    def __init__(self, settings: dict, count):
        opts = settings["openai"]
        self.model = settings["model"]
        self.url = opts["base_url"].rstrip("/") + "/chat/completions"
        self.concurrency = opts["concurrency"]
        self.timeout = opts["timeout_s"]
        self.logprobs = opts["logprobs"]
        self.response_format = opts["response_format"]
        self.policy = RetryPolicy(attempts=opts["max_retries"])
        self.count = count
        self.session = requests.Session()
        self.session.max_redirects = 5
        adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=self.concurrency)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        if opts["api_key_env"]:
            key = os.environ.get(opts["api_key_env"])
            if not key:
                raise LLMError(f"llm.openai.api_key_env names {opts['api_key_env']}, which is not set in the environment")
            self.session.headers["Authorization"] = f"Bearer {key}"

    def body(self, call: Call) -> dict:
        sampling = call.sampling
        body: dict[str, Any] = {"model": self.model, "messages": openai_messages(call),
                                "temperature": sampling.get("temperature", 0.0), "max_tokens": sampling.get("max_tokens", 256)}
        for key in ("top_p", "seed"):
            if sampling.get(key) is not None:
                body[key] = sampling[key]
        if call.kind == "json" and self.response_format == "json_schema":
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "answer", "schema": call.schema, "strict": True}}
        elif call.kind == "json" and self.response_format == "json_object":
            body["response_format"] = {"type": "json_object", "schema": call.schema}
        if call.kind == "yesno" and self.logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = 20
        return body

    def _post(self, body: dict) -> requests.Response:
        """One try; the answer is read in full within timeout_s (a dripping server is cut off)."""
        response = self.session.post(self.url, json=body, timeout=self.timeout, stream=True)
        read_body(response, self.timeout)
        return response

    def _one(self, call: Call) -> Result:
        body = self.body(call)
        try:
            response = with_retries(lambda: self._post(body), self.policy,
                                    on_retry=lambda attempt, why: self.count("llm_http_retries"))
        except RetriesExhausted as err:
            raise LLMError(f"openai backend {self.url}: {err}") from None
        except requests.RequestException as err:  # a redirect loop, a bad URL...
            raise LLMError(f"openai backend {self.url}: {type(err).__name__}: {err}") from None
        if response.status_code != 200:
            return Result(response.text[:2000], error=f"backend: HTTP {response.status_code} from {self.url}")
        try:
            data = response.json()
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
            usage = data.get("usage") or {}
            content = (choice.get("logprobs") or {}).get("content") or []
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as err:
            return Result(response.text[:2000], error=f"backend: malformed response from {self.url}: {type(err).__name__}: {err}")
        p_yes = None
        if call.kind == "yesno" and content:
            first = content[0]
            p_yes = yes_probability([(t["token"], t["logprob"]) for t in first.get("top_logprobs") or [first]])
        return Result(text, p_yes, usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0),
                      finish_reason=choice.get("finish_reason"))

    def generate(self, calls: list[Call]) -> Iterator[tuple[int, Result]]:
        pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="llm-openai")
        try:
            futures = {pool.submit(self._one, call): i for i, call in enumerate(calls)}
            for future in as_completed(futures):
                yield futures[future], future.result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        self.session.close()
