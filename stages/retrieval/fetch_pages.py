"""fetch_pages: read every page result as markdown with its images in place (M2RAG §4.2.1: "retrieve
each web page containing a mix of text and images in markdown format using JINA AI Reader").

Input `results` (retrieval_search_results, from search_web): every row of kind `page` is one item
(image rows are the image stages' business and are not read here). Each distinct url is fetched
once through the fetch layer (stages.core.fetch: SSRF guard on every redirect hop, retries, rate
limits, byte cap `max_bytes`, WARC record/replay) and its raw body stored once by sha256 under
`store`. Two readers:

- `local` (default): the page is decoded (BOM, Content-Type charset, <meta charset>, else UTF-8;
  latin-1 labels as windows-1252) and read by trafilatura into markdown with images as
  `![alt](absolute url)`: why trafilatura and not resiliparse is in stages/core/pages.py.
- `jina`: GET <reader_endpoint>/<url> (Jina Reader, the seed's tool) through the same fetch layer,
  JSON reply {data: {title, url, content}}; an optional key from the variable named by
  `reader_key_env` goes in an Authorization header. A reader refusing the key or out of quota
  (401, 402, 429 after retries) stops the job naming Jina Reader.

Output `pages` (retrieval_pages): one row per (query, page url). Rejects, each with the url: the
fetch layer's reasons (http_403 and other http_<status>, blocked_address, too_large, timeout,
connection_error, too_many_redirects, not_in_archive, ...), `not_html` (another Content-Type: a
PDF, an image), `empty_page` (no bytes), `undecodable` (not valid in its declared charset, or
not UTF-8 when none is declared), `broken_html` (binary or markup-less data served as HTML),
`no_content` (the reader found no main text), `reader_error` (the reader API's reply is not its
JSON, or not of its shape `READER_REPLY`: a title or url that is a number), `bad_url` (the page url
does not parse, `http://[::1`), `duplicate_page` (a second result row of one query with the same
url: one page id). Invariant: page rows in = pages + rejected.
"""
from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import dataclasses
import multiprocessing
import os

from stages.core.fetch import FETCH_PARAMS, FETCH_REJECTS, FetchError, Fetcher, parse_url, stage_fetch_settings
from stages.core.ids import content_id
from stages.core.pages import HTML_TYPES, PageStore, Undecodable, count_images, decode_html, html_to_markdown, looks_broken
from stages.core.schema_check import answer_problem, read_json
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "2"
READER_STOPS = {"http_401", "http_402", "http_429"}
_TEXT = {"type": ["string", "null"]}
READER_REPLY = {  # Jina Reader's JSON reply, what read_jina reads of it
    "type": "object", "required": ["data"],
    "properties": {"data": {"type": "object", "properties": {"content": _TEXT, "title": _TEXT, "url": _TEXT}}},
}


class ReaderStopped(RuntimeError):
    pass


def read_local(fetcher: Fetcher, url: str, read_page) -> dict:
    """The page's columns, or raises Reject: fetched here, read by `read_page` (`page_columns`, in
    a markdown process when the stage has them)."""
    try:
        fetched = fetcher.fetch(url)
    except FetchError as err:
        raise Reject(err.reason, err.detail) from None
    columns = read_page(fetched.body, fetched.content_type, fetched.headers.get("content-type", ""), fetched.final_url, fetched.status)
    if isinstance(columns, tuple):
        raise Reject(*columns)
    return columns


def page_columns(store_root: str, body: bytes, media: str, content_type: str, final_url: str, status: int) -> dict | tuple[str, str]:
    """A fetched page's columns, its body stored; or (reason, detail) when it is not a readable
    HTML page. Plain values in and out: it runs in a markdown process."""
    if not body.strip():
        return "empty_page", f"{final_url}: no content ({len(body)} bytes)"
    if media and media not in HTML_TYPES:
        return "not_html", f"{final_url}: Content-Type {media!r}"
    try:
        html, charset = decode_html(body, content_type)
    except Undecodable as err:
        return "undecodable", f"{final_url}: {err}"
    broken = looks_broken(html)
    if broken:
        return "broken_html", f"{final_url}: {broken}"
    title, markdown = html_to_markdown(html, final_url)
    if not markdown:
        return "no_content", f"{final_url}: the reader found no main text in {len(html)} characters of HTML"
    return {
        "final_url": final_url, "status": status, "content_type": media or "text/html",
        "charset": charset, "sha256": PageStore(store_root).put(body, ".html"), "title": title, "markdown": markdown,
    }


def markdown_processes(n: int) -> concurrent.futures.ProcessPoolExecutor | None:
    """n processes reading pages into markdown (trafilatura: most of a page's CPU) beside this one,
    which fetches: two cores where one would wait on the other. Forked, all of them now, before any
    thread of the stage starts (a fork copies only the forking thread); None for n = 0."""
    if n <= 0:
        return None
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("fork"))
    pool.submit(int).result()  # a fork-context pool starts all its processes at its first task
    return pool


def read_jina(fetcher: Fetcher, store: PageStore, url: str, endpoint: str, key: str) -> dict:
    headers = {"Accept": "application/json", "X-Return-Format": "markdown"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    reader_url = f"{endpoint.rstrip('/')}/{url}"
    try:
        parse_url(url)  # a page url that does not parse is not sent to the reader
        fetched = fetcher.fetch(reader_url, headers=headers)
    except FetchError as err:
        if err.reason in READER_STOPS:
            raise ReaderStopped(f"Jina Reader at {endpoint}: {err.reason}: {err.detail} (key or quota: see reader_key_env)") from None
        raise Reject(err.reason, f"via Jina Reader: {err.detail}") from None
    try:
        reply = read_json(fetched.body)
    except ValueError as err:
        raise Reject("reader_error", f"{reader_url}: reply is not JSON ({err})") from None
    problem = answer_problem(READER_REPLY, reply)
    if problem:
        raise Reject("reader_error", f"{reader_url}: reply is not the reader's JSON: {problem}")
    data = reply["data"]
    markdown = (data.get("content") or "").strip()
    if not markdown:
        raise Reject("no_content", f"{reader_url}: the reader returned no content")
    return {
        "final_url": data.get("url") or url, "status": fetched.status, "content_type": fetched.content_type or "application/json",
        "charset": "utf-8", "sha256": store.put(markdown.encode(), ".md"), "title": (data.get("title") or "").strip(), "markdown": markdown,
    }


def run(ctx) -> None:
    p = ctx.params
    if p["reader"] not in ("local", "jina"):
        raise StageError(f"param reader must be local or jina, got {p['reader']!r}")
    settings = stage_fetch_settings(ctx)
    settings = dataclasses.replace(settings, max_bytes=min(settings.max_bytes, p["max_bytes"]))
    key = os.environ.get(p["reader_key_env"], "").strip() if p["reader_key_env"] and settings.mode != "replay" else ""
    store = PageStore(p["store"])
    results = ctx.read_rows("results")
    rows = [r for r in results if r["kind"] == "page"]
    ctx.stats["image_results_skipped"] = len(results) - len(rows)

    urls = sorted({r["url"] for r in rows})
    readers = markdown_processes(p["markdown_processes"] if p["reader"] == "local" and urls else 0)

    def read_page(*fetched) -> dict | tuple[str, str]:
        if readers is None:
            return page_columns(p["store"], *fetched)
        try:
            return readers.submit(page_columns, p["store"], *fetched).result()
        except concurrent.futures.process.BrokenProcessPool as err:
            raise StageError(f"a markdown process ended without its answer (killed, out of memory?): {err}") from None

    def read(url: str) -> dict | Reject:
        try:
            if p["reader"] == "jina":
                return read_jina(fetcher, store, url, p["reader_endpoint"], key)
            return read_local(fetcher, url, read_page)
        except Reject as rejected:
            return rejected

    try:
        fetcher = Fetcher(settings, record_to=p["record_warc"] or None)
    except ValueError as err:
        raise StageError(f"fetch: {err}") from None
    try:
        with fetcher, concurrent.futures.ThreadPoolExecutor(max_workers=p["workers"]) as pool:
            try:
                read_by_url = dict(zip(urls, pool.map(read, urls)))
            except ReaderStopped as err:
                raise StageError(str(err)) from None
    finally:
        if readers is not None:
            readers.shutdown(cancel_futures=True)
    for key_, value in fetcher.stats.items():
        ctx.stats[f"fetch_{key_}"] = value

    writer = ctx.writer("pages")
    written: set[str] = set()
    for row in rows:
        page_id = content_id("page", row["query_id"], row["url"])
        with ctx.item(page_id):
            if page_id in written:  # two results of one query with one url (crafted input: search_web drops repeats)
                raise Reject("duplicate_page", f"query={row['query_id']}: {row['url']} is result {row['id']} and an earlier one")
            written.add(page_id)
            read_result = read_by_url[row["url"]]
            if isinstance(read_result, Reject):
                raise Reject(read_result.reason, f"query={row['query_id']}: {read_result.detail}")
            writer.write({
                "id": page_id, "query_id": row["query_id"], "result_id": row["id"], "rank": row["rank"], "url": row["url"],
                **read_result, "chars": len(read_result["markdown"]), "images": count_images(read_result["markdown"]), "reader": p["reader"],
            })


STAGE = Stage(
    name="fetch_pages",
    version=VERSION,
    doc=__doc__,
    inputs={
        "results": Input("search results (page rows are read)", many=True, table="retrieval_search_results"),
        "warcs": Input("WARC files replay mode answers from (instead of fetch.replay_warcs)", many=True, optional=True, kind="file"),
    },
    outputs={"pages": Output("retrieval_pages", "one row per (query, page) read as markdown")},
    params={
        "reader": Param(str, "local", "local (trafilatura) or jina (Jina Reader API, the seed's reader)", choices=("local", "jina")),
        "reader_endpoint": Param(str, "https://r.jina.ai", "reader API base url; the page url is appended"),
        "reader_key_env": Param(str, "JINA_API_KEY", "environment variable with the reader API key (optional)"),
        "store": Param(str, "data/cache/pages", "raw page bodies by sha256, shared across runs", folder="writes"),
        "max_bytes": Param(int, 5_000_000, "largest page accepted (also capped by fetch.max_bytes)", min=1),
        "workers": Param(int, 8, "concurrent fetches (per-host limits still apply)", min=1),
        "markdown_processes": Param(int, 1, "processes reading the fetched pages into markdown beside the fetching one "
                                            "(0: read in it); the rule reserves a core for each", min=0, max=64),
        **FETCH_PARAMS,
    },
    run=run,
    rejects={
        **FETCH_REJECTS,
        "empty_page": "the page has no bytes",
        "not_html": "another Content-Type (a PDF, an image)",
        "undecodable": "not valid in its declared charset, or not UTF-8 when none is declared",
        "broken_html": "binary or markup-less data served as HTML",
        "no_content": "the reader found no main text",
        "reader_error": "the reader API's reply is not its JSON",
                "duplicate_page": "a second result row of one query with the same url",
    },
)

if __name__ == "__main__":
    STAGE.main()
