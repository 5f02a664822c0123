"""Parse each paper's PDF with MinerU into the evidence elements of MCiteBench.

Seed: mcitebench.txt §3.2 (papers parsed with MinerU into text paragraphs, images and tables, the
candidate evidence) and §3.4 (references such as "Table 3", "Section 4.2" or "Section 4.3, Line 39"
are resolved against the parsed paper, so elements carry labels, section numbers and line numbers).

MinerU runs as its own parsing API, `mineru-api` from the `mineru` package: the stage starts it on a
free 127.0.0.1 port with the configured tier, waits for /v1/health, and always stops it (or it
uses `server_url`, e.g. a GPU machine serving the model tiers). Each PDF is POSTed to
/v1/file_parse (tier, ocr_mode, output_formats=zip); the zip holds `middle_json.json` (schema
docvortex.middle 2.0) and `images/*.jpg`. From middle_json the stage reads `pages[].page_idx` and
`pages[].blocks[]` in reading order: `type` (paragraph_title, doc_title, text, list, equation,
image, chart, table, header, footer, page_number, ...), `bbox` (fractions of the page), `content`
(spans of {type, content, styles}; for image/table blocks the *_body part with `image_path`, the
crop MinerU cut, and *_caption / *_footnote parts; a table body is HTML). Block types are an
allow-list: page furniture (header, footer, page_number) is dropped and counted as
`furniture_blocks`, a type the stage does not know is dropped and counted as `skipped_block_<type>`.

The `flash` tier reads the PDF's text layer on CPU without model files. It gives reading order,
headings, paragraphs, raster figures and ruled tables (HTML) with captions and crops; it does not
OCR (a scanned page comes back as one image block with no text), finds no vector-drawn figures,
and marks every heading level 2. So, deterministically, on MinerU's own output:
- margin line numbers (short all-digit text blocks in the left/right margin) are taken out of the
  text and become line_start/line_end of the paragraphs beside them;
- a text block whose first span is bold and reads like a heading ("A.1 Hyperparameters") is split
  into a heading and its paragraph; a text block continuing the previous one (no closing
  punctuation, next starts in lower case) is joined to it;
- a caption attached to the wrong kind of block ("Table 3: ..." under a figure) moves to the
  caption-less block of its kind on the same page;
- labels come from captions ("Figure 3", "Table 2"; "Figure 3b" and "Figure 3 (a)" fold into
  "Figure 3"; an unlabelled sub-figure takes the label of its neighbouring figure); sections and
  heading paths from numbered headings ("4.2 Ablations"); the appendix starts at an "Appendix"
  heading or at a lettered section ("A Additional Results") after the references.

Input: papers (harvest_openreview). Output: elements, one row per element (fan-out).
Invariant: papers in = papers parsed (one or more elements) + rejected.
Every stored PDF is opened with PDFium before MinerU sees it, so a file that cannot be parsed costs
no MinerU call: not_a_pdf (the store holds other bytes: empty, an HTML error page), encrypted_pdf
(it needs a password), corrupt_pdf (PDFium, or MinerU, cannot open it).
Rejects: no_pdf, pdf_not_in_store, not_a_pdf, encrypted_pdf, corrupt_pdf, needs_ocr_tier (no text
layer: the flash tier, or ocr_mode txt, extracts no text), no_text_found (an OCR tier found no text
either), mineru_failed (any other MinerU error: the request failed or timed out, an error answer,
an unreadable zip or middle_json).
"""
from __future__ import annotations

import io
import json
import os
import re
import socket
import subprocess
import tempfile
import time
import zipfile
import zlib
from contextlib import contextmanager
from pathlib import Path

import pypdfium2
import requests
from tqdm import tqdm

from stages.core.images import ImageStore, pdf_path
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "1"

TEXT_TYPES = {"text", "list", "ref_text", "aside_text", "page_footnote", "code", "index"}
SKIPPED_TYPES = {"header", "footer", "page_number"}
VISUAL = {"image": "figure", "chart": "figure", "table": "table"}
LABEL = re.compile(r"^\s*(figure|fig\.?|table|tab\.?)\s*([A-Z]\.?\d+|\d+)(?:\s*\(?([a-z])\)?(?![a-z]))?", re.I)
CAPTION = re.compile(LABEL.pattern + r"\s*[:.|]", re.I)
NUMBERED = re.compile(r"^(?:appendix\s+)?((?:\d+|[A-Z])(?:\.\d+)*)\.?\s+(\S.*)$", re.I)
LINE_NUMBERS = re.compile(r"^\d{1,4}(?:\s+\d{1,4})*$")


# --- the MinerU server --------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def mineru_server(tier: str, mineru_home: str, timeout: float):
    """`mineru-api` on a free 127.0.0.1 port for the duration of the block; always stopped."""
    port = free_port()
    env = dict(os.environ)
    if mineru_home:
        env["MINERU_HOME"] = str(Path(mineru_home).resolve())
    with tempfile.TemporaryDirectory(prefix="mineru-") as tmp:
        log_path = Path(tmp) / "server.log"
        command = ["mineru-api", "--host", "127.0.0.1", "--port", str(port), "--tier", tier, "--upload-dir", str(Path(tmp) / "uploads")]
        with open(log_path, "wb") as log:
            try:
                proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
            except FileNotFoundError:
                raise StageError("mineru-api is not installed (pip install mineru)") from None
            url = f"http://127.0.0.1:{port}"
            try:
                wait_ready(proc, url, timeout, log_path)
                yield url
            finally:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def wait_ready(proc: subprocess.Popen, url: str, timeout: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StageError(f"mineru-api exited with {proc.returncode}: {log_path.read_text(errors='replace')[-2000:]}")
        try:
            if requests.get(f"{url}/v1/health", timeout=2).status_code == 200:
                return
        except requests.RequestException:  # not listening yet, or too busy warming up to answer in time
            pass
        time.sleep(0.3)
    raise StageError(f"mineru-api did not answer /v1/health within {timeout}s: {log_path.read_text(errors='replace')[-2000:]}")


def check_pdf(pdf: bytes) -> None:
    """Reject bytes that are no PDF, need a password or do not open (PDFium, as inside MinerU)."""
    if b"%PDF-" not in pdf[:1024]:  # the header may follow up to 1 KB of junk
        raise Reject("not_a_pdf", f"{len(pdf)} bytes starting {pdf[:40]!r}")
    try:
        pypdfium2.PdfDocument(pdf).close()
    except pypdfium2.PdfiumError as err:
        raise Reject("encrypted_pdf" if "password" in str(err).lower() else "corrupt_pdf", str(err)) from None


def mineru_parse(url: str, pdf: bytes, name: str, params: dict) -> tuple[dict, dict[str, bytes]]:
    """middle_json and the crops (zip path -> bytes) of one PDF; raises Reject."""
    query = {"tier": params["tier"], "ocr_mode": params["ocr_mode"], "output_formats": "zip", "response_format": "zip",
             "wait_timeout": int(params["parse_timeout_s"])}
    if params["page_range"]:
        query["page_range"] = params["page_range"]
    try:
        response = requests.post(f"{url}/v1/file_parse", params=query, files={"files": (name, pdf, "application/pdf")},
                                 timeout=params["parse_timeout_s"] + 30)
    except requests.RequestException as err:
        raise Reject("mineru_failed", f"{type(err).__name__}: {err}") from None
    if response.headers.get("content-type", "").startswith("application/zip"):
        try:
            with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
                middle = json.loads(archive.read("middle_json.json"))
                images = {n: archive.read(n) for n in archive.namelist() if n.startswith("images/")}
        except (zipfile.BadZipFile, zlib.error, EOFError, KeyError, ValueError) as err:  # ValueError: bad JSON or encoding
            raise Reject("mineru_failed", f"unreadable zip answer: {type(err).__name__}: {err}") from None
        if not isinstance(middle, dict):
            raise Reject("mineru_failed", f"middle_json.json is a {type(middle).__name__}, not an object")
        return middle, images
    try:
        body = response.json()
    except ValueError:
        raise Reject("mineru_failed", f"HTTP {response.status_code}: {response.text[:500]}") from None
    if not isinstance(body, dict):
        raise Reject("mineru_failed", f"HTTP {response.status_code}: {response.text[:500]}")
    errors = [f.get("error") or {} for f in body.get("files") or []] or [body.get("error") or {}]
    message = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors)
    if body.get("status") not in ("failed", "partial"):
        raise Reject("mineru_failed", f"HTTP {response.status_code}, task {body.get('status')}: {message}")
    if any("Failed to load document" in str(e.get("message")) for e in errors):
        raise Reject("corrupt_pdf", message)
    raise Reject("mineru_failed", message)


# --- reading middle_json ----------------------------------------------------------------------
def span_text(content) -> str:
    """Plain text of a block's spans (inline equations kept as $...$)."""
    if isinstance(content, str):
        return content
    parts = []
    for span in content or []:
        value = span.get("content")
        if isinstance(value, list):
            parts.append(span_text(value))
        elif span.get("type") == "inline_equation":
            parts.append(f"${value}$")
        elif value:
            parts.append(str(value))
    return "".join(parts).strip()


def is_margin_numbers(block: dict) -> bool:
    x0, _, x1, _ = block["bbox"]
    return block["type"] == "text" and bool(LINE_NUMBERS.match(span_text(block["content"]))) and x1 - x0 < 0.06 and (x1 < 0.12 or x0 > 0.88)


def margin_lines(block: dict) -> list[tuple[float, int]]:
    """(vertical centre, number) of each number in a margin block, spread evenly over its height."""
    numbers = [int(n) for n in span_text(block["content"]).split()]
    _, y0, _, y1 = block["bbox"]
    step = (y1 - y0) / len(numbers)
    return [(y0 + step * (i + 0.5), n) for i, n in enumerate(numbers)]


def split_run_in_heading(block: dict) -> tuple[str | None, dict]:
    """("A.1 Hyperparameters", rest of the block) when a text block opens with a bold heading."""
    spans = block.get("content")
    if block["type"] != "text" or not isinstance(spans, list) or len(spans) < 2:
        return None, block
    first = spans[0]
    head = str(first.get("content") or "").strip()
    if "bold" not in (first.get("styles") or []) or not looks_like_heading(head):
        return None, block
    return head, {**block, "content": spans[1:]}


def looks_like_heading(text: str) -> bool:
    if not text or len(text) > 80 or text.endswith((".", ",", ";")):
        return False
    return bool(NUMBERED.match(text)) or text.lower() in {"references", "appendix", "acknowledgments", "acknowledgements", "abstract"}


def caption_label(caption: str | None) -> tuple[str | None, str | None]:
    """("figure" | "table", "Figure 3") from a caption; sub-figure letters fold into the figure."""
    match = LABEL.match(caption or "")
    if not match:
        return None, None
    kind = "figure" if match[1].lower().startswith("fig") else "table"
    return kind, f"{kind.title()} {match[2]}"


class Sections:
    """The running section state: number, heading path and main body vs appendix."""

    def __init__(self):
        self.stack: list[tuple[str, str]] = []  # (number, heading text)
        self.number: str | None = None
        self.path: list[str] = []
        self.appendix = False
        self.after_references = False
        self.history: list[tuple[int, float, dict]] = [(-1, 0.0, self.where())]  # (page, y, state) after each heading

    def where(self) -> dict:
        return {"section_number": self.number, "section_path": list(self.path), "is_appendix": self.appendix}

    def at(self, page: int, y: float) -> dict:
        """The state at a point of the page: MinerU may read a float after a heading printed below it."""
        return [state for p, top, state in self.history if p < page or (p == page and top <= y)][-1]

    def heading_at(self, text: str, page: int, y: float) -> None:
        self.heading(text)
        self.history.append((page, y, self.where()))

    def heading(self, text: str) -> None:
        text = " ".join(text.split())
        lowered = text.lower()
        match = NUMBERED.match(text)
        number = match[1] if match else None
        lettered = number is not None and number[0].isalpha()
        if lettered and not (self.appendix or self.after_references or "." in number or lowered.startswith("appendix")):
            number = None  # "A Study of ..." in the main body is not an appendix section
        if number is None:
            if lowered.startswith(("appendix", "appendices", "supplementary")):
                self.appendix = True
            if lowered in ("references", "bibliography"):
                self.after_references = True
            self.stack, self.number, self.path = [], None, [text]
            return
        if lettered:
            self.appendix = True
        depth = number.count(".") + 1
        self.stack = [s for s in self.stack if s[0].count(".") + 1 < depth] + [(number.upper(), text)]
        self.number, self.path = number.upper(), [t for _, t in self.stack]


def build_elements(paper_id: str, middle: dict, crops: dict[str, bytes], store: ImageStore, stats) -> list[dict]:
    """The paper's elements from MinerU's middle_json, in reading order."""
    sections = Sections()
    elements: list[dict] = []
    for page in middle.get("pages") or []:
        page_idx = int(page.get("page_idx", 0))
        lines: list[tuple[float, int]] = []
        items: list[dict] = []  # this page's elements, with their bbox, before ids are given
        for block in page.get("blocks") or []:
            kind = block.get("type")
            if is_margin_numbers(block):
                lines += margin_lines(block)
                continue
            if kind in SKIPPED_TYPES:
                stats["furniture_blocks"] += 1
                continue
            if kind == "doc_title":
                continue
            if kind == "paragraph_title":
                sections.heading_at(span_text(block["content"]), page_idx, block["bbox"][1])
                continue
            if kind not in TEXT_TYPES and kind != "equation" and kind not in VISUAL:
                stats[f"skipped_block_{kind}"] += 1
                continue
            head, block = split_run_in_heading(block)
            if head:
                sections.heading_at(head, page_idx, block["bbox"][1])
                stats["run_in_headings"] += 1
            where = sections.where()
            if kind in VISUAL:
                items.append(visual_item(block, VISUAL[kind], crops, store, stats) | sections.at(page_idx, block["bbox"][1]))
                continue
            text = span_text(block["content"])
            if not text:
                continue
            modality = "equation" if kind == "equation" else "text"
            prev = items[-1] if items else None
            if modality == "text" and prev and prev["modality"] == "text" and prev["section_number"] == where["section_number"] \
                    and not prev["text"].rstrip().endswith((".", "!", "?", ":", ";")) and text[:1].islower():
                prev["text"] = f"{prev['text']} {text}"
                prev["bbox"] = [min(prev["bbox"][0], block["bbox"][1]), max(prev["bbox"][1], block["bbox"][3])]
                stats["joined_blocks"] += 1
                continue
            items.append({"modality": modality, "text": text, "caption": None, "label": None, "image_sha256": None,
                          "bbox": [block["bbox"][1], block["bbox"][3]]} | where)
        fix_captions(items, stats)
        for n, item in enumerate(items):
            y0, y1 = item.pop("bbox")
            near = [num for y, num in lines if y0 - 0.004 <= y <= y1 + 0.004] if item["modality"] == "text" else []
            elements.append({
                "id": f"el:{paper_id}:{page_idx}:{n}", "paper_id": paper_id, "page": page_idx, "reading_order": len(elements),
                **item, "line_start": min(near) if near else None, "line_end": max(near) if near else None,
            })
    return elements


def visual_item(block: dict, modality: str, crops: dict[str, bytes], store: ImageStore, stats) -> dict:
    body, captions, footnotes = None, [], []
    for part in block.get("content") or []:
        kind = part.get("type", "")
        if kind.endswith("_body"):
            body = part
        elif kind.endswith("_caption"):
            captions.append(span_text(part.get("content")))
        elif kind.endswith("_footnote"):
            footnotes.append(span_text(part.get("content")))
    sha = None
    if body and body.get("image_path") in crops:
        sha = store.put(crops[body["image_path"]], Path(body["image_path"]).suffix or ".jpg")
    else:
        stats["crops_missing"] += 1
    return {
        "modality": modality, "captions": [c for c in captions if c],
        "body": span_text(body.get("content")) if body else "", "footnotes": footnotes,
        "image_sha256": sha, "bbox": [block["bbox"][1], block["bbox"][3]],
    }


def fix_captions(items: list[dict], stats) -> None:
    """Give captions to the right blocks, then label, caption and text every figure and table."""
    for i, item in list(enumerate(items))[::-1]:  # a caption MinerU left as a text block beside its figure/table
        kind = caption_label(item["text"])[0] if item["modality"] == "text" and CAPTION.match(item["text"]) else None
        beside = [v for v in items[max(i - 1, 0) : i + 2] if v.get("modality") == kind and "captions" in v and not v["captions"]]
        if beside:
            beside[0]["captions"].append(item["text"])
            del items[i]
            stats["captions_from_text"] += 1
    visuals = [i for i in items if "captions" in i]
    for item in visuals:
        for caption in list(item["captions"]):
            kind, _ = caption_label(caption)
            if kind and kind != item["modality"]:
                target = min((v for v in visuals if v["modality"] == kind and not any(caption_label(c)[0] == kind for c in v["captions"])),
                             key=lambda v: abs(v["bbox"][0] - item["bbox"][1]), default=None)
                if target is not None:
                    item["captions"].remove(caption)
                    target["captions"].append(caption)
                    stats["captions_moved"] += 1
    for item in visuals:
        caption = " ".join(item.pop("captions")) or None
        body, footnotes = item.pop("body"), item.pop("footnotes")
        item["caption"] = caption
        item["label"] = caption_label(caption)[1]
        item["text"] = (body if item["modality"] == "table" else caption) or body or ""
        if footnotes:
            item["text"] += "\n" + "\n".join(footnotes)
    for i, item in enumerate(visuals):  # unlabelled sub-figures take their neighbour's label
        if item["modality"] == "figure" and not item["label"]:
            around = visuals[i + 1 :] + visuals[:i][::-1]
            item["label"] = next((v["label"] for v in around if v["modality"] == "figure" and v["label"]), None)


# --- the stage --------------------------------------------------------------------------------
def run(ctx) -> None:
    p = ctx.params
    papers = ctx.read_rows("papers")
    store = ImageStore(p["image_store"])
    todo = []
    for paper in papers:
        with ctx.item(paper["id"]):
            if not paper["pdf_sha256"]:
                raise Reject("no_pdf", "the submission has no PDF")
            path = pdf_path(p["pdf_store"], paper["pdf_sha256"])
            if not path.exists():
                raise Reject("pdf_not_in_store", str(path))
            check_pdf(path.read_bytes())
            todo.append(paper)
    if not todo:
        return
    with (mineru_server(p["tier"], p["mineru_home"], p["startup_timeout_s"]) if not p["server_url"] else _given(p["server_url"])) as url:
        for paper in tqdm(todo, desc="mineru", unit="pdf"):
            with ctx.item(paper["id"], counted=False):  # counted above
                parse_paper(ctx, url, paper, store)


@contextmanager
def _given(url: str):
    yield url.rstrip("/")


def parse_paper(ctx, url: str, paper: dict, store: ImageStore) -> None:
    p = ctx.params
    pdf = pdf_path(p["pdf_store"], paper["pdf_sha256"]).read_bytes()
    middle, crops = mineru_parse(url, pdf, f"{paper['pdf_sha256']}.pdf", p)
    ctx.stats["pages"] += len(middle.get("pages") or [])
    elements = build_elements(paper["id"], middle, crops, store, ctx.stats)
    if not any(e["modality"] != "figure" for e in elements):
        reason = "needs_ocr_tier" if p["ocr_mode"] == "txt" or p["tier"] == "flash" else "no_text_found"
        raise Reject(reason, f"MinerU ({p['tier']}, ocr_mode {p['ocr_mode']}) found no text: the PDF has no text layer")
    ctx.write("elements", elements)
    ctx.stats["papers_parsed"] += 1
    for e in elements:
        ctx.stats[f"elements_{e['modality']}"] += 1


def check_counts(ctx) -> str | None:
    parsed = ctx.stats["papers_parsed"]
    if ctx.rows_in != parsed + ctx.rejected:
        return f"papers in {ctx.rows_in} != parsed {parsed} + rejected {ctx.rejected}"
    return None


STAGE = Stage(
    name="parse_pdfs",
    version=VERSION,
    doc=__doc__,
    inputs={"papers": Input("harvest_openreview papers (pdf_sha256 names the PDF in the store)", table="mcitebench_papers")},
    outputs={"elements": Output("mcitebench_elements", "one row per parsed element", counted=False)},
    params={
        "tier": Param(str, "flash", "MinerU tier: flash (CPU, text layer only) | basic | standard | advanced (model files, GPU)", choices=("flash", "basic", "standard", "advanced")),
        "ocr_mode": Param(str, "txt", "auto | txt | ocr; flash reads the text layer (txt)", choices=("auto", "txt", "ocr")),
        "page_range": Param(str, "", "MinerU page range, e.g. '1-12'; empty = every page"),
        "server_url": Param(str, "", "a running mineru-api to use; empty = start one on 127.0.0.1"),
        "mineru_home": Param(str, "data/cache/mineru", "MINERU_HOME of the started server (config, model files)"),
        "startup_timeout_s": Param(float, 120.0, "how long to wait for the server's /v1/health", above=0),
        "parse_timeout_s": Param(float, 600.0, "how long one PDF may take", above=0),
        "pdf_store": Param(str, "data/cache/pdfs", "content-addressed PDF store root (harvest_openreview)"),
        "image_store": Param(str, "data/cache/images", "image store root for figure and table crops"),
    },
    run=run,
    invariant=check_counts,
)

if __name__ == "__main__":
    STAGE.main()
