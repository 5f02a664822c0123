"""parse_pdfs with the real MinerU (mineru-api, flash tier) on the demo's generated PDFs, plus a
scanned PDF (no text layer), a corrupt one and a paper without a PDF, through the stage's CLI
(skipped where mineru is not installed); and, without MinerU, the stage against a 127.0.0.1 server
posing as mineru-api (`server_url`) that answers broken zips, error bodies and no text, each of
which rejects only its own paper. The pure post-processing of middle_json is in
tests/test_parse_pdfs_layout.py."""
from __future__ import annotations

import collections
import io
import json
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image, ImageDraw
from werkzeug import Request, Response

from stages.core.fetch import Fetcher, FetchSettings
from stages.core.ids import sha256_hex
from stages.core.images import ImageStore
from stages.mcitebench.mineru import wait_ready
from stages.core.tables import table_schema, write_table
from tests.conftest import REPO, run_stage

DEMO_WARC = REPO / "data/samples/openreview/openreview.warc.gz"
LINED, PLAIN = "GsA7xk2Qp1", "RcR9mT4vLe"  # demo paper 1 has margin line numbers, paper 2 has none


def demo_pdf(forum: str) -> bytes:
    """A demo paper's PDF, as the harvest's replay of the bundled OpenReview recording answers it."""
    with Fetcher(FetchSettings(mode="replay", replay_warcs=(str(DEMO_WARC),))) as fetcher:
        return fetcher.fetch(f"https://api2.openreview.net/pdf?id={forum}").body


def scanned_pdf() -> bytes:
    canvas = pytest.importorskip("reportlab.pdfgen.canvas")
    ImageReader = pytest.importorskip("reportlab.lib.utils").ImageReader
    page = Image.new("RGB", (850, 1100), "white")
    draw = ImageDraw.Draw(page)
    for i in range(25):
        draw.text((80, 80 + 36 * i), f"A scanned line of text, number {i}, with no text layer under it.", fill="black")
    buf, out = io.BytesIO(), io.BytesIO()
    page.save(buf, format="PNG")
    c = canvas.Canvas(out, pagesize=(612, 792), invariant=1)  # US letter
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
    if shutil.which("mineru-api") is None:
        pytest.skip("mineru is not installed")
    tmp = tmp_path_factory.mktemp("parse")
    store = tmp / "pdfs"
    papers = [
        paper(LINED, demo_pdf(LINED), store), paper(PLAIN, demo_pdf(PLAIN), store),
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


# --- without MinerU: a 127.0.0.1 server posing as mineru-api ----------------------------------
def mineru_zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buf.getvalue()


def middle(*blocks: dict) -> bytes:
    return json.dumps({"pages": [{"page_idx": 0, "blocks": list(blocks)}]}).encode()


def text_block(kind: str, text: str, y: float) -> dict:
    return {"type": kind, "bbox": [0.12, y, 0.88, y + 0.02], "content": [{"type": "text", "content": text}]}


ZIP = "application/zip"
FAILED = {"status": "failed", "files": [{"error": {"code": "PARSE_ERROR", "message": "the backend crashed"}}]}
def tagged_pdf(tag: str) -> bytes:
    """A blank one-page PDF (it passes the stage's PDFium check) ending in a comment naming the answer."""
    canvas = pytest.importorskip("reportlab.pdfgen.canvas")
    out = io.BytesIO()
    c = canvas.Canvas(out, invariant=1)
    c.showPage()
    c.save()
    return out.getvalue() + f"%{tag}\n".encode()


def pdf_tag(pdf: bytes) -> str:
    return pdf.rstrip().rsplit(b"%", 1)[1].decode()


ANSWERS = {  # the PDF's tag -> (status, content type, body) of mineru-api's /v1/file_parse
    "good": (200, ZIP, mineru_zip({"middle_json.json": middle(text_block("paragraph_title", "1 Intro", 0.1),
                                                                     text_block("text", "Widgets gate things.", 0.2))})),
    "notzip": (200, ZIP, b"<html>502 Bad Gateway from a proxy</html>"),
    "nomiddle": (200, ZIP, mineru_zip({"images/a.jpg": b"jpeg"})),
    "badjson": (200, ZIP, mineru_zip({"middle_json.json": b"{not json"})),
    "failed": (500, "application/json", json.dumps(FAILED).encode()),
    "imageonly": (200, ZIP, mineru_zip({"middle_json.json": middle(
        {"type": "image", "bbox": [0.2, 0.1, 0.8, 0.5], "content": [{"type": "image_body", "image_path": "images/a.jpg"}]})})),
}


def run_against(tmp: Path, server_url: str, tags: list[str]) -> tuple[dict, dict, list[dict]]:
    store = tmp / "pdfs"
    papers = [paper(tag, tagged_pdf(tag), store) for tag in tags]
    write_table(tmp / "papers.parquet", papers, "mcitebench_papers")
    out = tmp / "elements.parquet"
    params = {"pdf_store": str(store), "image_store": str(tmp / "images"), "server_url": server_url, "tier": "standard", "ocr_mode": "auto"}
    run_stage("parse_pdfs", "--input", f"papers={tmp / 'papers.parquet'}", "--output", f"elements={out}", "--params", json.dumps(params))
    con = duckdb.connect()
    rejects = {i: (reason, detail) for i, reason, detail in con.execute(f"select id, reason, detail from read_parquet('{out}.rejects.parquet')").fetchall()}
    cur = con.execute(f"select paper_id, text from read_parquet('{out}')")
    return json.loads(Path(f"{out}.report.json").read_text()), rejects, [dict(zip(("paper_id", "text"), r)) for r in cur.fetchall()]


def test_a_broken_answer_rejects_only_its_own_paper(httpserver, tmp_path):
    seen = []

    def file_parse(request: Request) -> Response:
        seen.append(dict(request.args))
        status, kind, body = ANSWERS[pdf_tag(request.files["files"].read())]
        return Response(body, status=status, content_type=kind)

    httpserver.expect_request("/v1/file_parse", method="POST").respond_with_handler(file_parse)
    report, rejects, elements = run_against(tmp_path, httpserver.url_for("/"), list(ANSWERS))
    assert {i: reason for i, (reason, _) in rejects.items()} == {
        "openreview:notzip": "mineru_failed", "openreview:nomiddle": "mineru_failed", "openreview:badjson": "mineru_failed",
        "openreview:failed": "mineru_failed", "openreview:imageonly": "no_text_found",  # an OCR tier, so not needs_ocr_tier
    }
    assert "BadZipFile" in rejects["openreview:notzip"][1] and "middle_json.json" in rejects["openreview:nomiddle"][1]
    assert "JSONDecodeError" in rejects["openreview:badjson"][1] and "the backend crashed" in rejects["openreview:failed"][1]
    assert elements == [{"paper_id": "openreview:good", "text": "Widgets gate things."}]
    assert report["rows_in"] == 6 and report["stats"]["papers_parsed"] == 1 and report["rejected"] == 5
    assert all(a["tier"] == "standard" and a["ocr_mode"] == "auto" and a["output_formats"] == "zip" for a in seen)


def test_an_unreachable_server_rejects_the_papers(tmp_path):
    report, rejects, elements = run_against(tmp_path, "http://127.0.0.1:9", ["good"])
    (reason, detail), = rejects.values()
    assert reason == "mineru_failed" and "ConnectionError" in detail
    assert elements == [] and report["rows_in"] == 1 and report["rejected"] == 1


def test_wait_ready_rides_out_a_health_check_that_times_out(httpserver, tmp_path):
    """A warming-up mineru-api may accept the connection and answer /v1/health late (ReadTimeout)."""
    calls = []

    def health(_request: Request) -> Response:
        calls.append(time.monotonic())
        if len(calls) == 1:
            time.sleep(2.5)  # past wait_ready's 2 s per-check timeout
        return Response("{}", content_type="application/json")

    httpserver.expect_request("/v1/health").respond_with_handler(health)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # stands in for the server process
    try:
        wait_ready(alive, httpserver.url_for("/").rstrip("/"), 20, tmp_path / "server.log")
    finally:
        alive.terminate()
        alive.wait()
    assert len(calls) >= 2


def test_a_pdf_hash_that_is_not_a_sha256_is_rejected_by_the_contract(tmp_path):
    """pdf_sha256 is data: one of 5,000 characters (once an OSError, the name being past the file
    system's length) or a path ("../x") never reaches the store; the table contract (a sha256 in
    hex) rejects each paper as bad_value, naming the column, before the stage reads it."""
    rows = [paper("long", None, tmp_path) | {"pdf_sha256": "ab" * 2500}, paper("path", None, tmp_path) | {"pdf_sha256": "../" + "a" * 61}]
    pq.write_table(pa.Table.from_pylist(rows, schema=table_schema("mcitebench_papers")), tmp_path / "papers.parquet")  # past the writers' check
    out = tmp_path / "elements.parquet"
    params = {"pdf_store": str(tmp_path / "pdfs"), "image_store": str(tmp_path / "images"), "server_url": "http://127.0.0.1:9"}
    run_stage("parse_pdfs", "--input", f"papers={tmp_path / 'papers.parquet'}", "--output", f"elements={out}", "--params", json.dumps(params))
    rejects = duckdb.connect().execute(f"select reason, detail from read_parquet('{out}.rejects.parquet') order by id").fetchall()
    assert [r for r, _ in rejects] == ["bad_value", "bad_value"]
    assert all("pdf_sha256" in detail for _, detail in rejects)
