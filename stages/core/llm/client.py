"""The client: renders prompt files, answers from the cache, hands the misses to the backend's
endpoint scheduler one call at a time, checks every answer as it arrives and retries an invalid one
at once, without waiting for the others (see the package docstring).

`submit(request)` returns a Future of the LLMAnswer, so a stage can keep several roles' calls in
flight together and feed one role's answers to the next as they arrive; `run(requests)` submits a
batch and returns its answers in order."""
from __future__ import annotations

import collections
import json
import threading
from concurrent.futures import Future, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import jsonschema
from tqdm import tqdm

from stages.core.images import ImageStore, fit_longest_side
from stages.core.prompts import PROMPTS_DIR, Prompt, PromptLibrary
from stages.core.schema_check import read_json

from .cache import CallCache, cache_key, host_file
from .calls import Call, Result
from .registry import BACKENDS
from .scheduler import Endpoint, Shared
from .settings import LLMError, llm_settings

_COUNTING = threading.Lock()  # the clients of one stage share its stats Counter, from many threads


@dataclass(frozen=True)
class LLMRequest:
    id: str
    prompt: str  # a prompt file's name: prompts/<prompt>.md
    variables: dict[str, Any] = field(default_factory=dict)
    images: list[str] = field(default_factory=list)  # sha256 of images in the image store ("img:" prefix allowed)
    sampling: dict[str, Any] | None = None  # overrides the prompt's default sampling params
    # Replaces the prompt's answer schema, e.g. with a maxItems a stage param sets (the same prompt
    # with a tighter list stops a small model padding its answer to the schema's limit).
    schema: dict[str, Any] | None = None
    # A text answer's own format (e.g. the XML tags of CiteEval's prompts): parse(text) returns the
    # value or raises ValueError naming what is wrong, which makes the answer invalid (retried).
    parse: Callable[[str], Any] | None = field(default=None, compare=False)


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
    finish_reason: str | None = None  # "length": the answer was cut at max_tokens
    prompt_tokens: int = 0  # the backend's count for the last attempt (kept in the cache, so a cached answer has it too)
    completion_tokens: int = 0

    @property
    def detail(self) -> str:
        """What a reject row records: the reason, then the raw text."""
        return f"{self.error} | raw: {self.raw}"


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
            value = read_json(raw)
        except json.JSONDecodeError as err:
            return None, f"non_json: {err.msg} at char {err.pos}"
        except ValueError as err:  # "[[[[..." from a model or a proxy: an answer, not a crash
            return None, f"non_json: {err}"
        try:
            error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(value))
        except RecursionError:
            return None, "schema: nested deeper than the schema check reads"
        if error is not None:
            where = "/".join(map(str, error.absolute_path))
            return None, f"schema: {error.message}" + (f" (at {where})" if where else "")
        return value, None
    if kind == "yesno":
        word = _yes_no(raw)
        return (word, None) if word else (None, "not_yes_no: the answer does not start with yes or no")
    text = raw.strip()
    return (text, None) if text else (None, "empty: the model returned no text")


@dataclass
class _Prepared:
    request: LLMRequest
    prompt: Prompt
    messages: list[dict]
    images: list[tuple[str, Path]]
    sampling: dict
    error: str | None = None

    @property
    def schema(self) -> dict | None:
        return self.request.schema if self.request.schema is not None else self.prompt.schema


class LLMClient:
    def __init__(self, settings: dict, stats: collections.Counter | None = None):
        self.settings = settings
        self.stats = stats if stats is not None else collections.Counter()
        self.prompts = PromptLibrary(settings.get("prompts_dir", PROMPTS_DIR))
        self.backend_name = settings["backend"]
        self._backend_class = BACKENDS[self.backend_name].load()
        self.model_id = self._backend_class.model_id(settings)
        self._options = self._backend_class.options(settings)
        self.max_chars = settings["max_answer_chars"]
        self.cache_mode = settings["cache"]["mode"]
        self.cache: CallCache | None = None
        if self.cache_mode != "off":  # one cache per file per process, whose batches every client there shares
            path, per_host = Path(settings["cache"]["path"]), settings["cache"]["per_host"]
            self._cache_key = ("cache", str((host_file(path) if per_host else path).resolve()))
            self.cache = Shared.take(self._cache_key, lambda: CallCache(path, per_host))
        self.images = ImageStore(settings["image_store"])
        self._backend = None
        self._endpoint: Endpoint | None = None
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._inflight: dict[str, list] = {}  # call key -> the (prep, attempt, future) waiting for it
        self._busy = 0  # calls of this client inside a backend
        self._closed = False

    @classmethod
    def from_params(cls, params: dict | None, stats: collections.Counter | None = None) -> "LLMClient":
        return cls(llm_settings(params), stats)

    def count(self, key: str, n: int = 1) -> None:
        with _COUNTING:
            self.stats[key] += n

    @property
    def backend(self):
        """Loaded on the first cache miss: a fully cached rerun never loads a model."""
        with self._lock:
            if self._backend is None:
                name, max_in_flight, slots_dir = self._backend_class.endpoint(self.settings)
                key = ("endpoint", name, max_in_flight, slots_dir)
                endpoint = Shared.take(key, lambda: Endpoint(name, max_in_flight, slots_dir))
                try:
                    self._backend = self._backend_class(self.settings, self.count, endpoint)
                except BaseException:
                    Shared.drop(key)
                    raise
                self._endpoint, self._endpoint_key = endpoint, key
            return self._backend

    def close(self) -> None:
        """Waits for this client's calls inside a backend, drops its queued ones, then lets go of
        the endpoint, the backend (an engine is shut down with its last client) and the cache
        (its last batch committed)."""
        with self._lock:
            self._closed = True
            while self._busy:
                self._idle.wait()
        try:
            if self._backend is not None:
                Shared.drop(self._endpoint_key)
                self._backend.close()
                self._backend = None
        finally:
            if self.cache is not None:
                self.cache = None
                Shared.drop(self._cache_key)

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
            if self.settings["image_max_side"] and BACKENDS[self.backend_name].sees_images:
                try:
                    sha, found = fit_longest_side(self.images, sha, self.settings["image_max_side"])
                except (OSError, SyntaxError, ValueError) as err:  # a broken stored file fails this request only
                    error = f"image: {sha} cannot be scaled to {self.settings['image_max_side']} pixels: {err}"
                    break
            images.append((sha, found))
        return _Prepared(request, prompt, messages, images, sampling, error)

    def _call(self, prep: _Prepared, attempt: int) -> Call:
        sampling = dict(prep.sampling)
        if attempt:  # a retry of an invalid answer samples differently, reproducibly
            sampling["temperature"] = max(sampling["temperature"], self.settings["retry_temperature"])
            sampling["seed"] = sampling["seed"] + attempt
        shas = [sha for sha, _ in prep.images]
        key = cache_key(self.backend_name, self.model_id, prep.messages, shas, prep.prompt.kind, prep.schema, sampling, self._options)
        return Call(prep.messages, prep.images, prep.prompt.kind, prep.schema, sampling, key)

    def run(self, requests_: list[LLMRequest], desc: str | None = None) -> list[LLMAnswer]:
        """Answers in request order. A prompt that fails to render raises PromptError (a code bug);
        an outage raises LLMError as soon as one call meets it."""
        futures = [self.submit(r) for r in requests_]
        for future in tqdm(as_completed(futures), total=len(futures), desc=desc or "llm", unit="call", leave=False):
            future.result()
        return [f.result() for f in futures]

    def submit(self, request: LLMRequest) -> Future:
        """A Future of the request's LLMAnswer, settled when the answer is valid or its attempts
        are spent; it raises LLMError on an outage. A prompt that fails to render raises here."""
        prep = self._prepare(request)
        future: Future = Future()
        if prep.error:
            self.count("llm_failed")
            future.set_result(LLMAnswer(request.id, False, None, "", prep.error))
        else:
            self._attempt(prep, 0, future)
        return future

    def _attempt(self, prep: _Prepared, attempt: int, future: Future) -> None:
        """From the cache, from an identical call already on its way, or handed to the endpoint."""
        try:
            call = self._call(prep, attempt)
            name = prep.prompt.name
            hit = self.cache.get(call.key) if self.cache is not None and self.cache_mode == "use" else None
            if hit is None:
                self.backend  # noqa: B018 - loaded (or failing) before the call is registered
                with self._lock:
                    waiting = self._inflight.get(call.key)
                    if waiting is None:
                        self._inflight[call.key] = [(prep, attempt, future)]
                    else:
                        waiting.append((prep, attempt, future))
                if waiting is None:
                    try:
                        self._endpoint.submit(self._send, call, name)
                    except BaseException as err:  # the endpoint was shut down under a closing client
                        self._fail(call.key, err)
                    return
            self.count("llm_cache_hits")
            self.count(f"llm_cache_hits[{name}]")
            if hit is not None:
                self._settle(prep, attempt, future, hit, True)
        except BaseException as err:  # an outage, a cache that fails: the caller's result() raises it
            if not future.done():
                future.set_exception(err)

    def _send(self, call: Call, name: str) -> None:
        """In an endpoint worker: one call, its answer stored and judged for everyone waiting on it."""
        with self._lock:
            closed = self._closed
            self._busy += not closed
        if closed:
            self._fail(call.key, LLMError("the model client was closed before this call was sent"))
            return
        try:
            try:
                result = self._backend.send(call)
                self.count("llm_calls")
                self.count(f"llm_calls[{name}]")
                if call.images and not BACKENDS[self.backend_name].sees_images:  # a text-only model: attached, not read
                    self.count("llm_images_not_seen", len(call.images))
                self.count("llm_prompt_tokens", result.prompt_tokens)
                self.count("llm_completion_tokens", result.completion_tokens)
                if result.error is None and len(result.text) <= self.max_chars and self.cache is not None:
                    self.cache.put(call.key, self.backend_name, self.model_id, name, result)
            except BaseException as err:
                self._fail(call.key, err)
                return
            with self._lock:
                waiting = self._inflight.pop(call.key, [])
            for n, (prep, attempt, future) in enumerate(waiting):
                try:
                    self._settle(prep, attempt, future, result, n > 0)
                except BaseException as err:  # a request's own parse() failing otherwise than ValueError: a code bug
                    future.set_exception(err)
        finally:
            with self._lock:
                self._busy -= 1
                self._idle.notify_all()

    def _fail(self, key: str, err: BaseException) -> None:
        with self._lock:
            waiting = self._inflight.pop(key, [])
        for _, _, future in waiting:
            if not future.done():
                future.set_exception(err)

    def _settle(self, prep: _Prepared, attempt: int, future: Future, result: Result, cached: bool) -> None:
        """The answer, or the next attempt at once when it is invalid and attempts are left."""
        if result.error is None and len(result.text) > self.max_chars:
            value, error = None, f"too_long: the answer has {len(result.text)} characters, over llm.max_answer_chars ({self.max_chars})"
        else:
            value, error = judge(prep.prompt.kind, prep.schema, result)
        if error is None and prep.request.parse is not None:
            try:
                value = prep.request.parse(value)
            except ValueError as err:
                error = f"malformed: {err}"
        answer = LLMAnswer(prep.request.id, error is None, value, result.text[: self.max_chars], error, result.p_yes, cached,
                           attempt + 1, result.finish_reason, result.prompt_tokens, result.completion_tokens)
        if error and not result.error:
            self.count("llm_invalid")
            if attempt + 1 < self.settings["max_attempts"]:
                self._attempt(prep, attempt + 1, future)
                return
        if not answer.ok:
            self.count("llm_failed")
        future.set_result(answer)
