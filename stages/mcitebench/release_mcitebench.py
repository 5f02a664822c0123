"""The MCiteBench release (MCiteBench §3.6, Table 1): the quality-checked questions with their
evidence and distractors, after the human review decisions, as

- `benchmark.duckdb` and `parquet/`: tables questions, evidence, distractors, elements (those
  used as evidence or distractors) and images;
- `README.md`: the dataset card with the statistics of the seed's Table 1 (questions by type,
  single/multi-source, evidence modality, papers, questions per paper), each computed by a DuckDB
  query over the release tables (`TABLE1_SQL`);
- `mcitebench.jsonl`: one record per question in MCiteBench's released format (question_id,
  pdf_id, question_type, question, answer, evidence_keys, evidence_contents, evidence_modal,
  evidence_count, distractor_count, info_count, text_2_idx, idx_2_text, image_2_idx, idx_2_image,
  table_2_idx, idx_2_table, meta_data, distractor_contents), figures and tables as
  `images/<sha256>.jpg` paths relative to the release (the JPEG's own hash), text items indexed
  [1..n] in reading order, figures/tables by their number; a locating question's meta_data holds
  Gold, A-D, page_idx, explanation, img_caption and itable_caption as the seed's records do.

Human review: `review` is a filled-in copy of quality_control's review sheet (CSV with
question_id and decision = keep | reject | empty). Rejected rows become rejects with reason
`human_rejected` (the note is kept); an empty decision keeps the sample. A question whose image
is missing from the image store is rejected (`image_missing`), one whose evidence or distractor
elements are missing from the elements table `unknown_evidence`.

Quotas (§3.6, Table 1): with `quotas` set (e.g. total 3000; question_type explanation 2000,
locating 1000; source_type single/multi; evidence_modality text/figure/table/mixed; seed), the
questions left after review are sampled to those counts by the seeded stratified sampler of
stages/core/quotas.py; the others are rejects `over_quota`, and the card shows target, available
and achieved per stratum. Empty `quotas` (the default) releases every question.

Inputs:  questions, evidence, distractors, elements; review (optional CSV)
Outputs: manifest (release.json: name, version, path, table row counts)
Params:  name, releases_dir, image_store, jpeg_quality, quotas
Invariant: questions in = questions released + rejected.
"""
from __future__ import annotations

import collections
import io
import json
from pathlib import Path

import duckdb
import pyarrow as pa
from PIL import Image

from stages.core.ids import sha256_hex
from stages.core.images import STORED_FORMATS, ImageStore, flatten_to_rgb
from stages.core.quotas import check_quotas, sample as quota_sample
from stages.core.release import md_table, publish_release
from stages.core.review import read_sheet
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError
from stages.core.tables import table_schema, to_arrow
from stages.core.evidence import label_key

VERSION = "2"  # 2: the card prints each reject reason's meaning
DECISIONS = {"": "keep", "keep": "keep", "reject": "reject"}

# Table 1 of the seed, one query per row, over the release tables.
TABLE1_SQL = [
    ("Total questions", "select count(*) from questions"),
    ("- Explanation", "select count(*) from questions where question_type = 'explanation'"),
    ("- Locating", "select count(*) from questions where question_type = 'locating'"),
    ("Evidence sources", None),
    ("- Single-source", "select count(*) from questions where source_type = 'single'"),
    ("- Multi-source", "select count(*) from questions where source_type = 'multi'"),
    ("Evidence modality", None),
    ("- Text", "select count(*) from questions where evidence_modality = 'text'"),
    ("- Figure", "select count(*) from questions where evidence_modality = 'figure'"),
    ("- Table", "select count(*) from questions where evidence_modality = 'table'"),
    ("- Mixed", "select count(*) from questions where evidence_modality = 'mixed'"),
    ("Total papers", "select count(distinct paper_id) from questions"),
    ("Average questions per paper", "select round(count(*) / nullif(count(distinct paper_id), 0), 2) from questions"),
]


def read_review(path: str) -> dict[str, tuple[str, str]]:
    """question_id -> (decision, note) from a filled-in review sheet; bad rows fail naming them."""
    def check(row):
        return None if row["decision"].lower() in DECISIONS else f"decision must be keep, reject or empty, got {row['decision']!r}"
    return {row["question_id"]: (DECISIONS[row["decision"].lower()], row.get("note", ""))
            for row in read_sheet(path, "question_id", ["decision"], check)}


def to_jpeg(data: bytes, quality: int) -> tuple[bytes, int, int]:
    """JPEG bytes (unchanged when already JPEG; transparency on white) and the image size."""
    with Image.open(io.BytesIO(data), formats=STORED_FORMATS) as img:
        size = img.size
        if img.format == "JPEG":
            return data, *size
        buf = io.BytesIO()
        flatten_to_rgb(img).save(buf, format="JPEG", quality=quality)
        return buf.getvalue(), *size


def table1(tables: dict[str, pa.Table]) -> list[tuple[str, object]]:
    con = duckdb.connect()
    try:
        for name, table in tables.items():
            con.register(name, table)
        return [(label, con.execute(sql).fetchone()[0] if sql else "") for label, sql in TABLE1_SQL]
    finally:
        con.close()


def card(name: str, version: str, stats: list[tuple[str, object]], rejected: dict[str, int], quotas: list[dict] | None = None,
         meanings: dict[str, str] | None = None) -> str:
    rows = [[label, "" if value is None else value] for label, value in stats]
    quota_part = [] if not quotas else [
        "## Quotas (MCiteBench Table 1 targets: target vs achieved)",
        "",
        "Seeded stratified sample of the reviewed questions (stages/core/quotas.py); `available` is what the pool offered.",
        "",
        md_table(["Dimension", "Stratum", "Target", "Available", "Achieved"],
                 [[q["dimension"], q["value"], q["target"], q["available"], q["achieved"]] for q in quotas]),
        "",
    ]
    lines = [
        f"# {name} ({version})",
        "",
        "A multimodal benchmark for generating text with citations, built as in MCiteBench (sections 3.2-3.6):",
        "explanation questions from OpenReview review-rebuttal threads whose answers cite the paper explicitly,",
        "locating multiple-choice questions generated from single elements, evidence resolved to the parsed",
        "paper elements, distractors from the same paper (evidence + distractors per question), automatic",
        "quality control and the human review sheet's decisions.",
        "",
        "## Statistics (MCiteBench Table 1, computed from the release tables)",
        "",
        md_table(["Statistic", "Number"], rows),
        "",
        *quota_part,
        "## Files",
        "",
        "- `mcitebench.jsonl`: one record per question in MCiteBench's released format; image paths are relative to this folder.",
        "- `images/<sha256>.jpg`: figure and table crops.",
        "- `benchmark.duckdb`, `parquet/`: tables questions, evidence, distractors, elements, images.",
        "",
        "## Dropped at release",
        "",
        md_table(["Reason", "Questions", "Meaning"], [[r, n, (meanings or {}).get(r, "")] for r, n in sorted(rejected.items())]) if rejected else "none",
        "",
    ]
    return "\n".join(lines)


def record(q: dict, ev: list[dict], dis: list[dict], elements: dict[str, dict], paths: dict[str, str]) -> dict:
    """One question in MCiteBench's released JSONL format."""
    def content(e):
        return e["text"] if e["modality"] == "text" else paths[e["id"]]

    items = [elements[r["element_id"]] for r in ev] + [elements[r["element_id"]] for r in dis]
    texts = [e for e in sorted(items, key=lambda e: (e["reading_order"], e["id"])) if e["modality"] == "text"]
    idx_2_text = {str(k): e["text"] for k, e in enumerate(texts, start=1)}
    visual = {"figure": {}, "table": {}}
    for e in items:
        if e["modality"] in visual:
            visual[e["modality"]][label_key(e["label"])[1]] = paths[e["id"]]
    meta = {}
    if q["question_type"] == "locating":
        first = elements[ev[0]["element_id"]]
        meta = {"Gold": q["gold"], **dict(zip("ABCD", q["options"])), "page_idx": q["page_idx"], "explanation": q["explanation"],
                "img_caption": first["caption"] if first["modality"] == "figure" else None,
                "itable_caption": first["caption"] if first["modality"] == "table" else None}
    return {
        "question_id": q["id"],
        "pdf_id": q["paper_id"].split(":", 1)[-1],
        "question_type": q["question_type"],
        "question": q["question"],
        "answer": q["answer"],
        "evidence_keys": [r["key"] for r in ev],
        "evidence_contents": [content(elements[r["element_id"]]) for r in ev],
        "evidence_modal": [q["evidence_modality"]],
        "evidence_count": len(ev),
        "distractor_count": len(dis),
        "info_count": len(ev) + len(dis),
        "text_2_idx": {text: k for k, text in idx_2_text.items()},
        "idx_2_text": idx_2_text,
        "image_2_idx": {path: n for n, path in visual["figure"].items()},
        "idx_2_image": visual["figure"],
        "table_2_idx": {path: n for n, path in visual["table"].items()},
        "idx_2_table": visual["table"],
        "meta_data": meta,
        "distractor_contents": [content(elements[r["element_id"]]) for r in dis],
    }


def run(ctx):
    p = ctx.params
    problems = check_quotas(p["quotas"])
    if problems:
        raise StageError("; ".join(problems))
    questions = ctx.read_rows("questions")
    elements = {e["id"]: e for e in ctx.read_rows("elements")}
    by_q: dict[str, dict[str, list[dict]]] = {"evidence": collections.defaultdict(list), "distractors": collections.defaultdict(list)}
    for name in by_q:
        for row in ctx.read_rows(name):
            by_q[name][row["question_id"]].append(row)
        for rows in by_q[name].values():
            rows.sort(key=lambda r: r["rank"])
    review = read_review(ctx.input_path("review")) if ctx.has_input("review") else {}
    known = {q["id"] for q in questions}
    ctx.stats["review_rows_unknown"] = sum(1 for qid in review if qid not in known)

    store, images, jpeg = ImageStore(p["image_store"]), {}, {}  # element id -> images row; path -> bytes
    released = []
    for q in questions:
        with ctx.item(q["id"]):
            decision, note = review.get(q["id"], ("keep", ""))
            if decision == "reject":
                raise Reject("human_rejected", note or "rejected in the review sheet")
            rows = by_q["evidence"][q["id"]] + by_q["distractors"][q["id"]]
            if not by_q["evidence"][q["id"]] or any(r["element_id"] not in elements for r in rows):
                raise Reject("unknown_evidence", "evidence or distractor elements missing from the elements table")
            try:
                for r in rows:
                    e = elements[r["element_id"]]
                    if e["modality"] != "text" and e["id"] not in images:
                        if e["image_sha256"] is None:  # the contract lets text go without; a figure has its crop
                            raise Reject("image_missing", f"element {e['id']} ({e['modality']}) names no image")
                        data, width, height = to_jpeg(store.read(e["image_sha256"]), p["jpeg_quality"])
                        path = f"images/{sha256_hex(data)}.jpg"
                        jpeg[path] = data
                        images[e["id"]] = {"element_id": e["id"], "image_sha256": e["image_sha256"], "path": path, "width": width, "height": height}
            except (FileNotFoundError, OSError) as err:
                raise Reject("image_missing", str(err)) from None
            released.append(q)
    candidates = {q["id"] for q in released}
    achieved = None
    if p["quotas"]:
        released, achieved = quota_sample(released, p["quotas"])
        chosen = {q["id"] for q in released}
        for qid in [q["id"] for q in questions if q["id"] in candidates and q["id"] not in chosen]:
            with ctx.item(qid, counted=False):  # counted in the loop above
                raise Reject("over_quota", "not drawn by the release quotas' stratified sample")
    evidence = [r for q in released for r in by_q["evidence"][q["id"]]]
    distractors = [r for q in released for r in by_q["distractors"][q["id"]]]
    used = sorted({r["element_id"] for r in evidence + distractors})
    paths = {eid: row["path"] for eid, row in images.items()}
    records = [record(q, by_q["evidence"][q["id"]], by_q["distractors"][q["id"]], elements, paths) for q in released]
    tables = {
        "questions": to_arrow(released, table_schema("mcitebench_questions"), "mcitebench_questions"),
        "evidence": to_arrow(evidence, table_schema("mcitebench_evidence"), "mcitebench_evidence"),
        "distractors": to_arrow(distractors, table_schema("mcitebench_distractors"), "mcitebench_distractors"),
        "elements": to_arrow([elements[e] for e in used], table_schema("mcitebench_elements"), "mcitebench_elements"),
        "images": to_arrow([images[e] for e in used if e in images], table_schema("mcitebench_images"), "mcitebench_images"),
    }

    def export(folder: Path) -> None:
        (folder / "images").mkdir()
        for path in sorted({images[e]["path"] for e in used if e in images}):
            (folder / path).write_bytes(jpeg[path])
        with open(folder / "mcitebench.jsonl", "w", encoding="utf-8") as fh:
            for rec in records:
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")

    publish_release(ctx, tables, lambda name, version: card(name, version, table1(tables), dict(ctx.rejected_by_reason), achieved, ctx.stage.rejects), export)


STAGE = Stage(
    name="release_mcitebench",
    version=VERSION,
    doc=__doc__,
    inputs={
        "questions": Input("quality-checked questions (mcitebench_questions)", many=True, table="mcitebench_questions"),
        "evidence": Input("evidence rows (mcitebench_evidence)", many=True, table="mcitebench_evidence"),
        "distractors": Input("distractor rows (mcitebench_distractors)", many=True, table="mcitebench_distractors"),
        "elements": Input("parsed paper elements (mcitebench_elements)", many=True, table="mcitebench_elements"),
        "review": Input("filled-in review sheet (CSV: question_id, decision, note)", optional=True, kind="file"),
    },
    outputs={"manifest": Output(None, "release manifest JSON (name, version, path, tables)")},
    params={
        "name": Param(str, "mcitebench", "release name: <releases_dir>/<name>/<version>/", pattern=Param.PLAIN_NAME),
        "releases_dir": Param(str, "data/releases", "where releases land", folder="writes"),
        "image_store": Param(str, "data/cache/images", "root of the image store holding the element crops", folder="reads"),
        "jpeg_quality": Param(int, 90, "JPEG quality of converted crops", min=1, max=100),
        "quotas": Param(dict, {}, "target counts (total, question_type, source_type, evidence_modality, seed); empty = release every question"),
    },
    run=run,
    rejects={
        "human_rejected": "rejected in the review sheet (the note in the detail)",
        "unknown_evidence": "evidence or distractor elements missing from the elements table",
        "image_missing": "a figure or table image is not in the image store",
        "over_quota": "not drawn by the release quotas' stratified sample",
    },
)

if __name__ == "__main__":
    STAGE.main()
