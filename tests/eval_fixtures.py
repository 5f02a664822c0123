"""Fixtures for the evaluate family's tests: a release folder made from MCiteBench's real released
records (tests/data/, copied into the test's temp dir) and hand-made rows of the
evaluate tables."""
from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

from PIL import Image

from stages.core.ids import content_id

REFERENCE = Path(__file__).parent / "data" / "mcitebench_data_example.jsonl"  # three records of MCiteBench's released data
REPO = Path(__file__).resolve().parents[1]


def reference_records() -> list[dict]:
    return [json.loads(line) for line in REFERENCE.read_text().splitlines() if line.strip()]


def tiny_jpeg(seed: int) -> bytes:
    image = Image.new("RGB", (8, 8), ((37 * seed) % 256, (91 * seed) % 256, (53 * seed) % 256))
    buf = io.BytesIO()
    image.save(buf, format="JPEG")
    return buf.getvalue()


def make_release(folder: Path, records: list[dict] | None = None, manifest: bool = True) -> Path:
    """A release folder (mcitebench.jsonl + images/) and, optionally, its manifest; returns the manifest
    path (or the folder)."""
    records = reference_records() if records is None else records
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mcitebench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    paths = set()
    for r in records:
        for item in r["evidence_contents"] + r["distractor_contents"]:
            if item.startswith("images/"):
                paths.add(item)
        paths |= set(r["idx_2_image"].values()) | set(r["idx_2_table"].values())
    for i, rel in enumerate(sorted(paths)):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(tiny_jpeg(i + 1))
    if not manifest:
        return folder
    path = folder.parent / "release.json"
    path.write_text(json.dumps({"name": "mcitebench", "version": "v-test", "path": str(folder), "tables": {}}))
    return path


def make_mcitebench_data(folder: Path, records: list[dict] | None = None) -> Path:
    """MCiteBench's released data layout: the JSONL, and each paper's images under
    visual_resources_example/<pdf_id>/images/ (as in the seed's repository); returns the JSONL path."""
    records = reference_records() if records is None else records
    folder.mkdir(parents=True, exist_ok=True)
    jsonl = folder / "data_example.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records))
    for i, r in enumerate(records):
        paths = {c for c in r["evidence_contents"] + r["distractor_contents"] if c.startswith("images/")}
        paths |= set(r["idx_2_image"].values()) | set(r["idx_2_table"].values())
        for j, rel in enumerate(sorted(paths)):
            target = folder / "visual_resources_example" / r["pdf_id"] / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(tiny_jpeg(10 * i + j + 1))
    return jsonl


def item(label: str, modality: str = "text", evidence: bool = False) -> dict:
    return {"label": label, "modality": modality, "text": None if modality != "text" else f"text of {label}",
            "image_sha256": None, "caption": None, "is_evidence": evidence}


def response_row(qid: str, response: str, gold: list[str], labels: list[str] | None = None, *, model: str = "m",
                 question_type: str = "explanation", modality: str = "text") -> dict:
    labels = labels or ["[1]", "[2]", "Figure 1", "Table 2", "[3]"]
    kinds = {"F": "figure", "T": "table"}
    return {
        "id": content_id("resp", model, qid), "model": model, "question_id": qid, "pdf_id": "p",
        "question_type": question_type, "question": "Why?", "answer": "Because.", "meta_json": "{}",
        "modality": modality, "source": "single" if len(gold) == 1 else "multi", "gold": gold,
        "items": [item(l, kinds.get(l[0], "text"), l in gold) for l in labels],
        "with_captions": False, "vision": False, "response": response, "finish_reason": "stop",
    }


def copy_repo_subset(dest: Path) -> Path:
    """The files a Snakemake run needs, copied so a test never writes into the working tree."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "rules", "stages", "schemas", "prompts", "config"):
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / name)
    return dest


def llm_params(tmp_path: Path) -> dict:
    """The embedded model with a per-test call cache and image store."""
    return {"cache": {"path": str(tmp_path / "llm.sqlite")}, "image_store": str(tmp_path / "images"), "llamacpp": {"n_ctx": 8192}}


def shrink(record: dict, chars: int = 60) -> dict:
    """The record with every text item cut to `chars` characters, its index maps kept consistent
    (keeps model calls in tests short)."""
    cut = {text: text[:chars] for text in record["text_2_idx"]}
    out = dict(record)
    out["text_2_idx"] = {cut[t]: k for t, k in record["text_2_idx"].items()}
    out["idx_2_text"] = {k: cut.get(t, t[:chars]) for k, t in record["idx_2_text"].items()}
    out["evidence_contents"] = [cut.get(c, c) for c in record["evidence_contents"]]
    out["distractor_contents"] = [cut.get(c, c) for c in record["distractor_contents"]]
    out["answer"] = record["answer"][:chars]
    return out
