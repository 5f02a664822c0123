"""The client: renders prompt files, answers from the cache, sends the misses to the configured
backend as one batch, checks every answer and retries invalid ones (see the package docstring)."""
from __future__ import annotations

import collections
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import jsonschema
from tqdm import tqdm

from stages.core.images import ImageStore, fit_longest_side
from stages.core.prompts import PROMPTS_DIR, Prompt, PromptLibrary

from .cache import CallCache, cache_key
from .calls import Call, Result
from .registry import BACKENDS
from .settings import llm_settings


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
        self.cache = CallCache(settings["cache"]["path"], settings["cache"]["mode"])
        self.images = ImageStore(settings["image_store"])
        self._backend = None
        self._lock = threading.Lock()

    @classmethod
    def from_params(cls, params: dict | None, stats: collections.Counter | None = None) -> "LLMClient":
        return cls(llm_settings(params), stats)

    def count(self, key: str, n: int = 1) -> None:
        with self._lock:  # the openai backend counts HTTP retries from its worker threads
            self.stats[key] += n

    @property
    def backend(self):
        """Loaded on the first cache miss: a fully cached rerun never loads a model."""
        if self._backend is None:
            self._backend = self._backend_class(self.settings, self.count)
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
        key = cache_key(self.backend_name, self.model_id, prep.messages, shas, prep.prompt.kind, prep.schema, sampling)
        return Call(prep.messages, prep.images, prep.prompt.kind, prep.schema, sampling, key)

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
                value, error = judge(prep.prompt.kind, prep.schema, result)
                if error is None and prep.request.parse is not None:
                    try:
                        value = prep.request.parse(value)
                    except ValueError as err:
                        error = f"malformed: {err}"
                answer = LLMAnswer(prep.request.id, error is None, value, result.text, error, result.p_yes, cached, attempt + 1,
                                   result.finish_reason, result.prompt_tokens, result.completion_tokens)
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
        unseen = 0 if BACKENDS[self.backend_name].sees_images else sum(len(c.images) for c in batch)
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

