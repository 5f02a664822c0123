"""The fetch layer against real local HTTP servers on 127.0.0.1 (pytest-httpserver, raw sockets)."""
from __future__ import annotations

import concurrent.futures
import gzip
import socket
import threading
import time
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Response

from local_http import RawServer, drip
from stages.core.fetch import AddressGuard, DamagedArchive, Fetcher, FetchError, FetchSettings, load_archive
from stages.core.retry import RetryPolicy

LOCAL = ("127.0.0.1/32",)
SAMPLE_WARC = Path(__file__).resolve().parents[1] / "data/samples/reddit/images.warc.gz"


def settings(**overrides) -> FetchSettings:
    base = dict(allow_networks=LOCAL, timeout_s=2.0, attempts=3, backoff_s=0.05, max_retry_sleep_s=5.0)
    base.update(overrides)
    return FetchSettings.from_dict(base)


def fail_reason(fetcher: Fetcher, url: str, **kw) -> str:
    with pytest.raises(FetchError) as info:
        fetcher.fetch(url, **kw)
    return info.value.reason


@pytest.mark.parametrize(
    "address, why",
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.0.1", "private"),
        ("169.254.169.254", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("100.100.100.200", "cloud metadata"),
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("100.64.0.1", "not globally routable"),
        ("8.8.8.8", None),
        ("2606:4700:4700::1111", None),
    ],
)
def test_guard_classifies_addresses(address, why):
    assert AddressGuard().why_blocked(address) == why


def test_loopback_blocked_by_default_and_allowed_by_allow_list(httpserver: HTTPServer):
    httpserver.expect_request("/a.txt").respond_with_data(b"hello", content_type="text/plain")
    with Fetcher(FetchSettings()) as strict:
        assert fail_reason(strict, httpserver.url_for("/a.txt")) == "blocked_address"
    assert httpserver.log == []  # refused before connecting
    with Fetcher(settings()) as fetcher:
        got = fetcher.fetch(httpserver.url_for("/a.txt"))
    assert (got.status, got.body, got.content_type) == (200, b"hello", "text/plain")


def test_redirect_to_private_and_metadata_addresses_is_blocked(httpserver: HTTPServer):
    port = httpserver.port
    httpserver.expect_request("/to-loopback").respond_with_response(Response(status=302, headers={"Location": f"http://127.0.0.2:{port}/secret"}))
    httpserver.expect_request("/to-metadata").respond_with_response(Response(status=301, headers={"Location": "http://169.254.169.254/latest/meta-data/"}))
    httpserver.expect_request("/to-private").respond_with_response(Response(status=307, headers={"Location": "http://10.0.0.7/admin"}))
    httpserver.expect_request("/secret").respond_with_data(b"secret")
    with Fetcher(settings()) as fetcher:
        for path, address in (("/to-loopback", "127.0.0.2"), ("/to-metadata", "169.254.169.254"), ("/to-private", "10.0.0.7")):
            with pytest.raises(FetchError) as info:
                fetcher.fetch(httpserver.url_for(path))
            assert info.value.reason == "blocked_address" and address in str(info.value), (path, str(info.value))
    assert all(req.path != "/secret" for req, _ in httpserver.log)


def test_peer_check_after_connect_refuses_what_the_pre_check_missed(httpserver: HTTPServer):
    """The connection-level guard sees the socket's real peer, whatever DNS said earlier."""
    httpserver.expect_request("/x").respond_with_data(b"x")
    with Fetcher(FetchSettings()) as fetcher, pytest.raises(FetchError, match="blocked_address"):
        fetcher.session.get(httpserver.url_for("/x"), timeout=2)  # skips check_host on purpose


def test_redirects_followed_and_counted(httpserver: HTTPServer):
    httpserver.expect_request("/old").respond_with_response(Response(status=301, headers={"Location": "/new"}))
    httpserver.expect_request("/new").respond_with_data(b"moved", content_type="text/plain")
    httpserver.expect_request("/loop").respond_with_response(Response(status=302, headers={"Location": "/loop"}))
    with Fetcher(settings(max_redirects=3)) as fetcher:
        got = fetcher.fetch(httpserver.url_for("/old"))
        assert (got.body, got.redirects, got.final_url) == (b"moved", 1, httpserver.url_for("/new"))
        assert fail_reason(fetcher, httpserver.url_for("/loop")) == "too_many_redirects"


def test_429_with_retry_after_then_success(httpserver: HTTPServer):
    httpserver.expect_ordered_request("/busy").respond_with_response(Response(status=429, headers={"Retry-After": "1"}))
    httpserver.expect_ordered_request("/busy").respond_with_data(b"ok")
    with Fetcher(settings()) as fetcher:
        started = time.monotonic()
        got = fetcher.fetch(httpserver.url_for("/busy"))
        waited = time.monotonic() - started
    assert got.body == b"ok"
    assert waited >= 0.95  # Retry-After honoured, not the 0.05 s backoff
    assert fetcher.stats["retries"] == 1 and fetcher.stats["requests"] == 2


def test_a_retry_after_that_is_no_number_of_seconds_nor_a_date_falls_back_to_the_backoff(httpserver: HTTPServer):
    """A Retry-After is the server's word, untrusted: "²" passes str.isdigit but is no number."""
    for value in ("\u00b2", "soon", "-5", "1.5"):
        httpserver.clear()
        httpserver.expect_ordered_request("/busy").respond_with_response(Response(status=503, headers={"Retry-After": value}))
        httpserver.expect_ordered_request("/busy").respond_with_data(b"ok")
        with Fetcher(settings()) as fetcher:
            started = time.monotonic()
            assert fetcher.fetch(httpserver.url_for("/busy")).body == b"ok", value
            assert time.monotonic() - started < 1.4, value  # the 0.05 s backoff, not a wait read from the header (1.5 s or more)
            assert fetcher.stats["retries"] == 1


def test_persistent_5xx_and_404_reasons(httpserver: HTTPServer):
    httpserver.expect_request("/down").respond_with_data(b"no", status=503)
    httpserver.expect_request("/gone").respond_with_data(b"no", status=404)
    with Fetcher(settings(attempts=2)) as fetcher:
        assert fail_reason(fetcher, httpserver.url_for("/down")) == "http_503"
        assert fail_reason(fetcher, httpserver.url_for("/gone")) == "http_404"
    assert sum(1 for req, _ in httpserver.log if req.path == "/down") == 2
    assert sum(1 for req, _ in httpserver.log if req.path == "/gone") == 1  # a 404 is not retried


def test_timeout(httpserver: HTTPServer):
    def slow(request):
        time.sleep(1.0)
        return Response(b"late")

    httpserver.expect_request("/slow").respond_with_handler(slow)
    with Fetcher(settings(timeout_s=0.2, attempts=1)) as fetcher:
        assert fail_reason(fetcher, httpserver.url_for("/slow")) == "timeout"


def test_connection_reset_is_retried():
    """A raw server that drops the first connection without a word, then answers properly."""
    with socket.socket() as server:  # closed even when the fetch fails
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        port = server.getsockname()[1]

        def serve():
            for n in range(2):
                conn, _ = server.accept()
                with conn:
                    conn.recv(65536)
                    if n == 1:
                        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        with Fetcher(settings()) as fetcher:
            got = fetcher.fetch(f"http://127.0.0.1:{port}/r")
        thread.join(5)
    assert got.body == b"ok" and fetcher.stats["retries"] == 1


def test_a_content_length_that_is_no_number_leaves_the_cap_to_the_streamed_bytes():
    """A raw server whose Content-Length is "\u00b2" (str.isdigit says yes, int() says no): the body is
    read to the connection's close under the byte cap, as when no length is given."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        port = server.getsockname()[1]

        def serve():
            for body in (b"short", b"z" * 5000):
                conn, _ = server.accept()
                with conn:
                    conn.recv(65536)
                    conn.sendall("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: \u00b2\r\nConnection: close\r\n\r\n".encode("latin-1") + body)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        with Fetcher(settings(max_bytes=4000, attempts=1)) as fetcher:
            assert fetcher.fetch(f"http://127.0.0.1:{port}/a").body == b"short"
            assert fail_reason(fetcher, f"http://127.0.0.1:{port}/b") == "too_large"
        thread.join(5)


def test_size_cap_and_content_type(httpserver: HTTPServer):
    httpserver.expect_request("/big").respond_with_data(b"x" * 5000, content_type="image/png")

    def chunked(request):  # no Content-Length: the cap is enforced while streaming
        return Response((b"y" * 1000 for _ in range(10)), content_type="image/png", direct_passthrough=True)

    httpserver.expect_request("/stream").respond_with_handler(chunked)
    httpserver.expect_request("/page").respond_with_data(b"<html></html>", content_type="text/html; charset=utf-8")
    with Fetcher(settings(max_bytes=4000)) as fetcher:
        assert fail_reason(fetcher, httpserver.url_for("/big")) == "too_large"
        assert fail_reason(fetcher, httpserver.url_for("/stream")) == "too_large"
        assert fail_reason(fetcher, httpserver.url_for("/page"), accept=("image/",)) == "bad_content_type"
        assert fetcher.fetch(httpserver.url_for("/page"), accept=("image/", "text/html")).body == b"<html></html>"


def test_bad_urls():
    with Fetcher(settings()) as fetcher:
        for url in ("ftp://example.org/x", "file:///etc/passwd", "http:///nohost", "http://127.0.0.1:99999/", "http://[::1", "http://[zz::1]/", 42, None):
            assert fail_reason(fetcher, url) == "bad_url", url
    with Fetcher(settings(mode="replay", replay_warcs=(str(SAMPLE_WARC),))) as replaying:
        assert fail_reason(replaying, "http://[::1") == "bad_url"  # the same reason offline


def test_settings_reject_unknown_keys_and_bad_values():
    with pytest.raises(ValueError, match="unknown fetch setting"):
        FetchSettings.from_dict({"timeout": 3})
    with pytest.raises(ValueError, match="mode"):
        FetchSettings.from_dict({"mode": "offline"})
    with pytest.raises(ValueError):
        FetchSettings.from_dict({"allow_networks": ["not-a-cidr"]})
    with pytest.raises(ValueError, match="replay_warcs"):
        Fetcher(FetchSettings(mode="replay"))


def test_record_then_replay_with_the_server_stopped(tmp_path):
    server = HTTPServer(host="127.0.0.1", port=0)
    server.expect_request("/img.png").respond_with_data(b"\x89PNG fake bytes", content_type="image/png")
    server.expect_request("/r").respond_with_response(Response(status=302, headers={"Location": "/img.png"}))
    server.expect_request("/missing").respond_with_data(b"", status=404)
    server.start()
    try:
        urls = [server.url_for(p) for p in ("/img.png", "/r", "/missing")]
        warc = tmp_path / "rec.warc.gz"
        with Fetcher(settings(mode="record"), record_to=warc) as recorder:
            live = [recorder.fetch(urls[0]), recorder.fetch(urls[1])]
            assert fail_reason(recorder, urls[2]) == "http_404"
            assert fail_reason(recorder, "http://10.9.9.9/x") == "blocked_address"
    finally:
        server.stop()
    assert warc.exists() and not list(tmp_path.glob(".*.tmp"))
    archive = load_archive((str(warc),))
    assert len(archive) == 4  # image, redirect hop, 404, blocked failure (image fetched twice, kept once)
    # the archive holds where each body is, not the body (a run's pages and images would all sit in memory)
    image = archive[urls[0]]
    assert image.at[:2] == (urls[0], str(warc)) and "body" not in vars(image) and image.body == b"\x89PNG fake bytes"

    with Fetcher(settings(mode="replay", replay_warcs=[str(warc)])) as replayer:
        again = [replayer.fetch(urls[0]), replayer.fetch(urls[1])]
        assert fail_reason(replayer, urls[2]) == "http_404"
        assert fail_reason(replayer, "http://10.9.9.9/x") == "blocked_address"  # the recorded failure
        assert fail_reason(replayer, server.url_for("/never")) == "not_in_archive"
    assert [(f.body, f.final_url, f.redirects, f.content_type) for f in again] == [
        (f.body, f.final_url, f.redirects, f.content_type) for f in live
    ]
    assert replayer.stats["requests"] == 0


def test_a_replay_warc_replaced_after_loading_is_a_damaged_archive(tmp_path):
    """A replayed body is read from its WARC when asked: if the file no longer holds that url's
    record there (recorded again since), the replay stops naming the file, never answering with
    another url's body."""
    server = HTTPServer(host="127.0.0.1", port=0)
    for path in ("/a", "/b"):
        server.expect_request(path).respond_with_data(f"body of {path}".encode(), content_type="text/plain")
    server.start()
    try:
        warcs = {}
        for path in ("/a", "/b"):
            warcs[path] = tmp_path / f"{path[1:]}.warc.gz"
            with Fetcher(settings(mode="record"), record_to=warcs[path]) as recorder:
                recorder.fetch(server.url_for(path))
    finally:
        server.stop()
    with Fetcher(settings(mode="replay", replay_warcs=[str(warcs["/a"])])) as replayer:
        assert replayer.fetch(server.url_for("/a")).body == b"body of /a"
        warcs["/a"].write_bytes(warcs["/b"].read_bytes())  # /b's recording where /a's was
        with pytest.raises(DamagedArchive, match=r"a.warc.gz is damaged: .*no longer http://127.0.0.1:\d+/a's"):
            replayer.fetch(server.url_for("/a"))


def test_failed_recording_leaves_no_archive(tmp_path):
    warc = tmp_path / "rec.warc.gz"
    with pytest.raises(RuntimeError):
        with Fetcher(settings(mode="record"), record_to=warc):
            raise RuntimeError("stage died")
    assert not warc.exists() and not list(tmp_path.iterdir())


def test_per_host_concurrency_and_rate_limit():
    active, peak, lock = [0], [0], threading.Lock()

    def handler(request):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.15)
        with lock:
            active[0] -= 1
        return Response(b"ok")

    # a threaded server, so the only limit on parallel requests is the fetcher's
    server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
    server.expect_request("/slot").respond_with_handler(handler)
    server.start()
    try:
        with Fetcher(settings(per_host_concurrency=2)) as fetcher, concurrent.futures.ThreadPoolExecutor(6) as pool:
            assert all(f.body == b"ok" for f in pool.map(fetcher.fetch, [server.url_for("/slot")] * 6))
        assert peak[0] == 2
        peak[0] = 0
        with Fetcher(settings(per_host_concurrency=8, per_host_rate=10.0)) as fetcher, concurrent.futures.ThreadPoolExecutor(4) as pool:
            started = time.monotonic()
            list(pool.map(fetcher.fetch, [server.url_for("/slot")] * 4))
            assert time.monotonic() - started >= 0.3 + 0.15  # starts spaced 0.1 s apart, the last one served for 0.15 s
    finally:
        server.stop()


def test_extra_headers_go_to_the_first_origin_only_and_error_bodies_are_kept(tmp_path):
    """An API key header never follows a redirect to another host; an error's body (a search API's
    quota message) is on the FetchError, live and replayed."""
    api, other = HTTPServer(host="127.0.0.1", port=0), HTTPServer(host="127.0.0.1", port=0)
    api.start()
    other.start()
    try:
        api.expect_request("/go").respond_with_response(Response(status=302, headers={"Location": other.url_for("/landing")}))
        api.expect_request("/quota").respond_with_data(b'{"error": {"code": 403, "errors": [{"reason": "dailyLimitExceeded"}]}}', status=403, content_type="application/json")
        other.expect_request("/landing").respond_with_data(b"ok")
        warc = tmp_path / "h.warc.gz"
        with Fetcher(settings(mode="record"), record_to=warc) as fetcher:
            assert fetcher.fetch(api.url_for("/go"), headers={"X-Api-Key": "k1"}).body == b"ok"
            with pytest.raises(FetchError) as info:
                fetcher.fetch(api.url_for("/quota"), headers={"X-Api-Key": "k1"})
        assert info.value.reason == "http_403" and b"dailyLimitExceeded" in info.value.body
        assert [req.headers.get("X-Api-Key") for req, _ in api.log] == ["k1", "k1"]
        assert [req.headers.get("X-Api-Key") for req, _ in other.log] == [None]
    finally:
        api.stop()
        other.stop()
    assert b"X-Api-Key" not in gzip.decompress(warc.read_bytes())  # request headers are never recorded
    with Fetcher(settings(mode="replay", replay_warcs=[str(warc)])) as replay, pytest.raises(FetchError) as info:
        replay.fetch(api.url_for("/quota"))
    assert info.value.reason == "http_403" and b"dailyLimitExceeded" in info.value.body


@pytest.mark.parametrize("head", [
    b"HTTP/1.1 200 OK\r\nX-Slow: ",  # headers that never end
    b"HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: 100000\r\n\r\n",  # an error page that drips
])
def test_a_server_that_drips_headers_or_an_error_page_is_cut_off_at_the_deadline(head):
    """requests' read timeout bounds the wait between two bytes only: a header line or an error
    body dripped a byte at a time would hold the fetch for as long as the server likes."""
    with RawServer(drip(head)) as server, Fetcher(settings(timeout_s=1.0, total_timeout_s=1.5, attempts=1)) as fetcher:
        started = time.monotonic()
        reason = fail_reason(fetcher, server.url + "/x")
        took = time.monotonic() - started
    assert (reason, took < 5) == ("timeout" if b"200" in head else "http_404", True), (reason, took)


@pytest.mark.parametrize("status, headers", [(300, {}), (301, {}), (302, {}), (304, {})])
def test_a_3xx_that_is_no_redirect_is_no_page(httpserver: HTTPServer, status, headers):
    """A 300, a 304 or a redirect without a Location has no page to give: it is its status, not an
    empty page fetched with success."""
    httpserver.expect_request("/r").respond_with_data(b"a list of choices", status=status, headers=headers)
    with Fetcher(settings(attempts=1)) as fetcher:
        with pytest.raises(FetchError) as err:
            fetcher.fetch(httpserver.url_for("/r"))
    assert err.value.reason == f"http_{status}"
    assert ("without a Location" in str(err.value)) == (status in (301, 302))


def test_a_retry_after_of_zero_or_past_still_backs_off():
    """Retry-After: 0 (or a date past) would have the retries hit a failing server at once: the
    backoff is the floor, a longer Retry-After is honoured up to the cap."""
    policy = RetryPolicy(base_delay=0.5, max_sleep=60)
    for asked in ("0", "Mon, 01 Jan 2001 00:00:00 GMT"):
        assert 0.25 <= policy.delay(0, asked) <= 0.5 and 1.0 <= policy.delay(2, asked) <= 2.0
    assert policy.delay(0, "7") == 7.0 and policy.delay(0, "100000") == 60


def test_the_header_watchdog_runs_in_a_forked_child_even_if_its_lock_was_held():
    """Stage processes fork (the harvest's reader, fetch_pages' markdown readers): a child has no
    watchdog thread, and a lock another thread held at the fork would never be released there."""
    import os
    import signal

    from stages.core.retry import _WATCHDOG

    release = threading.Event()

    def hold():
        with _WATCHDOG._cond:
            release.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    time.sleep(0.05)
    pid = os.fork()
    if pid == 0:  # the child: an action armed here fires (and a deadlocked child ends in 5 s)
        signal.alarm(5)
        fired = threading.Event()
        _WATCHDOG.arm(0.05, fired.set)
        os._exit(0 if fired.wait(2) else 3)
    release.set()
    holder.join()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_deadline_past_the_headers_never_cuts_the_connection_s_next_request():
    """A kept-alive connection goes back to the pool once its headers are in: a deadline that
    fires late (its action already taken by the watchdog) must not shut the socket down under the
    next request on it."""
    from stages.core.retry import _Cut

    a, b = socket.socketpair()
    with a, b:
        cut = _Cut(a)
        assert cut.end() is False  # the headers came first
        cut.fire()  # the late deadline
        a.sendall(b"still open")
        assert b.recv(16) == b"still open"
        late = _Cut(b)
        late.fire()
        assert late.end() is True


def test_an_action_that_fails_does_not_end_the_other_deadlines():
    from stages.core.retry import _WATCHDOG

    def broken():
        raise RuntimeError("an action's own failure")

    fired = threading.Event()
    _WATCHDOG.arm(0.01, broken)
    _WATCHDOG.arm(0.05, fired.set)
    assert fired.wait(2)
