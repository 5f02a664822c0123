"""parse_pdfs with the real MinerU (mineru-api, flash tier) on the demo's generated PDFs, plus a
scanned PDF (no text layer), a corrupt one and a paper without a PDF, through the stage's CLI.
The pure post-processing of MinerU's middle_json is also checked on hand-written blocks."""
from __future__ import annotations

import collections
import io
import json
import shutil
from pathlib import Path

import duckdb
import pytest
from PIL import Image, ImageDraw
from reportlab.lib.pagesizes import letter
from reportlab.lib.utils import ImageReader
from reportlab.pdfgen import canvas

from stages.core.ids import sha256_hex
from stages.core.images import ImageStore
from stages.core.tables import write_table
from stages.parse_pdfs import build_elements, caption_label
from tests.conftest import REPO, run_stage

pytestmark = pytest.mark.skipif(shutil.which("mineru-api") is None, reason="mineru is not installed")
RAW_PDFS = REPO / "data/samples/openreview/raw/pdf"
LINED, PLAIN = "GsA7xk2Qp1", "RcR9mT4vLe"  # demo paper 1 has margin line numbers, paper 2 has none


def scanned_pdf() -> bytes:
    page = Image.new("RGB", (850, 1100), "white")
    draw = ImageDraw.Draw(page)
    for i in range(25):
        draw.text((80, 80 + 36 * i), f"A scanned line of text, number {i}, with no text layer under it.", fill="black")
    buf, out = io.BytesIO(), io.BytesIO()
    page.save(buf, format="PNG")
    c = canvas.Canvas(out, pagesize=letter, invariant=1)
    c.drawImage(ImageReader(io.BytesIO(buf.getvalue())), 0, 0, 612, 792)
    c.showPage()
    c.save()
    return out.getvalue()


def paper(pid: str, pdf: bytes | None, store: Path) -> dict:
    sha = None
    if pdf is not None:
        sha = sha256_hex(pdf)
        (store / sha[:2]).mkdir(parents=True, exist_ok=True)
        (store / sha[:2] / f"{sha}.pdf").write_bytes(pdf)
    return {"id": f"openreview:{pid}", "forum": pid, "number": 1, "title": pid, "abstract": None, "keywords": [],
            "venueid": "v", "decision": None, "withdrawn": False, "pdf_sha256": sha, "cdate": 0}


@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("parse")
    store = tmp / "pdfs"
    pdf = lambda forum: next(RAW_PDFS.glob(f"id={forum}.*.pdf")).read_bytes()  # noqa: E731
    papers = [
        paper(LINED, pdf(LINED), store), paper(PLAIN, pdf(PLAIN), store),
        paper("scanned", scanned_pdf(), store), paper("corrupt", b"%PDF-1.4\n1 0 obj <<garbage\n%%EOF\n", store),
        paper("nopdf", None, store),
    ]
    write_table(tmp / "papers.parquet", papers, "mcitebench_papers")
    out = tmp / "elements.parquet"
    params = {"pdf_store": str(store), "image_store": str(tmp / "images"), "mineru_home": str(tmp / "mineru")}
    run_stage("parse_pdfs", "--input", f"papers={tmp / 'papers.parquet'}", "--output", f"elements={out}", "--params", json.dumps(params))
    cur = duckdb.connect().execute(f"select * from read_parquet('{out}') order by reading_order")
    names = [d[0] for d in cur.description]
    rows = [dict(zip(names, r)) for r in cur.fetchall()]
    by_paper = collections.defaultdict(list)
    for row in rows:
        by_paper[row["paper_id"].split(":")[1]].append(row)
    report = json.loads(Path(f"{out}.report.json").read_text())
    rejects = duckdb.connect().execute(f"select id, reason from read_parquet('{out}.rejects.parquet')").fetchall()
    return by_paper, report, dict(rejects), tmp / "images"


def test_counts_and_rejects(parsed):
    by_paper, report, rejects, _ = parsed
    assert rejects == {"openreview:scanned": "needs_ocr_tier", "openreview:corrupt": "corrupt_pdf", "openreview:nopdf": "no_pdf"}
    assert report["rows_in"] == 5 and report["stats"]["papers_parsed"] == 2 and report["rejected"] == 3
    assert set(by_paper) == {LINED, PLAIN}
    modalities = {e["modality"] for e in by_paper[LINED]}
    assert {"text", "figure", "table"} <= modalities


@pytest.mark.parametrize("forum", [LINED, PLAIN])
def test_labels_match_the_generated_captions(parsed, forum):
    elements = parsed[0][forum]
    labelled = {e["label"]: e for e in elements if e["label"]}
    assert sorted(labelled) == ["Figure 1", "Figure 2", "Figure 3", "Figure 4", "Table 1", "Table 2", "Table 3", "Table 4"]
    for label, element in labelled.items():
        assert element["modality"] == ("figure" if label.startswith("Figure") else "table")
        assert element["caption"].startswith(f"{label}: ")
        assert element["line_start"] is None
    assert labelled["Table 3"]["caption"] == "Table 3: Wall-clock cost for one epoch."
    assert "(a) throughput" in labelled["Figure 3"]["caption"]  # sub-figures (a)(b) are one Figure 3
    assert labelled["Table 2"]["text"].startswith("<table>") and "Prompting" in labelled["Table 2"]["text"]
    assert [e["label"] for e in elements if e["modality"] == "figure"] == ["Figure 1", "Figure 2", "Figure 3", "Figure 4"]


@pytest.mark.parametrize("forum", [LINED, PLAIN])
def test_sections_paths_and_appendix(parsed, forum):
    elements = parsed[0][forum]
    labelled = {e["label"]: e for e in elements if e["label"]}
    where = {k: (labelled[k]["section_number"], labelled[k]["is_appendix"]) for k in labelled}
    assert where == {"Figure 1": ("3", False), "Table 1": ("3.2", False), "Table 2": ("4.1", False), "Figure 2": ("4.2", False),
                     "Figure 3": ("4.3", False), "Table 3": ("4.3", False), "Table 4": ("A.1", True), "Figure 4": ("A.1", True)}
    ablation = next(e for e in elements if e["text"].startswith("Removing the gate"))
    assert (ablation["section_number"], ablation["section_path"]) == ("4.2", ["4 Experiments", "4.2 Ablations"])
    hyper = next(e for e in elements if e["modality"] == "text" and e["text"].startswith("Table 4 lists"))  # under a run-in "A.1" heading
    assert hyper["section_path"] == ["A Additional Experiments", "A.1 Hyperparameters"] and hyper["is_appendix"]
    refs = next(e for e in elements if e["text"].startswith("Anonymous. A study"))
    assert refs["section_path"] == ["References"] and not refs["is_appendix"]
    assert not any(e["is_appendix"] for e in elements if e["section_number"] and e["section_number"][0].isdigit())
    pages = [e["page"] for e in elements]
    assert pages == sorted(pages) and [e["reading_order"] for e in elements] == list(range(len(elements)))
    assert all(e["id"] == f"el:openreview:{forum}:{e['page']}:{n}" for e in elements
               for n in [[x for x in elements if x["page"] == e["page"]].index(e)])


def test_margin_line_numbers(parsed):
    lined, plain = parsed[0][LINED], parsed[0][PLAIN]
    efficiency = [e for e in lined if e["section_number"] == "4.3" and e["modality"] == "text"]
    assert len(efficiency) == 1 and efficiency[0]["line_start"] <= 39 <= efficiency[0]["line_end"]  # "Section 4.3, Line 39"
    assert (efficiency[0]["line_start"], efficiency[0]["line_end"]) == (37, 40)
    texts = [e for e in lined if e["modality"] == "text" and e["section_number"]]
    assert all(e["line_start"] is not None for e in texts)
    assert not any(e["text"].strip().isdigit() for e in lined)  # the numbers left the text
    assert all(e["line_start"] is None for e in plain)


def test_crops_are_in_the_image_store(parsed):
    by_paper, _, _, images = parsed
    store = ImageStore(images)
    for e in by_paper[LINED]:
        if e["modality"] in ("figure", "table"):
            data = store.read(e["image_sha256"])
            assert sha256_hex(data) == e["image_sha256"]
            with Image.open(io.BytesIO(data)) as img:
                assert img.width > 100 and img.height > 30
        else:
            assert e["image_sha256"] is None


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
