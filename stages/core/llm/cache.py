"""The model call cache: raw outputs by call key in one SQLite file that parallel jobs share (WAL
mode). A cache that is not an SQLite database, or that this process cannot write, fails when the
client opens it, with one line naming the file, before any model is loaded."""
from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path

from .calls import Result
from .settings import LLMError

_HINT = "set llm.cache.path to another file, or llm.cache.mode: off to run without a cache"


def cache_key(backend: str, model: str, messages: list[dict], images: list[str], kind: str, schema: dict | None, sampling: dict) -> str:
    payload = {"backend": backend, "model": model, "messages": messages, "images": images, "kind": kind,
               "schema": schema, "sampling": sampling}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class CallCache:
    def __init__(self, path: str | Path, mode: str = "use"):
        self.path = Path(path)
        self.mode = mode
        self._con = None
        if mode == "off":
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._con = sqlite3.connect(str(self.path), timeout=60, isolation_level=None, check_same_thread=False)
            self._con.execute("pragma busy_timeout = 60000")
            self._con.execute("pragma journal_mode = wal")
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
        except (sqlite3.Error, OSError) as err:
            self.close()
            raise self._error(err) from None

    def _error(self, err: Exception) -> LLMError:
        text = str(err)
        if "not a database" in text:
            return LLMError(f"model cache {self.path} is not an SQLite database ({text}): delete or move it, or {_HINT}")
        if isinstance(err, PermissionError) or "readonly" in text or "unable to open" in text:
            return LLMError(f"model cache {self.path} cannot be written ({text}): make the file and its folder writable, or {_HINT}")
        return LLMError(f"model cache {self.path}: {text}")

    def get(self, key: str) -> Result | None:
        if self._con is None or self.mode != "use":
            return None
        row = self._con.execute(
            "select raw, p_yes, prompt_tokens, completion_tokens, finish_reason from calls where key = ?", (key,)
        ).fetchone()
        return Result(row[0], row[1], row[2], row[3], finish_reason=row[4]) if row else None

    def put(self, key: str, backend: str, model: str, prompt: str, result: Result) -> None:
        if self._con is None:
            return
        try:
            self._con.execute(
                "insert or replace into calls (key, backend, model, prompt, raw, p_yes, prompt_tokens, completion_tokens, "
                "created, finish_reason) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (key, backend, model, prompt, result.text, result.p_yes, result.prompt_tokens, result.completion_tokens,
                 time.time(), result.finish_reason),
            )
        except sqlite3.Error as err:  # e.g. the disk filled up or the file became read-only mid-run
            raise self._error(err) from None

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
