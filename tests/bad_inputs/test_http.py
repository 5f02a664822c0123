"""HTTP answers are untrusted input. Each case is one bad answer a search provider, the page reader,
OpenReview or Reddit may send (or one bad url the fetch layer is handed), served by a local server
on 127.0.0.1 in the API's own shape, through the stage's real CLI, with the outcome a user sees: a
reject of that item with its reason while every other item goes on, or, for a listing the client
cannot read at all, one line naming it. Never a traceback."""
from __future__ import annotations

import gzip
import json
import re
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pyarrow.parquet as pq
import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from conftest import run_stage
from stages.core.ids import content_id
from stages.core.tables import TableWriter, table_schema
from test_harvest_reddit_live import ID_ENV, SECRET_ENV, T0, RedditServer, _comment, _params, _post
from tests.faulty_server import FaultyServer
from tests.openreview_api import reply, submission

FETCH = {"allow_networks": ["127.0.0.1/32"], "attempts": 2, "backoff_s": 0.01, "max_retry_sleep_s": 0.05, "timeout_s": 5}
KEY_ENV = "CITEFORGE_TEST_GOOGLE_KEY"


def rejects_of(output: Path) -> dict[str, tuple[str, str]]:
    return {r["id"]: (r["reason"], r["detail"]) for r in pq.read_table(f"{output}.rejects.parquet").to_pylist()}


def report_of(output: Path) -> dict:
    return json.loads(Path(f"{output}.report.json").read_text())


def one_clear_line(result, *needles: str) -> str:
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert all(n in last for n in needles), last
    return last


# --- search providers (search_web) ------------------------------------------------------------------
def google_item(n: int, **over) -> dict:
    return {"kind": "customsearch#result", "title": f"title {n}", "link": f"https://site{n}.example/page", "snippet": f"snippet {n}", **over}


def google_reply(items: list, next_start: int | None = None) -> dict:
    queries = {"request": [{"startIndex": 1}]}
    if next_start is not None:
        queries["nextPage"] = [{"startIndex": next_start}]
    return {"kind": "customsearch#search", "queries": queries, "items": items}


HUGE_QUERY = "why " * 50_000  # 200 kB: the url is past what any server takes in a request line
GOOGLE_CASES = {  # kind -> (query text, the reply to it or None for the server's own answer, expected reason or None)
    "url_is_a_number": ("url is a number", google_reply([google_item(1), google_item(2, link=42)]), "bad_answer"),
    "title_is_an_object": ("title is an object", google_reply([google_item(1, title={"text": "t"})]), "bad_answer"),
    "items_is_a_string": ("items is a string", {"items": "none"}, "bad_answer"),
    "image_width_is_text": ("width is text", google_reply([google_item(1, image={"width": "wide"})]), "bad_answer"),
    "next_page_start_is_text": ("start is text", google_reply([google_item(1)], next_start="eleven"), "bad_answer"),
    "next_page_goes_back": ("goes back", google_reply([google_item(1)], next_start=1), "bad_answer"),
    "reply_is_a_list": ("a list", [google_item(1)], "bad_answer"),
    "200kB_query_gets_414": (HUGE_QUERY, None, "http_414"),
    "invalid_argument_400": ("invalid argument", 400, "http_400"),
    "good_query": ("a good query", google_reply([google_item(1), google_item(2)]), None),
}


@pytest.fixture(scope="module")
def google_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("google")
    by_query = {text: answer for text, answer, _ in GOOGLE_CASES.values()}

    def handle(request: Request) -> Response:
        answer = by_query[request.args["q"]]
        if answer == 400:  # Google's own error for an argument it refuses
            error = {"code": 400, "message": "Request contains an invalid argument.", "errors": [{"reason": "badRequest"}], "status": "INVALID_ARGUMENT"}
            return Response(json.dumps({"error": error}), status=400, content_type="application/json")
        return Response(json.dumps(answer), content_type="application/json; charset=UTF-8")

    with HTTPServer(host="127.0.0.1", port=0) as server:
        server.expect_request("/customsearch/v1").respond_with_handler(handle)
        queries = tmp / "queries.jsonl"
        queries.write_text("".join(json.dumps({"id": kind, "text": text}) + "\n" for kind, (text, _, _) in GOOGLE_CASES.items()))
        out = tmp / "results.parquet"
        params = {"provider": "google", "provider_settings": {"endpoint": server.url_for("/customsearch/v1"), "engine_id": "cx", "key_env": KEY_ENV},
                  "page_top_k": 2, "image_top_k": 0, "fetch": FETCH, "cache_mode": "off"}
        with pytest.MonkeyPatch.context() as env:
            env.setenv(KEY_ENV, "k")
            run_stage("search_web", "--input", f"queries={queries}", "--output", f"results={out}", "--params", json.dumps(params))
    return pq.read_table(out).to_pylist(), rejects_of(out), report_of(out)


@pytest.mark.parametrize("kind", list(GOOGLE_CASES))
def test_google_answer(google_run, kind):
    rows, rejects, report = google_run
    reason = GOOGLE_CASES[kind][2]
    if reason is None:
        assert kind not in rejects and [r["url"] for r in rows if r["query_id"] == kind] == ["https://site1.example/page", "https://site2.example/page"]
    else:
        assert rejects[kind][0] == reason, rejects.get(kind)
        assert not [r for r in rows if r["query_id"] == kind]
    assert report["rows_in"] == len(GOOGLE_CASES) == report["stats"]["queries_with_results"] + report["rejected"]


def test_a_search_reject_names_the_field_or_the_providers_own_words(google_run):
    _, rejects, _ = google_run
    assert "items.1.link must be str or null, got int 42" in rejects["url_is_a_number"][1]
    assert "items.0.title must be str or null" in rejects["title_is_an_object"][1]
    assert "Request contains an invalid argument" in rejects["invalid_argument_400"][1]
    assert "414" in rejects["200kB_query_gets_414"][1]


SEARXNG_CASES = {  # kind -> (the reply, expected reason or None)
    "url_is_a_number": ({"results": [{"url": 7, "title": "t", "content": "c"}]}, "bad_answer"),
    "title_is_an_object": ({"results": [{"url": "https://a.example/", "title": {"x": 1}, "content": "c"}]}, "bad_answer"),
    "results_is_an_object": ({"results": {"url": "https://a.example/"}}, "bad_answer"),
    "result_is_a_string": ({"results": ["https://a.example/"]}, "bad_answer"),
    "good_query": ({"results": [{"url": "https://a.example/", "title": "t", "content": "c"}]}, None),
}


def test_searxng_answers(tmp_path):
    def handle(request: Request) -> Response:
        reply = SEARXNG_CASES[request.args["q"]][0] if request.args["pageno"] == "1" else {"results": []}
        return Response(json.dumps({"query": request.args["q"], **reply}), content_type="application/json")

    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps({"id": kind, "text": kind}) + "\n" for kind in SEARXNG_CASES))
    out = tmp_path / "results.parquet"
    with HTTPServer(host="127.0.0.1", port=0) as server:
        server.expect_request("/search").respond_with_handler(handle)
        params = {"provider": "searxng", "provider_settings": {"endpoint": server.url_for("/")}, "page_top_k": 3, "fetch": FETCH, "cache_mode": "off"}
        run_stage("search_web", "--input", f"queries={queries}", "--output", f"results={out}", "--params", json.dumps(params))
    rejects = rejects_of(out)
    assert {k: r for k, (r, _) in rejects.items()} == {k: reason for k, (_, reason) in SEARXNG_CASES.items() if reason}
    assert "results.0.url must be str or null, got int 7" in rejects["url_is_a_number"][1]
    assert [r["url"] for r in pq.read_table(out).to_pylist()] == ["https://a.example/"]


def test_a_query_whose_image_search_is_a_bad_answer_keeps_none_of_its_page_results(tmp_path):
    """A query is kept with all its kinds or rejected whole: its page results are not written when
    its image search then fails (they were, beside its reject)."""
    def handle(request: Request) -> Response:
        images = request.args.get("categories") == "images"
        if request.args["pageno"] != "1":
            reply = {"results": []}
        elif images and request.args["q"] == "bad images":
            reply = {"results": [{"url": "https://a.example/i.png", "img_src": 7, "title": "t", "content": "c"}]}
        else:
            reply = {"results": [{"url": f"https://a.example/{'i.png' if images else 'page'}", "img_src": "https://a.example/i.png" if images else "",
                                  "title": "t", "content": "c"}]}
        return Response(json.dumps({"query": request.args["q"], **reply}), content_type="application/json")

    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"id": "good", "text": "good images"}) + "\n" + json.dumps({"id": "bad", "text": "bad images"}) + "\n")
    out = tmp_path / "results.parquet"
    with HTTPServer(host="127.0.0.1", port=0) as server:
        server.expect_request("/search").respond_with_handler(handle)
        params = {"provider": "searxng", "provider_settings": {"endpoint": server.url_for("/")}, "page_top_k": 1, "image_top_k": 1,
                  "fetch": FETCH, "cache_mode": "off"}
        run_stage("search_web", "--input", f"queries={queries}", "--output", f"results={out}", "--params", json.dumps(params))
    assert {k: r for k, (r, _) in rejects_of(out).items()} == {"bad": "bad_answer"}
    assert sorted((r["query_id"], r["kind"]) for r in pq.read_table(out).to_pylist()) == [("good", "image"), ("good", "page")]
    stats = report_of(out)["stats"]
    assert (stats["page_results"], stats["image_results"], stats["queries_with_results"]) == (1, 1, 1)


# --- the page reader and the fetch layer (fetch_pages, split_pages) -----------------------------------
def results_table(path: Path, urls: list[str]) -> dict[str, str]:
    """A search_web table of page results; returns page id -> url."""
    writer = TableWriter(path, table_schema("retrieval_search_results"), "retrieval_search_results")
    for rank, url in enumerate(urls, 1):
        writer.write({"id": f"result:{rank}", "query_id": "q1", "query": "sky", "kind": "page", "rank": rank, "url": url,
                      "title": "", "snippet": "", "page_url": "", "width": None, "height": None, "provider": "google"})
    writer.commit()
    return {content_id("page", "q1", url): url for url in urls}


def fetch_pages(results: Path, out: Path, **params) -> None:
    prm = {"fetch": FETCH, "workers": 2, "store": str(out.parent / "store"), **params}
    run_stage("fetch_pages", "--input", f"results={results}", "--output", f"pages={out}", "--params", json.dumps(prm))


ARTICLE = "<html><body><article><p>" + "Blue light is scattered more than red light by the air. " * 8 + "</p></article></body></html>"


def test_unparsable_urls_are_rejects_of_their_page(tmp_path):
    routes = {"/article": (200, {"Content-Type": "text/html"}, ARTICLE.encode()),
              "/to-nowhere": (302, {"Location": "http://[::1/x"}, b"")}  # (a server that sends any Location it likes)
    with FaultyServer(routes) as server:
        good, moved = server.url("/article"), server.url("/to-nowhere")
        ids = results_table(tmp_path / "results.parquet", ["http://[::1", "http://[::1]:99999/", good, moved])
        out = tmp_path / "out" / "pages.parquet"
        fetch_pages(tmp_path / "results.parquet", out)
    rejects = {ids[i]: reason for i, (reason, _) in rejects_of(out).items()}
    assert rejects == {"http://[::1": "bad_url", "http://[::1]:99999/": "bad_url", moved: "bad_response"}
    assert [r["url"] for r in pq.read_table(out).to_pylist()] == [good]


JINA_CASES = {  # page path -> (the reader's reply body, expected reason or None)
    "/title-int": (json.dumps({"code": 200, "data": {"title": 42, "url": "https://x.example/", "content": "Some text."}}), "reader_error"),
    "/url-int": (json.dumps({"code": 200, "data": {"title": "T", "url": 7, "content": "Some text."}}), "reader_error"),
    "/content-list": (json.dumps({"code": 200, "data": {"title": "T", "content": ["a", "b"]}}), "reader_error"),
    "/data-string": (json.dumps({"code": 200, "data": "Some text."}), "reader_error"),
    "/no-data": (json.dumps({"code": 200, "status": 20000}), "reader_error"),
    "/not-json": ("Title: T\n\nMarkdown Content:\nSome text.", "reader_error"),
    "/good": (json.dumps({"code": 200, "data": {"title": "Good", "url": "https://x.example/good", "content": "Some text."}}), None),
}


def test_jina_reader_answers(httpserver: HTTPServer, tmp_path):
    def reader(request: Request) -> Response:
        body, _ = JINA_CASES[request.path.split("example", 1)[1]]
        return Response(body, content_type="application/json")

    httpserver.expect_request(re.compile("^/reader/")).respond_with_handler(reader)
    urls = [f"https://pages.example{path}" for path in JINA_CASES] + ["http://[::1"]
    ids = results_table(tmp_path / "results.parquet", urls)
    out = tmp_path / "out" / "pages.parquet"
    fetch_pages(tmp_path / "results.parquet", out, reader="jina", reader_endpoint=httpserver.url_for("/reader"))
    rejects = {ids[i]: (reason, detail) for i, (reason, detail) in rejects_of(out).items()}
    expected = {f"https://pages.example{p}": reason for p, (_, reason) in JINA_CASES.items() if reason} | {"http://[::1": "bad_url"}
    assert {url: reason for url, (reason, _) in rejects.items()} == expected
    assert "data.title must be str or null, got int 42" in rejects["https://pages.example/title-int"][1]
    assert "data.url must be str or null, got int 7" in rejects["https://pages.example/url-int"][1]
    assert not any("[::1" in req.path for req, _ in httpserver.log)  # an unparsable url is not sent to the reader
    pages = pq.read_table(out).to_pylist()
    assert [(p["title"], p["final_url"]) for p in pages] == [("Good", "https://x.example/good")]


def page_row(page_id: str, markdown: str, url: str) -> dict:
    return {"id": page_id, "query_id": "q1", "result_id": "r", "rank": 1, "url": url, "final_url": url, "status": 200,
            "content_type": "text/html", "charset": "utf-8", "sha256": "0" * 64, "title": "t", "markdown": markdown,
            "chars": len(markdown), "images": markdown.count("!["), "reader": "jina"}


def test_split_pages_with_unparsable_urls(tmp_path):
    pages = tmp_path / "pages.parquet"
    writer = TableWriter(pages, table_schema("retrieval_pages"), "retrieval_pages")
    writer.write_many([
        page_row("page:bad-base", "Text. ![rel](/img/a.png)", "http://[::1"),
        page_row("page:bad-image", "Text before. ![broken](http://[::1/x.png) ![fine](https://i.example/b.png) Text after.", "https://p.example/"),
    ])
    writer.commit()
    out = tmp_path / "out" / "elements.parquet"
    run_stage("split_pages", "--input", f"pages={pages}", "--output", f"elements={out}")
    assert {k: r for k, (r, _) in rejects_of(out).items()} == {"page:bad-base": "bad_url"}
    elements = pq.read_table(out).to_pylist()
    assert [(e["kind"], e["image_url"]) for e in elements if e["kind"] == "image"] == [("image", "https://i.example/b.png")]
    report = report_of(out)
    assert report["stats"]["images_bad_url"] == 1 and report["rows_in"] == 2 == report["stats"]["pages_split"] + report["rejected"]


# --- OpenReview (harvest_openreview) ---------------------------------------------------------------------
def openreview(tmp_path: Path, url: str, check: bool = True):
    out = tmp_path / "out"
    settings = {"base_url": url, "mode": "live", "pdf_store": str(tmp_path / "pdfs"), "download_pdfs": False, "requests_per_second": 0.0,
                "retry_max_sleep": 0.05, "allow_networks": ["127.0.0.0/8"]}
    args = ["--params", json.dumps(settings)] + [a for t in ("papers", "reviews", "comments", "threads") for a in ("--output", f"{t}={out / t}.parquet")]
    return run_stage("harvest_openreview", *args, check=check), out / "papers.parquet"


def note(forum: str, n: int, **over) -> dict:
    return {**submission(forum, n, f"Paper {n}", pdf=False), **over}


def _content(n: int, **fields) -> dict:
    return {**submission("x", n, f"Paper {n}", pdf=False)["content"], **{k: {"value": v} for k, v in fields.items()}}


OPENREVIEW_CASES = {  # kind -> (the note as listed, its reject id, expected reason or None)
    "id_is_a_number": ({"id": 12345, "number": 1, "content": _content(1)}, "openreview:#0", "malformed_note"),
    "note_is_a_string": ("forum-as-text", "openreview:#1", "malformed_note"),
    "title_is_an_object": (note("f3", 3, content=_content(3, title={"en": "Paper"})), "openreview:f3", "malformed_note"),
    "no_title": (note("f4", 4, content=_content(4, title=None)), "openreview:f4", "malformed_note"),
    "number_is_text": (note("f5", 5, number="five"), "openreview:f5", "malformed_note"),
    "cdate_is_text": (note("f6", 6, cdate="yesterday"), "openreview:f6", "malformed_note"),
    "cdate_past_int64": (note("f7", 7, cdate=2**70), "openreview:f7", "malformed_note"),
    "reply_without_id": (note("f8", 8, details={"replies": [{"forum": "f8", "content": {}}]}), "openreview:f8", "malformed_note"),
    "reply_signature_is_a_number": (note("f9", 9, details={"replies": [{**reply("r9", "f9", 9, "Official_Comment", "Authors", {}), "signatures": [9]}]}),
                                    "openreview:f9", "malformed_note"),
    "replies_is_an_object": (note("f10", 10, details={"replies": {"r": 1}}), "openreview:f10", "malformed_note"),
    "abstract_is_a_list": (note("f11", 11, content=_content(11, abstract=["a", "b"])), "openreview:f11", "malformed_note"),
    "good_note": (note("f12", 12), "openreview:f12", None),
}


def test_openreview_notes(httpserver: HTTPServer, tmp_path):
    listed = [n for n, _, _ in OPENREVIEW_CASES.values()]
    httpserver.expect_request("/notes").respond_with_json({"notes": listed, "count": len(listed)})
    _, papers = openreview(tmp_path, httpserver.url_for("").rstrip("/"))
    rejects = rejects_of(papers)
    assert {item: reason for item, (reason, _) in rejects.items()} == {item: reason for _, item, reason in OPENREVIEW_CASES.values() if reason}
    assert "id must be str, got int 12345" in rejects["openreview:#0"][1]
    assert "title must be str" in rejects["openreview:f3"][1]
    assert [p["id"] for p in pq.read_table(papers).to_pylist()] == ["openreview:f12"]
    report = report_of(papers)
    assert report["rows_in"] == len(OPENREVIEW_CASES) == report["rows_out"]["papers"] + report["rejected"]


@pytest.mark.parametrize("page, words", [
    ({"notes": {"n1": {}}, "count": 1}, "notes must be list"),
    ({"notes": [], "count": "many"}, "count must be int"),
    ({"count": 3}, "misses required key(s) ['notes']"),
])
def test_an_openreview_listing_page_of_another_shape_is_one_line(httpserver: HTTPServer, tmp_path, page, words):
    httpserver.expect_request("/notes").respond_with_json(page)
    result, papers = openreview(tmp_path, httpserver.url_for("").rstrip("/"), check=False)
    one_clear_line(result, "harvest_openreview: error:", "GET /notes", words)
    assert not papers.parent.exists() or not list(papers.parent.iterdir())


# --- Reddit (harvest_reddit_live) --------------------------------------------------------------------------
def listing(children: list) -> dict:
    return {"kind": "Listing", "data": {"after": None, "before": None, "children": children}}


def reddit_harvest(tmp_path: Path, server: RedditServer, monkeypatch, check: bool = True, **params):
    monkeypatch.setenv(ID_ENV, "cid")
    monkeypatch.setenv(SECRET_ENV, "secret")
    out = tmp_path / "out"
    args = [f"--output=posts={out}/posts.00000.parquet", f"--output=comments={out}/comments.00000.parquet",
            "--params", json.dumps(_params(server.url, **{"subreddits": ["askscience"], "retry_attempts": 1, **params}))]
    return run_stage("harvest_reddit_live", *args, check=check), out / "posts.00000.parquet"


def serving(answers: dict[str, object]) -> RedditServer:
    """The test Reddit, with the answer to each path starting with a key replaced (a JSON answer,
    or a function that writes the raw answer to the handler)."""
    server = RedditServer()
    route = server.route

    def bad_route(handler, method, body):
        for prefix, answer in answers.items():
            if handler.path.startswith(prefix):
                return answer(handler) if callable(answer) else handler._send(200, answer)
        return route(handler, method, body)

    server.route = bad_route
    return server


POST_A = _post("a", created=T0 + 5000)
REDDIT_TREE_CASES = {  # kind -> (the answer to /comments/a or /api/morechildren, expected reject of reddit:a)
    "tree_is_an_object": ({"/comments/a": {"a": 1}}, "bad_answer"),
    "tree_has_one_listing": ({"/comments/a": [listing([{"kind": "t3", "data": POST_A}])]}, "bad_answer"),
    "comment_data_is_a_number": ({"/comments/a": [listing([{"kind": "t3", "data": POST_A}]), listing([{"kind": "t1", "data": 5}])]}, "bad_answer"),
    "comment_id_is_a_number": ({"/comments/a": [listing([{"kind": "t3", "data": POST_A}]), listing([{"kind": "t1", "data": {**_comment("c1", "a"), "id": 7}}])]},
                               "bad_answer"),
    "replies_is_a_number": ({"/comments/a": [listing([{"kind": "t3", "data": POST_A}]), listing([{"kind": "t1", "data": {**_comment("c1", "a"), "replies": 7}}])]},
                            "bad_answer"),
    "morechildren_comment_without_link_id": ({"/api/morechildren": {"json": {"errors": [], "data": {"things": [
        {"kind": "t1", "data": {k: v for k, v in _comment("c2", "a").items() if k != "link_id"}}]}}}}, "bad_answer"),
    "morechildren_comment_under_no_comment": ({"/api/morechildren": {"json": {"errors": [], "data": {"things": [
        {"kind": "t1", "data": _comment("c2", "a", parent="t1_nowhere")}]}}}}, "bad_answer"),
    "morechildren_things_is_a_number": ({"/api/morechildren": {"json": {"errors": [], "data": {"things": 5}}}}, "bad_answer"),
    "comment_author_is_null": ({"/comments/a": [listing([{"kind": "t3", "data": POST_A}]), listing([{"kind": "t1", "data": {**_comment("c1", "a"), "author": None}}])]},
                               "bad_answer"),
    "comment_without_replies": ({"/comments/a": [listing([{"kind": "t3", "data": POST_A}]), listing([
        {"kind": "t1", "data": {k: v for k, v in _comment("c1", "a").items() if k != "replies"}}])]}, "bad_answer"),
    "comment_parent_is_a_number": ({"/comments/a": [listing([{"kind": "t3", "data": POST_A}]), listing([{"kind": "t1", "data": {**_comment("c1", "a"), "parent_id": 3}}])]},
                                   "bad_answer"),
    "more_count_is_text": ({"/comments/a": [listing([{"kind": "t3", "data": POST_A}]), listing([
        {"kind": "more", "data": {"count": "two", "name": "t1_c2", "id": "c2", "parent_id": "t3_a", "depth": 0, "children": ["c2"]}}])]}, "bad_answer"),
}


@pytest.mark.parametrize("kind", list(REDDIT_TREE_CASES))
def test_a_reddit_comment_tree_of_another_shape_rejects_its_post(tmp_path, monkeypatch, kind):
    answers, reason = REDDIT_TREE_CASES[kind]
    server = serving(answers)
    try:
        _, posts = reddit_harvest(tmp_path, server, monkeypatch)
    finally:
        server.stop()
    rejects = rejects_of(posts)
    words = "does not hold together" if kind == "morechildren_comment_under_no_comment" else "not of the API's shape"
    assert rejects["reddit:a"][0] == reason and words in rejects["reddit:a"][1], rejects["reddit:a"]
    assert "reddit:g" in {p["id"] for p in pq.read_table(posts).to_pylist()}  # the other posts go on


REDDIT_LISTING_CASES = {  # kind -> (the answer to /r/askscience/new, words of the one line): a page that is no listing
    "listing_is_a_list": ([1, 2], "the answer must be dict"),
    "children_is_a_string": ({"kind": "Listing", "data": {"after": None, "children": "x"}}, "data.children must be list"),
    "no_data": ({"kind": "Listing"}, "misses required key(s) ['data']"),
    "after_is_a_number": ({"kind": "Listing", "data": {"after": 5, "children": []}}, "data.after must be"),
}


@pytest.mark.parametrize("kind", list(REDDIT_LISTING_CASES))
def test_a_reddit_listing_of_another_shape_is_one_line(tmp_path, monkeypatch, kind):
    answer, words = REDDIT_LISTING_CASES[kind]
    server = serving({"/r/askscience/new": answer})
    try:
        result, posts = reddit_harvest(tmp_path, server, monkeypatch, check=False)
    finally:
        server.stop()
    one_clear_line(result, "harvest_reddit_live: error: r/askscience: the listing could not be read", words)
    assert not list(posts.parent.glob("*.parquet*"))


REDDIT_LISTED_POST_CASES = {  # kind -> (a post on the listing page praw cannot read, its reject id, words of the reject)
    "child_is_a_number": (5, "r/askscience/new:page1:2", "the answer must be dict"),
    "child_data_is_a_number": ({"kind": "t3", "data": 5}, "r/askscience/new:page1:2", "data must be dict"),
    "subreddit_is_a_number": ({"kind": "t3", "data": _post("b", created=T0 + 4000, subreddit=5)}, "reddit:b", "data.subreddit must be str"),
    "post_id_is_empty": ({"kind": "t3", "data": _post("", created=T0 + 4000)}, "r/askscience/new:page1:2", "data.id must have at least 1"),
    "subreddit_is_empty": ({"kind": "t3", "data": _post("b", created=T0 + 4000, sub="")}, "reddit:b", "data.subreddit must have at least 1"),
    "author_is_null": ({"kind": "t3", "data": _post("b", created=T0 + 4000, author=None)}, "reddit:b", "data.author must not be any of [null"),
    "poll_options_are_numbers": ({"kind": "t3", "data": _post("b", created=T0 + 4000, poll_data={"options": [1, 2]})}, "reddit:b",
                                 "poll_data.options.0 must be dict"),
}


@pytest.mark.parametrize("kind", list(REDDIT_LISTED_POST_CASES))
def test_a_listed_post_praw_cannot_read_is_its_own_reject(tmp_path, monkeypatch, kind):
    """praw builds a whole listing page before any rule runs: the post is left out of what it
    reads, and the page's other posts are harvested."""
    bad, reject_id, words = REDDIT_LISTED_POST_CASES[kind]
    page = [{"kind": "t3", "data": POST_A}, bad, {"kind": "t3", "data": _post("old", created=T0 - 10)}]
    server = serving({"/r/askscience/new": listing(page)})
    try:
        _, posts = reddit_harvest(tmp_path, server, monkeypatch)
    finally:
        server.stop()
    rejects = rejects_of(posts)
    assert set(rejects) == {reject_id} and rejects[reject_id][0] == "bad_answer", rejects
    assert rejects[reject_id][1].startswith("r/askscience/new page 1, post 2 is not of the API's shape: ") and words in rejects[reject_id][1]
    assert [p["id"] for p in pq.read_table(posts).to_pylist()] == ["reddit:a"]
    comments = pq.read_table(posts.with_name("comments.00000.parquet")).num_rows
    report = json.loads(posts.with_name(posts.name + ".report.json").read_text())
    assert comments == 4 and report["rows_in"] == 2 + comments  # the two posts in the window were judged, and a's comments


def test_a_listed_post_praw_cannot_read_outside_the_window_is_not_judged(tmp_path, monkeypatch):
    late = _post("late", created=T0 + 40 * 86400, author=None)  # after the window: counted as listed after it
    old = _post("old", created=T0 - 10, author=None)  # past the start: where the listing stops
    page = [{"kind": "t3", "data": late}, {"kind": "t3", "data": POST_A}, {"kind": "t3", "data": old}]
    server = serving({"/r/askscience/new": listing(page)})
    try:
        _, posts = reddit_harvest(tmp_path, server, monkeypatch)
    finally:
        server.stop()
    report = json.loads(posts.with_name(posts.name + ".report.json").read_text())
    assert rejects_of(posts) == {} and [p["id"] for p in pq.read_table(posts).to_pylist()] == ["reddit:a"]
    assert report["stats"]["listed_after_window"] == 1


def record_then_replay(tmp_path, server, warc, monkeypatch) -> dict:
    """The r/askscience harvest recorded from `server` into `warc`, then replayed with the server
    stopped: {mode: its posts table}."""
    monkeypatch.setenv(ID_ENV, "cid")
    monkeypatch.setenv(SECRET_ENV, "secret")
    outputs = {}
    try:
        for mode in ("record", "replay"):
            out = tmp_path / mode
            params = _params(server.url, subreddits=["askscience"], retry_attempts=1, mode=mode, warc=str(warc))
            run_stage("harvest_reddit_live", f"--output=posts={out}/posts.00000.parquet", f"--output=comments={out}/comments.00000.parquet",
                      "--params", json.dumps(params))
            server.stop()
            outputs[mode] = out / "posts.00000.parquet"
    finally:
        if server.server.thread.is_alive():
            server.stop()
    return outputs


def test_a_page_of_only_posts_praw_cannot_read_does_not_end_the_listing(tmp_path, monkeypatch):
    """praw ends a listing at an empty page: a page whose every post was left out is followed by
    the next page in its place, so the posts after it are harvested; record then replay reads the
    same (the page asked for in its place is archived under its own url)."""
    server = RedditServer()  # pages of 2: [b0, b1], [b2, a], [del, gallery], ...; b0, b1 and b2 of another shape
    server.posts["askscience"][0:1] = [_post(pid, created=T0 + 8000 - k, author=None) for k, pid in enumerate(("b0", "b1", "b2"))]
    warc = tmp_path / "reddit.warc.gz"
    outputs = record_then_replay(tmp_path, server, warc, monkeypatch)
    for posts in outputs.values():
        rejects = rejects_of(posts)
        assert {k: v[0] for k, v in rejects.items() if v[0] == "bad_answer"} == {"reddit:b0": "bad_answer", "reddit:b1": "bad_answer",
                                                                                 "reddit:b2": "bad_answer"}
        assert rejects["reddit:b1"][1].startswith("r/askscience/new page 1, post 2 ")
        assert rejects["reddit:b2"][1].startswith("r/askscience/new page 2, post 1 ")
        assert "reddit:a" in {p["id"] for p in pq.read_table(posts).to_pylist()}
        assert "incomplete_window" not in report_of(posts)["stats"]
    assert pq.read_table(outputs["record"]).equals(pq.read_table(outputs["replay"]))


@pytest.mark.parametrize("kind", ["no_after_key", "pages_naming_each_other"])
def test_a_page_of_only_posts_praw_cannot_read_with_no_next_page_ends_the_listing(tmp_path, monkeypatch, kind):
    """An emptied page whose `after` is absent (the listing's shape allows it), or two emptied pages
    naming each other, end the listing as an empty page would: the window is reported incomplete,
    the left-out posts are rejects, nothing loops or fails."""
    bad = [{"kind": "t3", "data": _post(pid, created=T0 + 5000, author=None)} for pid in ("b1", "b2")]
    server = RedditServer()
    route = server.route

    def looping(handler, method, body):
        if handler.path.startswith("/r/askscience/new"):
            after = parse_qs(urlsplit(handler.path).query).get("after", [None])[0]
            data = {"children": bad[:1] if after != "t3_b1" else bad[1:]}
            if kind == "pages_naming_each_other":
                data["after"] = "t3_b2" if after != "t3_b2" else "t3_b1"
            return handler._send(200, {"kind": "Listing", "data": data})
        return route(handler, method, body)

    server.route = looping
    try:
        result, posts = reddit_harvest(tmp_path, server, monkeypatch)
    finally:
        server.stop()
    report = report_of(posts)
    assert report["stats"]["incomplete_window"] == ["askscience"]
    rejects = rejects_of(posts)  # a post listed again on a later page is a reject named by its page
    assert "reddit:b1" in rejects and {reason for reason, _ in rejects.values()} == {"bad_answer"}
    assert pq.read_table(posts).num_rows == 0


def test_a_left_out_post_is_named_by_its_subreddit_and_page(tmp_path, monkeypatch):
    """Pages are counted per subreddit: the second subreddit's first page is its page 1."""
    server = RedditServer()
    server.posts["woodworking"].insert(0, _post("w0", sub="woodworking", created=T0 + 200, author=None))
    monkeypatch.setenv(ID_ENV, "cid")
    monkeypatch.setenv(SECRET_ENV, "secret")
    out = tmp_path / "out"
    try:
        run_stage("harvest_reddit_live", f"--output=posts={out}/posts.00000.parquet", f"--output=comments={out}/comments.00000.parquet",
                  "--params", json.dumps(_params(server.url, retry_attempts=1)))
    finally:
        server.stop()
    rejects = rejects_of(out / "posts.00000.parquet")
    assert rejects["reddit:w0"][0] == "bad_answer" and rejects["reddit:w0"][1].startswith("r/woodworking/new page 1, post 1 "), rejects["reddit:w0"]


REDDIT_FIELD_CASES = {  # kind -> (the post's fields, expected reason): the harvest rules judge what praw could read
    "author_is_an_object": ({"author": {"name": "x"}}, "bad_field_type"),
    "author_is_a_number": ({"author": 5}, "bad_field_type"),
    "title_is_an_object": ({"title": {"t": 1}}, "bad_field_type"),
    "created_is_text": ({"created_utc": "soon"}, "bad_field_type"),
}


def test_reddit_post_fields_of_the_wrong_type_are_rejects(tmp_path, monkeypatch):
    children = [{"kind": "t3", "data": _post(kind, created=T0 + 100 + i, **fields)} for i, (kind, (fields, _)) in enumerate(REDDIT_FIELD_CASES.items())]
    server = serving({"/r/askscience/new": listing(children)})
    try:
        _, posts = reddit_harvest(tmp_path, server, monkeypatch)
    finally:
        server.stop()
    assert {k: r for k, (r, _) in rejects_of(posts).items()} == {f"reddit:{kind}": reason for kind, (_, reason) in REDDIT_FIELD_CASES.items()}


# --- Reddit answers too large or too slow ------------------------------------------------------------------
BOMB = gzip.compress(b"\0" * (1 << 20), 9) * 400  # 400 gzip members: about 400 KB on the wire, 400 MB decoded
DRIP_BYTES, DRIP_GAP_S = 1000, 0.5  # 500 s to send, a byte well inside any read timeout
TIMEOUT_S = 2.0  # the stage's timeout_s in these cases


def gzip_bomb(handler, status=200, headers=()):
    """A JSON answer whose gzip body decodes to 400 MB."""
    handler.send_response(status)
    for key, value in [("Content-Type", "application/json; charset=UTF-8"), ("Content-Encoding", "gzip"), ("Content-Length", str(len(BOMB))), *headers]:
        handler.send_header(key, value)
    handler.end_headers()
    handler.wfile.write(BOMB)


def redirect_bomb(handler):
    """A 302 whose body is the bomb: requests reads a redirect's body before praw sees the status."""
    gzip_bomb(handler, 302, [("Location", handler.path)])


def drip(handler):
    """A 200 that announces DRIP_BYTES and sends one every DRIP_GAP_S, until the client hangs up."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json; charset=UTF-8")
    handler.send_header("Content-Length", str(DRIP_BYTES))
    handler.end_headers()
    for _ in range(DRIP_BYTES):
        try:
            handler.wfile.write(b" ")
            handler.wfile.flush()
        except OSError:  # the client gave up: what the test wants
            return
        time.sleep(DRIP_GAP_S)


def bounded_harvest(tmp_path: Path, answers: dict, monkeypatch, check: bool = True, **params):
    """reddit_harvest with `answers` served and timeout_s TIMEOUT_S, which must end well before a
    drip would (DRIP_BYTES * DRIP_GAP_S = 500 s); also the server's url."""
    server = serving(answers)
    started = time.monotonic()
    try:
        result, posts = reddit_harvest(tmp_path, server, monkeypatch, check=check, timeout_s=TIMEOUT_S, **params)
    finally:
        server.stop()
    took = time.monotonic() - started
    assert took < 30, took  # each try is cut at TIMEOUT_S; the rest is the stage's start
    return result, posts, server.url


REDDIT_UNBOUNDED_LISTING_CASES = {  # kind -> (the answer to /r/askscience/new, words of the one line)
    "gzip_bomb": (gzip_bomb, "AnswerTooLarge: GET {url}/r/askscience/new?limit=2&raw_json=1: the answer is too large: body passed 33554432 bytes"),
    "gzip_bomb_in_a_redirect": (redirect_bomb, "AnswerTooLarge: GET {url}/r/askscience/new?limit=2&raw_json=1: the answer is too large"),
    "drip": (drip, "RetriesExhausted: gave up after 2 attempts: ReadTimeout: GET {url}/r/askscience/new?limit=2&raw_json=1: body not complete after 2 s"),
}


@pytest.mark.parametrize("kind", list(REDDIT_UNBOUNDED_LISTING_CASES))
def test_a_reddit_listing_too_large_or_too_slow_is_one_line(tmp_path, monkeypatch, kind):
    """A listing page that decodes past the byte cap (not retried), or that drips a byte at a time
    (cut at timeout_s for the whole body, then retried): one line naming the subreddit and the url,
    quickly, and no output."""
    answer, words = REDDIT_UNBOUNDED_LISTING_CASES[kind]
    asked = []

    def answering(handler):
        asked.append(handler.path)
        return answer(handler)

    result, posts, url = bounded_harvest(tmp_path, {"/r/askscience/new": answering}, monkeypatch, check=False, retry_attempts=2)
    one_clear_line(result, "harvest_reddit_live: error: r/askscience: the listing could not be read: ", words.format(url=url))
    assert len(asked) == (1 if "bomb" in kind else 2)  # too large: not asked again; too slow: retried
    assert not list(posts.parent.glob("*.parquet*"))


REDDIT_UNBOUNDED_TREE_CASES = {  # kind -> (the answer to /comments/a, expected reject of reddit:a, words of its detail)
    "gzip_bomb": (gzip_bomb, "bad_answer", "GET {url}/comments/a/?limit=2048&sort=confidence&raw_json=1: the answer is too large: "
                                           "body passed 33554432 bytes"),
    "drip": (drip, "comments_unavailable", "RetriesExhausted: gave up after 1 attempts: ReadTimeout: GET {url}/comments/a/?limit=2048&sort=confidence"
                                           "&raw_json=1: body not complete after 2 s"),
}


@pytest.mark.parametrize("kind", list(REDDIT_UNBOUNDED_TREE_CASES))
def test_a_reddit_comment_tree_too_large_or_too_slow_rejects_its_post(tmp_path, monkeypatch, kind):
    """A comment tree past the byte cap is its post's bad_answer; one dripping past timeout_s, once
    the retries are spent, its comments_unavailable. Quickly, and the other posts go on."""
    answer, reason, words = REDDIT_UNBOUNDED_TREE_CASES[kind]
    _, posts, url = bounded_harvest(tmp_path, {"/comments/a": answer}, monkeypatch)
    rejects = rejects_of(posts)
    assert rejects["reddit:a"][0] == reason and rejects["reddit:a"][1].startswith(words.format(url=url)), rejects["reddit:a"]
    assert "reddit:g" in {p["id"] for p in pq.read_table(posts).to_pylist()}  # the other posts go on


def test_a_too_large_answer_recorded_is_replayed_as_the_same_reject(tmp_path, monkeypatch):
    """record writes the too-large answer as a failure (not its bytes); replay raises it again."""
    server = serving({"/comments/a": gzip_bomb})
    warc = tmp_path / "reddit.warc.gz"
    outputs = record_then_replay(tmp_path, server, warc, monkeypatch)
    assert warc.stat().st_size < len(BOMB)  # the bomb is not in the archive
    recorded, replayed = rejects_of(outputs["record"]), rejects_of(outputs["replay"])
    assert recorded == replayed and recorded["reddit:a"][0] == "bad_answer" and "too large" in recorded["reddit:a"][1]
    assert pq.read_table(outputs["record"]).equals(pq.read_table(outputs["replay"]))
