"""Generate data/samples/reddit/images.warc.gz: the web images of the demo's Reddit posts, so the
demo's image stages replay them offline (fetch mode `replay`).

    python scripts/make_image_warc.py [--dumps data/samples/reddit/RS_2023-01.zst ...] [--out ...]

The urls are the ones the pipeline will ask for: every submission of the bundled dumps, read with
harvest_pushshift's own reader and `image_urls` (its image_extensions: the config's, else the stage's), so the
archive and the demo cannot drift apart. The responses are synthesised, seeded by the url (the
images are identical on every run; the WARC's record ids and dates are not), and written with the
fetch layer's own WarcRecorder, so replay reads exactly what a live `record` run would write.
They exercise the demo's image stages: most urls get a 320x240 JPEG (the second image of a
gallery a resized near-copy of the first, for phash_dedup); some a 160x120 BMP (converted to JPEG), a
small icon PNG (filtered: too few pixels), an HTML page served as image/jpeg (not_an_image), a
302 redirect to the image, or a 404.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import sys
from pathlib import Path

import numpy as np
import orjson
import yaml
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stages.core.fetch import WarcRecorder  # noqa: E402
from stages.mavis.reddit_records import image_urls  # noqa: E402
from stages.core.wiring import declaration, lookup  # noqa: E402
from stages.mavis.harvest_pushshift import read_zstd_lines  # noqa: E402

DUMPS = ["data/samples/reddit/RS_2023-01.zst", "data/samples/reddit/askscience_submissions.zst"]


def picture(seed: int, size=(320, 240)) -> Image.Image:
    rng = np.random.default_rng(seed)
    blocks = np.kron(rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8), np.ones((40, 40, 1), dtype=np.uint8))
    noise = rng.integers(-24, 24, size=blocks.shape)  # texture: JPEGs of ~30 KB, over the 20 KB filter
    return Image.fromarray(np.clip(blocks + noise, 0, 255).astype(np.uint8)).resize(size)


def encoded(im: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    im.save(buffer, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buffer.getvalue()


def responses(url: str, position: int, first_seed: int | None) -> list[tuple[str, int, str, list[tuple[str, str]], bytes]]:
    """(url, status, reason, headers, body) records for one url, redirect hops first."""
    seed = int.from_bytes(hashlib.sha256(url.encode()).digest()[:4], "big")
    kind = seed % 12
    if position == 1 and first_seed is not None:  # a gallery's second image: near-copy of the first
        return [(url, 200, "OK", [("Content-Type", "image/jpeg")], encoded(picture(first_seed).resize((300, 225)), "JPEG"))]
    if kind == 0:
        return [(url, 404, "Not Found", [("Content-Type", "text/html")], b"<html><body>404</body></html>")]
    if kind == 1:
        return [(url, 200, "OK", [("Content-Type", "image/jpeg")], b"<!doctype html><html><body>removed</body></html>")]
    if kind == 2:
        return [(url, 200, "OK", [("Content-Type", "image/png")], encoded(picture(seed, (64, 64)), "PNG"))]
    if kind == 3:
        return [(url, 200, "OK", [("Content-Type", "image/bmp")], encoded(picture(seed, (160, 120)), "BMP"))]
    if kind == 4:
        target = url.split("?", 1)[0] + "?moved=1"
        return [(url, 302, "Found", [("Location", target)], b""), (target, 200, "OK", [("Content-Type", "image/jpeg")], encoded(picture(seed), "JPEG"))]
    return [(url, 200, "OK", [("Content-Type", "image/jpeg")], encoded(picture(seed), "JPEG"))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dumps", nargs="+", default=DUMPS)
    parser.add_argument("--config", default="config/config.yaml")
    parser.add_argument("--out", default="data/samples/reddit/images.warc.gz", type=Path)
    args = parser.parse_args()
    config = yaml.safe_load(Path(args.config).read_text()) or {}
    extensions = tuple(lookup(config, "mavis.harvest_pushshift.image_extensions")
                       or declaration("harvest_pushshift")["params"]["image_extensions"]["default"])
    lists = []
    for dump in args.dumps:
        for line in read_zstd_lines(dump):
            try:
                post = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # the harvest's bad_json reject: no urls
            if type(post) is dict and "title" in post:
                urls, _ = image_urls(post, extensions)
                if urls:
                    lists.append(urls)
    recorder = WarcRecorder(args.out)
    seen, records = set(), 0
    for urls in lists:
        first_seed = None
        for position, url in enumerate(urls):
            if url in seen:
                continue
            seen.add(url)
            for hop in responses(url, position, first_seed):
                recorder.response(*hop)
                records += 1
            if position == 0:
                first_seed = int.from_bytes(hashlib.sha256(url.encode()).digest()[:4], "big")
    recorder.commit()
    print(f"wrote {records} records for {len(seen)} image urls of {len(lists)} posts to {args.out} ({args.out.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
