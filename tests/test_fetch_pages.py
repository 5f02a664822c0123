"""fetch_pages against pages served on 127.0.0.1: markdown with images in place, charsets (latin-1 in
the header, windows-1252 in <meta>), every reject reason, a redirect to a private address refused,
the Jina Reader mode, and record then replay with the server stopped."""
from __future__ import annotations

import json
import re

import pyarrow.parquet as pq
import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from stages.core.ids import content_id
from stages.core.tables import TableWriter, table_schema
from tests.conftest import run_stage

FETCH = {"allow_networks": ["127.0.0.1/32"], "attempts": 2, "backoff_s": 0.01, "max_retry_sleep_s": 0.05, "timeout_s": 5}

ARTICLE = """<!doctype html><html><head><meta charset="utf-8"><title>Why the sky is blue | Sky Facts</title></head>
<body><nav><a href="/">Home</a> <a href="/shop">Shop</a> <a href="/login">Log in</a></nav>
<div class="advert">Sponsored: <a href="https://ads.example/c">Cheap telescopes, click now</a></div>
<article><h1>Why the sky is blue</h1>
<p>Sunlight is scattered by the molecules of the air, and blue light, with its short wavelength, is scattered far more
than red light. This is called <a href="/rayleigh">Rayleigh scattering</a> and it colours the whole daytime sky.</p>
<figure><img src="/img/sky.jpg" alt="A clear blue sky"><figcaption>Noon sky.</figcaption></figure>
<p>At sunset the light crosses much more air, so most of the blue is scattered away before it reaches us and the sky
near the horizon turns red and orange. Violet is scattered even more, but our eyes are less sensitive to it.</p>
<ul><li>Mars has a butterscotch daytime sky and blue sunsets.</li><li>The Moon has no air and a black sky.</li></ul>
<img src="https://cdn.example.org/sunset.png" alt="Sunset">
</article><footer>Copyright Sky Facts. <a href="/privacy">Privacy policy</a></footer></body></html>"""

LATIN1 = ("<html><head><title>Caf\u00e9 science</title></head><body><article><h1>Caf\u00e9 science</h1>"
          "<p>Au caf\u00e9, on parle de la diffusion de la lumi\u00e8re: le ciel est bleu parce que l'air diffuse davantage "
          "les courtes longueurs d'onde. C'est na\u00efve mais juste, et tr\u00e8s bien expliqu\u00e9 par Rayleigh.</p>"
          "<p>Le soir, la lumi\u00e8re traverse plus d'air et le ciel devient rouge et orang\u00e9 pr\u00e8s de l'horizon.</p>"
          "</article></body></html>")
CP1252 = ('<html><head><meta http-equiv="Content-Type" content="text/html; charset=windows-1252"><title>Starter notes</title></head>'
          "<body><article><h1>The baker\u2019s starter \u2013 notes</h1><p>A sourdough starter is flour and water \u2014 fed daily, "
          "it keeps wild yeast and lactic bacteria alive; the \u201cfloat test\u201d tells you when it is ready to bake with.</p>"
          "<p>Keep it at room temperature and feed it twice a day with equal weights of flour and water.</p></article></body></html>")


def results_table(path, base: str, urls: list[str]) -> None:
    writer = TableWriter(path, table_schema("retrieval_search_results"), "retrieval_search_results")
    for rank, url in enumerate(urls, 1):
        full = url if url.startswith("http") else f"{base}{url}"
        writer.write({"id": content_id("result", "q1", "page", full), "query_id": "q1", "query": "sky", "kind": "page", "rank": rank, "url": full,
                      "title": "", "snippet": "", "page_url": "", "width": None, "height": None, "provider": "google"})
    writer.write({"id": "result:img", "query_id": "q1", "query": "sky", "kind": "image", "rank": 1, "url": f"{base}/img/sky.jpg",
                  "title": "", "snippet": "", "page_url": "", "width": 10, "height": 10, "provider": "google"})
    writer.commit()


def serve_pages(server: HTTPServer) -> list[str]:
    server.expect_request("/article").respond_with_data(ARTICLE, content_type="text/html; charset=utf-8")
    server.expect_request("/latin1").respond_with_data(LATIN1.encode("latin-1"), content_type="text/html; charset=ISO-8859-1")
    server.expect_request("/cp1252").respond_with_data(CP1252.encode("cp1252"), content_type="text/html")
    server.expect_request("/undeclared").respond_with_data("<html><body><p>caf\u00e9 cr\u00e8me</p></body></html>".encode("latin-1"), content_type="text/html")
    server.expect_request("/broken").respond_with_data(b"<html><body><p>Half a page <b>bold <i>and", content_type="text/html")
    server.expect_request("/binary").respond_with_data(b"\x00\x01\x02PK\x03\x04" * 300, content_type="text/html")
    server.expect_request("/paper.pdf").respond_with_data(b"%PDF-1.4\n%%EOF\n", content_type="application/pdf")
    server.expect_request("/empty").respond_with_data(b"", content_type="text/html")
    server.expect_request("/paywall").respond_with_data("<html>Subscribe</html>", status=403, content_type="text/html")
    server.expect_request("/huge").respond_with_data("<html><body>" + "<p>word</p>" * 5000 + "</body></html>", content_type="text/html")
    server.expect_request("/moved").respond_with_response(Response(status=301, headers={"Location": "/article"}))
    server.expect_request("/to-private").respond_with_response(Response(status=302, headers={"Location": "http://10.0.0.7/admin"}))
    return ["/article", "/latin1", "/cp1252", "/undeclared", "/broken", "/binary", "/paper.pdf", "/empty", "/paywall", "/huge", "/moved", "/to-private"]


def fetch_pages(results, out, check=True, warcs=(), **params):
    prm = {"fetch": FETCH, "max_bytes": 20_000, "workers": 4, **params}
    args = ["--input", f"results={results}", "--output", f"pages={out}", "--params", json.dumps(prm)]
    for warc in warcs:
        args += ["--input", f"warcs={warc}"]
    return run_stage("fetch_pages", *args, check=check)


def test_pages_read_as_markdown_with_charsets_and_every_reject_reason(httpserver: HTTPServer, tmp_path):
    paths = serve_pages(httpserver)
    base = httpserver.url_for("").rstrip("/")
    results = tmp_path / "results.parquet"
    results_table(results, base, paths)
    out = tmp_path / "pages.parquet"
    fetch_pages(results, out, store=str(tmp_path / "store"))
    pages = {r["url"][len(base):]: r for r in pq.read_table(out).to_pylist()}
    by_id = {content_id("page", "q1", f"{base}{path}"): path for path in paths}
    rejects = {by_id[r["id"]]: r["reason"] for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()}
    assert set(pages) == {"/article", "/latin1", "/cp1252", "/broken", "/moved"}
    assert rejects == {
        "/undeclared": "undecodable", "/binary": "broken_html", "/paper.pdf": "not_html", "/empty": "empty_page",
        "/paywall": "http_403", "/huge": "too_large", "/to-private": "blocked_address",
    }
    article = pages["/article"]["markdown"]
    assert "Rayleigh scattering" in article and "butterscotch" in article
    assert "Cheap telescopes" not in article and "Privacy policy" not in article and "Log in" not in article  # boilerplate gone
    assert f"![A clear blue sky]({base}/img/sky.jpg)" in article and "![Sunset](https://cdn.example.org/sunset.png)" in article
    assert article.index("Rayleigh") < article.index("/img/sky.jpg") < article.index("At sunset")  # images in place
    assert pages["/article"]["images"] == 2 and pages["/article"]["title"] == "Why the sky is blue"
    assert (pages["/latin1"]["charset"], pages["/cp1252"]["charset"]) == ("cp1252", "cp1252")
    assert "Au café" in pages["/latin1"]["markdown"] and "naïve" in pages["/latin1"]["markdown"]
    assert "baker’s starter – notes" in pages["/cp1252"]["markdown"] and "“float test”" in pages["/cp1252"]["markdown"]
    assert pages["/moved"]["final_url"] == f"{base}/article" and pages["/moved"]["status"] == 200
    assert pages["/moved"]["sha256"] == article_sha(pages) and (tmp_path / "store" / article_sha(pages)[:2] / f"{article_sha(pages)}.html").exists()
    assert "Half a page" in pages["/broken"]["markdown"]  # unclosed tags are still a page
    assert all(req.path != "/admin" for req, _ in httpserver.log)  # the private address was never reached
    report = json.loads(open(f"{out}.report.json").read())
    assert report["rows_in"] == len(paths) and report["stats"]["image_results_skipped"] == 1


def test_markdown_processes_change_nothing_but_where_pages_are_read(httpserver: HTTPServer, tmp_path):
    """The default reads pages in a forked markdown process; 0 reads them in the fetching process:
    the same rows, rejects (details included) and stored bodies."""
    paths = serve_pages(httpserver)
    results = tmp_path / "results.parquet"
    results_table(results, httpserver.url_for("").rstrip("/"), paths)
    got = {}
    for processes in (0, 2):
        out = tmp_path / f"pages{processes}.parquet"
        fetch_pages(results, out, store=str(tmp_path / f"store{processes}"), markdown_processes=processes)
        stored = sorted(p.name for p in (tmp_path / f"store{processes}").rglob("*.html"))
        got[processes] = (pq.read_table(out).to_pylist(), pq.read_table(f"{out}.rejects.parquet").to_pylist(), stored)
    assert got[0] == got[2] and len(got[0][0]) == 5 and len(got[0][1]) == 7


def article_sha(pages):
    return pages["/article"]["sha256"]


def test_record_then_replay_with_the_server_stopped_gives_identical_pages(tmp_path):
    server = HTTPServer(host="127.0.0.1", port=0)
    paths = serve_pages(server)
    server.start()
    base = server.url_for("").rstrip("/")
    results = tmp_path / "results.parquet"
    results_table(results, base, paths)
    warc = tmp_path / "pages.warc.gz"
    try:
        fetch_pages(results, tmp_path / "live.parquet", store=str(tmp_path / "store"), fetch={**FETCH, "mode": "record"}, record_warc=str(warc))
    finally:
        server.stop()
    fetch_pages(results, tmp_path / "replay.parquet", store=str(tmp_path / "store"), fetch={**FETCH, "mode": "replay"}, warcs=[warc])
    assert pq.read_table(tmp_path / "replay.parquet").equals(pq.read_table(tmp_path / "live.parquet"))
    live_rejects = sorted((r["id"], r["reason"]) for r in pq.read_table(tmp_path / "live.parquet.rejects.parquet").to_pylist())
    replay_rejects = sorted((r["id"], r["reason"]) for r in pq.read_table(tmp_path / "replay.parquet.rejects.parquet").to_pylist())
    assert live_rejects == replay_rejects and len(live_rejects) == 7


def test_jina_reader_mode_goes_through_the_fetch_layer_and_stops_on_quota(httpserver: HTTPServer, tmp_path, monkeypatch):
    monkeypatch.setenv("CITEFORGE_TEST_JINA_KEY", "jina-key")
    seen: list = []

    def reader(request: Request) -> Response:
        target = request.full_path.lstrip("/").rstrip("?")
        seen.append((target, request.headers.get("Authorization"), request.headers.get("Accept")))
        if target.endswith("/gone"):
            return Response(json.dumps({"code": 422, "message": "cannot reach"}), status=422, content_type="application/json")
        data = {"title": "Read " + target, "url": target, "content": f"# Page\n\nText of {target}.\n\n![pic](https://img.example/{len(seen)}.jpg)"}
        return Response(json.dumps({"code": 200, "status": 20000, "data": data}), content_type="application/json")

    httpserver.expect_request(re.compile("^/https:/+.*")).respond_with_handler(reader)
    results = tmp_path / "results.parquet"
    results_table(results, "", ["https://news.example/a", "https://news.example/gone"])
    out = tmp_path / "pages.parquet"
    fetch_pages(results, out, store=str(tmp_path / "store"), reader="jina", reader_endpoint=httpserver.url_for("/"), reader_key_env="CITEFORGE_TEST_JINA_KEY")
    pages = pq.read_table(out).to_pylist()
    assert [(p["url"], p["final_url"], p["reader"], p["images"]) for p in pages] == [("https://news.example/a", "https://news.example/a", "jina", 1)]
    assert pages[0]["markdown"].startswith("# Page") and pages[0]["title"] == "Read https://news.example/a"
    assert [r["reason"] for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()] == ["http_422"]
    assert {(auth, accept) for _, auth, accept in seen} == {("Bearer jina-key", "application/json")}

    httpserver.clear()
    httpserver.expect_request(re.compile("^/https:/+.*")).respond_with_response(Response('{"code":402,"message":"balance"}', status=402))
    failed = fetch_pages(results, tmp_path / "p2.parquet", check=False, reader="jina", reader_endpoint=httpserver.url_for("/"), reader_key_env="CITEFORGE_TEST_JINA_KEY")
    assert failed.returncode != 0 and "Jina Reader" in failed.stderr and "http_402" in failed.stderr


def test_control_characters_past_one_in_twenty_mean_binary_data():
    """looks_broken counts the C0 controls other than tab, newline, carriage return and form feed
    in the first 4 KB: more than 5% of it is binary data served as HTML."""
    from stages.core.pages import looks_broken

    page = "<p>" + "a" * 97  # 100 characters
    assert looks_broken(page + "\x01" * 5) is None  # 5 of 105: under 5%
    assert looks_broken(page + "\x01\x02\x1b\x7f\x0b\x1f\x03") == "6 control characters in the first 107 characters"  # DEL is not one
    assert looks_broken(page + "\t\n\r\f" * 10) is None
    assert looks_broken("x" * 4096 + "\x01" * 500).startswith("no markup")  # only the first 4 KB is looked at


def test_a_charset_label_browsers_do_not_know_is_passed_over_as_the_standard_does():
    from stages.core.pages import Undecodable, decode_html

    page = "<html><head><meta charset='windows-1252'></head><body><p>Au caf\u00e9, na\u00efve \u2013 notes</p></body></html>"
    assert decode_html(page.encode("cp1252"), "text/html; charset=x-nope") == (page, "cp1252")  # a typo in the header: the meta's
    assert decode_html(page.encode("cp1252"), "text/html; charset=utf-7") == (page, "cp1252")  # no browser decodes UTF-7
    utf8 = page.replace("windows-1252", "utf-16")
    assert decode_html(utf8.encode(), "text/html") == (utf8, "utf-8")  # a <meta> read as ASCII cannot mean UTF-16
    with pytest.raises(Undecodable, match=r"is not utf-8 \(charset from the default; the header's 'x-nope' passed over; the meta's 'bogus' passed over\)"):
        decode_html(page.replace("windows-1252", "bogus").encode("cp1252"), "text/html; charset=x-nope")
