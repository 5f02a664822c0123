"""Web search providers behind one small interface (MAVIS §3.2 Step 2: Google Programmable Search
for images; M2RAG §4.2.1: Google Search for pages, Google Image Search for auxiliary images).

A provider turns (query, kind, top_k) into ranked `SearchHit`s, paging as its API requires. Every
request goes through the fetch layer (stages.core.fetch: SSRF guard, byte cap, retries of 429/5xx
and timeouts, WARC record/replay), so a search-derived benchmark rebuilds offline from its WARC.
Keys travel in request headers, never in urls: they stay out of WARC files, caches and logs.

Anything that stops a provider from answering (quota or rate limit exhausted after retries, a
rejected or missing key, an unreachable endpoint, a reply that is not JSON at all, a replay
archive without the request) raises `SearchFailed` naming the provider: a stage stops on it rather
than writing an empty result for the query. What is wrong with one query's answer only raises
`Reject` for that query (the searching stage goes on with the next one):
- `http_<status>`: a client error for this request (400, 413, 414 for a query too long for a
  url, 422, 451...); 401, 402, 403, 404, 405, 407 and 429 are the provider's or the settings'
  problem and stop the job;
- `bad_answer`: the JSON does not have the API's shape or types (each provider declares its
  reply's JSON Schema, `REPLY`): a result whose url is a number, a title that is an object.

Modules: `google` (Programmable Search JSON API, web and image mode), `searxng` (a self-hosted
SearXNG's JSON API). `make_provider(name, settings)` builds one from its config section.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from stages.core.fetch import Fetcher, FetchError
from stages.core.schema_check import answer_problem, read_json
from stages.core.stage import Param, Reject
from stages.core.tables import atomic_write_bytes

KINDS = ("page", "image")
# 4xx answers that say the provider or its settings are wrong (key, quota, endpoint): they stop
# the job. Any other 4xx is about the one request, so it rejects that query.
PROVIDER_STATUSES = frozenset({401, 402, 403, 404, 405, 407, 429})

# The params of every searching stage: which provider, its config section, the result-list cache.
SEARCH_PARAMS = {
    "provider": Param(str, "google", "search provider (stages.core.search)", choices=("google", "searxng")),
    "provider_settings": Param(dict, {}, "the provider's config section (stages/core/search/<provider>.py)"),
    "cache_dir": Param(str, "data/cache/search", "result-list cache (live and record mode)"),
    "cache_mode": Param(str, "use", "result-list cache: use, refresh (re-ask) or off", choices=("use", "refresh", "off")),
}


@dataclass
class SearchHit:
    rank: int  # 1-based, in the provider's order, after dropping repeated urls
    url: str  # the page, or the image file in image mode
    title: str
    snippet: str
    kind: str  # page | image
    page_url: str = ""  # image mode: the page showing the image
    width: int | None = None  # image mode, where the provider gives them
    height: int | None = None


def pixels(side: int | None) -> int | None:
    """One side of an image as a provider gave it, or None (unknown) below 1 pixel or past int32,
    the results table's type: a bogus size must not fail the job's write."""
    return side if side is not None and 0 < side <= 2**31 - 1 else None


class SearchFailed(RuntimeError):
    """The provider cannot answer: the job stops, naming the provider and why."""

    def __init__(self, provider: str, reason: str, detail: str):
        super().__init__(f"search provider {provider}: {reason}: {detail}")
        self.provider = provider
        self.reason = reason


class Provider:
    """Base of every provider: rate limit, one JSON GET through the fetch layer, error mapping.

    Subclasses set `name`, implement `search` (paging) and may refine `explain` (their API's error
    bodies)."""

    name = "provider"
    REPLY: dict = {"type": "object"}  # the JSON Schema of one reply: what `search` reads of it

    def __init__(self, settings: dict):
        self.settings = dict(settings)
        rate = float(self.settings.get("rate_per_s") or 0)
        self._interval = 1.0 / rate if rate > 0 else 0.0
        self._next = 0.0
        self._lock = threading.Lock()

    # what identifies a result list apart from the query: endpoint, engine, language...
    def cache_identity(self) -> dict:
        return {k: v for k, v in sorted(self.settings.items()) if not k.endswith("_env") and k != "rate_per_s"}

    def headers(self) -> dict[str, str]:
        return {}

    def search(self, fetcher: Fetcher, query: str, kind: str, top_k: int) -> list[SearchHit]:
        raise NotImplementedError

    def _wait_turn(self) -> None:
        """The provider's own rate limit (requests per second), across threads."""
        if not self._interval:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + self._interval
        if start > now:
            time.sleep(start - now)

    def get_json(self, fetcher: Fetcher, url: str) -> dict:
        """The reply to one GET, checked against `REPLY`. Raises SearchFailed (the job stops) or
        Reject (this query's request or answer is bad)."""
        if fetcher.settings.mode != "replay":  # a replay sends nothing anywhere
            self._wait_turn()
        try:
            fetched = fetcher.fetch(url, accept=("application/json", "text/json"), headers=self.headers())
        except FetchError as err:
            reason, detail = self.explain(err)
            if reason == err.reason and _status(reason) // 100 == 4 and _status(reason) not in PROVIDER_STATUSES:
                raise Reject(reason, f"{self.name}: {detail}") from None
            raise SearchFailed(self.name, reason, detail) from None
        try:
            data = read_json(fetched.body)
        except ValueError as err:
            raise SearchFailed(self.name, "bad_response", f"{url[:300]}: not JSON ({err})") from None
        problem = answer_problem(self.REPLY, data)
        if problem:
            raise Reject("bad_answer", f"{self.name} answered {url[:300]}: {problem}")
        return data

    def explain(self, err: FetchError) -> tuple[str, str]:
        """(reason, detail) for a failed request; providers read their error bodies here."""
        if err.reason == "http_429":
            return "rate_limited", f"HTTP 429 after retries: {err.detail}"
        if err.reason in ("http_401", "http_403"):
            return "auth", f"{err.detail}: the key is missing, wrong or not allowed"
        return err.reason, err.detail


def _status(reason: str) -> int:
    """The HTTP status of a fetch layer reason `http_<status>`, else 0."""
    return int(reason[5:]) if reason.startswith("http_") and reason[5:].isdigit() else 0


def make_provider(name: str, settings: dict, need_key: bool = True) -> Provider:
    """The provider `name` from its config section. `need_key`: False in replay mode, where no
    request leaves the machine and no key is read."""
    from . import google, searxng  # noqa: PLC0415 (both are small; imported here to avoid a cycle)

    providers = {"google": google.GoogleSearch, "searxng": searxng.SearxngSearch}
    if name not in providers:
        raise ValueError(f"unknown search provider {name!r}; known: {sorted(providers)}")
    return providers[name](settings, need_key=need_key)


def env_value(provider: str, variable: str, what: str) -> str:
    value = os.environ.get(variable, "").strip() if variable else ""
    if not value:
        raise SearchFailed(provider, "no_key", f"{what}: environment variable {variable or '(none named)'} is not set")
    return value


def dedupe(hits: list[SearchHit], top_k: int) -> list[SearchHit]:
    """First occurrence of each url, ranks renumbered 1..n, at most top_k."""
    seen: set[str] = set()
    kept = []
    for hit in hits:
        if hit.url and hit.url not in seen:
            seen.add(hit.url)
            kept.append(hit)
    for rank, hit in enumerate(kept[:top_k], 1):
        hit.rank = rank
    return kept[:top_k]


class SearchCache:
    """Result lists by (provider, its settings, kind, query, top_k), one JSON file each, so a live
    run never asks the same question twice. mode: use | refresh (ask again, overwrite) | off."""

    def __init__(self, root: str | os.PathLike, mode: str = "use"):
        if mode not in ("use", "refresh", "off"):
            raise ValueError(f"search cache mode must be use, refresh or off, got {mode!r}")
        self.root = Path(root)
        self.mode = mode

    def _path(self, provider: Provider, kind: str, query: str, top_k: int) -> Path:
        key = json.dumps([provider.name, provider.cache_identity(), kind, query, top_k], sort_keys=True)
        digest = hashlib.sha256(key.encode()).hexdigest()
        return self.root / provider.name / digest[:2] / f"{digest}.json"

    def get(self, provider: Provider, kind: str, query: str, top_k: int) -> list[SearchHit] | None:
        if self.mode != "use":
            return None
        path = self._path(provider, kind, query, top_k)
        try:
            return [SearchHit(**hit) for hit in json.loads(path.read_text())]
        except (OSError, ValueError, TypeError):  # absent, or damaged on disk: ask again (put replaces it)
            return None

    def put(self, provider: Provider, kind: str, query: str, top_k: int, hits: list[SearchHit]) -> None:
        if self.mode == "off":
            return
        atomic_write_bytes(self._path(provider, kind, query, top_k), json.dumps([asdict(h) for h in hits]).encode())
