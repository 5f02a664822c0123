"""The pure layout rules over MinerU's middle_json (stages/mcitebench/pdf_layout.py: labels, sections,
appendix, the block type allow-list) on hand-written blocks: no MinerU needed."""
from __future__ import annotations

import collections

from stages.core.images import ImageStore
from stages.mcitebench.pdf_layout import build_elements, caption_label


# --- MinerU's middle_json post-processing on hand-written blocks ----------------------------------
def block(kind: str, y: float, text: str = "", parts: list | None = None, x: tuple = (0.12, 0.88)) -> dict:
    content = parts if parts is not None else [{"type": "text", "content": text}]
    return {"type": kind, "bbox": [x[0], y, x[1], y + 0.02], "content": content}


def figure(y: float, caption: str | None) -> dict:
    parts = [{"type": "image_body", "bbox": [0.2, y, 0.8, y + 0.1], "content": ""}]
    if caption:
        parts.append({"type": "image_caption", "content": [{"type": "text", "content": caption}]})
    return block("image", y, parts=parts)


def test_subfigures_fold_into_their_figure(tmp_path):
    assert caption_label("Figure 3b: detail") == ("figure", "Figure 3")
    assert caption_label("Fig. 3 (a) left") == ("figure", "Figure 3")
    assert caption_label("Table A.2: extra") == ("table", "Table A.2")
    assert caption_label("Figures are nice") == (None, None)
    middle = {"pages": [{"page_idx": 0, "blocks": [
        block("paragraph_title", 0.05, "4 Results"),
        figure(0.1, "(a) left panel"), figure(0.1, "Figure 3: both panels."), figure(0.5, "Figure 4c: third panel"),
        block("text", 0.7, "Plain text mentioning Figure 3 without being a caption."),
    ]}]}
    stats = collections.Counter()
    elements = build_elements("openreview:x", middle, {}, ImageStore(tmp_path), stats)
    assert [(e["modality"], e["label"]) for e in elements] == [("figure", "Figure 3"), ("figure", "Figure 3"), ("figure", "Figure 4"), ("text", None)]
    assert stats["crops_missing"] == 3 and all(e["section_number"] == "4" for e in elements)


def test_lettered_heading_in_the_main_body_is_not_an_appendix(tmp_path):
    middle = {"pages": [{"page_idx": 0, "blocks": [
        block("paragraph_title", 0.05, "A Study of Widgets"), block("text", 0.1, "Body text."),
        block("paragraph_title", 0.2, "Appendix"), block("text", 0.25, "Extra text."),
        block("paragraph_title", 0.3, "B More Results"), block("text", 0.35, "More text."),
    ]}]}
    elements = build_elements("openreview:x", middle, {}, ImageStore(tmp_path), collections.Counter())
    assert [(e["section_number"], e["section_path"], e["is_appendix"]) for e in elements] == [
        (None, ["A Study of Widgets"], False), (None, ["Appendix"], True), ("B", ["B More Results"], True)]


def test_unknown_block_types_are_counted_not_emitted(tmp_path):
    middle = {"pages": [{"page_idx": 0, "blocks": [
        block("paragraph_title", 0.05, "1 Intro"), block("text", 0.1, "Body text."), block("ref_text", 0.15, "A. Author. A paper."),
        block("hologram", 0.2, "Text of a block type MinerU may add later."), block("header", 0.0, "Running head"),
    ]}]}
    stats = collections.Counter()
    elements = build_elements("openreview:x", middle, {}, ImageStore(tmp_path), stats)
    assert [e["text"] for e in elements] == ["Body text.", "A. Author. A paper."]
    assert stats["skipped_block_hologram"] == 1 and stats["furniture_blocks"] == 1
