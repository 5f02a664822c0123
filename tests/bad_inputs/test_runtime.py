"""Bad inputs at run time, one case each, with the outcome a user sees: a reject with its reason,
or one line naming the input (no traceback), and never a half-written output.

Images (the gate in front of the image store, stages.core.images.normalize_image): HTML served as
an image, SVG, a pixel bomb, an EPS file (Pillow would run Ghostscript on it), a thousand-frame
GIF. Replay archives (cache_images in fetch mode replay): a truncated, an empty and a garbage
WARC. Stage CLI: invalid JSON in --params, an unknown --param key, an output folder that cannot be
written. generate_answers: a question_id given twice."""
from __future__ import annotations

import gzip
import io
import json
import os
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from stages.core.images import normalize_image
from stages.core.stage import Reject
from stages.eval_mcitebench.generate_answers import STAGE as GENERATE_ANSWERS
from stages.images.cache_images import STAGE as CACHE_IMAGES
from tests.eval_fixtures import make_release, reference_records, shrink
from tests.faulty_server import FaultyServer

REPO = Path(__file__).resolve().parents[2]
SAMPLE_WARC = REPO / "data/samples/reddit/images.warc.gz"
MAX_PIXELS = 64_000_000


# -- images ---------------------------------------------------------------------------------------
def png_header(width: int, height: int) -> bytes:
    """A PNG that declares width x height (and holds one empty IDAT): the header is all a bomb needs."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


EPS = (b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n%%EndComments\n"
       b"newpath 0 0 moveto 10 10 lineto stroke\nshowpage\n%%EOF\n")

IMAGE_CASES = {
    "html_as_image": (b"<!doctype html><html><body>Not Found</body></html>", "not_an_image", "none of JPEG/PNG/GIF/WEBP/BMP/TIFF"),
    "svg": (b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>', "unsupported_format", "SVG"),
    "pixel_bomb": (png_header(9_000, 8_000), "pixel_bomb", "9000x8000 = 72000000 pixels > 64000000"),
    "huge_pixel_bomb": (png_header(50_000, 50_000), "pixel_bomb", "2500000000 pixels"),  # past Pillow's own limit too
    "eps": (EPS, "not_an_image", "none of JPEG/PNG/GIF/WEBP/BMP/TIFF"),
}


@pytest.mark.parametrize("kind", sorted(IMAGE_CASES))
def test_bad_images_are_rejects_with_a_reason(kind):
    data, reason, detail = IMAGE_CASES[kind]
    started = time.monotonic()
    with pytest.raises(Reject) as info:
        normalize_image(data, MAX_PIXELS)
    assert (info.value.reason, detail in info.value.detail) == (reason, True), str(info.value)
    assert time.monotonic() - started < 2  # decided from the header, nothing big decoded


def test_an_eps_image_never_reaches_ghostscript(tmp_path):
    """A `gs` first on PATH records any call: unrestricted Pillow runs it on an EPS, the gate must not."""
    bin_dir, marker = tmp_path / "bin", tmp_path / "gs-was-run"
    bin_dir.mkdir()
    (bin_dir / "gs").write_text(f'#!/bin/sh\necho "$@" >> {marker}\nexit 1\n')
    (bin_dir / "gs").chmod(0o755)
    (tmp_path / "x.eps").write_bytes(EPS)
    script = ("import sys\nfrom stages.core.images import normalize_image\nfrom stages.core.stage import Reject\n"
              "try:\n    normalize_image(open(sys.argv[1], 'rb').read(), 10**8)\n"
              "except Reject as err:\n    print(err.reason)\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "x.eps")], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.stdout.strip() == "not_an_image" and "Traceback" not in done.stderr, done.stderr
    assert not marker.exists()


def test_a_thousand_frame_gif_is_kept_and_only_its_first_frame_decoded():
    frames = [Image.new("P", (16, 16), i % 256) for i in range(1000)]
    buffer = io.BytesIO()
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:], duration=10)
    started = time.monotonic()
    image = normalize_image(buffer.getvalue(), MAX_PIXELS)
    assert (image.format, image.width, image.height, image.data) == ("gif", 16, 16, buffer.getvalue())
    assert time.monotonic() - started < 2


# -- replay archives and the stage CLI --------------------------------------------------------------
def cache_images(tmp_path: Path, *extra: str, warc: Path | None = None, output: Path | None = None, params: dict | None = None):
    """cache_images in replay mode, in-process: the exit message (None on success) and the output folder."""
    owners = tmp_path / "owners.parquet"
    pq.write_table(pa.table({"id": ["p1"], "image_urls": [["https://i.example.org/a.jpg"]]}), owners)
    out = output or tmp_path / "out" / "images.parquet"
    fetch = {"mode": "replay", "replay_warcs": [str(warc or SAMPLE_WARC)]}
    argv = ["--input", f"owners={owners}", "--output", f"images={out}",
            "--params", json.dumps({"store": str(tmp_path / "store"), "fetch": fetch, **(params or {})}), *extra]
    try:
        CACHE_IMAGES.main(argv)
    except SystemExit as exit_:
        return exit_.code, out.parent
    return None, out.parent


def damaged(kind: str, tmp_path: Path) -> Path:
    data = SAMPLE_WARC.read_bytes()
    path = tmp_path / f"{kind}.warc.gz"
    path.write_bytes({"truncated_warc": data[: len(data) // 2], "empty_warc": b"",
                      "garbage_warc": b"hello, this is no archive\n" * 20,
                      "garbage_gzip_warc": gzip.compress(b"hello, no records here\n" * 20),
                      "truncated_uncompressed_warc": gzip.decompress(data)[:300_000]}[kind])
    return path


CLI_CASES = {
    "truncated_warc": "is damaged: gzip stream broken near byte",
    "empty_warc": "is damaged: the file is empty",
    "garbage_warc": "is damaged: no WARC record at offset 0",
    "garbage_gzip_warc": "is damaged: unreadable after offset 0",
    "truncated_uncompressed_warc": "is cut short",
    "invalid_params_json": "--params: inline JSON is not valid JSON/YAML",
    "unknown_param_key": "unknown param(s) ['worker']",
    "unwritable_output_folder": "output 'images': cannot write",
}


@pytest.mark.parametrize("kind", sorted(CLI_CASES))
def test_whole_input_problems_end_in_one_line_and_leave_nothing(kind, tmp_path):
    if kind.endswith("_warc"):
        warc = damaged(kind, tmp_path)
        message, out = cache_images(tmp_path, warc=warc)
        assert str(warc) in message
    elif kind == "invalid_params_json":
        message, out = cache_images(tmp_path, "--params", '{"workers": 2')
    elif kind == "unknown_param_key":
        message, out = cache_images(tmp_path, "--param", "worker=2")
    else:
        (tmp_path / "a-file").write_text("not a folder")
        message, out = cache_images(tmp_path, output=tmp_path / "a-file" / "out" / "images.parquet")
    assert isinstance(message, str) and message.startswith("cache_images: error: ") and "\n" not in message, message
    assert CLI_CASES[kind] in message, message
    assert not out.is_dir() or list(out.iterdir()) == []  # no output, no sidecar, no temp


def test_the_sample_warc_still_replays(tmp_path):
    message, out = cache_images(tmp_path)
    assert message is None and (out / "images.parquet").exists()


# -- generate_answers: one response per question ----------------------------------------------------
def test_a_question_id_given_twice_is_a_duplicate_id_reject(tmp_path):
    def answer(method, target, headers, body):
        reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Table 2 [1]."}}], "usage": {}}
        return 200, {"Content-Type": "application/json"}, json.dumps(reply).encode()

    release = make_release(tmp_path / "release" / "v1")
    records = [shrink(r) for r in reference_records()]
    again = dict(records[1], question=records[1]["question"] + " (a second record with the same id)")
    lines = [records[0], records[1], again]
    (release.parent / "v1" / "mcitebench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    out = tmp_path / "out" / "responses.parquet"
    with FaultyServer({"/v1/chat/completions": answer}) as server:
        llm = {"backend": "openai", "model": "remote", "cache": {"path": str(tmp_path / "llm.sqlite")},
               "image_store": str(tmp_path / "images"), "openai": {"base_url": server.url("/v1"), "max_in_flight": 2}}
        GENERATE_ANSWERS.main(["--input", f"release={release}", "--output", f"responses={out}",
                               "--params", json.dumps({"model": "remote", "llm": llm, "vision": False})])
    rows = pq.read_table(out).to_pylist()
    rejects = pq.read_table(f"{out}.rejects.parquet").to_pylist()
    assert sorted(r["question_id"] for r in rows) == sorted([records[0]["question_id"], records[1]["question_id"]])
    assert [(r["id"], r["reason"]) for r in rejects] == [(str(records[1]["question_id"]), "duplicate_id")]
    assert "question_id seen on line 2" in rejects[0]["detail"]
    assert next(r for r in rows if r["question_id"] == records[1]["question_id"])["question"] == records[1]["question"]
