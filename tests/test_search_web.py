"""search_web against local servers on 127.0.0.1 speaking Google Programmable Search's and SearXNG's
JSON: paging, image mode, quota and key errors, the cache, record then replay offline."""
from __future__ import annotations

import gzip
import json
from urllib.parse import parse_qs, urlsplit

import pyarrow.parquet as pq
import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from stages.core.search.google import GoogleSearch
from stages.core.search.searxng import SearxngSearch
from tests.conftest import run_stage

FETCH = {"allow_networks": ["127.0.0.1/32"], "attempts": 2, "backoff_s": 0.01, "max_retry_sleep_s": 0.05, "timeout_s": 5}
QUERIES = [{"id": "q1", "text": "why is the sky blue"}, {"id": "q2", "text": "how do volcanoes erupt"}]
TOTAL = 37  # results the fake engine has for any query


def write_queries(path, rows=QUERIES):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def google_handler(seen: list):
    """Google's JSON API: `num` items from `start`, nextPage while results remain; no items past TOTAL."""

    def handle(request: Request) -> Response:
        args = {k: v[0] for k, v in parse_qs(urlsplit(request.url).query).items()}
        seen.append((args, request.headers.get("X-goog-api-key")))
        start, num = int(args["start"]), int(args["num"])
        image = args.get("searchType") == "image"
        slug = args["q"].replace(" ", "-")
        items = []
        for i in range(start, min(start + num, TOTAL + 1)):
            item = {"kind": "customsearch#result", "title": f"{args['q']} #{i}", "link": f"https://site{i}.example/{slug}", "snippet": f"snippet {i}"}
            if image:
                item["link"] = f"https://img{i}.example/{slug}.jpg"
                item["image"] = {"contextLink": f"https://site{i}.example/{slug}", "width": 100 + i, "height": 50 + i}
            items.append(item)
        request_info = {"startIndex": start, "count": num, "searchTerms": args["q"]}
        queries = {"request": [request_info]}
        if start + num <= TOTAL:
            queries["nextPage"] = [{**request_info, "startIndex": start + num}]
        body = {"kind": "customsearch#search", "queries": queries}
        if items:
            body["items"] = items
        return Response(json.dumps(body), content_type="application/json; charset=UTF-8")

    return handle


def google_error(status: int, reason: str, message: str) -> Response:
    body = {"error": {"code": status, "message": message, "errors": [{"message": message, "domain": "usageLimits", "reason": reason}], "status": "RESOURCE_EXHAUSTED"}}
    return Response(json.dumps(body), status=status, content_type="application/json")


def params(endpoint: str, tmp_path, **extra) -> str:
    base = {
        "provider": "google", "provider_settings": {"endpoint": endpoint, "engine_id": "test-cx", "key_env": "CITEFORGE_TEST_GOOGLE_KEY"},
        "page_top_k": 23, "image_top_k": 0, "fetch": FETCH, "cache_dir": str(tmp_path / "cache"), "cache_mode": "off",
    }
    base.update(extra)
    return json.dumps(base)


def search(tmp_path, queries, out, prm, check=True, warcs=()):
    args = ["--input", f"queries={queries}", "--output", f"results={out}", "--params", prm]
    for warc in warcs:
        args += ["--input", f"warcs={warc}"]
    return run_stage("search_web", *args, check=check)


def test_google_pages_are_paged_to_top_k_with_the_key_in_a_header(httpserver: HTTPServer, tmp_path, monkeypatch):
    monkeypatch.setenv("CITEFORGE_TEST_GOOGLE_KEY", "secret-key-123")
    seen: list = []
    httpserver.expect_request("/customsearch/v1").respond_with_handler(google_handler(seen))
    out = tmp_path / "results.parquet"
    search(tmp_path, write_queries(tmp_path / "q.jsonl"), out, params(httpserver.url_for("/customsearch/v1"), tmp_path, image_top_k=5))
    rows = pq.read_table(out).to_pylist()
    for qid in ("q1", "q2"):
        pages = sorted((r for r in rows if r["query_id"] == qid and r["kind"] == "page"), key=lambda r: r["rank"])
        assert [r["rank"] for r in pages] == list(range(1, 24))
        assert [r["url"] for r in pages] == [f"https://site{i}.example/{pages[0]['query'].replace(' ', '-')}" for i in range(1, 24)]
        images = sorted((r for r in rows if r["query_id"] == qid and r["kind"] == "image"), key=lambda r: r["rank"])
        assert [(r["width"], r["height"]) for r in images] == [(100 + i, 50 + i) for i in range(1, 6)]
        assert all(r["page_url"].startswith("https://site") and r["url"].endswith(".jpg") for r in images)
    # pages of 10, 10, 3 for each query's web search, one request of 5 for its image search
    pages = [(a["start"], a["num"]) for a, _ in seen if "searchType" not in a]
    assert pages == [("1", "10"), ("11", "10"), ("21", "3")] * 2
    assert [(a["start"], a["num"]) for a, _ in seen if a.get("searchType") == "image"] == [("1", "5")] * 2
    assert all(a["cx"] == "test-cx" and key == "secret-key-123" and "key" not in a for a, key in seen)


def test_google_stops_at_the_last_page_and_rejects_queries_without_results(httpserver: HTTPServer, tmp_path, monkeypatch):
    monkeypatch.setenv("CITEFORGE_TEST_GOOGLE_KEY", "k")
    seen: list = []
    handler = google_handler(seen)

    def handle(request: Request) -> Response:
        if "nothing" in request.args.get("q", ""):
            return Response(json.dumps({"kind": "customsearch#search", "queries": {"request": [{}]}, "searchInformation": {"totalResults": "0"}}), content_type="application/json")
        return handler(request)

    httpserver.expect_request("/customsearch/v1").respond_with_handler(handle)
    out = tmp_path / "results.parquet"
    queries = write_queries(tmp_path / "q.jsonl", [{"id": "a", "text": "plenty"}, {"id": "b", "text": "nothing at all"}, {"id": "c", "text": "  "}])
    search(tmp_path, queries, out, params(httpserver.url_for("/customsearch/v1"), tmp_path, page_top_k=50))
    assert pq.read_table(out).num_rows == TOTAL  # asked for 50, the engine had 37
    rejects = {r["id"]: r["reason"] for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()}
    assert rejects == {"b": "no_results", "c": "empty_query"}
    report = json.loads(open(f"{out}.report.json").read())
    assert report["rows_in"] == 3 and report["stats"]["queries_with_results"] == 1


@pytest.mark.parametrize(
    "status, reason, words",
    [
        (403, "dailyLimitExceeded", ["google", "quota", "dailyLimitExceeded"]),
        (429, "rateLimitExceeded", ["google", "quota", "429"]),
        (400, "keyInvalid", ["google", "auth", "keyInvalid"]),
        (403, "forbidden", ["google", "auth"]),
    ],
)
def test_google_quota_and_key_errors_stop_the_job_naming_the_provider(httpserver: HTTPServer, tmp_path, monkeypatch, status, reason, words):
    monkeypatch.setenv("CITEFORGE_TEST_GOOGLE_KEY", "k")
    httpserver.expect_request("/customsearch/v1").respond_with_response(google_error(status, reason, f"{reason} for this project"))
    out = tmp_path / "results.parquet"
    result = search(tmp_path, write_queries(tmp_path / "q.jsonl"), out, params(httpserver.url_for("/customsearch/v1"), tmp_path), check=False)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert all(w in last for w in words), last
    assert not out.exists()  # no table at all, never an empty one
    tries = len(httpserver.log)
    assert tries == (FETCH["attempts"] if status == 429 else 1)  # 429 is retried, a quota or key error is not


def test_missing_key_variable_is_named(httpserver: HTTPServer, tmp_path, monkeypatch):
    monkeypatch.delenv("CITEFORGE_TEST_GOOGLE_KEY", raising=False)
    result = search(tmp_path, write_queries(tmp_path / "q.jsonl"), tmp_path / "r.parquet", params(httpserver.url_for("/customsearch/v1"), tmp_path), check=False)
    assert result.returncode != 0 and "CITEFORGE_TEST_GOOGLE_KEY" in result.stderr and "google" in result.stderr
    assert httpserver.log == []


def searxng_handler(seen: list):
    def handle(request: Request) -> Response:
        seen.append(dict(request.args))
        page = int(request.args["pageno"])
        image = request.args["categories"] == "images"
        results = []
        if page <= 3:
            for i in range(8):
                n = (page - 1) * 8 + i
                result = {"url": f"https://s{n % 20}.example/p", "title": f"t{n}", "content": f"c{n}", "engine": "duckduckgo"}
                if image:
                    result.update({"img_src": f"https://i{n}.example/x.png", "resolution": f"{640 + n} x {480 + n}"})
                results.append(result)
        return Response(json.dumps({"query": request.args["q"], "number_of_results": 0, "results": results, "unresponsive_engines": []}), content_type="application/json")

    return handle


def test_searxng_pages_until_top_k_distinct_urls_and_parses_image_resolution(httpserver: HTTPServer, tmp_path):
    seen: list = []
    httpserver.expect_request("/search").respond_with_handler(searxng_handler(seen))
    out = tmp_path / "results.parquet"
    prm = params("", tmp_path, provider="searxng", provider_settings={"endpoint": httpserver.url_for("/"), "max_pages": 5}, page_top_k=12, image_top_k=4)
    search(tmp_path, write_queries(tmp_path / "q.jsonl", QUERIES[:1]), out, prm)
    rows = pq.read_table(out).to_pylist()
    pages = sorted((r for r in rows if r["kind"] == "page"), key=lambda r: r["rank"])
    assert [r["url"] for r in pages] == [f"https://s{n}.example/p" for n in range(12)]
    assert {r["provider"] for r in rows} == {"searxng"}
    images = sorted((r for r in rows if r["kind"] == "image"), key=lambda r: r["rank"])
    assert [(r["url"], r["width"], r["height"]) for r in images] == [(f"https://i{n}.example/x.png", 640 + n, 480 + n) for n in range(4)]
    assert [(a["categories"], a["pageno"], a["format"]) for a in seen] == [("general", "1", "json"), ("general", "2", "json"), ("images", "1", "json")]


def test_searxng_without_json_format_stops_with_advice(httpserver: HTTPServer, tmp_path):
    httpserver.expect_request("/search").respond_with_response(Response("Forbidden", status=403))
    prm = params("", tmp_path, provider="searxng", provider_settings={"endpoint": httpserver.url_for("/")})
    result = search(tmp_path, write_queries(tmp_path / "q.jsonl"), tmp_path / "r.parquet", prm, check=False)
    assert result.returncode != 0 and "searxng" in result.stderr and "search.formats" in result.stderr


BOGUS_RESOLUTIONS = ["9" * 5000 + "x1", "99999999999999999999999x1", "2147483648x10", "0x480", "640x0", "640 by 480", "-640x480", "٦٤٠x480", None]


@pytest.mark.parametrize("resolution", BOGUS_RESOLUTIONS)
def test_a_searxng_resolution_that_is_no_int32_size_is_unknown(resolution):
    """A side past int32 (or past what int() reads), of 0 pixels, or not ASCII digits: the hit is
    kept, its size unknown, rather than a traceback or a table that fails when written."""
    hit = SearxngSearch._hit({"url": "https://e.example/p", "img_src": "https://e.example/i.jpg", "resolution": resolution}, "image")
    assert (hit.url, hit.width, hit.height) == ("https://e.example/i.jpg", None, None)


def test_a_searxng_resolution_within_int32_is_read():
    hit = SearxngSearch._hit({"url": "https://e.example/p", "img_src": "https://e.example/i.jpg", "resolution": f" {2**31 - 1} × 1 "}, "image")
    assert (hit.width, hit.height) == (2**31 - 1, 1)


@pytest.mark.parametrize("width, height, kept", [(2**40, 480, (None, 480)), (640, 0, (640, None)), (-1, 2**31 - 1, (None, 2**31 - 1))])
def test_a_google_image_side_that_is_no_int32_size_is_unknown(width, height, kept):
    hit = GoogleSearch._hit({"link": "https://e.example/i.jpg", "image": {"contextLink": "https://e.example/p", "width": width, "height": height}}, "image")
    assert (hit.width, hit.height) == kept


def test_bogus_image_sizes_leave_the_results_table_writable(httpserver: HTTPServer, tmp_path):
    """The stage end to end: sizes that once stopped the job (a traceback from int(), a width the
    int32 column refused when written) are written as unknown, the good one as given."""
    results = [{"url": f"https://s{n}.example/p", "img_src": f"https://i{n}.example/x.png", "title": f"t{n}", "content": "", "resolution": r}
               for n, r in enumerate(BOGUS_RESOLUTIONS[:2] + ["640x480"])]
    httpserver.expect_request("/search").respond_with_json({"query": "q", "results": results})
    out = tmp_path / "results.parquet"
    prm = params("", tmp_path, provider="searxng", provider_settings={"endpoint": httpserver.url_for("/"), "max_pages": 1}, page_top_k=0, image_top_k=3)
    search(tmp_path, write_queries(tmp_path / "q.jsonl", QUERIES[:1]), out, prm)
    rows = sorted(pq.read_table(out).to_pylist(), key=lambda r: r["rank"])
    assert [(r["url"], r["width"], r["height"]) for r in rows] == [
        ("https://i0.example/x.png", None, None), ("https://i1.example/x.png", None, None), ("https://i2.example/x.png", 640, 480)]


def test_record_then_replay_with_the_server_stopped_gives_the_same_table_and_the_cache_answers_repeats(tmp_path, monkeypatch):
    monkeypatch.setenv("CITEFORGE_TEST_GOOGLE_KEY", "secret-record-key")
    server = HTTPServer(host="127.0.0.1", port=0)
    seen: list = []
    server.expect_request("/customsearch/v1").respond_with_handler(google_handler(seen))
    server.start()
    endpoint = server.url_for("/customsearch/v1")
    queries = write_queries(tmp_path / "q.jsonl")
    warc = tmp_path / "search.warc.gz"
    try:
        recorded = tmp_path / "recorded.parquet"
        search(tmp_path, queries, recorded, params(endpoint, tmp_path, image_top_k=2, cache_mode="use", fetch={**FETCH, "mode": "record"}, record_warc=str(warc)))
        asked = len(seen)
        cached = tmp_path / "cached.parquet"  # live again: every list comes from the cache
        search(tmp_path, queries, cached, params(endpoint, tmp_path, image_top_k=2, cache_mode="use"))
        assert len(seen) == asked and json.loads(open(f"{cached}.report.json").read())["stats"]["cache_hits"] == 4
    finally:
        server.stop()
    archive = gzip.decompress(warc.read_bytes())
    assert b"secret-record-key" not in archive and b"X-goog-api-key" not in archive and archive.count(b"WARC-Type: response") == asked
    monkeypatch.delenv("CITEFORGE_TEST_GOOGLE_KEY")  # a replay needs no key
    replayed = tmp_path / "replayed.parquet"
    search(tmp_path, queries, replayed, params(endpoint, tmp_path, image_top_k=2, fetch={**FETCH, "mode": "replay"}), warcs=[warc])
    assert pq.read_table(replayed).equals(pq.read_table(recorded))
    assert pq.read_table(cached).equals(pq.read_table(recorded))
    # a replay asked for something the archive lacks stops, naming the provider
    missing = search(tmp_path, write_queries(tmp_path / "q2.jsonl", [{"id": "x", "text": "never recorded"}]), tmp_path / "m.parquet",
                     params(endpoint, tmp_path, fetch={**FETCH, "mode": "replay"}), check=False, warcs=[warc])
    assert missing.returncode != 0 and "google" in missing.stderr and "not_in_archive" in missing.stderr


def test_transient_errors_are_retried_by_the_fetch_layer(httpserver: HTTPServer, tmp_path, monkeypatch):
    monkeypatch.setenv("CITEFORGE_TEST_GOOGLE_KEY", "k")
    seen: list = []
    handler = google_handler(seen)
    calls = {"n": 0}

    def flaky(request: Request) -> Response:
        calls["n"] += 1
        if calls["n"] == 1:
            return Response("backend error", status=503)
        return handler(request)

    httpserver.expect_request("/customsearch/v1").respond_with_handler(flaky)
    out = tmp_path / "results.parquet"
    search(tmp_path, write_queries(tmp_path / "q.jsonl", QUERIES[:1]), out, params(httpserver.url_for("/customsearch/v1"), tmp_path, page_top_k=5))
    assert pq.read_table(out).num_rows == 5 and calls["n"] == 2
    assert json.loads(open(f"{out}.report.json").read())["stats"]["fetch_retries"] == 1


def test_an_answer_nested_deeper_than_python_reads_is_read_as_unreadable(httpserver: HTTPServer, tmp_path, monkeypatch):
    """A provider (or a proxy before it) answering "[[[[...]]]]": as a result page it is a bad_response
    that stops the job in one line naming the provider, as any unreadable page does; as a 400's error
    body it says nothing, and each query is an http_400 reject. Never a RecursionError traceback."""
    monkeypatch.setenv("CITEFORGE_TEST_GOOGLE_KEY", "k")
    deep = "[" * 100_000 + "]" * 100_000
    for status in (200, 400):
        httpserver.clear()
        httpserver.expect_request("/customsearch/v1").respond_with_response(Response(deep, status=status, content_type="application/json"))
        out = tmp_path / f"results{status}.parquet"
        result = search(tmp_path, write_queries(tmp_path / "q.jsonl"), out, params(httpserver.url_for("/customsearch/v1"), tmp_path), check=False)
        assert "Traceback" not in result.stderr, result.stderr[-2000:]
        if status == 200:
            last = result.stderr.strip().splitlines()[-1]
            assert result.returncode != 0 and last.startswith("search_web: error: search provider google: bad_response:"), last
            assert "not JSON (JSON nested deeper than Python reads)" in last and not out.exists()
        else:
            assert result.returncode == 0
            assert {r["reason"] for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()} == {"http_400"}
