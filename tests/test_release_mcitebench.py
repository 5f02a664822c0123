"""release_mcitebench: MCiteBench JSONL round-trip, Table 1 card = DuckDB over the release, review decisions."""
import csv
import io
import json
import re
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from PIL import Image

from stages.core.images import ImageStore
from stages.mcitebench.release_mcitebench import to_jpeg
from tests.conftest import run_stage
from tests.mcitebench_fixtures import PAPER, paper_elements, qa_row, write

# Field order and types of MCiteBench's released records (data/data_example.jsonl of the seed's repository).
FIELDS = {
    "question_id": str, "pdf_id": str, "question_type": str, "question": str, "answer": str,
    "evidence_keys": list, "evidence_contents": list, "evidence_modal": list, "evidence_count": int,
    "distractor_count": int, "info_count": int, "text_2_idx": dict, "idx_2_text": dict, "image_2_idx": dict,
    "idx_2_image": dict, "table_2_idx": dict, "idx_2_table": dict, "meta_data": dict, "distractor_contents": list,
}


def build(tmp_path: Path):
    """Real pair_evidence and sample_distractors runs over the hand-made paper."""
    store = ImageStore(tmp_path / "images")
    el = write(tmp_path / "elements.parquet", paper_elements(store), "mcitebench_elements")
    qas = [
        qa_row(PAPER, "explanation", "How much does the gate contribute?", "Removing it costs 4.1 points (Table 2; Section 4.2, Line 39).", source="t1"),
        qa_row(PAPER, "explanation", "How does training evolve?", "The curves in Figure 3 show it.", source="t2"),
        qa_row(PAPER, "locating", "How long does training take?", "3 hours", source=f"el:{PAPER}:1:1", evidence=[f"el:{PAPER}:1:1"],
               options=["1 hour", "3 hours", "5 hours", "8 hours"], gold="B", explanation="The paragraph says 3 hours."),
        qa_row(PAPER, "locating", "Which model is best on W-100?", "Ours", source=f"el:{PAPER}:2:5", evidence=[f"el:{PAPER}:2:5"],
               options=["Ours", "Baseline", "Both", "Neither"], gold="A", explanation="Row one of the table."),
    ]
    qa = write(tmp_path / "qa.parquet", qas, "mcitebench_qa")
    run_stage("pair_evidence", "--input", f"qa={qa}", "--input", f"elements={el}",
              "--output", f"questions={tmp_path}/paired.parquet", "--output", f"evidence={tmp_path}/evidence.parquet",
              "--output", f"pairing_sheet={tmp_path}/pairing_sheet.csv")
    run_stage("sample_distractors", "--input", f"questions={tmp_path}/paired.parquet", "--input", f"evidence={tmp_path}/evidence.parquet",
              "--input", f"elements={el}", "--output", f"questions={tmp_path}/sampled.parquet",
              "--output", f"distractors={tmp_path}/distractors.parquet", "--params", '{"min_text_chars": 40}')
    return store, el, qas


def release(tmp_path, store, el, *extra, check=True):
    manifest = tmp_path / "out" / "release.json"
    result = run_stage(
        "release_mcitebench", "--input", f"questions={tmp_path}/sampled.parquet", "--input", f"evidence={tmp_path}/evidence.parquet",
        "--input", f"distractors={tmp_path}/distractors.parquet", "--input", f"elements={el}", *extra,
        "--output", f"manifest={manifest}",
        "--params", json.dumps({"releases_dir": str(tmp_path / "releases"), "image_store": str(store.root)}), check=check)
    return (json.loads(manifest.read_text()) if check else None), result


@pytest.fixture
def built(tmp_path):
    return (tmp_path, *build(tmp_path))


def test_jsonl_round_trips_in_mcitebench_format(built):
    tmp_path, store, el, qas = built
    manifest, _ = release(tmp_path, store, el)
    folder = Path(manifest["path"])
    records = [json.loads(line) for line in (folder / "mcitebench.jsonl").read_text().splitlines()]
    assert len(records) == manifest["tables"]["questions"] == 4
    assert {r["question_type"] for r in records} == {"explanation", "locating"}
    for rec in records:
        assert list(rec) == list(FIELDS)
        for field, kind in FIELDS.items():
            assert type(rec[field]) is kind, (field, rec[field])
        assert rec["pdf_id"] == "paper1"
        assert len(rec["evidence_keys"]) == len(rec["evidence_contents"]) == rec["evidence_count"]
        assert len(rec["distractor_contents"]) == rec["distractor_count"]
        assert rec["info_count"] == rec["evidence_count"] + rec["distractor_count"] == 5
        for mapping in ("text_2_idx", "idx_2_text", "image_2_idx", "idx_2_image", "table_2_idx", "idx_2_table"):
            assert all(type(k) is str and type(v) is str for k, v in rec[mapping].items())
        assert rec["text_2_idx"] == {v: k for k, v in rec["idx_2_text"].items()}
        assert sorted(rec["idx_2_text"], key=int) == [str(k) for k in range(1, len(rec["idx_2_text"]) + 1)]
        assert rec["image_2_idx"] == {v: k for k, v in rec["idx_2_image"].items()}
        assert rec["table_2_idx"] == {v: k for k, v in rec["idx_2_table"].items()}
        # every item of the input is indexed: text by [k], figures and tables by their number
        for item in rec["evidence_contents"] + rec["distractor_contents"]:
            if item.startswith("images/"):
                assert re.fullmatch(r"images/[0-9a-f]{64}\.jpg", item)
                assert item in rec["image_2_idx"] or item in rec["table_2_idx"]
                with Image.open(folder / item) as img:
                    assert img.format == "JPEG"
            else:
                assert item in rec["text_2_idx"]
    by_q = {r["question"]: r for r in records}
    gate = by_q["How much does the gate contribute?"]
    assert gate["evidence_keys"] == ["Table 2", "Section 4.2, Line 39"]
    assert gate["evidence_contents"][0] == gate["idx_2_table"]["2"]
    assert gate["evidence_contents"][1].startswith("Section 4.2 paragraph two")
    assert gate["evidence_modal"] == ["mixed"] and gate["meta_data"] == {}
    loc = by_q["Which model is best on W-100?"]
    assert loc["meta_data"]["Gold"] == "A" and loc["meta_data"]["A"] == "Ours" and loc["meta_data"]["D"] == "Neither"
    assert loc["meta_data"]["itable_caption"] == "Table 2: Main results on W-100." and loc["meta_data"]["img_caption"] is None
    assert loc["evidence_modal"] == ["table"] and loc["evidence_keys"] == ["Table 2"]


def card_numbers(card: str) -> dict[str, str]:
    return {m[1].strip(): m[2].strip() for m in re.finditer(r"^\| (.+?) \| (.*?) \|$", card, re.M)}


def test_card_statistics_equal_duckdb_over_the_release(built):
    tmp_path, store, el, _ = built
    manifest, _ = release(tmp_path, store, el)
    folder = Path(manifest["path"])
    shown = card_numbers((folder / "README.md").read_text())
    con = duckdb.connect(str(folder / "benchmark.duckdb"), read_only=True)
    one = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
    expected = {
        "Total questions": one("select count(*) from questions"),
        "- Explanation": one("select count(*) from questions where question_type = 'explanation'"),
        "- Locating": one("select count(*) from questions where question_type = 'locating'"),
        "- Single-source": one("select count(*) from questions where evidence_count = 1"),
        "- Multi-source": one("select count(*) from questions where evidence_count > 1"),
        "- Text": one("select count(*) from questions where evidence_modality = 'text'"),
        "- Figure": one("select count(*) from questions where evidence_modality = 'figure'"),
        "- Table": one("select count(*) from questions where evidence_modality = 'table'"),
        "- Mixed": one("select count(*) from questions where evidence_modality = 'mixed'"),
        "Total papers": one("select count(distinct paper_id) from questions"),
        "Average questions per paper": one("select round(count(*) / count(distinct paper_id), 2) from questions"),
    }
    # the evidence table agrees with the question rows it summarises
    assert one("select count(*) from (select question_id, count(*) n from evidence group by 1) e join questions q on q.id = e.question_id and q.evidence_count = e.n") == expected["Total questions"]
    con.close()
    assert {k: str(v) for k, v in expected.items()} == {k: shown[k] for k in expected}
    assert expected["Total questions"] == 4 and expected["Total papers"] == 1 and expected["- Mixed"] == 1


def test_review_decisions_are_honoured(built):
    tmp_path, store, el, qas = built
    sheet = tmp_path / "review.csv"
    with open(sheet, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["question_id", "question", "decision", "note"])
        writer.writeheader()
        writer.writerow({"question_id": qas[1]["id"], "question": qas[1]["question"], "decision": "reject", "note": "figure does not show it"})
        writer.writerow({"question_id": qas[0]["id"], "question": qas[0]["question"], "decision": "Keep", "note": ""})
    manifest, _ = release(tmp_path, store, el, "--input", f"review={sheet}")
    records = [json.loads(line) for line in (Path(manifest["path"]) / "mcitebench.jsonl").read_text().splitlines()]
    assert qas[1]["id"] not in {r["question_id"] for r in records} and len(records) == 3
    rejects = pq.read_table(tmp_path / "out" / "release.json.rejects.parquet").to_pylist()
    assert [(r["id"], r["reason"], r["detail"]) for r in rejects] == [(qas[1]["id"], "human_rejected", "figure does not show it")]
    report = json.loads((tmp_path / "out" / "release.json.report.json").read_text())
    assert report["rows_in"] == 4 and report["rows_out"] == {"manifest": 3}

    with open(sheet, "a", newline="") as fh:
        csv.writer(fh).writerow([qas[2]["id"], "q", "maybe", ""])
    _, result = release(tmp_path, store, el, "--input", f"review={sheet}", check=False)
    assert result.returncode != 0 and "decision must be keep, reject or empty" in result.stderr and qas[2]["id"] in result.stderr


def test_transparent_crop_becomes_white_not_black():
    crop = Image.new("RGBA", (4, 4), (0, 0, 0, 0))  # fully transparent, black under the alpha
    crop.putpixel((0, 0), (200, 30, 30, 255))
    buf = io.BytesIO()
    crop.save(buf, format="PNG")
    data, width, height = to_jpeg(buf.getvalue(), quality=95)
    with Image.open(io.BytesIO(data)) as img:
        assert img.format == "JPEG" and (width, height) == (4, 4)
        assert min(img.convert("RGB").getpixel((3, 3))) > 240  # background flattened onto white
