"""SearXNG's JSON API: a self-hosted, keyless metasearch engine (an alternative to Google's quota).

    GET <endpoint>/search?q=<query>&format=json&pageno=<1..>&categories=general|images
        [&language=..&safesearch=0|1|2]

A reply has `results` (url, title, content; in the images category img_src, the image file, and
resolution "WxH": width and height where both fit the results table's int32 and are positive,
else unknown, null), as many per page as the instance's engines return: pages are asked for until
top_k distinct urls, an empty page, or `max_pages`. An instance without `json` in
`search.formats` answers 403: that stops the job with that advice. Settings (config
`retrieval.search_web.searxng`): endpoint (required), rate_per_s, max_pages, language, safesearch,
key_env (optional: a bearer token for an instance behind an authenticating proxy).
"""
from __future__ import annotations

import os
import re
from urllib.parse import urlencode

from stages.core.fetch import Fetcher, FetchError

from . import Provider, SearchFailed, SearchHit, dedupe, pixels

CATEGORIES = {"page": "general", "image": "images"}
_TEXT = {"type": ["string", "null"]}
_RESULT = {"type": "object", "properties": {"url": _TEXT, "img_src": _TEXT, "title": _TEXT, "content": _TEXT, "resolution": _TEXT}}
# at most 10 ASCII digits a side: int() of a longer run is slow or refused (past 4300 digits), and
# no int32 has more; a side past int32 or of 0 pixels is no size either (see _size)
_RESOLUTION = re.compile(r"^\s*([0-9]{1,10})\s*[x×]\s*([0-9]{1,10})\s*$")

class SearxngSearch(Provider):
    name = "searxng"
    REPLY = {"type": "object", "properties": {"results": {"type": ["array", "null"], "items": _RESULT}}}

    def __init__(self, settings: dict, need_key: bool = True):
        super().__init__(settings)
        self.endpoint = (self.settings.get("endpoint") or "").rstrip("/")
        if not self.endpoint:
            raise SearchFailed(self.name, "no_endpoint", "set retrieval.search_web.searxng.endpoint to the instance's base url")
        self.max_pages = int(self.settings.get("max_pages") or 5)
        key_env = self.settings.get("key_env") or ""
        self.token = os.environ.get(key_env, "").strip() if (key_env and need_key) else ""

    def cache_identity(self) -> dict:
        return {k: self.settings.get(k) for k in ("endpoint", "language", "safesearch")}

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def url(self, query: str, kind: str, page: int) -> str:
        params = {"q": query, "format": "json", "pageno": page, "categories": CATEGORIES[kind]}
        for key in ("language", "safesearch"):
            if self.settings.get(key) not in (None, ""):
                params[key] = self.settings[key]
        return f"{self.endpoint}/search?{urlencode(params)}"

    def search(self, fetcher: Fetcher, query: str, kind: str, top_k: int) -> list[SearchHit]:
        hits: list[SearchHit] = []
        for page in range(1, self.max_pages + 1):
            results = self.get_json(fetcher, self.url(query, kind, page)).get("results") or []
            hits.extend(h for h in (self._hit(r, kind) for r in results) if h.url)
            if not results or len(dedupe(list(hits), top_k)) >= top_k:
                break
        return dedupe(hits, top_k)

    @staticmethod
    def _hit(result: dict, kind: str) -> SearchHit:
        width, height = _size(result.get("resolution"))
        image = kind == "image"
        return SearchHit(
            rank=0,
            url=(result.get("img_src") if image else result.get("url")) or "",
            title=result.get("title") or "",
            snippet=result.get("content") or "",
            kind=kind,
            page_url=(result.get("url") or "") if image else "",
            width=width if image else None,
            height=height if image else None,
        )

    def explain(self, err: FetchError) -> tuple[str, str]:
        if err.reason == "http_403":
            return "forbidden", f"{err.detail} (is 'json' in the instance's search.formats? is a token needed: key_env?)"
        return super().explain(err)


def _size(resolution: str | None) -> tuple[int | None, int | None]:
    """(width, height) of a resolution "WxH" whose sides are both sizes `pixels` takes, else (None,
    None): the size is unknown, the hit is kept."""
    match = _RESOLUTION.match(resolution or "")
    width, height = (pixels(int(match[1])), pixels(int(match[2]))) if match else (None, None)
    return (width, height) if width and height else (None, None)
