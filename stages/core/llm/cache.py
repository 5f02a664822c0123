"""The model call cache: raw outputs by call key in SQLite. A cache that is not an SQLite database,
or that this process cannot write, fails when the client opens it, with one line naming the file,
before any model is loaded.

Writes are committed in batches (when `BATCH` answers are pending, or at an answer coming `BATCH_S`
seconds or more after the last commit, and at close), one transaction each: one fsync per batch
instead of one per answer, so the cache keeps up with a saturated server (synchronous stays FULL:
a committed batch survives a power cut too). Durability: a crash loses at most the batch not yet
committed, under `BATCH` answers; those calls are missing from the cache, so a rerun asks them
again. It never reads a wrong answer: a row is written whole in one transaction with the key that
hashes everything that decides the answer, and a torn transaction is rolled back by SQLite on the
next open. Until it is committed, a batch answers this process's lookups from memory.

Two layouts (`cache.per_host`):
- one file (`path`), WAL mode: the processes of one host share it (WAL needs shared memory, so
  not across hosts);
- one file per host beside `path` (`llm.sqlite` -> `llm.<host>.sqlite`), rollback-journal mode:
  each host writes only its own file, and a lookup reads this host's file, then every other
  host's. Rollback-journal readers need nothing but file locks, which a shared filesystem (NFSv4)
  gives across hosts; WAL's shared memory it does not. For a cache on storage several hosts mount.
"""
from __future__ import annotations

import hashlib
import json
import re
import socket
import sqlite3
import threading
import time
from pathlib import Path

from .calls import Result
from .settings import LLMError

_HINT = "set llm.cache.path to another file, or llm.cache.mode: off to run without a cache"
BATCH = 512  # answers per commit
BATCH_S = 1.0  # or the seconds since the last commit, whichever comes first
_COLUMNS = "key, backend, model, prompt, raw, p_yes, prompt_tokens, completion_tokens, created, finish_reason"
OPEN_TIMEOUT_S = 60.0  # how long opening waits on other processes opening or writing the file
_RACE = re.compile(r"database is locked|database table is locked|duplicate column name")


def cache_key(backend: str, model: str, messages: list[dict], images: list[str], kind: str, schema: dict | None, sampling: dict,
              options: dict | None = None) -> str:
    """`options`: a backend's request options that change the answer (e.g. openai.extra_body); left
    out when empty, so the keys of calls without options are what they always were."""
    payload = {"backend": backend, "model": model, "messages": messages, "images": images, "kind": kind,
               "schema": schema, "sampling": sampling}
    if options:
        payload["options"] = options
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def host_file(path: Path, host: str | None = None) -> Path:
    """This host's file of a per-host cache: llm.sqlite -> llm.<host>.sqlite."""
    host = host or socket.gethostname()
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in host)
    return path.with_name(f"{path.stem}.{safe}{path.suffix}")


class CallCache:
    """Thread-safe: the client's worker threads look answers up and store them."""

    def __init__(self, path: str | Path, per_host: bool = False):
        self.path = Path(path)
        self.per_host = per_host
        self.file = host_file(self.path) if per_host else self.path
        self._con: sqlite3.Connection | None = None
        self._others: dict[Path, sqlite3.Connection] = {}
        self._pending: dict[str, tuple] = {}
        self._last_commit = time.monotonic()
        self._lock = threading.Lock()
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            self._con = sqlite3.connect(str(self.file), timeout=OPEN_TIMEOUT_S, isolation_level=None, check_same_thread=False)
            self._con.execute(f"pragma busy_timeout = {int(OPEN_TIMEOUT_S * 1000)}")
            deadline = time.monotonic() + OPEN_TIMEOUT_S
            while True:
                try:
                    self._prepare()
                    break
                except sqlite3.OperationalError as err:
                    # Shard jobs starting together open one new file at once. Switching it to WAL
                    # (and a racing schema change) can answer "locked" at once, without waiting
                    # on busy_timeout; every step is idempotent, so it is tried again.
                    if not _RACE.search(str(err)) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        except (sqlite3.Error, OSError) as err:
            self.close()
            raise self._error(err, self.file) from None
        if per_host:
            self._open_others()

    def _prepare(self) -> None:
        """The file's journal mode, durability and table, checked writable."""
        self._con.execute("pragma journal_mode = " + ("delete" if self.per_host else "wal"))
        self._con.execute("pragma synchronous = full")
        self._con.execute(
            "create table if not exists calls (key text primary key, backend text, model text, prompt text, "
            "raw text, p_yes real, prompt_tokens integer, completion_tokens integer, created real, finish_reason text)"
        )
        columns = {row[1] for row in self._con.execute("pragma table_info(calls)")}
        if "finish_reason" not in columns:  # a cache written before finish reasons were kept
            self._con.execute("alter table calls add column finish_reason text")
        # A read-only file opens without complaint and fails on the first write, after the
        # model has run: write once now, inside a transaction that is rolled back.
        self._con.execute("begin immediate")
        try:
            self._con.execute("insert or replace into calls (key) values ('')")
        finally:
            self._con.execute("rollback")

    def _open_others(self) -> None:
        """Every other host's file, for lookups (a host whose file appears later is read by the next job)."""
        for other in sorted(self.path.parent.glob(f"{self.path.stem}.*{self.path.suffix}")):
            if other == self.file or other in self._others:
                continue
            con = None
            try:  # opened read-write though only read: a file its host's crash left mid-commit is rolled back on open
                con = sqlite3.connect(str(other), timeout=60, isolation_level=None, check_same_thread=False)
                con.execute("pragma busy_timeout = 60000")
                con.execute("select 1 from calls limit 1")
            except sqlite3.Error as err:
                if con is not None:
                    con.close()
                if "no such table: calls" in str(err):  # its host is creating it this moment: the next job reads it
                    continue
                raise self._error(err, other) from None
            self._others[other] = con

    def _error(self, err: Exception, file: Path) -> LLMError:
        text = str(err)
        if "not a database" in text:
            return LLMError(f"model cache {file} is not an SQLite database ({text}): delete or move it, or {_HINT}")
        if isinstance(err, PermissionError) or "readonly" in text or "unable to open" in text:
            return LLMError(f"model cache {file} cannot be written ({text}): make the file and its folder writable, or {_HINT}")
        return LLMError(f"model cache {file}: {text}")

    def get(self, key: str) -> Result | None:
        with self._lock:
            row = self._pending.get(key)
            if row is not None:
                return Result(row[4], row[5], row[6], row[7], finish_reason=row[9])
            if self._con is None:
                return None
            query = "select raw, p_yes, prompt_tokens, completion_tokens, finish_reason from calls where key = ?"
            try:
                for con in (self._con, *self._others.values()):
                    found = con.execute(query, (key,)).fetchone()
                    if found:
                        return Result(found[0], found[1], found[2], found[3], finish_reason=found[4])
            except sqlite3.Error as err:
                raise self._error(err, self.file) from None
        return None

    def put(self, key: str, backend: str, model: str, prompt: str, result: Result) -> None:
        with self._lock:
            if self._con is None:
                return
            self._pending[key] = (key, backend, model, prompt, result.text, result.p_yes, result.prompt_tokens,
                                  result.completion_tokens, time.time(), result.finish_reason)
            if len(self._pending) >= BATCH or time.monotonic() - self._last_commit >= BATCH_S:
                self._commit()

    def flush(self) -> None:
        with self._lock:
            self._commit()

    def _commit(self) -> None:
        self._last_commit = time.monotonic()
        if not self._pending or self._con is None:
            return
        try:
            self._con.execute("begin immediate")
            try:
                self._con.executemany(f"insert or replace into calls ({_COLUMNS}) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                      list(self._pending.values()))
            except BaseException:
                self._con.execute("rollback")
                raise
            self._con.execute("commit")
        except sqlite3.Error as err:  # e.g. the disk filled up or the file became read-only mid-run
            raise self._error(err, self.file) from None
        self._pending.clear()

    def close(self) -> None:
        with self._lock:
            try:
                self._commit()
            finally:
                for con in (self._con, *self._others.values()):
                    if con is not None:
                        con.close()
                self._con = None
                self._others.clear()
