"""A local OpenAI-compatible server on 127.0.0.1 that gives every call the plainest answer its
request allows: a JSON call gets the smallest instance of the JSON schema it sends (first enum
value, first anyOf branch, minimum numbers, min-length strings); a yes/no call (one that asks for
log-probabilities) gets "yes" with log-probabilities; any other call a short sentence citing [1].

It speaks the real API's shapes, so a model stage runs its real client, cache and answer checks
against it; nothing is scripted per prompt. The property test over every stage
(tests/test_stage_contract.py) uses it so that its model stages need no model."""
from __future__ import annotations

import json
from contextlib import contextmanager

from local_http import LocalServer, QuietHandler

TEXT_ANSWER = "Yes, the sky is blue because air scatters blue light most [1]."


def smallest(schema: dict, i: int = 0):
    """The smallest instance of a JSON schema (the constructs the answer schemas use); `i` varies
    the items of an array so that uniqueItems holds."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return smallest(schema[key][0], i)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next(k for k in kind if k != "null")
    if kind == "object":
        return {name: smallest(sub) for name, sub in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [smallest(schema.get("items") or {"type": "string"}, k) for k in range(max(schema.get("minItems", 1), 1))]
    if kind == "string":
        return ("ok" + "k" * i).ljust(schema.get("minLength", 1), "k")
    if kind in ("integer", "number"):
        low, high = schema.get("minimum", 0), schema.get("maximum")
        value = low + i
        return min(value, high) if high is not None else value
    if kind == "boolean":
        return True
    return None


def answer(body: dict) -> dict:
    """The /chat/completions reply to one request body."""
    fmt = body.get("response_format") or {}
    schema = fmt.get("json_schema", {}).get("schema") if fmt.get("type") == "json_schema" else fmt.get("schema")
    logprobs = None
    if fmt:
        text = json.dumps(smallest(schema or {"type": "object"}))
    elif body.get("logprobs"):
        text = "yes"
        top = [{"token": "yes", "logprob": -0.1}, {"token": "no", "logprob": -2.4}]
        logprobs = {"content": [{"token": "yes", "logprob": -0.1, "top_logprobs": top}]}
    else:
        text = TEXT_ANSWER
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop", "logprobs": logprobs}
    return {"id": "plain", "object": "chat.completion", "model": body.get("model", "plain"), "choices": [choice],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


@contextmanager
def plain_llm_server():
    """Yields the server's base URL (.../v1) while it runs."""

    class Handler(QuietHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.answer(200, json.dumps(answer(body)).encode())

        def do_GET(self):  # /v1/models
            self.answer(200, json.dumps({"object": "list", "data": [{"id": "plain", "object": "model"}]}).encode())

    with LocalServer(Handler) as server:
        yield f"{server.url}/v1"
