"""The model layer (docs/ARCHITECTURE.md "Models"): one client, three backends, prompts as
files, schema-checked answers and a call cache shared by parallel jobs.

    from stages.core.llm import LLMClient, LLMRequest
    client = LLMClient.from_params(ctx.params["llm"], stats=ctx.stats)
    answers = client.run([LLMRequest(id=row_id, prompt="m2rag_query_clear", variables={...}), ...])
    for row, answer in zip(rows, answers):
        with ctx.item(row["id"]):
            if not answer.ok:
                raise Reject("invalid_answer", answer.detail)

`answers[i]` answers `requests[i]`. A request names a prompt file (stages/core/prompts.py); the
client renders it, looks each call up in the cache, hands the misses to the endpoint's scheduler,
checks every answer as it arrives (json: parses and satisfies the prompt's schema; yesno: says yes
or no; text: not empty and at most `max_answer_chars`) and retries an invalid one at once, up to
`max_attempts` (at `retry_temperature`, seed + attempt), after which the answer is not ok and
carries the raw text and the reason. Never a default value. `client.submit(request)` gives a
Future of one answer instead, for stages that keep several roles in flight together:

    asked = {answerer.submit(request): row for ...}
    for future in as_completed(asked):          # the judge is fed as the answers arrive
        verdicts[asked[future]["id"]] = judge.submit(...)

The package, one concern per module:
- settings.py: `llm_settings`, the one merge of defaults, the config's `llm:` section and a
  stage's override (rules call it at DAG parse time, the client again in the job); LLMError.
- registry.py: `BACKENDS`, what each backend can do (sees images, holds a GPU) and how to load
  it; `sees_images(params)` for stages with a `vision` param, `gpus(settings)` for rules.
- client.py: LLMRequest, LLMAnswer, LLMClient; cache.py: the SQLite call cache and its keys;
  calls.py: Call and Result, the interface every backend implements; scheduler.py: one Endpoint
  per model server per process (requests in flight capped across processes by file-lock slots,
  rate-limit pauses) and `Shared`, which keeps one engine per model per process and closes it.
- llamacpp.py, openai.py, vllm.py: one module per backend (see each for what it does).

The cache is SQLite in WAL mode (`cache.path`; one file per host with `cache.per_host`), written
in batched commits, keyed by a hash of (backend, model id, rendered messages, image hashes, answer
kind and schema, sampling params, request options that change answers). `cache.mode`: use |
refresh | off. Figures added to `stats`: llm_calls, llm_cache_hits, llm_prompt_tokens,
llm_completion_tokens, llm_invalid (invalid outputs, retries included), llm_failed (requests
that ended not ok), llm_http_retries, llm_images_not_seen, and per prompt `llm_calls[<prompt>]`,
`llm_cache_hits[<prompt>]`.

A backend failure that retrying cannot fix for one request (the prompt exceeds the context, HTTP
400, an answer that is not a chat completion or is too large) makes that answer not ok
("backend: ..."); an outage (retries exhausted, connection refused),
a missing model or an unusable cache raises LLMError (a StageError: one line, no traceback) so the
job fails and a rerun resumes from the cache.
"""
from .registry import BACKENDS, Backend, gpus, sees_images
from .settings import DEFAULTS, LLMError, llm_settings

__all__ = [
    "BACKENDS", "DEFAULTS", "Backend", "Call", "CallCache", "LLMAnswer", "LLMClient", "LLMError", "LLMRequest", "Result",
    "cache_key", "embedded_gguf", "gpus", "judge", "llm_settings", "sees_images", "server_command", "yes_probability",
]


def __getattr__(name: str):
    """The client side, imported on first use: the rules import this package at DAG parse time for
    `llm_settings` and `BACKENDS`, and must not pay for the client's imports (pyarrow, jinja2...)."""
    if name in ("LLMClient", "LLMRequest", "LLMAnswer", "judge"):
        from . import client as module
    elif name in ("CallCache", "cache_key"):
        from . import cache as module
    elif name in ("Call", "Result", "yes_probability"):
        from . import calls as module
    elif name in ("embedded_gguf", "server_command"):
        from . import llamacpp as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(module, name)
