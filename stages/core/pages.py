"""Web pages: charset-correct decoding, reading as markdown with images in place, and the page
store (raw bodies once by sha256). Used by fetch_pages and its benchmark.

Reader choice. On the test pages (tests/test_fetch_pages.py, scripts/make_retrieval_sample.py:
articles with navigation, ads, figures, lists, tables and relative image urls) trafilatura's
markdown output keeps the article and drops navigation, ads and footers, keeps lists and tables,
and writes every image in place as `![alt](absolute url)`, resolving relative urls against the
page's url. resiliparse's main-content extraction is faster but writes plain text only: images
become their alt text without a url (M2RAG §4.2.2 needs the urls), links become "text (url)",
and on the sample page it kept the advertisement block and dropped the list items. So the local
reader is trafilatura (favor_recall, tables, formatting, links and images included);
`split_pages` then applies M2RAG's own cleaning.

Decoding follows the HTML standard's order: a byte-order mark, then the charset of the
Content-Type header, then a <meta charset> or http-equiv declaration in the first 4 KB, else
UTF-8. As in the standard, a label no browser decodes with (a typo, `x-nope`; UTF-7 and UTF-32,
which the standard leaves out) is passed over for the next source, and a <meta> declaring UTF-16
means UTF-8 (the declaration itself was read as ASCII). Labels for latin-1 and ASCII decode as
windows-1252, as browsers do. A body that does not decode strictly with its charset raises
`Undecodable`: no replacement characters slip into a benchmark's text.
"""
from __future__ import annotations

import codecs
import hashlib
import os
import re
from pathlib import Path

from .tables import atomic_write_bytes

HTML_TYPES = ("text/html", "application/xhtml+xml")
_META_CHARSET = re.compile(rb"""<meta[^>]+?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
_HEADER_CHARSET = re.compile(r"""charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
_WINDOWS_1252 = {"latin_1", "iso8859-1", "ascii", "cp1252"}
_NOT_IN_BROWSERS = {"utf-7", "utf-32", "utf-32-le", "utf-32-be"}  # codecs Python has and the encoding standard leaves out
_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]+\)")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f]")  # below 32, less tab, newline, carriage return and form feed


class Undecodable(ValueError):
    pass


def _browser_codec(label: str) -> str | None:
    """The codec of a charset label, None for one browsers do not decode with."""
    try:
        name = codecs.lookup(label).name
    except LookupError:
        return None
    return None if name in _NOT_IN_BROWSERS else name


def declared_charset(body: bytes, content_type: str) -> tuple[str, str]:
    """(codec name, where it came from: bom | header | meta | default, with any label passed over)."""
    for bom, name in _BOMS:
        if body.startswith(bom):
            return name, "bom"
    passed_over = []
    match = _HEADER_CHARSET.search(content_type or "")
    if match:
        codec = _browser_codec(match[1])
        if codec:
            return codec, "header"
        passed_over.append(f"the header's {match[1]!r}")
    match = _META_CHARSET.search(body[:4096])
    if match:
        label = match[1].decode("ascii", "replace")
        codec = _browser_codec(label)
        if codec:
            return ("utf-8" if codec.startswith("utf-16") else codec), "meta" + "".join(f"; {p} passed over" for p in passed_over)
        passed_over.append(f"the meta's {label!r}")
    return "utf-8", "default" + "".join(f"; {p} passed over" for p in passed_over)


def decode_html(body: bytes, content_type: str) -> tuple[str, str]:
    """(text, codec name). Raises Undecodable naming the charset, where it was declared and the
    first bad byte."""
    codec, where = declared_charset(body, content_type)
    if codec in _WINDOWS_1252:
        codec = "cp1252"
    try:
        return body.decode(codec), codec
    except UnicodeDecodeError as err:
        if codec == "cp1252":  # the 5 bytes cp1252 leaves undefined are C1 controls for browsers
            return body.decode("latin-1"), "latin-1"
        raise Undecodable(f"byte {body[err.start]:#04x} at offset {err.start} is not {codec} (charset from the {where})") from None


def looks_broken(text: str) -> str | None:
    """Why decoded text is not an HTML page (binary data served as HTML), or None."""
    head = text[:4096]
    if "\x00" in head:
        return "NUL characters in the first 4 KB (binary data)"
    controls = len(_CONTROL.findall(head))
    if head and controls / len(head) > 0.05:
        return f"{controls} control characters in the first {len(head)} characters"
    if "<" not in head:
        return "no markup in the first 4 KB"
    return None


def html_to_markdown(html: str, url: str) -> tuple[str, str]:
    """(title, markdown) by trafilatura; empty markdown when it finds no main content. The page is
    parsed once, the title read before the extraction prunes the tree."""
    import trafilatura  # heavy import, only where pages are read
    from trafilatura.utils import load_html

    tree = load_html(html)
    if tree is None:
        return "", ""
    title = page_title(tree)
    markdown = trafilatura.extract(
        tree, url=url, output_format="markdown", include_images=True, include_links=True,
        include_tables=True, include_formatting=True, favor_recall=True, deduplicate=False,
    ) or ""
    return title, markdown.strip()


def page_title(tree) -> str:
    """The title `trafilatura.extract_metadata` gives (its meta tags, then JSON-LD, then its title
    rules on h1, title and h2; trimmed as it trims) without the rest of its metadata: its date
    search (htmldate) was 80% of a page's reading time, and only the title is kept."""
    from trafilatura.metadata import examine_meta, extract_meta_json, extract_title
    from trafilatura.settings import Document

    metadata = examine_meta(tree)
    try:
        metadata = extract_meta_json(tree, metadata)
    except Exception:  # noqa: BLE001 - trafilatura guards its JSON-LD reader the same way
        pass
    found = Document()
    found.title = metadata.title or extract_title(tree)
    found.clean_and_trim()
    return (found.title or "").strip()


def count_images(markdown: str) -> int:
    return len(_IMAGE.findall(markdown))


class PageStore:
    """Raw page bodies once by sha256: <root>/<sha[:2]>/<sha><ext>."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def put(self, body: bytes, ext: str = ".html") -> str:
        sha = hashlib.sha256(body).hexdigest()
        path = self.root / sha[:2] / f"{sha}{ext}"
        if not path.exists():
            atomic_write_bytes(path, body)
        return sha


def image_placeholder(template: str, n: int) -> str:
    """Image n's placeholder in a page's text (split_pages writes it, the M2RAG image stages look it
    up): `{n}` replaced as text, any other brace in the template literal."""
    return template.replace("{n}", str(n))


def surrounding_text(chunk: str, placeholder: str, width: int) -> str:
    """Up to `width` characters either side of an image's placeholder in its text chunk, whitespace
    squeezed: the page context an image is scored or captioned with (M2RAG §4.3, §5.2)."""
    at = chunk.find(placeholder)
    if at < 0:
        return ""
    return " ".join((chunk[max(0, at - width):at] + " " + chunk[at + len(placeholder):at + len(placeholder) + width]).split())
