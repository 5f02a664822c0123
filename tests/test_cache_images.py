"""cache_images end to end: the real stage CLI, a real HTTP server on 127.0.0.1, a real image store."""
from __future__ import annotations

import io
import json
import os
import stat
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image
from pytest_httpserver import HTTPServer
from werkzeug import Response

from stages.core.fetch import WarcRecorder
from stages.core.images import ImageStore, normalize_image
from stages.core.stage import Reject, StageError

LOCAL_FETCH = {"allow_networks": ["127.0.0.1/32"], "timeout_s": 3.0, "attempts": 3, "backoff_s": 0.05}


def encode(fmt: str, size=(64, 48), mode="RGB", color=(200, 30, 60), **kw) -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size, color).save(buffer, fmt, **kw)
    return buffer.getvalue()


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bomb(width: int = 50_000, height: int = 50_000) -> bytes:
    """A valid PNG header declaring width x height RGB pixels, with a tiny IDAT: a few hundred
    bytes on the wire, 7.5 GB if anyone decoded it."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * (1 + 3 * 1000))  # the first row's worth, nowhere near all of it
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", idat) + png_chunk(b"IEND", b"")


JPEG = encode("JPEG", color=(10, 120, 200))
SERVED = {
    "/a.jpg": (JPEG, "image/jpeg"),
    "/b.png": (encode("PNG", mode="RGBA", color=(0, 255, 0, 128)), "image/png"),
    "/c.gif": (encode("GIF", mode="P", color=3), "image/gif"),
    "/d.webp": (encode("WEBP", color=(90, 90, 0)), "image/webp"),
    "/e.bmp": (encode("BMP", color=(1, 2, 3)), "image/bmp"),
    "/f.tiff": (encode("TIFF", mode="RGBA", color=(9, 9, 9, 0)), "application/octet-stream"),
    "/logo.svg": (b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>', "image/svg+xml"),
    "/truncated.jpg": (encode("JPEG", size=(400, 300), color=(50, 60, 70))[:600], "image/jpeg"),
    "/page.jpg": (b"<!doctype html><html><body>not found</body></html>", "image/jpeg"),
    "/bomb.png": (png_bomb(), "image/png"),
    "/text": (b"hello", "text/plain"),
    "/huge.jpg": (b"\xff" * 300_000, "image/jpeg"),
}


def serve(server: HTTPServer) -> None:
    for path, (body, ctype) in SERVED.items():
        server.expect_request(path).respond_with_data(body, content_type=ctype)
    server.expect_request("/gone.jpg").respond_with_data(b"", status=404)
    server.expect_request("/moved.jpg").respond_with_response(Response(status=302, headers={"Location": "/a.jpg"}))
    server.expect_request("/sneaky.jpg").respond_with_response(Response(status=302, headers={"Location": "http://192.168.1.1/cam.jpg"}))
    server.expect_oneshot_request("/busy.jpg").respond_with_response(Response(status=429, headers={"Retry-After": "0"}))
    server.expect_request("/busy.jpg").respond_with_data(encode("JPEG", color=(7, 7, 7)), content_type="image/jpeg")


def items(path: Path, server: HTTPServer) -> Path:
    u = server.url_for
    rows = [
        {"id": "reddit:p1", "image_urls": [u("/a.jpg"), u("/b.png"), u("/c.gif"), u("/d.webp")]},
        {"id": "reddit:p2", "image_urls": [u("/e.bmp"), u("/f.tiff"), u("/logo.svg"), u("/moved.jpg"), u("/a.jpg"), u("/a.jpg")]},
        {"id": "reddit:p3", "image_urls": [u("/truncated.jpg"), u("/page.jpg"), u("/bomb.png"), u("/gone.jpg"), u("/sneaky.jpg")]},
        {"id": "reddit:p4", "image_urls": [u("/busy.jpg"), u("/text"), u("/huge.jpg"), "", "ftp://x/y.png"]},
        {"id": "reddit:p5", "image_urls": []},
    ]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


EXPECTED_REJECTS = {
    "/logo.svg": "unsupported_format",
    "/truncated.jpg": "broken_image",
    "/page.jpg": "not_an_image",
    "/bomb.png": "pixel_bomb",
    "/gone.jpg": "http_404",
    "/sneaky.jpg": "blocked_address",
    "/text": "bad_content_type",
    "/huge.jpg": "too_large",
}


# The stage runs under this wrapper, which reports the peak resident memory of the exec'd process
# itself (VmHWM belongs to the address space exec created: unlike a child's ru_maxrss it does not
# include the pytest parent's memory copied at fork time).
_PEAK_WRAPPER = """
import runpy, sys
try:
    runpy.run_module("stages.images.cache_images", run_name="__main__", alter_sys=True)
finally:
    peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM"))
    print("PEAK_KB", peak.split()[1])
"""


def run_stage(tmp: Path, items_path: Path, store: Path, fetch: dict, record_warc: str = "") -> tuple[list[dict], list[dict], dict, float]:
    """The stage CLI in its own process: (rows, rejects, report, that process's peak RSS in MB)."""
    out = tmp / "images.parquet"
    params = {"store": str(store), "fetch": fetch, "record_warc": record_warc, "workers": 4}
    argv = [sys.executable, "-c", _PEAK_WRAPPER, "--input", f"owners={items_path}", "--output", f"images={out}", "--params", json.dumps(params)]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    peak_kb = int(proc.stdout.rsplit("PEAK_KB", 1)[1].split()[0])
    rejects = pq.read_table(f"{out}.rejects.parquet").to_pylist()
    return pq.read_table(out).to_pylist(), rejects, json.loads(Path(f"{out}.report.json").read_text()), peak_kb / 1024


def store_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_each_format_and_each_failure(tmp_path, httpserver: HTTPServer):
    serve(httpserver)
    fetch = {**LOCAL_FETCH, "max_bytes": 200_000}
    rows, rejects, report, peak_mb = run_stage(tmp_path, items(tmp_path / "items.parquet", httpserver), tmp_path / "store", fetch)
    assert peak_mb < 500, f"the pixel bomb was decoded? the stage peaked at {peak_mb:.0f} MB"  # decoding it needs 7.5 GB

    assert report["rows_in"] == 20 == len(rows) + len(rejects)  # the count invariant, pair by pair
    by_path = {r["url"].split(httpserver.url_for(""), 1)[-1]: r for r in rows}
    by_path = {("/" + k.lstrip("/")): v for k, v in by_path.items()}
    assert {k: by_path[k]["format"] for k in ("/a.jpg", "/b.png", "/c.gif", "/d.webp", "/e.bmp", "/f.tiff")} == {
        "/a.jpg": "jpeg", "/b.png": "png", "/c.gif": "gif", "/d.webp": "webp", "/e.bmp": "jpeg", "/f.tiff": "jpeg",
    }
    assert by_path["/e.bmp"]["source_format"] == "bmp" and by_path["/f.tiff"]["source_format"] == "tiff"
    assert by_path["/a.jpg"]["id"] == by_path["/moved.jpg"]["id"]  # same bytes via a redirect: one image
    assert by_path["/moved.jpg"]["final_url"].endswith("/a.jpg")
    assert by_path["/busy.jpg"]["format"] == "jpeg"  # 429, then success
    store = ImageStore(tmp_path / "store")
    for row in rows:
        data = store.read(row["sha256"])
        assert row["id"] == f"img:{row['sha256']}" and len(data) == row["bytes"]
        with Image.open(io.BytesIO(data)) as im:
            assert im.size == (row["width"], row["height"]) == (64, 48)
    assert store.read(by_path["/a.jpg"]["sha256"]) == JPEG  # kept formats are stored byte for byte

    reasons = {}
    for r in rejects:
        url = r["detail"].split("url=", 1)[1].split(": ", 1)[0]
        reasons[url.replace(httpserver.url_for(""), "/").replace("//", "/")] = r["reason"]
    for path, reason in EXPECTED_REJECTS.items():
        assert reasons.get(path) == reason, (path, reasons.get(path))
    assert sorted(r["reason"] for r in rejects if r["reason"] in ("bad_url", "duplicate_url")) == ["bad_url", "bad_url", "duplicate_url"]
    assert report["stats"]["fetch_retries"] == 1


def test_a_url_listed_twice_is_one_reject_for_its_fate_and_one_duplicate(tmp_path, httpserver: HTTPServer):
    serve(httpserver)
    u = httpserver.url_for
    rows_in = [
        {"id": "reddit:q1", "image_urls": [u("/gone.jpg"), u("/gone.jpg"), u("/a.jpg"), u("/a.jpg"), "", ""]},
        {"id": "reddit:q2", "image_urls": [u("/gone.jpg")]},  # another owner: not a duplicate
    ]
    pq.write_table(pa.Table.from_pylist(rows_in), tmp_path / "items.parquet")
    rows, rejects, report, _ = run_stage(tmp_path, tmp_path / "items.parquet", tmp_path / "store", LOCAL_FETCH)
    assert report["rows_in"] == 7 == len(rows) + len(rejects)
    assert [(r["owner_id"], r["position"]) for r in rows] == [("reddit:q1", 2)]
    fates = sorted((r["detail"].split(" ", 1)[0], r["detail"].split("position=", 1)[1].split(" ", 1)[0], r["reason"]) for r in rejects)
    assert fates == [
        ("owner=reddit:q1", "0", "http_404"), ("owner=reddit:q1", "1", "duplicate_url"), ("owner=reddit:q1", "3", "duplicate_url"),
        ("owner=reddit:q1", "4", "bad_url"), ("owner=reddit:q1", "5", "duplicate_url"), ("owner=reddit:q2", "0", "http_404"),
    ]


def test_record_then_replay_rebuilds_an_identical_store(tmp_path):
    server = HTTPServer(host="127.0.0.1", port=0)
    serve(server)
    server.start()
    try:
        items_path = items(tmp_path / "items.parquet", server)
        warc = tmp_path / "rec.warc.gz"
        recorded = run_stage(tmp_path / "live", items_path, tmp_path / "store_live", {**LOCAL_FETCH, "mode": "record"}, str(warc))
    finally:
        server.stop()
    assert warc.exists()
    replayed = run_stage(tmp_path / "replay", items_path, tmp_path / "store_replay", {**LOCAL_FETCH, "mode": "replay", "replay_warcs": [str(warc)]})
    assert store_files(tmp_path / "store_live") == store_files(tmp_path / "store_replay") != {}
    assert replayed[0] == recorded[0]  # identical output rows
    assert [(r["id"], r["reason"]) for r in replayed[1]] == [(r["id"], r["reason"]) for r in recorded[1]]
    assert replayed[2]["stats"].get("fetch_requests", 0) == 0 and replayed[2]["stats"]["fetch_replayed"] > 0


def test_normalize_checks_pixels_before_decoding():
    with pytest.raises(Reject) as info:
        normalize_image(png_bomb(20_000, 20_000), max_pixels=64_000_000)
    assert info.value.reason == "pixel_bomb" and "400000000 pixels" in info.value.detail
    with pytest.raises(Reject, match="pixel_bomb"):
        normalize_image(encode("PNG", size=(200, 200)), max_pixels=30_000)
    assert normalize_image(encode("PNG", size=(200, 200)), max_pixels=40_000).format == "png"


def test_cli_help_and_bad_params(tmp_path):
    help_text = subprocess.run([sys.executable, "-m", "stages.images.cache_images", "--help"], capture_output=True, text=True, check=True).stdout
    assert "record_warc" in help_text and "max_pixels" in help_text
    items_path = tmp_path / "items.parquet"
    pq.write_table(pa.Table.from_pylist([{"id": "a", "image_urls": ["http://example.org/a.png"]}]), items_path)
    out = tmp_path / "images.parquet"
    bad = subprocess.run(
        [sys.executable, "-m", "stages.images.cache_images", "--input", f"owners={items_path}", "--output", f"images={out}", "--params", '{"fetch": {"mode": "record"}}'],
        capture_output=True, text=True,
    )
    assert bad.returncode != 0 and "record_warc" in bad.stderr and not out.exists()
    bad = subprocess.run(
        [sys.executable, "-m", "stages.images.cache_images", "--input", f"owners={items_path}", "--output", f"images={out}", "--params", '{"url_column": "urls"}'],
        capture_output=True, text=True,
    )
    assert bad.returncode != 0 and f"{items_path} (table 'owners'): column 'urls' is missing" in bad.stderr


def test_record_warc_replaces_only_a_warc_and_only_in_record_mode(tmp_path):
    """Record mode replaces the file at record_warc: another file, a folder or an unwritable place
    is one line before any fetch, and the file is left as it was."""
    items_path = tmp_path / "items.parquet"
    pq.write_table(pa.Table.from_pylist([{"id": "a", "image_urls": ["http://127.0.0.1:9/a.png"]}]), items_path)
    precious = tmp_path / "precious.txt"
    precious.write_text("not a WARC\n")
    (tmp_path / "folder").mkdir()

    def run(fetch: dict, record_warc: str) -> subprocess.CompletedProcess:
        params = json.dumps({"fetch": fetch, "record_warc": record_warc, "store": str(tmp_path / "store")})
        return subprocess.run([sys.executable, "-m", "stages.images.cache_images", "--input", f"owners={items_path}",
                               "--output", f"images={tmp_path / 'images.parquet'}", "--params", params], capture_output=True, text=True)

    record = {"mode": "record", "attempts": 1}
    empty = tmp_path / "__init__.py"
    empty.write_text("")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for target, expected in ((precious, "exists and is not a gzipped WARC file"), (empty, "exists and is not a gzipped WARC file"),
                             (tmp_path / "folder", "it is a folder"), (fifo, "not a regular file"), (Path("/dev/null"), "not a regular file"),
                             (Path("/proc/citeforge/x.warc.gz"), "cannot write")):
        bad = run(record, str(target))
        assert bad.returncode != 0 and expected in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
        assert f"WARC file {target}" in bad.stderr
    assert precious.read_text() == "not a WARC\n" and empty.read_text() == "" and stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and not (tmp_path / "images.parquet").exists()
    with pytest.raises(StageError, match="exists and is not a gzipped WARC file"):  # every recorder checks: the harvests' too
        WarcRecorder(precious)
    ignored = run({"mode": "live"}, str(tmp_path / "new.warc.gz"))
    assert ignored.returncode != 0 and "a WARC is written in mode 'record' only" in ignored.stderr
    # an earlier recording is a WARC: record mode writes over it
    warc = tmp_path / "earlier.warc.gz"
    assert run(record, str(warc)).returncode == 0 and warc.stat().st_size
    again = run(record, str(warc))
    assert again.returncode == 0, again.stderr


def test_the_store_finds_a_file_only_by_a_real_sha256(tmp_path):
    """A sha256 in a table is data: a key that is not 64 hex digits (a glob such as `ab*`, a path,
    5,000 characters) finds nothing, not another image's file."""
    store = ImageStore(tmp_path / "store")
    digest = store.put(b"not really an image", "jpg")
    assert store.find(digest) == store.path(digest, "jpg")
    for key in (digest[:2] + "*", "*", digest[:10] + "?" * 54, "../" + digest, "a" * 5000, digest.upper(), ""):
        assert store.find(key) is None, key


def test_the_store_finds_a_file_of_any_extension(tmp_path):
    """The usual extensions are looked up by name; any other is still found (by a listing)."""
    store = ImageStore(tmp_path / "store")
    for data, ext in ((b"a jpeg", "jpg"), (b"a png", "png"), (b"a bitmap", "bmp"), (b"a JPEG named .jpeg", ".JPEG")):
        digest = store.put(data, ext)
        assert store.find(digest) == store.path(digest, ext) and store.read(digest) == data, ext
    assert store.find("0" * 64) is None and store.find(None) is None
