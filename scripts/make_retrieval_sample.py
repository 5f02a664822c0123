"""Generate data/samples/retrieval/web.warc.gz: the search API answers, pages and images the demo's
retrieval stages ask for, so `snakemake --cores 2 release` replays them with no network.

    python scripts/make_retrieval_sample.py [--config config/config.yaml --config config/demo.yaml] [--out data/samples/retrieval/web.warc.gz]
    python scripts/make_retrieval_sample.py --config config/config.yaml --config <recipe> --eli5 <larger ELI5 file> --out <cache>/web.warc.gz

The search requests are built by the provider's own code (stages.core.search.google) from the
config's `retrieval` section and the bundled queries (data/samples/retrieval/queries.jsonl), so
the archive and the demo cannot drift apart. The answers are synthesised in the Programmable
Search JSON API's shape (items, queries.nextPage; image items with image.contextLink, width,
height). The pages are real-looking articles (navigation, an advert, headings, lists, a table,
relative and absolute images, links) written from the demo corpus's topic phrases, plus the
cases fetch_pages must reject or follow: a 301 redirect, a 404, a 403 (paywall), a PDF, a PNG
listed as a page, an empty body, a page in latin-1 (declared in the header) and one in
windows-1252 (declared in <meta>), bytes that are not UTF-8 with no charset declared, and binary
data served as text/html. Every image a page or an image result names is a small JPEG. Records
are written with the fetch layer's own WarcRecorder, as a live `record` run would write them.

The M2RAG demo (rules/m2rag.smk) searches the ELI5 sample's questions (data/samples/eli5.jsonl;
whichever the classifier and sampler keep): every question gets a page answer of
`m2rag.search_web.page_top_k` results, an explainer built from its ELI5 answer (with a diagram, a
photo and an advert banner) and a loosely related forum page, so the scorer sees useful and
useless pieces and images, and an image answer of `m2rag.search_web.image_top_k` auxiliary
images. The M2RAG images are small (120x90, just over M2RAG's 1e4-pixel minimum; the advert
banner goes with its advert block in the page reader), and the explainer's photo is its
diagram's pixels as a PNG (another file, the same pHash), so phash_dedup has a near-duplicate to
remove.
"""
from __future__ import annotations

import argparse
import hashlib
import html
import io
import json
import random
import sys
from pathlib import Path

import numpy as np
import yaml
from snakemake.utils import update_config
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from make_text_corpus import TOPICS  # noqa: E402

from stages.core.fetch import WarcRecorder  # noqa: E402
from stages.core.search.google import GoogleSearch  # noqa: E402
from stages.core.wiring import declaration, lookup  # noqa: E402

QUERY_TOPICS = {"demo:sky": "sky", "demo:volcano": "volcano", "demo:sourdough": "sourdough", "demo:battery": "battery"}
HTML = [("Content-Type", "text/html; charset=utf-8")]


def jpeg(seed: str, size=(200, 150), min_bytes: int = 0) -> bytes:
    """A seeded block picture; where it is smaller than `min_bytes` (a recipe's size filter: M2RAG's
    20 KB), grain is added and it grows by a quarter until the file is that large."""
    rng = np.random.default_rng(int(hashlib.sha256(seed.encode()).hexdigest()[:8], 16))
    blocks = Image.fromarray(np.kron(rng.integers(0, 256, size=(3, 4, 3), dtype=np.uint8), np.ones((50, 50, 1), dtype=np.uint8)))
    pixels = np.asarray(blocks.resize(size))
    while True:
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, "JPEG", quality=85)
        if len(buffer.getvalue()) >= min_bytes:
            return buffer.getvalue()
        size = (size[0] * 5 // 4, size[1] * 5 // 4)
        grain = rng.integers(-64, 64, size=(size[1], size[0], 3))
        pixels = np.clip(np.asarray(blocks.resize(size)).astype(np.int16) + grain, 0, 255).astype(np.uint8)


def article(topic: str, title: str, host: str, seed: int) -> str:
    rng = random.Random(seed)
    subjects, facts = TOPICS[topic]
    paragraphs = [" ".join(f"{rng.choice(subjects)} {rng.choice(facts)}." for _ in range(rng.randint(3, 5))) for _ in range(4)]
    items = "".join(f"<li>{html.escape(rng.choice(subjects))} {html.escape(rng.choice(facts))}.</li>" for _ in range(3))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)} | {host}</title>
<link rel="stylesheet" href="/static/site.css"><script src="/static/analytics.js"></script></head>
<body>
<header><nav><a href="/">Home</a> <a href="/topics">Topics</a> <a href="/about">About us</a> <a href="/shop">Shop</a></nav></header>
<div class="advert">Sponsored: <a href="https://ads.example/click?id={seed}">Win a free trip today!</a></div>
<main><article>
<h1>{html.escape(title)}</h1>
<p>{html.escape(paragraphs[0])} See our <a href="/glossary">glossary</a> or https://{host}/print for a printable copy.</p>
<figure><img src="/images/{topic}-diagram.jpg" alt="Diagram: {html.escape(title.lower())}"><figcaption>How it works.</figcaption></figure>
<p>{html.escape(paragraphs[1])}</p>
<h2>Key facts</h2>
<ul>{items}</ul>
<p>{html.escape(paragraphs[2])}</p>
<img src="https://cdn.{host}/photos/{topic}-{seed}.jpg" alt="Photo of {topic}">
<table><tr><th>Question</th><th>Short answer</th></tr><tr><td>{html.escape(title)}</td><td>{html.escape(rng.choice(facts))}</td></tr></table>
<p>{html.escape(paragraphs[3])} Read more in <a href="https://{topic}-notes.example/more">our longer guide</a>.</p>
</article></main>
<footer>&copy; 2024 {host}. <a href="/privacy">Privacy</a> <a href="/cookies">Cookies</a></footer>
</body></html>"""


def pages_for(topic: str) -> list[tuple[str, str, list]]:
    """(url, title, records) for the 4 page results of a topic; records are (url, status, reason,
    headers, body), redirect hops first."""
    title = {"sky": "Why is the sky blue?", "volcano": "How do volcanoes erupt?", "sourdough": "Why sourdough bread rises",
             "battery": "How lithium-ion batteries store energy"}[topic]
    host = f"www.{topic}-facts.example"
    main = f"https://{host}/guide/{topic}"
    ok = lambda url, seed, t=title: [(url, 200, "OK", HTML, article(topic, t, host, seed).encode())]  # noqa: E731
    cases = {
        "sky": [
            (main, title, ok(main, 1)),
            ("https://old.sky-facts.example/blue", "Blue light explained", [
                ("https://old.sky-facts.example/blue", 301, "Moved Permanently", [("Location", f"https://{host}/blue-light")], b""),
                *ok(f"https://{host}/blue-light", 2, "Blue light explained")]),
            ("https://physics-notes.example/rayleigh.pdf", "Rayleigh scattering (PDF)", [
                ("https://physics-notes.example/rayleigh.pdf", 200, "OK", [("Content-Type", "application/pdf")], b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n")]),
            ("https://science-club.example/scattering", "Scattering for the curious", [
                ("https://science-club.example/scattering", 200, "OK", [("Content-Type", "text/html; charset=iso-8859-1")],
                 article(topic, "Scattering for the curious: a café chat", "science-club.example", 3).replace('<meta charset="utf-8">', "").encode("latin-1"))]),
        ],
        "volcano": [
            (main, title, ok(main, 4)),
            ("https://geo-forum.example/thread/812", "Volcano thread", [("https://geo-forum.example/thread/812", 404, "Not Found", HTML, b"<html><body>Not found</body></html>")]),
            ("https://paywall-news.example/volcanoes", "Inside a volcano (subscribers)", [("https://paywall-news.example/volcanoes", 403, "Forbidden", HTML, b"<html><body>Subscribe to read</body></html>")]),
            ("https://volcano-watch.example/live", "Live volcano watch", [("https://volcano-watch.example/live", 200, "OK", HTML, b"")]),
        ],
        "sourdough": [
            (main, title, ok(main, 5)),
            ("https://bake-at-home.example/starter", "Keeping a starter", [
                ("https://bake-at-home.example/starter", 200, "OK", [("Content-Type", "text/html")],
                 article(topic, "Keeping a starter – the baker’s notes", "bake-at-home.example", 6).replace('<meta charset="utf-8">', '<meta http-equiv="Content-Type" content="text/html; charset=windows-1252">').encode("cp1252"))]),
            ("https://old-recipes.example/loaf", "Old loaf recipes", [
                ("https://old-recipes.example/loaf", 200, "OK", [("Content-Type", "text/html")], "<html><body><p>Pain au levain: farine, eau, sel — très simple.</p></body></html>".encode("cp1252"))]),
            ("https://recipes.example/sourdough-tips", "Sourdough tips", ok("https://recipes.example/sourdough-tips", 7, "Sourdough tips")),
        ],
        "battery": [
            (main, title, ok(main, 8)),
            ("https://energy-explained.example/cells", "Cells and batteries", ok("https://energy-explained.example/cells", 9, "Cells and batteries")),
            ("https://energy-explained.example/download", "Battery data", [("https://energy-explained.example/download", 200, "OK", HTML, b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00" * 40)]),
            ("https://energy-explained.example/chart.png", "Battery chart", [("https://energy-explained.example/chart.png", 200, "OK", [("Content-Type", "image/png")], b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)]),
        ],
    }
    return cases[topic]


def eli5_pages(qid: str, question: str, answer: str) -> list[tuple[str, str, str]]:
    """(url, title, html) of the M2RAG demo pages for one ELI5 question."""
    host = f"www.explainers-{qid}.example"
    explainer = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(question)} | Explainers</title></head>
<body><nav><a href="/">Home</a> <a href="/topics">Topics</a></nav>
<div class="advert"><img src="https://ads.example/banner-{qid}.jpg" alt="Advert: cheap flights"> Win a free trip today!</div>
<main><article><h1>{html.escape(question)}</h1>
<p>{html.escape(answer)}</p>
<figure><img src="/images/diagram.jpg" alt="Diagram: {html.escape(question.lower())}"><figcaption>How it works, step by step.</figcaption></figure>
<p>In short: {html.escape(answer.split(".")[0])}. See the <a href="/glossary">glossary</a> for the terms used here.</p>
<img src="https://cdn.{host}/photos/{qid}.jpg" alt="Photo for {html.escape(question.lower())}">
</article></main><footer>&copy; 2024 Explainers</footer></body></html>"""
    forum = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Forum: {html.escape(question)}</title></head>
<body><h1>Re: {html.escape(question)}</h1>
<p>Great question, I was wondering the same thing last week. Has anyone got a good book on this?</p>
<p>Off topic, but does anyone know a good pizza place near the station? Asking for a friend.</p>
</body></html>"""
    return [(f"https://{host}/q/{qid}", question, explainer), (f"https://forum-{qid}.example/t/1", f"Forum: {question}", forum)]


def google_answer(query: str, items: list[dict], start: int, num: int, total: int, image: bool) -> bytes:
    request = {"title": "Google Custom Search - " + query, "totalResults": str(total), "searchTerms": query, "count": num, "startIndex": start, "cx": "demo"}
    if image:
        request["searchType"] = "image"
    queries = {"request": [request]}
    if start + num <= total:
        queries["nextPage"] = [{**request, "startIndex": start + num}]
    return json.dumps({"kind": "customsearch#search", "queries": queries, "searchInformation": {"totalResults": str(total)}, "items": items}).encode()


def load_config(paths: list[str] | None) -> dict:
    """The config files merged as Snakemake merges --configfile (nested mappings updated)."""
    config: dict = {}
    for path in paths or ["config/config.yaml", "config/demo.yaml"]:
        update_config(config, yaml.safe_load(Path(path).read_text()) or {})
    return config


def setting(config: dict, *sections: str, stage: str, param: str):
    """A stage param as a run resolves it: the last of `sections` that sets it, else the stage's default."""
    for section in reversed(sections):
        if lookup(config, f"{section}.{param}") is not None:
            return lookup(config, f"{section}.{param}")
    return declaration(stage)["params"][param]["default"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", help="config files merged in order, as Snakemake merges them "
                        "(default config/config.yaml then config/demo.yaml; a recipe: config/config.yaml, the recipe, its overlays)")
    parser.add_argument("--queries", default="data/samples/retrieval/queries.jsonl")
    parser.add_argument("--eli5", default="data/samples/eli5.jsonl", help="the M2RAG demo's ELI5 questions")
    parser.add_argument("--out", default="data/samples/retrieval/web.warc.gz", type=Path)
    args = parser.parse_args()
    config = load_config(args.config)
    search = config["retrieval"]["search_web"]
    provider = GoogleSearch(search["google"], need_key=False)
    queries = [json.loads(line) for line in Path(args.queries).read_text().splitlines() if line.strip()]
    recorder = WarcRecorder(args.out)
    records, images, small = 0, set(), set()

    def record(url, status, reason, headers, body):
        nonlocal records
        recorder.response(url, status, reason, headers, body)
        records += 1

    for query in queries:
        topic = QUERY_TOPICS.get(query["id"])
        if not topic or not query["text"].strip():
            continue
        pages = pages_for(topic)
        items = [{"kind": "customsearch#result", "title": title, "htmlTitle": html.escape(title), "link": url,
                  "displayLink": url.split("/")[2], "snippet": f"{title} - {TOPICS[topic][1][0][:80]}...", "formattedUrl": url}
                 for url, title, _ in pages][: search["page_top_k"]]
        record(provider.url(query["text"], "page", 1, search["page_top_k"]), 200, "OK", [("Content-Type", "application/json; charset=UTF-8")],
               google_answer(query["text"], items, 1, search["page_top_k"], 240, False))
        for _, _, hops in pages:
            for hop in hops:
                record(*hop)
            final = hops[-1]
            if final[1] == 200 and b"<img" in final[4]:
                for src in (f"https://{final[0].split('/')[2]}/images/{topic}-diagram.jpg",):
                    images.add(src)
                for token in final[4].decode("latin-1").split('src="')[1:]:
                    src = token.split('"', 1)[0]
                    if src.startswith("https://"):
                        images.add(src)
        image_items = []
        for n in range(search["image_top_k"]):
            image_url = f"https://img.{topic}-pictures.example/{topic}-{n}.jpg"
            images.add(image_url)
            image_items.append({"kind": "customsearch#result", "title": f"{topic} picture {n}", "link": image_url, "displayLink": f"img.{topic}-pictures.example",
                                "snippet": f"{topic} picture {n}", "mime": "image/jpeg", "fileFormat": "image/jpeg",
                                "image": {"contextLink": f"https://{topic}-pictures.example/gallery/{n}", "height": 150, "width": 200, "byteSize": 9000,
                                          "thumbnailLink": f"https://thumbs.example/{topic}-{n}", "thumbnailHeight": 75, "thumbnailWidth": 100}})
        record(provider.url(query["text"], "image", 1, search["image_top_k"]), 200, "OK", [("Content-Type", "application/json; charset=UTF-8")],
               google_answer(query["text"], image_items, 1, search["image_top_k"], 120, True))
    m2rag_k, m2rag_images = (setting(config, "retrieval.search_web", "m2rag.search_web", stage="search_web", param=k)
                             for k in ("page_top_k", "image_top_k"))
    near_duplicates = {}  # the explainer's photo url -> the diagram it re-encodes
    for line in Path(args.eli5).read_text().splitlines():
        row = json.loads(line)
        question, answer = (row["title"] or "").strip(), (row["answers"]["text"] or [""])[0]
        if not question:
            continue
        pages = eli5_pages(row["q_id"], question, answer)[:m2rag_k]
        items = [{"kind": "customsearch#result", "title": title, "htmlTitle": html.escape(title), "link": url,
                  "displayLink": url.split("/")[2], "snippet": f"{title} - {answer[:80]}", "formattedUrl": url} for url, title, _ in pages]
        record(provider.url(question, "page", 1, m2rag_k), 200, "OK", [("Content-Type", "application/json; charset=UTF-8")],
               google_answer(question, items, 1, m2rag_k, len(items), False))  # all there is: no next page
        for url, _, body in pages:
            record(url, 200, "OK", HTML, body.encode())
            for src in body.split('src="')[1:]:
                src = src.split('"', 1)[0]
                small.add(src if src.startswith("https://") else f"https://{url.split('/')[2]}{src}")
        photo = f"https://cdn.www.explainers-{row['q_id']}.example/photos/{row['q_id']}.jpg"
        if photo in small:
            small.discard(photo)
            near_duplicates[photo] = f"https://www.explainers-{row['q_id']}.example/images/diagram.jpg"
        if m2rag_images:
            aux = []
            for n in range(m2rag_images):
                image_url = f"https://img.pictures-{row['q_id']}.example/{row['q_id']}-{n}.jpg"
                small.add(image_url)
                aux.append({"kind": "customsearch#result", "title": f"Picture {n + 1}: {question}", "link": image_url,
                            "displayLink": f"img.pictures-{row['q_id']}.example", "snippet": f"{question} ({answer[:60]})", "mime": "image/jpeg",
                            "fileFormat": "image/jpeg", "image": {"contextLink": f"https://pictures-{row['q_id']}.example/gallery/{n}",
                                                                  "height": 90, "width": 120, "byteSize": 3000}})
            record(provider.url(question, "image", 1, m2rag_images), 200, "OK", [("Content-Type", "application/json; charset=UTF-8")],
                   google_answer(question, aux, 1, m2rag_images, 50, True))
    for url in sorted(images):
        record(url, 200, "OK", [("Content-Type", "image/jpeg")], jpeg(url))
    # the M2RAG images: small, to keep the archive small (banners smaller still), but as large as the
    # run's M2RAG size filter asks (the demo's 1 KB, the seed's 20 KB), so the filter's other rules are what shows
    min_bytes = setting(config, "m2rag.filter_images", "images.filter_images", stage="filter_images", param="min_bytes")
    for url in sorted(small - images):
        record(url, 200, "OK", [("Content-Type", "image/jpeg")], jpeg(url, (96, 24)) if "://ads." in url else jpeg(url, (120, 90), min_bytes))
    for url, original in sorted(near_duplicates.items()):  # the same pixels as a PNG: another file, the same pHash
        buffer = io.BytesIO()
        Image.open(io.BytesIO(jpeg(original, (120, 90), min_bytes))).save(buffer, "PNG")
        record(url, 200, "OK", [("Content-Type", "image/png")], buffer.getvalue())
    recorder.commit()
    print(f"wrote {records} records ({len(images | small | set(near_duplicates))} images) to {args.out} ({args.out.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
