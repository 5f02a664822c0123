"""The openai backend: any OpenAI-compatible /chat/completions endpoint (hosted, `vllm serve`,
llama_cpp.server). Its requests go through the endpoint's scheduler (scheduler.py): at most
`max_in_flight` on the wire across the processes sharing `slots_dir`, each try holding a slot only
while it is on the wire; retries on 429/5xx/timeouts honour Retry-After (stages.core.retry), and
rate-limit headers pause the whole endpoint. The key comes from the environment variable
`api_key_env` names; `headers` and `extra_body` are sent with every request (`extra_body` merged
into the JSON body, and part of the cache key: it changes answers, e.g. vLLM's
`chat_template_kwargs`; headers route and authenticate, and are not). Images go as data URLs
before the last user message's text, or in place where the text marks their slots (IMAGE_SLOT);
the vllm backend sends the same messages. A json prompt's schema goes whole (`response_format:
json_schema`, which `vllm serve` enforces while decoding), or in the subset OpenAI's API takes
(`openai_strict`: no length, range or size limits, every property required), inside JSON mode
(`json_object_schema`, llama_cpp.server's extension), or not at all (`json_object`: the JSON mode
of OpenAI's and DeepSeek's APIs, which take no other key there; the prompt describes the shape;
`none`); the answer is checked against the whole schema in every case.

Every answer is untrusted input: a body over the cap that `max_answer_chars` sets, a body that is
not a chat completion, or a field of the wrong type (content that is neither text nor a list of
parts, a token count that is not a count, a log-probability entry without its number, bytes that
are not UTF-8, a malformed header or an undecodable gzip) makes that one call fail with the reason
("backend: ..."), never the job.
"""
from __future__ import annotations

import base64
import json
import math
import os
from pathlib import Path
from typing import Any

import requests

from stages.core.retry import BodyTooLarge, DeadlineAdapter, RetriesExhausted, RetryPolicy, read_body, with_retries

from .calls import Call, Result, yes_probability
from .scheduler import Endpoint, rate_limit_wait
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


class Malformed(ValueError):
    """An answer that is not a chat completion of the expected shape; the message says where."""


def _count(usage: dict, name: str) -> int:
    value = usage.get(name)
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():  # some servers send counts as strings
        return int(value)
    raise Malformed(f"usage.{name} is {value!r}, not a token count")


def _text(content: Any) -> str:
    """message.content: a string, null, or a list of parts whose text parts are joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise Malformed(f"message.content is of type {type(content).__name__}")
    texts = []
    for n, part in enumerate(content):
        if not isinstance(part, dict):
            raise Malformed(f"message.content[{n}] is of type {type(part).__name__}, not a part")
        if part.get("type") == "text":
            if not isinstance(part.get("text"), str):
                raise Malformed(f"message.content[{n}].text is not a string")
            texts.append(part["text"])
    return "".join(texts)


def _p_yes(logprobs: Any) -> float | None:
    """P(yes) from the first answer token's top log-probabilities; None when none were sent."""
    if logprobs is None:
        return None
    if not isinstance(logprobs, dict):
        raise Malformed(f"logprobs is of type {type(logprobs).__name__}")
    content = logprobs.get("content")
    if content is None:
        return None
    if not isinstance(content, list):
        raise Malformed("logprobs.content is not a list")
    if not content:
        return None
    first = content[0]
    if not isinstance(first, dict):
        raise Malformed("logprobs.content[0] is not an object")
    candidates = first.get("top_logprobs") or [first]
    if not isinstance(candidates, list):
        raise Malformed("logprobs.content[0].top_logprobs is not a list")
    pairs = []
    for n, entry in enumerate(candidates):
        if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
            raise Malformed(f"logprobs.content[0].top_logprobs[{n}] has no token")
        logprob = entry.get("logprob")
        if isinstance(logprob, bool) or not isinstance(logprob, (int, float)) or math.isnan(logprob) or logprob > 0:
            raise Malformed(f"logprobs.content[0].top_logprobs[{n}] has no log-probability (logprob {logprob!r})")
        pairs.append((entry["token"], float(logprob)))
    return yes_probability(pairs)


def read_answer(data: Any, kind: str) -> Result:
    """A Result from a decoded chat.completion; Malformed names the first field that is wrong."""
    if not isinstance(data, dict):
        raise Malformed(f"the answer is of type {type(data).__name__}, not an object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise Malformed("no choices" if not choices else f"choices is of type {type(choices).__name__}")
    choice = choices[0]
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        raise Malformed("choices[0] has no message")
    finish = choice.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise Malformed(f"finish_reason is {finish!r}")
    usage = data.get("usage") or {}
    if not isinstance(usage, dict):
        raise Malformed(f"usage is of type {type(usage).__name__}")
    p_yes = _p_yes(choice.get("logprobs")) if kind == "yesno" else None
    return Result(_text(choice["message"].get("content")), p_yes, _count(usage, "prompt_tokens"), _count(usage, "completion_tokens"),
                  finish_reason=finish)


# JSON Schema keywords OpenAI's strict structured outputs refuse (an HTTP 400 for the whole call):
# lengths, ranges and sizes. The answer is still checked against the full schema when it comes.
_NOT_STRICT = frozenset({"$schema", "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
                         "exclusiveMaximum", "multipleOf", "minItems", "maxItems", "uniqueItems", "minProperties", "maxProperties"})


def openai_strict_schema(schema: Any) -> Any:
    """`schema` in the subset OpenAI's API takes with `strict: true`: every property of an object
    required and no other allowed, a `const` as a one-value enum, the keywords in _NOT_STRICT left
    out. An optional property becomes one the model always writes, which the full schema accepts."""
    if isinstance(schema, list):
        return [openai_strict_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in ("properties", "$defs") and isinstance(value, dict):  # names, not keywords, map to schemas
            out[key] = {name: openai_strict_schema(sub) for name, sub in value.items()}
        elif key == "const":
            out["enum"] = [value]
        elif key not in _NOT_STRICT:
            out[key] = openai_strict_schema(value)
    if isinstance(schema.get("properties"), dict):
        out["required"] = list(schema["properties"])
        out["additionalProperties"] = False
    return out


class OpenAIBackend:
    @staticmethod
    def model_id(settings: dict) -> str:
        return settings["model"]

    @staticmethod
    def options(settings: dict) -> dict:
        """The request options that change answers, for the cache key."""
        extra = settings["openai"]["extra_body"]
        return {"extra_body": extra} if extra else {}

    @staticmethod
    def endpoint(settings: dict) -> tuple[str, int, str | None]:
        opts = settings["openai"]
        return opts["base_url"].rstrip("/"), opts["max_in_flight"], opts["slots_dir"] or str(Path(settings["cache"]["path"]).parent / "llm_slots")

    def __init__(self, settings: dict, count, endpoint: Endpoint):
        opts = settings["openai"]
        self.model = settings["model"]
        self.url = opts["base_url"].rstrip("/") + "/chat/completions"
        self.endpoint = endpoint
        self.timeout = opts["timeout_s"]
        self.logprobs = opts["logprobs"]
        self.response_format = opts["response_format"]
        self.extra_body = opts["extra_body"]
        # A JSON string escapes a character in at most 6 bytes (\uXXXX); 1 MiB for the rest of the answer.
        self.max_body = 6 * settings["max_answer_chars"] + (1 << 20)
        self.policy = RetryPolicy(attempts=opts["max_retries"])
        self.count = count
        self.session = requests.Session()
        self.session.max_redirects = 5
        adapter = DeadlineAdapter(pool_connections=1, pool_maxsize=opts["max_in_flight"])
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.session.headers.update(opts["headers"])
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
        if call.kind == "json" and self.response_format in ("json_schema", "openai_strict"):
            schema = call.schema if self.response_format == "json_schema" else openai_strict_schema(call.schema)
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}}
        elif call.kind == "json" and self.response_format == "json_object":  # OpenAI's and DeepSeek's JSON mode: no other key
            body["response_format"] = {"type": "json_object"}
        elif call.kind == "json" and self.response_format == "json_object_schema":  # llama_cpp.server's extension
            body["response_format"] = {"type": "json_object", "schema": call.schema}
        if call.kind == "yesno" and self.logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = 20
        body.update(self.extra_body)
        return body

    def _post(self, body: dict) -> requests.Response:
        """One try, holding an endpoint slot while on the wire; the answer is read in full within
        timeout_s (a dripping server is cut off) and at most max_body bytes."""
        with self.endpoint.slot():
            response = self.session.post(self.url, json=body, timeout=self.timeout, stream=True)
            read_body(response, self.timeout, self.max_body)
        self.endpoint.pause(rate_limit_wait(response.status_code, response.headers))
        return response

    def send(self, call: Call) -> Result:
        body = self.body(call)
        try:
            response = with_retries(lambda: self._post(body), self.policy,
                                    on_retry=lambda attempt, why: self.count("llm_http_retries"))
        except RetriesExhausted as err:
            raise LLMError(f"openai backend {self.url}: {err}") from None
        except BodyTooLarge as err:
            return Result("", error=f"backend: the answer from {self.url} is too large ({err}; llm.max_answer_chars sets the cap)")
        except (requests.exceptions.InvalidHeader, requests.exceptions.ContentDecodingError) as err:  # this answer, not the endpoint
            return Result("", error=f"backend: malformed response from {self.url}: {type(err).__name__}: {err}")
        except requests.RequestException as err:  # a redirect loop, a bad URL...
            raise LLMError(f"openai backend {self.url}: {type(err).__name__}: {err}") from None
        if response.status_code != 200:
            return Result(response.text[:2000], error=f"backend: HTTP {response.status_code} from {self.url}")
        try:
            # json.loads on the bytes decodes them strictly (requests' .json() would put U+FFFD
            # in place of bytes that are not UTF-8, and a wrong answer would be cached)
            return read_answer(json.loads(response.content), call.kind)
        except (ValueError, RecursionError) as err:  # Malformed, not JSON, or not UTF-8
            return Result(response.text[:2000], error=f"backend: malformed response from {self.url}: {err}")

    def close(self) -> None:
        self.session.close()
