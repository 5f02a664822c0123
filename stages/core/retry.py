"""Retries with backoff and per-host rate limits, shared by every HTTP client in citeforge
(the fetch layer, the OpenReview API, the OpenAI-compatible model backend).

A call is retried on 429, 5xx, timeouts and connection errors; a Retry-After header (seconds or
an HTTP date) is honoured, capped by `max_sleep`; otherwise the wait grows exponentially with
jitter. Anything else (a 404, a schema error) is returned or raised at once.
"""
from __future__ import annotations

import email.utils
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable, TypeVar
from urllib.parse import urlsplit

import requests

T = TypeVar("T")

RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
RETRY_EXCEPTIONS = (requests.Timeout, requests.ConnectionError)


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5  # total tries, the first included
    base_delay: float = 0.5
    max_sleep: float = 60.0

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        if retry_after:
            parsed = parse_retry_after(retry_after)
            if parsed is not None:
                return min(parsed, self.max_sleep)
        return min(self.base_delay * (2**attempt) * (0.5 + random.random() / 2), self.max_sleep)


def parse_retry_after(value: str) -> float | None:
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class RetriesExhausted(RuntimeError):
    def __init__(self, message: str, last_status: int | None = None):
        super().__init__(message)
        self.last_status = last_status


def with_retries(
    call: Callable[[], requests.Response],
    policy: RetryPolicy = RetryPolicy(),
    on_retry: Callable[[int, str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> requests.Response:
    """Run `call` until it returns a response whose status is not retryable.

    Raises RetriesExhausted when every attempt hit a retryable status or error.
    `on_retry(attempt, why)` lets a stage count retries in its report.
    """
    last = ""
    status = None
    for attempt in range(policy.attempts):
        try:
            response = call()
        except RETRY_EXCEPTIONS as err:
            last, status, retry_after = f"{type(err).__name__}: {err}", None, None
        else:
            if response.status_code not in RETRY_STATUSES:
                return response
            last, status = f"HTTP {response.status_code}", response.status_code
            retry_after = response.headers.get("Retry-After")
            response.close()
        if attempt + 1 < policy.attempts:
            if on_retry:
                on_retry(attempt + 1, last)
            sleep(policy.delay(attempt, retry_after))
    raise RetriesExhausted(f"gave up after {policy.attempts} attempts: {last}", status)


class HostRateLimiter:
    """At most `per_second` requests per host across threads (a minimum spacing per host)."""

    def __init__(self, per_second: float | None):
        self.interval = 1.0 / per_second if per_second else 0.0
        self._next: dict[str, float] = {}
        self._lock = threading.Lock()

    def wait(self, url: str) -> None:
        if not self.interval:
            return
        host = urlsplit(url).netloc
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next.get(host, now))
            self._next[host] = start + self.interval
        if start > now:
            time.sleep(start - now)
