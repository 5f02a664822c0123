"""split_pages (M2RAG §4.2.2): numbered image placeholders with their urls, links reduced to their
text, RecursiveCharacterTextSplitter chunk sizes, the 200-chunk cap, stable element ids."""
from __future__ import annotations

import json
import re

import pyarrow.parquet as pq

from stages.core.tables import TableWriter, table_schema
from tests.conftest import run_stage

PAGE = """# Why the sky is blue

Sunlight is scattered by air. See [Rayleigh scattering](https://en.example.org/wiki/Rayleigh "Rayleigh") and <https://sky.example/more>
or https://sky.example/print?x=1 for more.

![A clear sky](/img/sky.jpg)

[![Sunset thumbnail](https://cdn.example.org/sunset-small.png)](https://cdn.example.org/sunset.png)

![inline pixel](data:image/gif;base64,R0lGODlhAQABAAAAACw=)

## Colours

- Blue scatters most. ![Spectrum](https://cdn.example.org/spectrum.jpg "the spectrum")
- Red scatters least.
"""


def page_row(page_id: str, markdown: str, url: str = "https://sky.example/article") -> dict:
    return {"id": page_id, "query_id": "q1", "result_id": "r", "rank": 1, "url": url, "final_url": url, "status": 200,
            "content_type": "text/html", "charset": "utf-8", "sha256": "0" * 64, "title": "t", "markdown": markdown,
            "chars": len(markdown), "images": markdown.count("!["), "reader": "local"}


def write_pages(path, rows):
    writer = TableWriter(path, table_schema("retrieval_pages"), "retrieval_pages")
    writer.write_many(rows)
    writer.commit()


def split(pages, out, **params):
    run_stage("split_pages", "--input", f"pages={pages}", "--output", f"elements={out}", "--params", json.dumps(params))
    return sorted(pq.read_table(out).to_pylist(), key=lambda r: (r["page_id"], r["order"]))


def long_page(paragraphs: int) -> str:
    """Paragraphs of ~900 characters (one chunk each at 1000), an image in the 1st and the 250th."""
    parts = []
    for i in range(paragraphs):
        text = " ".join(f"word{i}x{j}" for j in range(100))[:900]
        if i in (0, 249):
            text += f" ![figure {i}](https://img.example/{i}.png)"
        parts.append(text)
    return "\n\n".join(parts)


def test_placeholders_links_chunks_and_stable_ids(tmp_path):
    pages = tmp_path / "pages.parquet"
    write_pages(pages, [page_row("page:a", PAGE), page_row("page:long", long_page(300)), page_row("page:empty", "https://y.example/a?b=1\n\n<https://z.example>\n\n![](data:image/png;base64,AAAA)")])
    out = tmp_path / "elements.parquet"
    rows = split(pages, out)
    page_a = [r for r in rows if r["page_id"] == "page:a"]
    texts = [r for r in page_a if r["kind"] == "text"]
    images = [r for r in page_a if r["kind"] == "image"]
    # images: numbered in page order, urls absolute, data: urls dropped, a linked image kept as an image
    assert [(r["placeholder"], r["image_url"], r["text"]) for r in images] == [
        (1, "https://sky.example/img/sky.jpg", "A clear sky"),
        (2, "https://cdn.example.org/sunset-small.png", "Sunset thumbnail"),
        (3, "https://cdn.example.org/spectrum.jpg", "Spectrum"),
    ]
    text = "\n".join(r["text"] for r in texts)
    assert re.findall(r"<image_(\d+)>", text) == ["1", "2", "3"]
    assert "See Rayleigh scattering and" in text  # a link became its text
    assert "http" not in text and "](" not in text and "data:" not in text and "![" not in text
    assert [r["order"] for r in page_a] == list(range(len(page_a)))
    assert page_a[0]["kind"] == "text" and all(r["query_id"] == "q1" for r in page_a)

    long_rows = [r for r in rows if r["page_id"] == "page:long"]
    long_texts = [r for r in long_rows if r["kind"] == "text"]
    assert len(long_texts) == 200  # 300 paragraphs of ~900 characters, capped at 200 chunks
    assert all(0 < len(r["text"]) <= 1000 for r in long_texts) and all(r["chars"] == len(r["text"]) for r in long_rows)
    assert [r["image_url"] for r in long_rows if r["kind"] == "image"] == ["https://img.example/0.png"]  # the 250th paragraph's image went with its chunk
    report = json.loads(open(f"{out}.report.json").read())
    assert report["stats"]["chunks_dropped"] == 100 and report["stats"]["images_dropped"] == 1
    assert [(r["id"], r["reason"]) for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()] == [("page:empty", "empty_page")]

    again = split(pages, tmp_path / "again.parquet")
    assert [r["element_id"] for r in again] == [r["element_id"] for r in rows]
    assert len({r["element_id"] for r in rows}) == len(rows)
    smaller = split(pages, tmp_path / "small.parquet", chunk_size=300, chunk_overlap=50)
    assert all(len(r["text"]) <= 300 for r in smaller if r["kind"] == "text")
    assert not {r["element_id"] for r in smaller} & {r["element_id"] for r in rows}  # other settings, other ids


def test_a_placeholder_with_other_braces_keeps_them_as_text(tmp_path):
    """Only `{n}` is replaced: "{img:{n}}" is neither a format error nor a lost image."""
    pages = tmp_path / "pages.parquet"
    write_pages(pages, [page_row("page:a", PAGE)])
    rows = split(pages, tmp_path / "elements.parquet", placeholder="{img:{n}}")
    text = "\n".join(r["text"] for r in rows if r["kind"] == "text")
    assert re.findall(r"\{img:(\d+)\}", text) == ["1", "2", "3"]
    assert [r["placeholder"] for r in rows if r["kind"] == "image"] == [1, 2, 3]
