"""Every HTTP client of citeforge against tests/faulty_server.py: 429 with and without
Retry-After, 500/502/503, a reset mid-body, a truncated body under a correct Content-Length, a body
dripping slower than any deadline, a redirect loop.

For each client and fault, served once (transient) and on every try (persistent): the record ends
as a success after retries, or as a reject with a reason (fetch layer, OpenReview PDFs, a PDF sent
to mineru-api), or as a failure that names itself (an OpenReview listing, the model backend:
LLMError, one line, the job fails and a rerun resumes from the call cache; a search provider:
SearchFailed naming the provider and the reason, the job stops rather than write an empty result). Nothing is dropped silently, and no client runs
past its configured timeouts (wall-time bounds, generous for a busy machine)."""
from __future__ import annotations

import collections
import io
import json
import time
import zipfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from stages.core.fetch import Fetcher, FetchError, FetchSettings
from stages.core.llm import LLMClient, LLMError, LLMRequest
from stages.mcitebench.mineru import parse_pdf
from stages.core.retry import RetryPolicy
from stages.core.search import SearchFailed, make_provider
from stages.core.stage import Reject
from stages.core.prompts import PromptLibrary
from stages.images.cache_images import STAGE as CACHE_IMAGES
from stages.mcitebench.harvest_openreview import STAGE as HARVEST_OPENREVIEW
from tests.faulty_server import FAULTS, FaultyServer
from tests.local_http import RawServer, drip
from tests.openreview_api import FakeOpenReview, submission

TIMEOUT, DEADLINE, ATTEMPTS, MAX_SLEEP = 0.5, 0.8, 2, 0.3
PERSISTENT_REASON = {  # the fetch layer's reject reason when a fault never stops
    "429_retry_after": "http_429", "429": "http_429", "500": "http_500", "502": "http_502", "503": "http_503",
    "reset": "connection_error", "truncated": "connection_error", "drip": "timeout", "redirect_loop": "too_many_redirects",
}


def png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (12, 10), (200, 30, 30)).save(buffer, "PNG")
    return buffer.getvalue()


def worst_case(attempts: int, deadline: float, sleep: float) -> float:
    """The longest a record may take: every try timing out (connect/read plus body deadline) and
    every wait at its cap, plus slack for a busy machine."""
    return attempts * (TIMEOUT + deadline) + (attempts - 1) * sleep + 3.0


# -- the fetch layer ------------------------------------------------------------------------------
def fetch_settings(**kw) -> FetchSettings:
    return FetchSettings.from_dict({"allow_networks": ["127.0.0.1/32"], "timeout_s": TIMEOUT, "total_timeout_s": DEADLINE,
                                    "attempts": ATTEMPTS, "backoff_s": 0.01, "max_retry_sleep_s": MAX_SLEEP, "max_redirects": 3, **kw})


@pytest.fixture
def image_server():
    with FaultyServer({"/img.png": (200, {"Content-Type": "image/png"}, png())}) as server:
        yield server


@pytest.mark.parametrize("fault", FAULTS)
def test_fetch_recovers_from_one_fault(image_server, fault):
    image_server.inject("/img.png", fault)
    started = time.monotonic()
    with Fetcher(fetch_settings()) as fetcher:
        got = fetcher.fetch(image_server.url("/img.png"), accept=("image/",))
    waited = time.monotonic() - started
    assert got.body == png() and got.status == 200
    assert image_server.served("/img.png") == [fault, "answer"]
    if fault == "redirect_loop":
        assert got.redirects == 1 and fetcher.stats["retries"] == 0  # a redirect is followed, not retried
    else:
        assert fetcher.stats["retries"] == 1
    if fault == "429_retry_after":
        assert waited >= MAX_SLEEP  # Retry-After (capped) honoured, not the 0.01 s backoff
    assert waited < worst_case(ATTEMPTS, DEADLINE, MAX_SLEEP)


@pytest.mark.parametrize("fault", FAULTS)
def test_fetch_gives_up_with_a_reason(image_server, fault):
    image_server.inject("/img.png", fault, times=None)
    started = time.monotonic()
    with Fetcher(fetch_settings()) as fetcher, pytest.raises(FetchError) as info:
        fetcher.fetch(image_server.url("/img.png"))
    assert info.value.reason == PERSISTENT_REASON[fault], str(info.value)
    assert image_server.url("/img.png") in str(info.value)
    tries = len(image_server.served("/img.png"))
    assert tries == (4 if fault == "redirect_loop" else ATTEMPTS)  # max_redirects 3: four hops
    assert time.monotonic() - started < worst_case(ATTEMPTS, DEADLINE, MAX_SLEEP)


def test_cache_images_accounts_for_every_url_under_every_fault(tmp_path):
    """The stage over one url per fault (persistent) plus one per fault (served once): each
    (owner, url) ends as an image row or a reject with the fetch layer's reason."""
    routes = {f"/{kind}/{fault}.png": (200, {"Content-Type": "image/png"}, png()) for fault in FAULTS for kind in ("once", "always")}
    with FaultyServer(routes) as server:
        for fault in FAULTS:
            server.inject(f"/once/{fault}.png", fault)
            server.inject(f"/always/{fault}.png", fault, times=None)
        owners = tmp_path / "owners.parquet"
        pq.write_table(pa.table({"id": [f"post{i}" for i in range(len(FAULTS))],
                                 "image_urls": [[server.url(f"/once/{f}.png"), server.url(f"/always/{f}.png")] for f in FAULTS]}), owners)
        out = tmp_path / "images.parquet"
        fetch = {"allow_networks": ["127.0.0.1/32"], "timeout_s": TIMEOUT, "total_timeout_s": DEADLINE, "attempts": ATTEMPTS,
                 "backoff_s": 0.01, "max_retry_sleep_s": MAX_SLEEP, "max_redirects": 3}
        started = time.monotonic()
        CACHE_IMAGES.main(["--input", f"owners={owners}", "--output", f"images={out}", "--params",
                           json.dumps({"store": str(tmp_path / "store"), "fetch": fetch, "workers": 4})])
        elapsed = time.monotonic() - started
    kept = pq.read_table(out).to_pylist()
    rejects = pq.read_table(f"{out}.rejects.parquet").to_pylist()
    report = json.loads((tmp_path / "images.parquet.report.json").read_text())
    assert sorted(r["url"].rsplit("/", 2)[1] for r in kept) == ["once"] * len(FAULTS)
    assert sorted(r["reason"] for r in rejects) == sorted(PERSISTENT_REASON.values())
    assert report["rows_in"] == 2 * len(FAULTS) == len(kept) + len(rejects)
    assert elapsed < 4 * worst_case(ATTEMPTS, DEADLINE, MAX_SLEEP)  # 4 workers over 18 urls


# -- OpenReview (harvest_openreview in live mode) -------------------------------------------------
PDF = b"%PDF-1.4\n% a tiny stand-in, long enough to cut in half\n%%EOF\n"


@pytest.fixture
def openreview(httpserver):
    subs = [submission(f"f{i}", i + 1, f"Paper {i}") for i in range(len(FAULTS))]
    api = FakeOpenReview(httpserver, subs, {f"f{i}": PDF for i in range(len(FAULTS))})
    with FaultyServer(upstream=api.url) as server:
        yield server


def harvest(tmp_path, url: str, **params) -> tuple[int | str | None, dict | None, float]:
    out = tmp_path / "out"
    settings = {"base_url": url, "mode": "live", "allow_networks": ["127.0.0.1/32"], "pdf_store": str(tmp_path / "pdfs"),
                "page_size": 4, "requests_per_second": 0.0, "retry_attempts": ATTEMPTS, "retry_max_sleep": MAX_SLEEP,
                "timeout_s": TIMEOUT, **params}
    argv = ["--params", json.dumps(settings)] + [a for t in ("papers", "reviews", "comments", "threads") for a in ("--output", f"{t}={out / t}.parquet")]
    started = time.monotonic()
    try:
        HARVEST_OPENREVIEW.main(argv)
        code = None
    except SystemExit as exit_:
        code = exit_.code
    elapsed = time.monotonic() - started
    report = out / "papers.parquet.report.json"
    return code, json.loads(report.read_text()) if report.exists() else None, elapsed


def test_openreview_pdfs_recover_from_one_fault_each(openreview, tmp_path):
    for i, fault in enumerate(FAULTS):
        openreview.inject(f"/pdf?id=f{i}", fault)
    code, report, elapsed = harvest(tmp_path, openreview.url())
    assert code is None and report["rows_out"]["papers"] == len(FAULTS) and report["rejected"] == 0
    assert report["stats"]["pdfs"] == len(FAULTS)
    assert report["stats"]["fetch_retries"] == len(FAULTS) - 1  # the redirect is followed, not retried
    assert elapsed < len(FAULTS) * worst_case(ATTEMPTS, TIMEOUT, MAX_SLEEP)


def test_openreview_pdfs_that_never_come_are_rejects_with_a_reason(openreview, tmp_path):
    for i, fault in enumerate(FAULTS):
        openreview.inject(f"/pdf?id=f{i}", fault, times=None)
    code, report, elapsed = harvest(tmp_path, openreview.url())
    assert code is None
    assert report["rows_in"] == len(FAULTS) and report["rows_out"]["papers"] == 0
    assert report["rejected_by_reason"] == {"pdf_unavailable": len(FAULTS)}
    details = {r["id"]: r["detail"] for r in pq.read_table(tmp_path / "out/papers.parquet.rejects.parquet").to_pylist()}
    for i, fault in enumerate(FAULTS):
        detail = details[f"openreview:f{i}"]
        assert f"/pdf?id=f{i}" in detail, detail
        expected = {"reset": "cut short", "truncated": "cut short", "drip": "not complete after", "redirect_loop": "redirects"}
        assert expected.get(fault, f"HTTP {fault[:3]}") in detail, (fault, detail)
    assert elapsed < len(FAULTS) * worst_case(ATTEMPTS, TIMEOUT, MAX_SLEEP)


@pytest.mark.parametrize("fault", FAULTS)
def test_openreview_listing_recovers_from_one_fault(openreview, tmp_path, fault):
    openreview.inject("/notes", fault)
    code, report, elapsed = harvest(tmp_path, openreview.url(), download_pdfs=False)
    assert code is None and report["rows_out"]["papers"] == len(FAULTS)
    assert report["stats"]["api_pages"] == 3
    assert elapsed < worst_case(ATTEMPTS, TIMEOUT, MAX_SLEEP) + 2


@pytest.mark.parametrize("fault", FAULTS)
def test_openreview_listing_that_never_comes_fails_in_one_line(openreview, tmp_path, fault):
    openreview.inject("/notes", fault, times=None)
    code, report, elapsed = harvest(tmp_path, openreview.url(), download_pdfs=False)
    assert isinstance(code, str) and code.startswith("harvest_openreview: error: OpenReview GET /notes?") and "\n" not in code, code
    assert report is None and not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert elapsed < worst_case(ATTEMPTS, TIMEOUT, MAX_SLEEP) + 2


# -- the OpenAI-compatible model backend ----------------------------------------------------------
def chat_completion(method, target, headers, body) -> tuple[int, dict, bytes]:
    """The shape of an OpenAI chat.completion (what a hosted API or `vllm serve` answers)."""
    request = json.loads(body)
    answer = {"id": "chatcmpl-1", "object": "chat.completion", "model": request["model"],
              "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Rain falls."}}],
              "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}
    return 200, {"Content-Type": "application/json"}, json.dumps(answer).encode()


@pytest.fixture
def model_server():
    with FaultyServer({"/v1/chat/completions": chat_completion}) as server:
        yield server


def model_client(url: str, tmp_path, stats) -> LLMClient:
    folder = tmp_path / "prompts"
    folder.mkdir(exist_ok=True)
    (folder / "say.md").write_text("---\nkind: text\nmax_tokens: 6\n---\nSay one thing about {{ topic }}.\n")
    settings = {"backend": "openai", "model": "remote", "cache": {"path": str(tmp_path / "cache.sqlite")},
                "openai": {"base_url": url, "max_in_flight": 2, "timeout_s": TIMEOUT, "max_retries": ATTEMPTS}}
    client = LLMClient.from_params(settings, stats=stats)
    client.prompts = PromptLibrary(folder)
    return client


@pytest.mark.parametrize("fault", FAULTS)
def test_model_backend_recovers_from_one_fault(model_server, tmp_path, fault):
    model_server.inject("/v1/chat/completions", fault)
    stats = collections.Counter()
    started = time.monotonic()
    with model_client(model_server.url("/v1"), tmp_path, stats) as client:
        (answer,) = client.run([LLMRequest("a", "say", {"topic": "rain"})])
    assert answer.ok and answer.value == "Rain falls.", answer.detail
    assert stats["llm_calls"] == 1 and stats["llm_http_retries"] == (0 if fault == "redirect_loop" else 1)
    assert time.monotonic() - started < worst_case(ATTEMPTS, TIMEOUT, 1.0)  # Retry-After: 1, uncapped here


@pytest.mark.parametrize("fault", FAULTS)
def test_model_backend_outage_fails_the_job_in_one_line(model_server, tmp_path, fault):
    model_server.inject("/v1/chat/completions", fault, times=None)
    stats = collections.Counter()
    started = time.monotonic()
    with model_client(model_server.url("/v1"), tmp_path, stats) as client, pytest.raises(LLMError) as info:
        client.run([LLMRequest("a", "say", {"topic": "rain"})])
    message = str(info.value)
    assert message.startswith(f"openai backend {model_server.url('/v1/chat/completions')}: ") and "\n" not in message
    assert ("TooManyRedirects" if fault == "redirect_loop" else f"gave up after {ATTEMPTS} attempts") in message
    assert time.monotonic() - started < worst_case(ATTEMPTS, TIMEOUT, 1.0)


def test_model_backend_malformed_answer_is_a_failed_call_not_a_crash(tmp_path):
    garbage = lambda *request: (200, {"Content-Type": "application/json"}, b'{"choices": "not a list"}')  # noqa: E731
    with FaultyServer({"/v1/chat/completions": garbage}) as server:
        stats = collections.Counter()
        with model_client(server.url("/v1"), tmp_path, stats) as client:
            (answer,) = client.run([LLMRequest("a", "say", {"topic": "rain"})])
    assert not answer.ok and answer.error.startswith("backend: malformed response") and "not a list" in answer.raw
    assert stats["llm_failed"] == 1


def _raw_answer(head: bytes, body: bytes):
    def answer(conn, closing):
        conn.sendall(head + b"\r\n" + body)
    return answer


COMPLETION = json.dumps({"choices": [{"message": {"content": "Rain falls."}, "finish_reason": "stop"}]}).encode()


@pytest.mark.parametrize("head, body, words", [
    # bytes that are not UTF-8 in the content: requests' .json() would read them as U+FFFD, and cache that
    (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 49\r\n",
     b'{"choices": [{"message": {"content": "caf\xe9 \xff"}}]}', "can't decode byte"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n", b"{}   ", "InvalidHeader"),
    (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 20\r\n", b"\x1f\x8b" + b"x" * 18, "ContentDecodingError"),
])
def test_model_backend_answer_of_bad_bytes_is_a_failed_call_not_the_job(tmp_path, head, body, words):
    stats = collections.Counter()
    with RawServer(_raw_answer(head, body)) as server, model_client(server.url + "/v1", tmp_path, stats) as client:
        (answer,) = client.run([LLMRequest("a", "say", {"topic": "rain"})])
    assert not answer.ok and answer.error.startswith("backend: malformed response") and words in answer.error, answer.error


def test_model_backend_headers_dripped_are_cut_off_at_the_timeout(tmp_path):
    """A status line, then header bytes a little at a time without end: each gap is under the read
    timeout, so only a deadline on the headers as a whole ends the try."""
    started = time.monotonic()
    with RawServer(drip(b"HTTP/1.1 200 OK\r\nX-Slow: ", interval=0.1)) as server:
        with model_client(server.url + "/v1", tmp_path, collections.Counter()) as client, pytest.raises(LLMError) as info:
            client.run([LLMRequest("a", "say", {"topic": "rain"})])
    assert "ReadTimeout" in str(info.value) and time.monotonic() - started < worst_case(ATTEMPTS, TIMEOUT, MAX_SLEEP)


# -- the search providers (stages/core/search: Google Programmable Search, SearXNG) ---------------
def google_api(method, target, headers, body) -> tuple[int, dict, bytes]:
    """The Custom Search JSON API's shape: `items` with link, title, snippet; no next page."""
    assert headers.get("X-goog-api-key") == "test-key"
    items = [{"link": f"https://example.org/{i}", "title": f"Result {i}", "snippet": "..."} for i in range(3)]
    return 200, {"Content-Type": "application/json"}, json.dumps({"items": items, "queries": {}}).encode()


def searxng_api(method, target, headers, body) -> tuple[int, dict, bytes]:
    """SearXNG's JSON API: `results` with url, title, content; page 2 is empty."""
    results = [] if "pageno=2" in target else [{"url": f"https://example.org/{i}", "title": f"Result {i}", "content": "..."} for i in range(3)]
    return 200, {"Content-Type": "application/json"}, json.dumps({"query": "q", "results": results}).encode()


SEARCH = {"google": ("/customsearch/v1", google_api), "searxng": ("/search", searxng_api)}
PERSISTENT_SEARCH_REASON = {  # SearchFailed.reason when a fault never stops
    "google": {**PERSISTENT_REASON, "429_retry_after": "quota", "429": "quota"},
    "searxng": {**PERSISTENT_REASON, "429_retry_after": "rate_limited", "429": "rate_limited"},
}


@pytest.fixture(params=sorted(SEARCH))
def search_server(request, monkeypatch):
    name = request.param
    path, route = SEARCH[name]
    monkeypatch.setenv("TEST_SEARCH_KEY", "test-key")
    with FaultyServer({path: route}) as server:
        settings = {"endpoint": server.url(path), "engine_id": "cx1", "key_env": "TEST_SEARCH_KEY"} if name == "google" \
            else {"endpoint": server.url(""), "max_pages": 2}
        yield name, path, server, make_provider(name, settings)


@pytest.mark.parametrize("fault", FAULTS)
def test_search_recovers_from_one_fault(search_server, fault):
    name, path, server, provider = search_server
    server.inject(path, fault)
    started = time.monotonic()
    with Fetcher(fetch_settings()) as fetcher:
        hits = provider.search(fetcher, "why is the sky blue", "page", 3)
    assert [h.url for h in hits] == [f"https://example.org/{i}" for i in range(3)] and [h.rank for h in hits] == [1, 2, 3]
    assert server.served(path)[:2] == [fault, "answer"]
    assert fetcher.stats["retries"] == (0 if fault == "redirect_loop" else 1)
    assert time.monotonic() - started < worst_case(ATTEMPTS, DEADLINE, MAX_SLEEP)


@pytest.mark.parametrize("fault", FAULTS)
def test_search_outage_stops_the_job_naming_the_provider(search_server, fault):
    name, path, server, provider = search_server
    server.inject(path, fault, times=None)
    started = time.monotonic()
    with Fetcher(fetch_settings()) as fetcher, pytest.raises(SearchFailed) as info:
        provider.search(fetcher, "why is the sky blue", "page", 3)
    assert info.value.reason == PERSISTENT_SEARCH_REASON[name][fault], str(info.value)
    assert str(info.value).startswith(f"search provider {name}: ") and "\n" not in str(info.value)
    assert len(server.served(path)) == (4 if fault == "redirect_loop" else ATTEMPTS)
    assert time.monotonic() - started < worst_case(ATTEMPTS, DEADLINE, MAX_SLEEP)


# -- the MinerU client (stages/mcitebench/mineru.py: POST /v1/file_parse of mineru-api) ------------------
MINERU_SLACK = 0.6  # per try: the server's wait_timeout (0 here) plus this, for the whole answer


def mineru_answer(method, target, headers, body) -> tuple[int, dict, bytes]:
    """mineru-api's zip answer: middle_json.json and the crops under images/."""
    assert method == "POST" and b"%PDF-" in body and "output_formats=zip" in target
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("middle_json.json", json.dumps({"pages": [{"page_idx": 0, "blocks": []}]}))
        archive.writestr("images/a.png", png())
    return 200, {"Content-Type": "application/zip"}, buffer.getvalue()


@pytest.fixture
def mineru_server():
    with FaultyServer({"/v1/file_parse": mineru_answer}) as server:
        yield server


def mineru_parse(server: FaultyServer):
    return parse_pdf(server.url(""), PDF, "paper.pdf", tier="flash", ocr_mode="txt", page_range="", timeout=0.0,
                     policy=RetryPolicy(attempts=ATTEMPTS, base_delay=0.01, max_sleep=MAX_SLEEP), slack=MINERU_SLACK)


@pytest.mark.parametrize("fault", FAULTS)
def test_mineru_client_recovers_from_one_fault(mineru_server, fault):
    mineru_server.inject("/v1/file_parse", fault)
    started = time.monotonic()
    middle, images = mineru_parse(mineru_server)
    assert middle == {"pages": [{"page_idx": 0, "blocks": []}]} and images == {"images/a.png": png()}
    assert mineru_server.served("/v1/file_parse") == [fault, "answer"]
    assert time.monotonic() - started < worst_case(ATTEMPTS, MINERU_SLACK, MAX_SLEEP)


@pytest.mark.parametrize("fault", FAULTS)
def test_mineru_client_outage_is_the_papers_reject_with_a_reason(mineru_server, fault):
    mineru_server.inject("/v1/file_parse", fault, times=None)
    started = time.monotonic()
    with pytest.raises(Reject) as info:
        mineru_parse(mineru_server)
    assert info.value.reason == "mineru_failed" and mineru_server.url("/v1/file_parse") in info.value.detail
    expected = {"reset": "cut short", "truncated": "cut short", "drip": "not complete after", "redirect_loop": "TooManyRedirects"}
    assert expected.get(fault, f"HTTP {fault[:3]}") in info.value.detail, (fault, info.value.detail)
    tries = len(mineru_server.served("/v1/file_parse"))
    assert tries == (6 if fault == "redirect_loop" else ATTEMPTS)  # max_redirects 5: six hops
    assert time.monotonic() - started < worst_case(ATTEMPTS, MINERU_SLACK, MAX_SLEEP)


def test_mineru_error_answer_in_a_proxys_shape_is_a_reject(mineru_server):
    """An error body whose `error` is a bare string (a proxy's, not mineru-api's {code, message})."""
    mineru_server.routes["/v1/file_parse"] = (400, {"Content-Type": "application/json"}, b'{"error": "upload too large"}')
    with pytest.raises(Reject) as info:
        mineru_parse(mineru_server)
    assert info.value.reason == "mineru_failed" and "upload too large" in info.value.detail
