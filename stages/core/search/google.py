"""Google Programmable Search (Custom Search JSON API), web and image mode: the seeds' search.

    GET <endpoint>?cx=<engine id>&q=<query>&num=<1..10>&start=<1-based>[&searchType=image]
    header X-goog-api-key: <key>          (the key stays out of the url, hence out of WARC files)

A reply has `items` (link, title, snippet; in image mode `image` with contextLink, width, height:
a side past the results table's int32, or below 1 pixel, is unknown, null) and
`queries.nextPage[0].startIndex` while more results exist. Pages hold at most 10 items and the API
serves at most the first 100 results, so top_k is reached by paging `start` 1, 11, 21, ...

Errors arrive as {"error": {"code", "message", "errors": [{"reason"}], "status"}}: 403
dailyLimitExceeded / quotaExceeded, 429 rateLimitExceeded (after the fetch layer's retries) are
quota errors; 400 keyInvalid, 401, 403 forbidden / accessNotConfigured are key errors. All stop
the job, naming Google and the reason. Another 400 (an invalid argument) is about the one query:
it rejects that query (stages.core.search), as a reply not of the shape `REPLY` does.

Settings (config `retrieval.search_web.google`): endpoint, key_env (variable holding the API key),
engine_id_env (variable holding the engine id `cx`) or engine_id (the id itself: it is not a
secret, it is in every public search box), rate_per_s, params (extra API parameters: gl, lr, safe...).
"""
from __future__ import annotations

import os
from urllib.parse import urlencode

from stages.core.fetch import Fetcher, FetchError

from stages.core.stage import Reject

from . import Provider, SearchFailed, SearchHit, dedupe, env_value, pixels
from stages.core.schema_check import read_json

ENDPOINT = "https://www.googleapis.com/customsearch/v1"
PAGE_SIZE = 10
MAX_RESULTS = 100  # start + num - 1 <= 100
QUOTA_REASONS = {"dailyLimitExceeded", "quotaExceeded", "rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED"}
KEY_REASONS = {"keyInvalid", "keyExpired", "forbidden", "accessNotConfigured", "API_KEY_INVALID", "ipRefererBlocked"}
_TEXT = {"type": ["string", "null"]}
_SIZE = {"type": ["integer", "null"]}
_ITEM = {"type": "object", "properties": {
    "link": _TEXT, "title": _TEXT, "snippet": _TEXT,
    "image": {"type": ["object", "null"], "properties": {"contextLink": _TEXT, "width": _SIZE, "height": _SIZE}},
}}
_NEXT_PAGE = {"type": "object", "properties": {"startIndex": {"type": "integer"}}, "required": ["startIndex"]}


class GoogleSearch(Provider):
    name = "google"
    REPLY = {"type": "object", "properties": {
        "items": {"type": ["array", "null"], "items": _ITEM},
        "queries": {"type": ["object", "null"], "properties": {"nextPage": {"type": ["array", "null"], "items": _NEXT_PAGE}}},
    }}

    def __init__(self, settings: dict, need_key: bool = True):
        super().__init__(settings)
        self.endpoint = self.settings.get("endpoint") or ENDPOINT
        self.extra = dict(self.settings.get("params") or {})
        engine = self.settings.get("engine_id") or ""
        engine_env = self.settings.get("engine_id_env") or ""
        if not engine and engine_env:
            engine = os.environ.get(engine_env, "").strip()
        if not engine:
            raise SearchFailed(self.name, "no_engine_id", f"set engine_id, or the environment variable named by engine_id_env ({engine_env or 'none named'})")
        self.engine = engine
        self.key = env_value(self.name, self.settings.get("key_env", "GOOGLE_API_KEY"), "API key") if need_key else ""

    def cache_identity(self) -> dict:
        return {"endpoint": self.endpoint, "engine": self.engine, "params": self.extra}

    def headers(self) -> dict[str, str]:
        return {"X-goog-api-key": self.key} if self.key else {}

    def url(self, query: str, kind: str, start: int, num: int) -> str:
        params = {"cx": self.engine, "q": query, "num": num, "start": start, **self.extra}
        if kind == "image":
            params["searchType"] = "image"
        return f"{self.endpoint}?{urlencode(params)}"

    def search(self, fetcher: Fetcher, query: str, kind: str, top_k: int) -> list[SearchHit]:
        hits: list[SearchHit] = []
        start = 1
        while len(hits) < top_k and start <= MAX_RESULTS:
            num = min(PAGE_SIZE, top_k - len(hits), MAX_RESULTS - start + 1)
            data = self.get_json(fetcher, self.url(query, kind, start, num))
            items = data.get("items") or []
            hits.extend(self._hit(item, kind) for item in items if item.get("link"))
            next_page = (data.get("queries") or {}).get("nextPage") or []
            if not items or not next_page:
                break
            next_start = next_page[0]["startIndex"]
            if next_start <= start:  # a reply that does not move forward would loop
                raise Reject("bad_answer", f"{self.name}: nextPage.startIndex {next_start} after start {start}")
            start = next_start
        return dedupe(hits, top_k)

    @staticmethod
    def _hit(item: dict, kind: str) -> SearchHit:
        image = item.get("image") or {}
        return SearchHit(
            rank=0,
            url=item["link"],
            title=item.get("title") or "",
            snippet=item.get("snippet") or "",
            kind=kind,
            page_url=(image.get("contextLink") or "") if kind == "image" else "",
            width=pixels(image.get("width")) if kind == "image" else None,
            height=pixels(image.get("height")) if kind == "image" else None,
        )

    def explain(self, err: FetchError) -> tuple[str, str]:
        status = err.reason[5:] if err.reason.startswith("http_") else ""
        reasons, message = _error_body(err.body)
        said = f"HTTP {status} {'/'.join(sorted(reasons)) or ''} {message}".strip() if status else err.detail
        if status == "429" or reasons & QUOTA_REASONS:
            return "quota", f"{said} (quota or rate limit exhausted)"
        if status in ("401", "403") or reasons & KEY_REASONS:
            return "auth", f"{said} (check the key in the variable named by key_env and that the Custom Search API is enabled for it)"
        return err.reason, said


def _error_body(body: bytes) -> tuple[set[str], str]:
    """Google's error reasons and message; a body of another shape (a proxy's HTML page) says nothing."""
    try:
        error = read_json(body or b"{}").get("error")
    except (ValueError, AttributeError):
        return set(), ""
    if not isinstance(error, dict):
        return set(), ""
    # the reason is in errors[] and, in newer replies, in details[]
    entries = [e for key in ("errors", "details") if isinstance(error.get(key), list) for e in error[key] if isinstance(e, dict)]
    reasons = {e["reason"] for e in entries if isinstance(e.get("reason"), str) and e["reason"]}
    return reasons, str(error.get("message") or "")[:300]
