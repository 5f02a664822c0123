"""Parse each paper's PDF with MinerU into the evidence elements of MCiteBench.

Seed: mcitebench.txt §3.2 (papers parsed with MinerU into text paragraphs, images and tables, the
candidate evidence) and §3.4 (references such as "Table 3", "Section 4.2" or "Section 4.3, Line 39"
are resolved against the parsed paper, so elements carry labels, section numbers and line numbers).

MinerU runs as its own parsing API (stages/mcitebench/mineru.py): `mineru-api` started on 127.0.0.1 with
the configured tier for the run and always stopped, or a running one at `server_url` (e.g. a GPU
machine serving the model tiers). Each PDF goes to it once; its middle_json becomes elements by the
layout rules of stages/mcitebench/pdf_layout.py (margin line numbers, run-in headings, captions moved to
the right block, labels, section paths, main body vs appendix), and the figure and table crops go
to the image store.

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

from tqdm import tqdm

from stages.core.images import ImageStore, is_named_file, pdf_path
from stages.mcitebench.mineru import MINERU_REJECTS, check_pdf, mineru_service, parse_pdf
from stages.mcitebench.pdf_layout import build_elements
from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "1"


def run(ctx) -> None:
    p = ctx.params
    store = ImageStore(p["image_store"])
    todo = []
    for paper in ctx.read_rows("papers"):
        with ctx.item(paper["id"]):
            if not paper.get("pdf_sha256"):
                raise Reject("no_pdf", "the submission has no PDF")
            path = pdf_path(p["pdf_store"], paper["pdf_sha256"])
            if not is_named_file(path):
                raise Reject("pdf_not_in_store", str(path)[:300])
            check_pdf(path.read_bytes())
            todo.append(paper)
    if not todo:
        return
    with mineru_service(p["server_url"], p["tier"], p["mineru_home"], p["startup_timeout_s"]) as url:
        for paper in tqdm(todo, desc="mineru", unit="pdf"):
            with ctx.item(paper["id"], counted=False):
                parse_paper(ctx, url, paper, store)


def parse_paper(ctx, url: str, paper: dict, store: ImageStore) -> None:
    p = ctx.params
    pdf = pdf_path(p["pdf_store"], paper["pdf_sha256"]).read_bytes()
    middle, crops = parse_pdf(url, pdf, f"{paper['pdf_sha256']}.pdf", tier=p["tier"], ocr_mode=p["ocr_mode"],
                              page_range=p["page_range"], timeout=p["parse_timeout_s"])
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
        "parse_timeout_s": Param(float, 600.0, "how long one PDF may take per try (+30 s for the upload and the answer; a busy or failing server is tried 3 times)", above=0),
        "pdf_store": Param(str, "data/cache/pdfs", "content-addressed PDF store root (harvest_openreview)", folder="reads"),
        "image_store": Param(str, "data/cache/images", "image store root for figure and table crops", folder="writes"),
    },
    run=run,
    invariant=check_counts,
    rejects={
        **MINERU_REJECTS,
        "no_pdf": "the submission has no PDF",
        "pdf_not_in_store": "the submission's PDF is not in the PDF store",
        "needs_ocr_tier": "no text layer: the flash tier, or ocr_mode txt, extracts no text",
        "no_text_found": "an OCR tier found no text either",
    },
)

if __name__ == "__main__":
    STAGE.main()
