"""Requests in flight per model endpoint (issue 31): one `Endpoint` per server per process, whose
calls every client of that server in the process shares, and a cap on requests in flight that the
processes using the server share too.

Why file locks: a batching server is full at a number of requests in flight, not at a number of
jobs. Slot k of an endpoint is an `flock` on `<slots_dir>/<endpoint>/<k>`, held only while one
HTTP try is on the wire, so a job running alone fills the server, sixteen shard jobs share it, and
a job's CPU work, cache hits and back-off sleeps hold nothing. The kernel drops a dead process's
locks, so a killed job never leaks a slot, and there is no broker to start or stop. A Snakemake
resource per endpoint would split the server statically (each job holding its share for its whole
life, a lone job never above its share) and could not count the requests of one process's
concurrent roles. The slots folder on local disk caps the processes of one host; on a shared
filesystem whose locks work across hosts (NFSv4, Lustre mounted with `flock`) it caps a cluster.

An endpoint also pauses when the server says so (429 with Retry-After, or x-ratelimit-remaining-*
at 0 until x-ratelimit-reset-*): every request of every process sharing the slots waits it out.

`Shared` holds what one process keeps once per key (an endpoint, an in-process engine, the call
cache) for as long as a client uses it, and closes it when the last one lets go: deterministic,
never left to the garbage collector.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import random
import re
import resource
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

from stages.core.retry import parse_retry_after

from .settings import LLMError


class Shared:
    """One object per key in this process, made on first `take`, closed on the last `drop`."""

    _lock = threading.Lock()
    _held: dict[tuple, list] = {}  # key -> [object, users]

    @classmethod
    def take(cls, key: tuple, make: Callable[[], Any]) -> Any:
        with cls._lock:
            entry = cls._held.get(key)
            if entry is None:
                entry = cls._held[key] = [make(), 0]
            entry[1] += 1
            return entry[0]

    @classmethod
    def drop(cls, key: tuple) -> None:
        with cls._lock:
            entry = cls._held[key]
            entry[1] -= 1
            if entry[1]:
                return
            del cls._held[key]
        entry[0].close()  # outside the lock: closing an engine can take seconds

    @classmethod
    def keys(cls) -> list[tuple]:
        with cls._lock:
            return list(cls._held)


class Slots:
    """At most `n` holders at once across the processes that share `folder`."""

    def __init__(self, folder: Path, n: int):
        self.folder, self.n = folder, n
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise LLMError(f"llm.openai.slots_dir: cannot create {folder}: {err}") from None
        self._fds: dict[int, int] = {}
        self._held: set[int] = set()
        self._scan = threading.Lock()  # one thread of this process looks for a free slot at a time
        self._freed = threading.Condition()
        self._releases = 0  # local releases so far: a scan that raced one does not wait for the next
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = 256 + 2 * n  # one open file per slot this process has used, with room for the rest
        if soft != resource.RLIM_INFINITY and soft < wanted:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted if hard == resource.RLIM_INFINITY else min(hard, wanted), hard))

    def _try(self, k: int) -> bool:
        fd = self._fds.get(k)
        if fd is None:
            fd = self._fds[k] = os.open(self.folder / str(k), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as err:
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise LLMError(f"llm.openai.slots_dir {self.folder} does not support file locks ({err}): "
                           "set it to a folder on a local disk") from None

    def acquire(self) -> int:
        wait = 0.001
        with self._scan:
            while True:
                with self._freed:
                    # Slots this process holds are skipped: where flock is emulated by POSIX locks
                    # (NFS), a process does not conflict with itself.
                    seen = self._releases
                    free = [k for k in range(self.n) if k not in self._held]
                start = random.randrange(len(free)) if free else 0
                for k in free[start:] + free[:start]:
                    if self._try(k):
                        with self._freed:
                            self._held.add(k)
                        return k
                with self._freed:  # a slot this process frees wakes the scan at once; others' are polled
                    if self._releases == seen:
                        self._freed.wait(wait)
                wait = min(wait * 2, 0.02)

    def release(self, k: int) -> None:
        fcntl.flock(self._fds[k], fcntl.LOCK_UN)
        with self._freed:
            self._held.discard(k)
            self._releases += 1
            self._freed.notify()

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)  # releases any lock still held
        self._fds.clear()


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def parse_duration(value: str | None) -> float | None:
    """Seconds in an x-ratelimit-reset-* value: "1s", "6m0s", "20ms", "1h2m3.5s" or a plain number."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    parts = _DURATION.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[u] for n, u in parts)


def rate_limit_wait(status: int, headers) -> float:
    """How long the whole endpoint should wait after this answer: a 429's Retry-After, or the reset
    time of a request or token budget the answer says is spent; 0 when nothing is spent."""
    waits = []
    if status == 429 and headers.get("Retry-After"):
        waits.append(parse_retry_after(headers["Retry-After"]) or 0.0)
    for budget in ("requests", "tokens"):
        if (headers.get(f"x-ratelimit-remaining-{budget}") or "").strip() == "0":
            waits.append(parse_duration(headers.get(f"x-ratelimit-reset-{budget}")) or 0.0)
    return max(waits, default=0.0)


class Endpoint:
    """One model server as this process sees it: `max_in_flight` worker threads, and with
    `slots_dir` the same cap shared with every process that uses that folder."""

    def __init__(self, name: str, max_in_flight: int, slots_dir: str | Path | None = None, max_pause: float = 300.0):
        self.name, self.max_in_flight, self.max_pause = name, max_in_flight, max_pause
        self.pool = ThreadPoolExecutor(max_workers=max_in_flight, thread_name_prefix=f"llm-{name[:24]}")
        self.slots = None
        self._pause_file = None
        if slots_dir is not None:
            digest = hashlib.sha256(name.encode()).hexdigest()[:12]
            folder = Path(slots_dir) / f"{re.sub(r'[^A-Za-z0-9.]+', '_', name)[:48]}-{digest}"
            self.slots = Slots(folder, max_in_flight)
            self._pause_file = folder / "paused_until"
        self._paused_until = 0.0

    def submit(self, fn: Callable, *args) -> Future:
        return self.pool.submit(fn, *args)

    def pause(self, seconds: float) -> None:
        """No request of this endpoint starts for `seconds` (capped at max_pause), in every process sharing the slots."""
        if seconds <= 0:
            return
        until = time.time() + min(seconds, self.max_pause)
        if until <= self._paused_until:
            return
        self._paused_until = until
        if self._pause_file is not None:
            temp = self._pause_file.with_name(f"paused_until.{os.getpid()}.{threading.get_ident()}")
            with contextlib.suppress(OSError):  # a pause not shared costs other processes one 429 each, nothing worse
                temp.write_text(repr(until))
                os.replace(temp, self._pause_file)

    def _pause_left(self) -> float:
        until = self._paused_until
        if self._pause_file is not None:
            with contextlib.suppress(OSError, ValueError):
                until = max(until, float(self._pause_file.read_text()))
        return until - time.time()

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """Held for one try on the wire; waits out a pause first."""
        while (left := self._pause_left()) > 0:
            time.sleep(min(left, self.max_pause))
        if self.slots is None:
            yield
            return
        k = self.slots.acquire()
        try:
            yield
        finally:
            self.slots.release(k)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        if self.slots is not None:
            self.slots.close()
