"""The layout of a parsed paper, read from MinerU's middle_json: pure functions, no server, no I/O
(crops go to whatever store is passed in).

middle_json (schema docvortex.middle 2.0) lists `pages[].page_idx` and `pages[].blocks[]` in
reading order: `type` (paragraph_title, doc_title, text, list, equation, image, chart, table,
header, footer, page_number, ...), `bbox` (fractions of the page), `content` (spans of {type,
content, styles}; for image/table blocks the *_body part with `image_path`, the crop MinerU cut,
and *_caption / *_footnote parts; a table body is HTML). Block types are an allow-list: page
furniture (header, footer, page_number) is dropped and counted as `furniture_blocks`, a type not
known here is dropped and counted as `skipped_block_<type>`.

MinerU's `flash` tier reads the PDF's text layer on CPU without model files. It gives reading
order, headings, paragraphs, raster figures and ruled tables (HTML) with captions and crops; it
does not OCR, finds no vector-drawn figures, and marks every heading level 2. So, deterministically,
on MinerU's own output:
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
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

TEXT_TYPES = {"text", "list", "ref_text", "aside_text", "page_footnote", "code", "index"}
SKIPPED_TYPES = {"header", "footer", "page_number"}
VISUAL = {"image": "figure", "chart": "figure", "table": "table"}
LABEL = re.compile(r"^\s*(figure|fig\.?|table|tab\.?)\s*([A-Z]\.?\d+|\d+)(?:\s*\(?([a-z])\)?(?![a-z]))?", re.I)
CAPTION = re.compile(LABEL.pattern + r"\s*[:.|]", re.I)
NUMBERED = re.compile(r"^(?:appendix\s+)?((?:\d+|[A-Z])(?:\.\d+)*)\.?\s+(\S.*)$", re.I)
LINE_NUMBERS = re.compile(r"^\d{1,4}(?:\s+\d{1,4})*$")


class CropStore(Protocol):
    def put(self, data: bytes, ext: str) -> str:
        """Store a crop, return its sha256 (stages.core.images.ImageStore)."""


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


def build_elements(paper_id: str, middle: dict, crops: dict[str, bytes], store: CropStore, stats) -> list[dict]:
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


def visual_item(block: dict, modality: str, crops: dict[str, bytes], store: CropStore, stats) -> dict:
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

