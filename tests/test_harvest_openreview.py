"""harvest_openreview against a 127.0.0.1 server speaking OpenReview API v2 (tests/openreview_api.py),
through the stage's real CLI: recorded into a WARC by the fetch layer, then replayed from it with
the server stopped."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Response

from stages.core.ids import sha256_hex
from tests.conftest import REPO
from tests.openreview_api import INVITATION, VENUE, FakeOpenReview, reply, submission

PDF = b"%PDF-1.4\n% a tiny stand-in\n%%EOF\n"


def nested_paper() -> dict:
    """Submission 1: a review answered by the authors in two parts, a reviewer follow-up under the
    answer and the authors' reply to it (replies nested four deep), a meta-review and a decision."""
    f, n = "forum1", 1
    return submission(f, n, "Gated Widgets", replies=[
        reply("rev1", f, n, "Official_Review", "Reviewer_aB1c", {"summary": "A widget model.", "questions": "Why does the gate help?", "rating": 6, "confidence": 4}, cdate=1),
        reply("ans1", f, n, "Official_Comment", "Authors", {"title": "Response (1/2)", "comment": "The gate helps, see Table 2."}, replyto="rev1", cdate=2),
        reply("ans2", f, n, "Official_Comment", "Authors", {"title": "Response (2/2)", "comment": "Also Figure 3."}, replyto="ans1", cdate=3),
        reply("fup1", f, n, "Official_Comment", "Reviewer_aB1c", {"comment": "What about runtime?"}, replyto="ans1", cdate=4),
        reply("ans3", f, n, "Official_Comment", "Authors", {"comment": "Section 4.3, Line 39 reports it."}, replyto="fup1", cdate=5),
        reply("meta1", f, n, "Meta_Review", "Area_Chair_xY9z", {"metareview": "Solid.", "recommendation": "Accept"}, cdate=6),
        reply("dec1", f, n, "Decision", "Program_Chairs", {"title": "Paper Decision", "decision": "Accept (Poster)"}, cdate=7),
    ])


def venue() -> tuple[list[dict], dict[str, bytes]]:
    subs = [
        nested_paper(),
        submission("forum2", 2, "No PDF Here", pdf=False),
        submission("forum3", 3, "Pulled Out", venueid=f"{VENUE}/Withdrawn_Submission", replies=[
            reply("wd3", "forum3", 3, "Withdrawal", "Authors", {"withdrawal_confirmation": "I have read and agree."}, cdate=1),
        ]),
        submission("forum4", 4, "Missing File"),
        submission("forum5", 5, "Plain Paper"),
    ]
    return subs, {"forum1": PDF, "forum3": PDF + b"3", "forum5": PDF + b"5"}


def harvest(tmp_path: Path, url: str, check: bool = True, env: dict | None = None, **params) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "out"
    settings = {"base_url": url, "mode": "record", "warc": str(tmp_path / "openreview.warc.gz"), "pdf_store": str(tmp_path / "pdfs"),
                "requests_per_second": 0.0, "retry_max_sleep": 0.05, "allow_networks": ["127.0.0.0/8"], **params}
    args = [sys.executable, "-m", "stages.mcitebench.harvest_openreview", "--params", json.dumps(settings)]
    for table in ("papers", "reviews", "comments", "threads"):
        args += ["--output", f"{table}={out / table}.parquet"]
    # the timeout turns a harvest that pages forever into a failure rather than a hung suite
    result = subprocess.run(args, cwd=REPO, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=120)
    if check and result.returncode:
        raise AssertionError(result.stderr[-3000:])
    return result, out


@pytest.fixture
def own_server():
    """A server of the test's own, which it may stop (the shared `httpserver` must keep running)."""
    server = HTTPServer(host="127.0.0.1", port=0)
    server.start()
    yield server
    if server.is_running():
        server.stop()


def rows(out: Path, table: str, order: str = "id") -> list[dict]:
    cur = duckdb.connect().execute(f"select * from read_parquet('{out / table}.parquet') order by {order}")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def report(out: Path) -> dict:
    return json.loads((out / "papers.parquet.report.json").read_text())


def rejects(out: Path) -> dict[str, str]:
    return {r["id"]: r["reason"] for r in rows(out, "papers.parquet.rejects")}


def test_harvest_pages_papers_replies_and_threads(httpserver, tmp_path):
    subs, pdfs = venue()
    api = FakeOpenReview(httpserver, subs, pdfs)
    _, out = harvest(tmp_path, api.url, page_size=2)

    offsets = [(int(a["offset"]), int(a["limit"])) for path, a in api.requests if path == "/notes"]
    assert offsets == [(0, 2), (2, 2), (4, 2)]  # pages until count (5) is reached
    assert all(a["details"] == "replies" and a["invitation"] == INVITATION for p, a in api.requests if p == "/notes")

    rep = report(out)
    assert rep["rows_in"] == 5 and rep["rows_out"]["papers"] + rep["rejected"] == 5
    assert rejects(out) == {"openreview:forum4": "pdf_unavailable"}  # the note names a PDF the API does not have

    papers = {p["id"]: p for p in rows(out, "papers")}
    assert set(papers) == {"openreview:forum1", "openreview:forum2", "openreview:forum3", "openreview:forum5"}
    p1 = papers["openreview:forum1"]
    assert (p1["title"], p1["number"], p1["decision"], p1["withdrawn"]) == ("Gated Widgets", 1, "Accept (Poster)", False)
    assert p1["keywords"] == ["citations", "benchmarks"] and p1["venueid"] == VENUE
    assert p1["pdf_sha256"] == sha256_hex(PDF)
    assert (tmp_path / "pdfs" / p1["pdf_sha256"][:2] / f"{p1['pdf_sha256']}.pdf").read_bytes() == PDF
    # a note without a PDF keeps its row, with no hash and no PDF request
    assert papers["openreview:forum2"]["pdf_sha256"] is None
    assert ("/pdf", {"id": "forum2"}) not in api.requests
    # a withdrawn paper is kept and flagged
    assert (papers["openreview:forum3"]["withdrawn"], papers["openreview:forum3"]["decision"]) == (True, "Withdrawn")

    reviews = rows(out, "reviews")
    assert [(r["note_id"], r["rating"], r["confidence"]) for r in reviews] == [("rev1", "6", "4")]
    assert "questions: Why does the gate help?" in reviews[0]["text"]
    assert json.loads(reviews[0]["fields_json"])["rating"] == 6

    comments = {c["note_id"]: c for c in rows(out, "comments")}
    shape = {k: (c["kind"], c["role"], c["thread_root"], c["depth"]) for k, c in comments.items() if k.startswith(("ans", "fup", "meta", "dec"))}
    assert shape == {
        "ans1": ("Official_Comment", "authors", "rev1", 2),
        "ans2": ("Official_Comment", "authors", "rev1", 3),
        "fup1": ("Official_Comment", "reviewer", "rev1", 3),
        "ans3": ("Official_Comment", "authors", "rev1", 4),
        "meta1": ("Meta_Review", "area_chair", "meta1", 1),
        "dec1": ("Decision", "program_chairs", "dec1", 1),
    }
    assert comments["ans1"]["text"] == "The gate helps, see Table 2." and comments["ans1"]["title"] == "Response (1/2)"
    assert comments["wd3"]["kind"] == "Withdrawal"

    threads = {t["question_note_id"]: t for t in rows(out, "threads")}
    assert set(threads) == {"rev1", "fup1"}
    assert threads["rev1"]["response_note_ids"] == ["ans1", "ans2"]
    assert threads["rev1"]["response_text"] == "The gate helps, see Table 2.\n\nAlso Figure 3."
    assert threads["rev1"]["reviewer_signature"].endswith("/Submission1/Reviewer_aB1c")
    assert threads["fup1"]["response_note_ids"] == ["ans3"] and threads["fup1"]["question_text"] == "What about runtime?"


def test_429_and_500_are_retried_then_succeed(httpserver, tmp_path):
    subs, pdfs = venue()
    api = FakeOpenReview(httpserver, subs[:1], pdfs)
    api.fail("/notes", 429, {"Retry-After": "0"})
    api.fail("/pdf", 500)
    _, out = harvest(tmp_path, api.url)
    assert [p["id"] for p in rows(out, "papers")] == ["openreview:forum1"]
    assert report(out)["stats"]["fetch_retries"] == 2
    assert [p for p, _ in api.requests] == ["/notes", "/notes", "/pdf", "/pdf"]


def test_exhausted_retries_fail_the_listing_with_a_clear_error(httpserver, tmp_path):
    api = FakeOpenReview(httpserver, venue()[0], {})
    api.fail("/notes", 503, times=3)
    result, out = harvest(tmp_path, api.url, check=False, retry_attempts=3)
    assert result.returncode != 0 and "gave up after 3 attempts: HTTP 503" in result.stderr
    assert not (out / "papers.parquet").exists()


def test_replay_rebuilds_the_same_tables_offline(own_server, tmp_path):
    subs, pdfs = venue()
    api = FakeOpenReview(own_server, subs, pdfs)
    _, recorded = harvest(tmp_path, api.url, page_size=2)
    warc = tmp_path / "openreview.warc.gz"
    assert warc.stat().st_size > 0
    own_server.stop()  # the replay has nothing to talk to
    replay_dir = tmp_path / "replay"
    replay_dir.mkdir()
    _, replayed = harvest(replay_dir, api.url, mode="replay", page_size=2, warc=str(warc))
    for table in ("papers", "reviews", "comments", "threads"):
        assert rows(replayed, table) == rows(recorded, table)
    assert rejects(replayed) == rejects(recorded)  # the recorded 404 replays as the same reject
    assert report(replayed)["stats"]["fetch_replayed"] == report(replayed)["stats"]["fetch_fetches"] > 0
    # a request that was never recorded is an error naming it
    result, _ = harvest(replay_dir, api.url, check=False, mode="replay", page_size=3, warc=str(warc))
    assert result.returncode != 0 and "not_in_archive" in result.stderr and "limit=3" in result.stderr
    assert "Traceback" not in result.stderr


def test_login_token_from_environment_and_drop_withdrawn(httpserver, tmp_path):
    subs, pdfs = venue()
    api = FakeOpenReview(httpserver, [subs[0], subs[2]], pdfs, token="tok-123")
    result, _ = harvest(tmp_path, api.url, check=False, env={"OPENREVIEW_USERNAME": "", "OPENREVIEW_PASSWORD": ""})
    assert result.returncode != 0 and "HTTP 403" in result.stderr  # no credentials, no token
    _, out = harvest(tmp_path, api.url, drop_withdrawn=True, env={"OPENREVIEW_USERNAME": "me@x.org", "OPENREVIEW_PASSWORD": "pw"})
    assert api.requests[0][0] == "/notes" and "/login" in [p for p, _ in api.requests]
    assert [p["id"] for p in rows(out, "papers")] == ["openreview:forum1"]
    assert rejects(out) == {"openreview:forum3": "withdrawn"}


def test_pdf_past_the_byte_cap_is_rejected_while_streaming(httpserver, tmp_path):
    """forum6 streams an endless PDF with no Content-Length: only the bytes tell, and the client
    stops reading; forum7 declares a length over the cap and is not read at all."""
    served = []

    def endless(_request):
        def body():
            for i in range(1000):  # 64 MiB if it were all read
                served.append(i)
                yield (b"%PDF-1.4\n" if i == 0 else b"") + b"0" * 65536
        return Response(body(), content_type="application/pdf")

    httpserver.expect_request("/pdf", query_string={"id": "forum6"}).respond_with_handler(endless)
    subs, pdfs = venue()
    subs += [submission("forum6", 6, "Endless PDF"), submission("forum7", 7, "Big PDF")]
    pdfs["forum7"] = PDF + b"0" * 5000
    api = FakeOpenReview(httpserver, subs, pdfs)
    _, out = harvest(tmp_path, api.url, max_pdf_bytes=4096)
    too_large = {"openreview:forum6": "pdf_too_large", "openreview:forum7": "pdf_too_large"}
    assert rejects(out) == {"openreview:forum4": "pdf_unavailable", **too_large}
    assert report(out)["rows_in"] == 7 and len(rows(out, "papers")) == 4
    assert len(served) < 1000  # the stream was cut, not drained
    stored = sorted(f.read_bytes() for f in (tmp_path / "pdfs").rglob("*.pdf"))
    assert stored == sorted([PDF, PDF + b"3", PDF + b"5"])  # only PDFs within the cap reach the store
    # the recorded cut replays as the same reject, and a lower cap at replay applies to cached PDFs
    replay_dir = tmp_path / "replay"
    replay_dir.mkdir()
    warc = str(tmp_path / "openreview.warc.gz")
    _, replayed = harvest(replay_dir, api.url, mode="replay", max_pdf_bytes=4096, warc=warc)
    assert rejects(replayed) == rejects(out)
    _, lower = harvest(replay_dir, api.url, mode="replay", max_pdf_bytes=len(PDF), warc=warc)
    assert rejects(lower) == {"openreview:forum4": "pdf_unavailable", "openreview:forum3": "pdf_too_large",
                              "openreview:forum5": "pdf_too_large", **too_large}


class WithoutCount(FakeOpenReview):
    """A server that leaves `count` out of its /notes pages (the notes themselves are all there)."""

    def _notes(self, request):
        page = json.loads(super()._notes(request).get_data())
        del page["count"]
        return self._json(page)


def test_a_listing_without_count_is_paged_to_an_empty_page_and_replays(own_server, tmp_path):
    subs, pdfs = venue()
    api = WithoutCount(own_server, subs, pdfs)
    _, recorded = harvest(tmp_path, api.url, page_size=2)
    offsets = [(int(a["offset"]), int(a["limit"])) for path, a in api.requests if path == "/notes"]
    assert offsets == [(0, 2), (2, 2), (4, 2), (5, 2)]  # the short page at 4 is not taken for the end: only the empty one at 5
    assert report(recorded)["rows_in"] == 5
    own_server.stop()
    replay_dir = tmp_path / "replay"
    replay_dir.mkdir()
    _, replayed = harvest(replay_dir, api.url, mode="replay", page_size=2, warc=str(tmp_path / "openreview.warc.gz"))
    for table in ("papers", "reviews", "comments", "threads"):
        assert rows(replayed, table) == rows(recorded, table)


@pytest.mark.parametrize("answer, words", [
    # a server that ignores offset, always the same page, and claims a huge count: stopped at the first page with nothing new
    (lambda offset, subs: {"notes": subs[:2], "count": 10**12}, "every note of the page was listed before"),
    (lambda offset, subs: {"notes": subs[:2]}, "every note of the page was listed before"),  # the same without count
    # notes without an id cannot tell one page from the next
    (lambda offset, subs: {"notes": [{"number": 1}, {"number": 2}], "count": 10**12}, "a page of 2 notes without an id"),
    (lambda offset, subs: {"notes": subs[offset:offset + 2], "count": 9}, "an empty page at offset 5 of a listing whose count is 9"),
])
def test_a_listing_that_does_not_move_forward_is_one_clear_error(httpserver, tmp_path, answer, words):
    subs, served = venue()[0], []

    def notes(request):
        served.append(request.args["offset"])
        return Response(json.dumps(answer(int(request.args["offset"]), subs)), content_type="application/json")

    httpserver.expect_request("/notes").respond_with_handler(notes)
    result, out = harvest(tmp_path, httpserver.url_for("").rstrip("/"), check=False, page_size=2)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "harvest_openreview: error: OpenReview GET /notes?invitation=" in last and words in last, last
    assert len(served) <= 4 and not (out / "papers.parquet").exists()


class Shifting(FakeOpenReview):
    """A listing that shifts by one note after its first page (a submission added meanwhile): the
    last note of the first page is listed again at the head of the second."""

    def _notes(self, request):
        offset = int(request.args.get("offset", 0))
        if offset:
            request.args = request.args.copy()
            request.args["offset"] = str(offset - 1)
        page = json.loads(super()._notes(request).get_data())
        page["count"] += 1
        return self._json(page)


def test_a_listing_that_shifts_while_paged_keeps_each_note_once(httpserver, tmp_path):
    subs, pdfs = venue()
    Shifting(httpserver, subs, pdfs)
    _, out = harvest(tmp_path, httpserver.url_for("").rstrip("/"), page_size=2)
    assert sorted(p["id"] for p in rows(out, "papers")) == ["openreview:forum1", "openreview:forum2", "openreview:forum3", "openreview:forum5"]
    rep = report(out)
    assert rep["rows_in"] == 5 and rep["stats"]["notes_listed_twice"] >= 1


@pytest.mark.parametrize("mode", ["sideways"])
def test_bad_mode_is_a_clear_error(tmp_path, mode):
    result, _ = harvest(tmp_path, "http://127.0.0.1:9", check=False, mode=mode)
    assert result.returncode != 0 and "param 'mode' must be one of" in result.stderr
