"""Image caching throughput against a local HTTP server, with a bare-download baseline.

    python benchmarks/bench_cache_images.py [--images 400] [--workers 8]

Serves --images distinct 640x480 images (JPEGs of about 130 KB; every 10th a 920 KB BMP so the
conversion path runs) from a threaded HTTP server on 127.0.0.1, then times in the same run:
  baseline      requests.Session + a thread pool downloading every url into memory, nothing else;
  cache_images  the stage end to end (fetch layer with guard, retries, rate-limit bookkeeping and
                size caps, Pillow decode/convert, content-addressed store writes, Parquet output),
                into an empty store, with fetch mode live and then mode record (WARC writing);
  replay        the stage again from the recorded WARC into an empty store (no network).
Prints images/s and MB/s for each and the ratio to the baseline.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import io
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import requests
from PIL import Image
from pytest_httpserver import HTTPServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stages.images.cache_images import STAGE  # noqa: E402


def make_images(count: int) -> list[tuple[bytes, str]]:
    rng = np.random.default_rng(0)
    base = np.kron(rng.integers(0, 256, size=(48, 64, 3), dtype=np.uint8), np.ones((10, 10, 1), dtype=np.uint8))
    out = []
    for i in range(count):
        pixels = base.copy()
        pixels[i % 480, :, :] = i % 256  # distinct bytes, distinct hashes
        buffer = io.BytesIO()
        fmt = "BMP" if i % 10 == 9 else "JPEG"
        Image.fromarray(pixels).save(buffer, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
        out.append((buffer.getvalue(), "image/bmp" if fmt == "BMP" else "image/jpeg"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    images = make_images(args.images)
    total_mb = sum(len(b) for b, _ in images) / 1e6
    server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
    for i, (body, ctype) in enumerate(images):
        server.expect_request(f"/img/{i}").respond_with_data(body, content_type=ctype)
    server.start()
    urls = [server.url_for(f"/img/{i}") for i in range(args.images)]
    print(f"{args.images} images, {total_mb:.1f} MB served from 127.0.0.1, {args.workers} workers")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            session = requests.Session()
            session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=args.workers))
            started = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
                got = sum(len(b) for b in pool.map(lambda u: session.get(u, timeout=10).content, urls))
            baseline = time.perf_counter() - started
            assert abs(got / 1e6 - total_mb) < 1e-6
            print(f"baseline      : {baseline:6.2f} s  {args.images / baseline:7.1f} images/s  {total_mb / baseline:6.1f} MB/s")

            items = tmp / "items.parquet"
            pq.write_table(pa.Table.from_pylist([{"id": f"reddit:{i // 4}", "image_urls": urls[i : i + 4]} for i in range(0, len(urls), 4)]), items)
            fetch = {"allow_networks": ["127.0.0.1/32"], "per_host_concurrency": args.workers}
            runs = [("live", {**fetch}, ""), ("record", {**fetch, "mode": "record"}, str(tmp / "rec.warc.gz")),
                    ("replay", {**fetch, "mode": "replay", "replay_warcs": [str(tmp / "rec.warc.gz")]}, "")]
            for name, settings, warc in runs:
                out = tmp / name / "images.parquet"
                params = {"store": str(tmp / name / "store"), "fetch": settings, "record_warc": warc, "workers": args.workers}
                started = time.perf_counter()
                STAGE.main(["--input", f"owners={items}", "--output", f"images={out}", "--params", json.dumps(params)])
                seconds = time.perf_counter() - started
                rows = pq.read_table(out).num_rows
                assert rows == args.images, f"{name}: {rows} of {args.images} images cached"
                print(f"cache_images {name:<7}: {seconds:6.2f} s  {args.images / seconds:7.1f} images/s  "
                      f"{total_mb / seconds:6.1f} MB/s  ({seconds / baseline:.2f}x the baseline's time)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
