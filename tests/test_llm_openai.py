"""The openai backend against a real OpenAI-compatible server (`python -m llama_cpp.server` with the
embedded GGUF, started by the `llama_server` fixture), through a small local proxy that can answer
429 or 500 first and counts requests in flight."""
from __future__ import annotations

import collections
import json
import threading
import time

import pytest
import requests

from local_http import LocalServer, QuietHandler
from stages.core.llm import LLMClient, LLMError, LLMRequest
from stages.core.prompts import PromptLibrary


class FaultProxy:
    """Forwards POSTs to the real server; `faults` (status, headers) are answered first, in order."""

    def __init__(self, upstream: str):
        self.upstream = upstream.rsplit("/v1", 1)[0]
        self.faults: list[tuple[int, dict]] = []
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.hold_s = 0.0  # each request stays in flight at least this long, so overlap does not hang on timing
        self.headers: list[dict] = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(QuietHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with proxy.lock:
                    proxy.requests += 1
                    proxy.headers.append(dict(self.headers))
                    fault = proxy.faults.pop(0) if proxy.faults else None
                    proxy.in_flight += 1
                    proxy.max_in_flight = max(proxy.max_in_flight, proxy.in_flight)
                try:
                    time.sleep(proxy.hold_s)
                    if fault:
                        status, headers, data = fault[0], fault[1], b'{"error": "injected"}'
                    else:
                        up = requests.post(proxy.upstream + self.path, data=body, headers={"Content-Type": "application/json"}, timeout=300)
                        status, headers, data = up.status_code, {}, up.content
                finally:  # counted out before the answer is sent: the client may start its next request as soon as it has it
                    with proxy.lock:
                        proxy.in_flight -= 1
                self.answer(status, data, headers=headers.items())

        self.server = LocalServer(Handler)
        self.url = f"{self.server.url}/v1"

    def close(self):
        self.server.close()


@pytest.fixture
def proxy(llama_server):
    p = FaultProxy(llama_server)
    yield p
    p.close()


@pytest.fixture
def prompts(tmp_path):
    folder = tmp_path / "prompts"
    folder.mkdir()
    (folder / "say.md").write_text("---\nkind: text\nmax_tokens: 6\n---\nSay one word about {{ topic }}.\n")
    (folder / "yn.md").write_text("---\nkind: yesno\nmax_tokens: 2\n---\nAnswer yes or no. {{ question }}\n")
    return PromptLibrary(folder)


def client(url, tmp_path, prompts=None, stats=None, **openai):
    settings = {"backend": "openai", "model": "smollm2", "cache": {"path": str(tmp_path / "cache.sqlite")},
                "openai": {"base_url": url, "response_format": "json_object_schema", "max_in_flight": 4, **openai}}
    c = LLMClient.from_params(settings, stats=stats if stats is not None else collections.Counter())
    if prompts is not None:
        c.prompts = prompts
    return c


def test_json_answers_are_schema_checked_and_cached(llama_server, tmp_path):
    stats = collections.Counter()
    questions = ["How do volcanoes erupt?", "Why is the sky blue?"]
    requests_ = [LLMRequest(f"q{i}", "m2rag_query_clear", {"text": q}) for i, q in enumerate(questions)]
    with client(llama_server, tmp_path, stats=stats) as c:
        answers = c.run(requests_)
    assert [a.id for a in answers] == ["q0", "q1"]
    for answer in answers:
        assert answer.ok, answer.detail
        assert answer.value["label"] in (0, 1) and 0 < len(answer.value["analysis"]) <= 300
        assert json.loads(answer.raw) == answer.value
    assert stats["llm_calls"] >= 2 and stats["llm_prompt_tokens"] > 0 and stats["llm_completion_tokens"] > 0
    again = collections.Counter()
    with client(llama_server, tmp_path, stats=again) as c:
        cached = c.run(requests_)
    assert [a.raw for a in cached] == [a.raw for a in answers] and all(a.cached for a in cached)
    assert again["llm_calls"] == 0 and again["llm_cache_hits"] == 2


def test_concurrency_bounded_and_answers_in_order(proxy, tmp_path, prompts):
    topics = [f"topic number {i}" for i in range(8)]
    proxy.hold_s = 0.5  # a tiny model can answer before the next request starts on a busy machine
    with client(proxy.url, tmp_path, prompts, max_in_flight=3) as c:
        answers = c.run([LLMRequest(t, "say", {"topic": t}) for t in topics])
    assert [a.id for a in answers] == topics
    assert all(a.ok for a in answers)
    assert proxy.requests == 8
    assert proxy.max_in_flight == 3


def test_429_with_retry_after_then_success(proxy, tmp_path, prompts):
    proxy.faults = [(429, {"Retry-After": "1"})]
    stats = collections.Counter()
    started = time.monotonic()
    with client(proxy.url, tmp_path, prompts, stats=stats) as c:
        (answer,) = c.run([LLMRequest("a", "say", {"topic": "rain"})])
    assert answer.ok and answer.value
    assert proxy.requests == 2 and stats["llm_http_retries"] == 1
    assert time.monotonic() - started >= 1.0  # Retry-After honoured


def test_500_then_success(proxy, tmp_path, prompts):
    proxy.faults = [(500, {})]
    stats = collections.Counter()
    with client(proxy.url, tmp_path, prompts, stats=stats) as c:
        (answer,) = c.run([LLMRequest("a", "say", {"topic": "snow"})])
    assert answer.ok and proxy.requests == 2 and stats["llm_http_retries"] == 1


def test_outage_fails_the_job_instead_of_guessing(proxy, tmp_path, prompts):
    proxy.faults = [(503, {"Retry-After": "0"})] * 2
    with client(proxy.url, tmp_path, prompts, max_retries=2) as c:
        with pytest.raises(LLMError, match="gave up after 2 attempts: HTTP 503"):
            c.run([LLMRequest("a", "say", {"topic": "fog"})])


def test_yes_no_with_probability_from_logprobs(llama_server, tmp_path, prompts):
    with client(llama_server, tmp_path, prompts) as c:
        answers = c.run([LLMRequest("a", "yn", {"question": "Is water wet?"}), LLMRequest("b", "yn", {"question": "Is fire cold?"})])
    for answer in answers:
        assert answer.ok and answer.value in ("yes", "no"), answer.detail
        assert answer.p_yes is not None and 0.0 < answer.p_yes < 1.0, answer.p_yes


def test_api_key_comes_from_the_named_environment_variable(proxy, tmp_path, prompts, monkeypatch):
    monkeypatch.delenv("CITEFORGE_TEST_KEY", raising=False)
    with pytest.raises(LLMError, match="CITEFORGE_TEST_KEY"):
        client(proxy.url, tmp_path, prompts, api_key_env="CITEFORGE_TEST_KEY").run([LLMRequest("a", "say", {"topic": "x"})])
    monkeypatch.setenv("CITEFORGE_TEST_KEY", "sk-test-123")
    with client(proxy.url, tmp_path, prompts, api_key_env="CITEFORGE_TEST_KEY") as c:
        assert c.run([LLMRequest("a", "say", {"topic": "x"})])[0].ok
    assert proxy.headers[-1]["Authorization"] == "Bearer sk-test-123"



class Qwen3Like:
    """vLLM serving Qwen3 behind a router: the chat template thinks first unless the request's
    chat_template_kwargs turn it off, and the router wants its header. Keeps what it received."""

    def __init__(self):
        self.received: list[tuple[dict, dict]] = []

    def __call__(self, method, target, headers, body):
        request = json.loads(body)
        self.received.append((request, headers))
        if headers.get("X-Route") != "gpu-pool-2":
            return 400, {"Content-Type": "application/json"}, b'{"error": "no route"}'
        thinking = (request.get("chat_template_kwargs") or {}).get("enable_thinking", True)
        content = "<think>" if thinking else "yes"
        answer = {"id": "c", "object": "chat.completion", "model": request["model"], "usage": {"prompt_tokens": 9, "completion_tokens": 1},
                  "choices": [{"index": 0, "finish_reason": "length" if thinking else "stop",
                               "message": {"role": "assistant", "content": content}}]}
        return 200, {"Content-Type": "application/json"}, json.dumps(answer).encode()


def test_extra_body_and_headers_reach_the_server_and_extra_body_keys_the_cache(tmp_path, prompts):
    from tests.faulty_server import FaultyServer

    route, headers = {"X-Route": "gpu-pool-2"}, Qwen3Like()
    no_thinking = {"chat_template_kwargs": {"enable_thinking": False}}
    question = [LLMRequest("a", "yn", {"question": "Is water wet?"})]
    with FaultyServer({"/v1/chat/completions": headers}) as server:
        url = server.url("/v1")
        with client(url, tmp_path, prompts, headers=route, logprobs=False) as c:
            (thinks,) = c.run(question)  # the template's default: a thinking block where yes/no was due, 3 attempts
        with client(url, tmp_path, prompts, headers=route, extra_body=no_thinking, logprobs=False) as c:
            (answer,) = c.run(question)  # the same request with the option: a miss, then an answer
        with client(url, tmp_path, prompts, headers={**route, "X-Trace": "7"}, extra_body=no_thinking, logprobs=False) as c:
            (again,) = c.run(question)  # other headers, same options: the same answer, from the cache
        with client(url, tmp_path, prompts, extra_body=no_thinking, logprobs=False) as c:
            (unrouted,) = c.run([LLMRequest("b", "yn", {"question": "Is fire cold?"})])
    assert not thinks.ok and thinks.error.startswith("not_yes_no") and thinks.raw == "<think>"
    assert answer.ok and answer.value == "yes" and not answer.cached
    assert again.ok and again.cached
    assert not unrouted.ok and unrouted.error.startswith("backend: HTTP 400")
    bodies = [body for body, _ in headers.received]
    assert len(bodies) == 5 and not any("chat_template_kwargs" in body for body in bodies[:3])
    assert bodies[3]["chat_template_kwargs"] == {"enable_thinking": False} and bodies[3]["messages"] == bodies[0]["messages"]
    assert [h.get("X-Route") for _, h in headers.received] == ["gpu-pool-2"] * 4 + [None]


STRICT_REFUSED = ("minLength", "maxLength", "pattern", "format", "minimum", "maximum", "minItems", "maxItems", "uniqueItems")


def strict_refusal(schema, where="schema") -> str | None:
    """What OpenAI's API says of a schema its strict structured outputs refuse (a keyword off its
    subset, an object whose properties are not all required or that allows others), else None."""
    if isinstance(schema, list):
        return next((r for i, s in enumerate(schema) if (r := strict_refusal(s, f"{where}[{i}]"))), None)
    if not isinstance(schema, dict):
        return None
    for key in STRICT_REFUSED:
        if key in schema:
            return f"Invalid schema for response_format 'answer': In context=({where!r}), '{key}' is not permitted."
    if "properties" in schema and (set(schema.get("required", [])) != set(schema["properties"]) or schema.get("additionalProperties") is not False):
        return f"Invalid schema for response_format 'answer': In context=({where!r}), 'required' is required to be supplied and to be an array including every key in properties."
    for key, value in schema.items():
        children = value.values() if key == "properties" else [value]
        for child in children:
            if (refusal := strict_refusal(child, f"{where}.{key}")):
                return refusal
    return None


def test_openai_strict_sends_the_schema_subset_the_api_takes_and_checks_the_whole(tmp_path):
    """A stand-in for OpenAI's API that refuses, as it does, a strict schema with length or range
    limits (HTTP 400, invalid_request_error): `json_schema` sends the prompt's schema whole and every
    call fails; `openai_strict` sends the subset, and the answer is still checked against the whole
    schema (a score of 11 is refused here, though the subset the API saw has no maximum)."""
    from schema_llm import smallest

    class Handler(QuietHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            schema = body["response_format"]["json_schema"]["schema"]
            refusal = strict_refusal(schema)
            if refusal:
                error = {"message": refusal, "type": "invalid_request_error", "param": "response_format", "code": None}
                return self.answer(400, json.dumps({"error": error}).encode())
            score = 11 if "Some markdown 2." in json.dumps(body["messages"]) else 3  # the second text, off the scale
            content = json.dumps({**smallest(schema), "score": score})
            choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
            self.answer(200, json.dumps({"choices": [choice], "usage": {"prompt_tokens": 9, "completion_tokens": 9}}).encode())

    request = lambda n: LLMRequest(f"r{n}", "m2rag_judge_fluency", {"text": f"Some markdown {n}."})  # noqa: E731
    with LocalServer(Handler) as server:
        with client(f"{server.url}/v1", tmp_path / "whole", response_format="json_schema", max_retries=1) as whole:
            (refused,) = whole.run([request(0)])
        with client(f"{server.url}/v1", tmp_path / "strict", response_format="openai_strict", max_retries=1) as strict:
            judged, off_scale = strict.run([request(1), request(2)])
    assert not refused.ok and refused.error.startswith("backend: HTTP 400") and "'maxLength' is not permitted" in refused.raw
    assert judged.ok and judged.value["score"] == 3
    assert not off_scale.ok and off_scale.error.startswith("schema:") and "11" in off_scale.error
