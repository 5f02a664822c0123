"""Retries with backoff and per-host rate limits, shared by every HTTP client in citeforge
(the fetch layer, the OpenReview API, the OpenAI-compatible model backend).

A call is retried on 429, 5xx, timeouts, connection errors and bodies cut short (a reset
mid-body, fewer bytes than Content-Length); a Retry-After header (seconds or an HTTP date) is
honoured, capped by `max_sleep`; otherwise the wait grows exponentially with jitter. Anything else
(a 404, a schema error) is returned or raised at once.

`read_body` reads a streamed response within a deadline for the whole body: requests' read
timeout only bounds the wait between two bytes, so a server that drips one byte a second would
otherwise hold a client for as long as it likes. `HeaderDeadline` does the same for the status
line and headers (http.client reads up to 100 header lines of 64 KiB, each recv with the full
timeout): they arrive within the read timeout in all, or the connection is cut and the try is a
read timeout, retried as any other.
"""
from __future__ import annotations

import email.utils
import itertools
import os
import random
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable, TypeVar
from urllib.parse import urlsplit

import requests
import requests.adapters
import urllib3
import urllib3.connection
import urllib3.exceptions

T = TypeVar("T")

RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
RETRY_EXCEPTIONS = (requests.Timeout, requests.ConnectionError, requests.exceptions.ChunkedEncodingError)


class BodyTooLarge(ValueError):
    """A body past its byte cap (the rest of it is not read)."""


def read_body(response: requests.Response, deadline_s: float, max_bytes: int = 0, head: bool = False) -> bytes:
    """The body of a `stream=True` response, read within `deadline_s` seconds in all and at most
    `max_bytes` (0: no cap). Raises requests.ReadTimeout past the deadline, requests.ConnectionError
    for a body cut short (both retried by `with_retries`), BodyTooLarge past the cap; with `head`,
    a body past the cap is its first `max_bytes` instead (an error page kept for what it says)."""
    declared = response.headers.get("Content-Length", "")
    if max_bytes and not head and declared.isascii() and declared.isdigit() and int(declared) > max_bytes:
        response.close()
        raise BodyTooLarge(f"Content-Length {declared} > {max_bytes} bytes")
    ends = time.monotonic() + deadline_s
    body = bytearray()
    try:
        while True:
            chunk = response.raw.read1(1 << 16, decode_content=True)  # returns what has arrived, so the deadline is checked often
            if not chunk:
                break
            body += chunk
            if max_bytes and len(body) > max_bytes:
                if head:
                    del body[max_bytes:]
                    break
                raise BodyTooLarge(f"body passed {max_bytes} bytes")
            if time.monotonic() > ends:
                raise requests.exceptions.ReadTimeout(f"body not complete after {deadline_s:g} s ({len(body)} bytes read)")
    except requests.RequestException:
        raise
    except urllib3.exceptions.ReadTimeoutError as err:
        raise requests.exceptions.ReadTimeout(f"read timed out: {err}") from None
    except (urllib3.exceptions.ProtocolError, OSError) as err:  # a reset, an IncompleteRead
        raise requests.ConnectionError(f"body cut short after {len(body)} bytes: {err}") from None
    except urllib3.exceptions.DecodeError as err:
        raise requests.exceptions.ContentDecodingError(f"undecodable body: {err}") from None
    finally:
        response.close()
    response._content = bytes(body)  # what .content/.json() answer from now on (requests' own cache)
    return response._content


class _Watchdog:
    """One thread that runs each armed action at its deadline, unless it is disarmed first (a
    Timer thread per request costs about 150 µs of CPU)."""

    def __init__(self):
        self._start_afresh()
        os.register_at_fork(after_in_child=self._start_afresh)  # a child has no watchdog thread, and its lock may be held

    def _start_afresh(self) -> None:
        self._cond = threading.Condition()
        self._armed: dict[int, tuple[float, Callable[[], None]]] = {}
        self._keys = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float, action: Callable[[], None]) -> int:
        when = time.monotonic() + seconds
        with self._cond:
            key = next(self._keys)
            earliest = min((at for at, _ in self._armed.values()), default=None)
            self._armed[key] = (when, action)
            if self._thread is None:  # started on first use
                self._thread = threading.Thread(target=self._run, daemon=True, name="http header deadlines")
                self._thread.start()
            elif earliest is None or when < earliest:
                self._cond.notify()
        return key

    def disarm(self, key: int) -> None:
        with self._cond:
            self._armed.pop(key, None)

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [key for key, (at, _) in self._armed.items() if at <= now]
                if not due:
                    earliest = min((at for at, _ in self._armed.values()), default=None)
                    self._cond.wait(None if earliest is None else earliest - now)
                    continue
                actions = [self._armed.pop(key)[1] for key in due]
            for action in actions:
                try:
                    action()
                except Exception:  # noqa: BLE001 - one action's failure must not end every deadline
                    pass


_WATCHDOG = _Watchdog()


class _Cut:
    """A connection's socket, shut down at its deadline unless the headers came first: once `end`
    is called the cut no longer happens, so a late deadline never reaches the socket's next
    request (a kept-alive connection is reused)."""

    def __init__(self, sock: socket.socket):
        self.sock, self.lock, self.over, self.fired = sock, threading.Lock(), False, False

    def fire(self) -> None:
        with self.lock:
            if self.over:
                return
            self.fired = True
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def end(self) -> bool:
        """No cut from now on; whether it happened."""
        with self.lock:
            self.over = True
            return self.fired


class HeaderDeadline:
    """A urllib3 connection mixin (before the connection class in the bases): the response's
    status line and headers within the connection's read timeout in all, not per byte. At the
    deadline the socket is shut down, which ends the blocked read; the try then fails as a socket
    timeout, which urllib3 reports as a read timeout."""

    def getresponse(self, *args, **kwargs):
        limit = self.timeout if isinstance(self.timeout, (int, float)) and self.timeout > 0 else None
        if limit is None or self.sock is None:
            return super().getresponse(*args, **kwargs)
        cut = _Cut(self.sock)
        key = _WATCHDOG.arm(limit, cut.fire)
        try:
            response = super().getresponse(*args, **kwargs)
        except Exception:
            if cut.end():
                raise TimeoutError(f"response headers not complete after {limit:g} s") from None
            raise
        finally:
            _WATCHDOG.disarm(key)
        if cut.end():  # http.client reads the cut as the end of the headers: a response it is not
            response.close()
            raise TimeoutError(f"response headers not complete after {limit:g} s")
        return response


class DeadlineAdapter(requests.adapters.HTTPAdapter):
    """requests' adapter with `HeaderDeadline` connections."""

    _POOLS = {
        "http": type("DeadlineHTTPPool", (urllib3.HTTPConnectionPool,),
                     {"ConnectionCls": type("DeadlineHTTPConnection", (HeaderDeadline, urllib3.connection.HTTPConnection), {})}),
        "https": type("DeadlineHTTPSPool", (urllib3.HTTPSConnectionPool,),
                      {"ConnectionCls": type("DeadlineHTTPSConnection", (HeaderDeadline, urllib3.connection.HTTPSConnection), {})}),
    }

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = self._POOLS


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5  # total tries, the first included
    base_delay: float = 0.5
    max_sleep: float = 60.0

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        """The backoff, or the server's Retry-After where it asks for longer (a 0 or a date past
        would have the retries hit a failing server at once)."""
        backoff = self.base_delay * (2**attempt) * (0.5 + random.random() / 2)
        asked = parse_retry_after(retry_after) if retry_after else None
        return min(backoff if asked is None else max(asked, backoff), self.max_sleep)


def parse_retry_after(value: str) -> float | None:
    value = value.strip()
    if value.isascii() and value.isdigit():  # str.isdigit also takes "²" and other digits float() refuses
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
    final: Callable[[requests.Response], bool] | None = None,
) -> requests.Response:
    """Run `call` until it returns a response whose status is not retryable, or one that `final`
    says is the server's verdict despite its status (an API that answers a failed task with a 500).

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
            if response.status_code not in RETRY_STATUSES or (final is not None and final(response)):
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
