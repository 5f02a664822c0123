"""What the client hands a backend and what it gets back: the one interface every backend module
implements (`generate(calls)` yields `(index, Result)` in any order), and the answer-side helpers
the backends share."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable


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
    finish_reason: str | None = None  # "stop", or "length" when max_tokens cut the answer short


def sampling_kwargs(call: Call) -> dict[str, Any]:
    """Sampling as the local engines (llama.cpp, vLLM) name it."""
    sampling = call.sampling
    kwargs: dict[str, Any] = {"temperature": sampling.get("temperature", 0.0), "max_tokens": sampling.get("max_tokens", 256),
                              "seed": sampling.get("seed")}
    for key in ("top_p", "top_k"):
        if key in sampling:
            kwargs[key] = sampling[key]
    return kwargs


def yes_probability(candidates: Iterable[tuple[str, float]]) -> float | None:
    """P(yes) / (P(yes) + P(no)) from (token text, log-probability) pairs; None if neither appears."""
    mass = {"yes": 0.0, "no": 0.0}
    for token, logprob in candidates:
        word = token.strip().lower()
        if word in mass:
            mass[word] += math.exp(logprob)
    total = mass["yes"] + mass["no"]
    return mass["yes"] / total if total > 0 else None
