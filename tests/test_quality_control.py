"""quality_control with the real embedded model: every question judged or rejected, scores kept
apart from the threshold (re-deciding re-calls nothing), and the review sheet lists the kept samples."""
import csv
import json

import pyarrow.parquet as pq

from stages.core.images import ImageStore
from tests.conftest import run_stage
from tests.mcitebench_fixtures import PAPER, paper_elements, qa_row, write


def _run(tmp_path, store, name, min_score):
    out = tmp_path / name
    params = {"llm": {"cache": {"path": str(tmp_path / "llm.sqlite")}, "image_store": str(store.root)}, "min_score": min_score}
    run_stage("quality_control", "--input", f"questions={tmp_path}/sampled.parquet", "--input", f"evidence={tmp_path}/evidence.parquet",
              "--input", f"distractors={tmp_path}/distractors.parquet", "--input", f"elements={tmp_path}/elements.parquet", "--output", f"questions={out}/checked.parquet",
              "--output", f"judgements={out}/judgements.parquet", "--output", f"review_sheet={out}/review.csv",
              "--params", json.dumps(params))
    kept = pq.read_table(out / "checked.parquet").to_pylist()
    judged = pq.read_table(out / "judgements.parquet").to_pylist()
    rejects = pq.read_table(out / "checked.parquet.rejects.parquet").to_pylist()
    with open(out / "review.csv", newline="") as fh:
        sheet = list(csv.DictReader(fh))
    return kept, judged, rejects, sheet, json.loads((out / "checked.parquet.report.json").read_text())


def test_judges_decides_and_exports_the_review_sheet(tmp_path):
    store = ImageStore(tmp_path / "images")
    el = write(tmp_path / "elements.parquet", paper_elements(store), "mcitebench_elements")
    qa = write(tmp_path / "qa.parquet", [
        qa_row(PAPER, "explanation", "How much does the gate contribute?", "Removing it costs 4.1 points (Table 2; Section 4.2, Line 39).", source="t1"),
    ], "mcitebench_qa")
    run_stage("pair_evidence", "--input", f"qa={qa}", "--input", f"elements={el}",
              "--output", f"questions={tmp_path}/paired.parquet", "--output", f"evidence={tmp_path}/evidence.parquet",
              "--output", f"pairing_sheet={tmp_path}/pairing_sheet.csv")
    run_stage("sample_distractors", "--input", f"questions={tmp_path}/paired.parquet", "--input", f"evidence={tmp_path}/evidence.parquet",
              "--input", f"elements={el}", "--output", f"questions={tmp_path}/sampled.parquet",
              "--output", f"distractors={tmp_path}/distractors.parquet")

    kept, judged, rejects, sheet, report = _run(tmp_path, store, "permissive", 0)
    assert report["rows_in"] == 1 and report["stats"]["llm_calls"] == 1
    # greedy decoding is deterministic: the embedded model returns a schema-valid judgement, which threshold 0 keeps
    assert len(kept) == 1 and rejects == [] and len(judged) == 1
    (j,) = judged
    assert j["decision"] == "keep" and all(j[c] in (0, 1, 2) for c in ("relevance", "clarity", "evidence_alignment"))
    (row,) = sheet
    assert row["question_id"] == kept[0]["id"] and row["decision"] == ""
    assert row["evidence"].startswith("[Table 2] (table) Table 2: Main results") and "[Section 4.2, Line 39] (text)" in row["evidence"]
    # the whole (Q, A, E, D) sample is checked: the distractors are on the sheet (and in the prompt)
    distractors = pq.read_table(tmp_path / "distractors.parquet").to_pylist()
    assert distractors and len(row["distractors"].splitlines()) >= len(distractors) > 0
    assert report["stats"]["llm_images_not_seen"] == 1  # the table crop went along; this model reads text only

    scores = [j[c] for c in ("relevance", "clarity", "evidence_alignment")]
    kept, judged, rejects, sheet, report = _run(tmp_path, store, "strict", 2)  # the top of the 0-2 scale
    assert report["stats"].get("llm_calls", 0) == 0  # re-deciding re-calls nothing
    if min(scores) < 2:
        assert kept == [] and sheet == [] and [r["reason"] for r in rejects] == ["low_quality"] and judged[0]["decision"] == "reject"
    else:
        assert len(kept) == 1 and rejects == [] and judged[0]["decision"] == "keep"
