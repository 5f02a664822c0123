"""split_pages: pages into text chunks and image elements (M2RAG §4.2.2 Text Processing).

Input `pages` (retrieval_pages, from fetch_pages): markdown with images as `![alt](url)`. The
seed's three steps, in its order:

1. Embedded image handling: every markdown image becomes a numbered placeholder (`placeholder`,
   default `<image_{n}>`, n = 1, 2, ... in page order) and its url (made absolute against the
   page's final url) is recorded; `data:` urls are not fetchable and are dropped with their image,
   as are urls that do not parse (`http://[::1`; stats: images_bad_url).
2. Text cleaning: links become their text (`[text](url)` -> `text`, `<https://...>` and bare urls
   go), then runs of blank lines are squeezed.
3. Text splitting: langchain-text-splitters' RecursiveCharacterTextSplitter with `chunk_size`
   and `chunk_overlap` (M2RAG's public code: 1000 characters, no overlap), keeping at most
   `max_chunks` chunks per page (the code's 200); images whose placeholder lies only in dropped
   chunks go with them (stats: chunks_dropped, images_dropped).

Output `elements` (retrieval_elements): per page, each text chunk followed by the image elements
whose placeholders it holds, `order` counting through the page. element_id is content_id of
(page, settings, kind, order, content): a re-split with the same settings gives the same ids.

Rejects: `empty_page` (no text and no image left after cleaning), `bad_url` (the page's url does
not parse, so its relative image urls cannot be resolved). Invariant: pages in = pages
with elements + rejected.
"""
from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

from stages.core.ids import content_id
from stages.core.pages import image_placeholder
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "1"
_IMAGE = re.compile(r"""!\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+["'][^"']*["'])?\s*\)""")
_LINK = re.compile(r"""\[([^\]]*)\]\(\s*<?[^)\s>]*>?(?:\s+["'][^"']*["'])?\s*\)""")
_AUTOLINK = re.compile(r"<(?:https?|ftp|mailto):[^>\s]+>")
_BARE_URL = re.compile(r"(?:https?|ftp)://[^\s)\]>]+")
_BLANK_LINES = re.compile(r"\n\s*\n\s*\n+")


def replace_images(markdown: str, base_url: str, placeholder: str, dropped: list[str]) -> tuple[str, list[tuple[int, str, str]]]:
    """(text with placeholders, [(n, absolute url, alt)]); image urls that do not parse are
    appended to `dropped`."""
    images: list[tuple[int, str, str]] = []

    def swap(match: re.Match) -> str:
        url = match[2]
        if url.startswith("data:"):
            return ""
        try:
            url = urljoin(base_url, url)
        except ValueError:  # `http://[::1`: no url to fetch, the image goes like a data: one
            dropped.append(url)
            return ""
        n = len(images) + 1
        images.append((n, url, match[1].strip()))
        return image_placeholder(placeholder, n)

    return _IMAGE.sub(swap, markdown), images


def clean_links(text: str) -> str:
    text = _LINK.sub(lambda m: m[1], text)
    text = _AUTOLINK.sub("", text)
    text = _BARE_URL.sub("", text)
    return _BLANK_LINES.sub("\n\n", text).strip()


def run(ctx) -> None:
    from langchain_text_splitters import RecursiveCharacterTextSplitter  # heavy import, only when run

    p = ctx.params
    if "{n}" not in p["placeholder"]:
        raise StageError(f"param placeholder must contain {{n}}, got {p['placeholder']!r}")
    if p["chunk_size"] < 1 or not 0 <= p["chunk_overlap"] < p["chunk_size"] or p["max_chunks"] < 1:
        raise StageError(f"need chunk_size >= 1, 0 <= chunk_overlap < chunk_size, max_chunks >= 1; got {p['chunk_size']}, {p['chunk_overlap']}, {p['max_chunks']}")
    splitter = RecursiveCharacterTextSplitter(chunk_size=p["chunk_size"], chunk_overlap=p["chunk_overlap"])
    settings_key = f"{p['chunk_size']}/{p['chunk_overlap']}/{p['max_chunks']}/{p['placeholder']}"
    marker = re.compile(re.escape(p["placeholder"]).replace(re.escape("{n}"), r"(\d+)"))
    writer = ctx.writer("elements")
    for page in ctx.read_rows("pages"):
        with ctx.item(page["id"]):
            base = page["final_url"] or page["url"]
            try:
                urlsplit(base)
            except ValueError as err:
                raise Reject("bad_url", f"page url {base[:300]!r} does not parse ({err}): its relative image urls cannot be resolved") from None
            dropped: list[str] = []
            text, images = replace_images(page["markdown"], base, p["placeholder"], dropped)
            ctx.stats["images_bad_url"] += len(dropped)
            text = clean_links(text)
            chunks = splitter.split_text(text) if text else []
            if not chunks and not images:
                raise Reject("empty_page", f"{page['url']}: nothing left after removing images and links ({page['chars']} characters of markdown)")
            kept = chunks[: p["max_chunks"]]
            ctx.stats["chunks"] += len(kept)
            ctx.stats["chunks_dropped"] += len(chunks) - len(kept)
            by_number = {n: (url, alt) for n, url, alt in images}
            rows, placed = [], set()

            def add(kind: str, body: str, image_url: str = "", number: int | None = None) -> None:
                order = len(rows)
                rows.append({
                    "element_id": content_id("el", page["id"], settings_key, kind, order, image_url or body),
                    "page_id": page["id"], "query_id": page["query_id"], "order": order, "kind": kind,
                    "text": body, "image_url": image_url, "placeholder": number, "chars": len(body),
                })

            for chunk in kept:
                add("text", chunk)
                for found in marker.finditer(chunk):
                    number = int(found[1])
                    if number in by_number and number not in placed:
                        placed.add(number)
                        add("image", by_number[number][1], by_number[number][0], number)
            if not chunks:  # a page of images only
                for number, url, alt in images:
                    placed.add(number)
                    add("image", alt, url, number)
            ctx.stats["images"] += len(placed)
            ctx.stats["images_dropped"] += len(images) - len(placed)
            writer.write_many(rows)
            ctx.stats["pages_split"] += 1


def invariant(ctx) -> str | None:
    split = ctx.stats["pages_split"]
    if ctx.rows_in != split + ctx.rejected:
        return f"pages in {ctx.rows_in} != pages split {split} + rejected {ctx.rejected}"
    return None


STAGE = Stage(
    name="split_pages",
    version=VERSION,
    doc=__doc__,
    inputs={"pages": Input("pages read as markdown", many=True, table="retrieval_pages")},
    outputs={"elements": Output("retrieval_elements", "text chunks and image elements in page order", counted=False)},
    params={
        "chunk_size": Param(int, 1000, "characters per chunk (M2RAG code: 1000)", min=1),
        "chunk_overlap": Param(int, 0, "characters shared by neighbouring chunks (M2RAG code: 0)", min=0),
        "max_chunks": Param(int, 200, "chunks kept per page (M2RAG code: 200)", min=1),
        "placeholder": Param(str, "<image_{n}>", "what an image becomes in the text; {n} is its number in the page", pattern=r".*\{n\}.*"),
    },
    run=run,
    invariant=invariant,
    rejects={"empty_page": "no text and no image left after cleaning", "bad_url": "the page's own url does not parse"},
)

if __name__ == "__main__":
    STAGE.main()
