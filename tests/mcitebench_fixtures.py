"""Hand-made MCiteBench inputs for the construction stages' tests, written from the fixed input
schemas (mcitebench_threads, mcitebench_elements) and the stages' own output schemas."""
from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

from stages.core.ids import content_id
from stages.core.images import ImageStore
from stages.core.tables import write_table

PAPER = "openreview:paper1"


def element(paper, n, modality, text, *, page=0, label=None, section=None, lines=None, appendix=False, image=None):
    return {
        "id": f"el:{paper}:{page}:{n}", "paper_id": paper, "page": page, "reading_order": n, "modality": modality,
        "text": text, "caption": text if modality in ("figure", "table") else None, "label": label,
        "section_number": section, "section_path": [f"{section} Section"] if section else [],
        "line_start": lines[0] if lines else None, "line_end": lines[1] if lines else None,
        "is_appendix": appendix, "image_sha256": image,
    }


def png_sha(store: ImageStore, color: tuple[int, int, int]) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), color).save(buf, format="PNG")
    return store.put(buf.getvalue(), "png")


def paper_elements(store: ImageStore, paper: str = PAPER, line_numbers: bool = True) -> list[dict]:
    """A small paper: numbered sections with line-numbered paragraphs, two tables, two figures, and
    an appendix holding a table and a section."""
    L = (lambda a, b: (a, b)) if line_numbers else (lambda a, b: None)
    img = lambda i: png_sha(store, (40 * i % 256, 90, 200 - 10 * i))  # noqa: E731
    return [
        element(paper, 0, "text", "We study widget learning and report 91.2% accuracy on the W-100 benchmark.", section="1", lines=L(1, 12)),
        element(paper, 1, "text", "Our method trains in 3 hours on 8 GPUs with a batch size of 256 examples.", section="3", lines=L(13, 24), page=1),
        element(paper, 2, "table", "Table 1: Dataset statistics.", label="Table 1", section="3", page=1, image=img(1)),
        element(paper, 3, "text", "Section 4.2 paragraph one: the ablation removes the gate and accuracy drops by 4.1 points.", section="4.2", lines=L(30, 38), page=2),
        element(paper, 4, "text", "Section 4.2 paragraph two: with the gate restored the loss converges 2x faster.", section="4.2", lines=L(39, 45), page=2),
        element(paper, 5, "table", "Table 2: Main results on W-100.", label="Table 2", section="4.2", page=2, image=img(2)),
        element(paper, 6, "figure", "Figure 3: Training curves.", label="Figure 3", section="4.3", page=3, image=img(3)),
        element(paper, 7, "text", "Section 4.3 discusses scaling: doubling width improves accuracy by 1.5 points.", section="4.3", lines=L(46, 60), page=3),
        element(paper, 8, "figure", "Figure 4: Attention maps.", label="Figure 4", section="4.3", page=3, image=img(4)),
        element(paper, 9, "text", "In conclusion, the gated widget model is 12% smaller than the baseline at equal accuracy.", section="5", lines=L(61, 70), page=4),
        element(paper, 10, "table", "Table 5: Extra hyper-parameters.", label="Table 5", section="A.1", page=5, appendix=True, image=img(5)),
        element(paper, 11, "text", "Appendix A.1 lists 14 hyper-parameters used in all runs of the experiments.", section="A.1", page=5, appendix=True),
    ]


def qa_row(paper, question_type, question, answer, *, source, evidence=(), options=(), gold=None, explanation=None, references=()):
    return {
        "id": content_id("mcq", question_type, source, question), "paper_id": paper, "question_type": question_type,
        "question": question, "answer": answer, "references": list(references), "evidence_element_ids": list(evidence),
        "options": list(options), "gold": gold, "explanation": explanation, "source_id": source,
    }


def write(path: Path, rows: list[dict], table: str) -> str:
    write_table(path, rows, table)
    return str(path)
