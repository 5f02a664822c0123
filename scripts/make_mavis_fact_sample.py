"""Generate data/samples/retrieval/mavis_facts.warc.gz: the image-search answers and the images the
MAVIS demo's retrieve_fact_documents and fact_cache_images ask for, so the per-fact documents
replay offline.

    python scripts/make_mavis_fact_sample.py [--config config/config.yaml --config config/demo.yaml] \
        [--facts 'data/runs/demo/mavis/extract_atomic_facts/facts.*.parquet'] [--out data/samples/retrieval/mavis_facts.warc.gz]

The queries are the demo's kept atomic facts, so run the demo up to extract_atomic_facts first (the
embedded model is deterministic: the same facts come out on every run of the same code). The
search requests are built by the provider's own code (stages.core.search.google) from the config's
`retrieval.search_web` section and `mavis.retrieve_fact_documents.image_top_k`, so archive and demo
agree. Answers are synthesised in the Programmable Search JSON API's image shape (items with
image.contextLink, width, height; the title and snippet name the fact's words, the image's text
stand-in). Every image is a seeded noise JPEG large enough for the demo's size filter (over 20 KB,
200x150); the last image of the last fact answers 404, so the image stages show a reject. A fact
whose text changes later is not in the archive: retrieve_fact_documents rejects it `not_in_archive`
until this script runs again.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import io
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import yaml
from snakemake.utils import update_config
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stages.core.fetch import WarcRecorder  # noqa: E402
from stages.core.search.google import GoogleSearch  # noqa: E402

JSON = [("Content-Type", "application/json; charset=UTF-8")]


def noise_jpeg(seed: str, size=(200, 150)) -> bytes:
    rng = np.random.default_rng(int(hashlib.sha256(seed.encode()).hexdigest()[:8], 16))
    pixels = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def image_answer(query: str, items: list[dict], num: int) -> bytes:
    request = {"title": "Google Custom Search - " + query, "totalResults": str(len(items)), "searchTerms": query, "count": num,
               "startIndex": 1, "cx": "demo", "searchType": "image"}
    return json.dumps({"kind": "customsearch#search", "queries": {"request": [request]},
                       "searchInformation": {"totalResults": str(len(items))}, "items": items}).encode()


def load_config(paths: list[str] | None) -> dict:
    """The config files merged as Snakemake merges --configfile (nested mappings updated)."""
    config: dict = {}
    for path in paths or ["config/config.yaml", "config/demo.yaml"]:
        update_config(config, yaml.safe_load(Path(path).read_text()) or {})
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", help="config files merged in order, as Snakemake merges them "
                        "(default config/config.yaml then config/demo.yaml; a recipe: config/config.yaml, the recipe, its overlays)")
    parser.add_argument("--facts", default="data/runs/demo/mavis/extract_atomic_facts/facts.*.parquet")
    parser.add_argument("--out", default="data/samples/retrieval/mavis_facts.warc.gz", type=Path)
    args = parser.parse_args()
    config = load_config(args.config)
    provider = GoogleSearch(config["retrieval"]["search_web"]["google"], need_key=False)
    top_k = config["mavis"]["retrieve_fact_documents"]["image_top_k"]
    paths = sorted(p for p in glob.glob(args.facts) if not p.endswith(".rejects.parquet"))
    if not paths:
        sys.exit(f"no facts at {args.facts}: run the demo up to extract_atomic_facts first")
    queries = sorted({row["text"] for path in paths for row in pq.read_table(path, columns=["text"]).to_pylist() if row["text"].strip()})
    recorder = WarcRecorder(args.out)
    images = 0
    for q, query in enumerate(queries):
        key = hashlib.sha256(query.encode()).hexdigest()[:12]
        words = " ".join(query.rstrip(".").split()[:8])
        items = []
        for n in range(top_k):
            url = f"https://img.mavis-facts.example/{key}-{n}.jpg"
            items.append({"kind": "customsearch#result", "title": f"Photo: {words}", "link": url, "displayLink": "img.mavis-facts.example",
                          "snippet": f"{words} (picture {n + 1})", "mime": "image/jpeg", "fileFormat": "image/jpeg",
                          "image": {"contextLink": f"https://mavis-facts.example/gallery/{key}/{n}", "height": 150, "width": 200}})
            missing = q == len(queries) - 1 and n == top_k - 1
            if missing:
                recorder.response(url, 404, "Not Found", [("Content-Type", "text/html")], b"<html><body>gone</body></html>")
            else:
                recorder.response(url, 200, "OK", [("Content-Type", "image/jpeg")], noise_jpeg(url))
                images += 1
        recorder.response(provider.url(query, "image", 1, top_k), 200, "OK", JSON, image_answer(query, items, top_k))
    recorder.commit()
    print(f"wrote {len(queries)} image searches and {images} images to {args.out} ({args.out.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
