import copy
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eval_fixtures import llm_params, make_release, reference_records, shrink
from stages.core.images import ImageStore
from stages.core.stage import Reject, StageError
from stages.core.evidence import shown
from stages.eval_mcitebench.generate_answers import STAGE, check_record, release_captions, release_file, task_items


@pytest.fixture()
def release(tmp_path):
    return make_release(tmp_path / "release" / "v1")


def items_of(record, folder, seed=42, captions=None, tmp=None):
    return task_items(record, folder, seed, captions or {}, ImageStore(tmp or folder.parent / "store"))


def test_items_labels_gold_and_modality(release):
    folder = release.parent / "v1"
    first, second, third = reference_records()
    items = items_of(first, folder)
    assert sorted(i["label"] for i in items) == ["Table 1", "Table 2", "Table 6", "[1]", "[2]"]
    assert sorted(i["label"] for i in items if i["is_evidence"]) == ["Table 2", "Table 6"]
    assert {i["modality"] for i in items if i["is_evidence"]} == {"table"}
    text = next(i for i in items if i["label"] == "[1]")
    assert text["text"].startswith("In this section, we provide empirical evidence") and text["image_sha256"] is None
    assert all(i["image_sha256"] for i in items if i["modality"] != "text")
    assert sorted(i["label"] for i in items_of(second, folder) if i["is_evidence"]) == ["Figure 1"]
    assert sorted(i["label"] for i in items_of(third, folder)) == ["Figure 1", "Figure 5", "[1]", "[2]", "[3]"]


def test_shuffle_is_seeded_per_question(release):
    folder = release.parent / "v1"
    record = reference_records()[1]
    order = lambda seed: [i["label"] for i in items_of(record, folder, seed)]  # noqa: E731
    assert order(42) == order(42)
    assert len({tuple(order(s)) for s in range(10)}) > 1  # the gold item does not sit in one fixed slot


def test_bad_records(release):
    folder = release.parent / "v1"
    record = reference_records()[0]
    unknown_text = copy.deepcopy(record)
    unknown_text["distractor_contents"][0] = "a paragraph that idx_2_text does not number"
    with pytest.raises(Reject, match="text_2_idx"):
        items_of(unknown_text, folder)
    missing = copy.deepcopy(record)
    (folder / missing["evidence_contents"][0]).unlink()
    with pytest.raises(Reject) as err:
        items_of(missing, folder)
    assert err.value.reason == "missing_image"
    no_field = {k: v for k, v in record.items() if k != "text_2_idx"}
    with pytest.raises(Reject, match="missing fields"):
        check_record(no_field)


def test_release_file_accepts_manifest_folder_and_jsonl(release, tmp_path):
    jsonl = release.parent / "v1" / "mcitebench.jsonl"
    assert release_file(str(release)) == jsonl
    assert release_file(str(jsonl.parent)) == jsonl
    assert release_file(str(jsonl)) == jsonl
    with pytest.raises(StageError, match="does not exist"):
        release_file(str(tmp_path / "nowhere"))


def test_captions_stand_in_for_images_of_a_text_only_model(release, tmp_path):
    folder = release.parent / "v1"
    record = reference_records()[1]
    figure = record["evidence_contents"][0]
    (folder / "parquet").mkdir()
    pq.write_table(pa.table({"image_sha256": [Path(figure).stem], "caption": ["Figure 1: key visualization."]}), folder / "parquet" / "elements.parquet")
    captions = release_captions(folder)
    items = items_of(record, folder, captions=captions)
    text_only, images = shown(items, vision=False, with_captions=False)
    fig = next(v for v in text_only if v["label"] == "Figure 1")
    assert fig["caption"] == "Figure 1: key visualization." and not fig["image"] and images == []
    with_vision, images = shown(items, vision=True, with_captions=False)
    fig = next(v for v in with_vision if v["label"] == "Figure 1")
    assert fig["image"] and fig["caption"] is None and len(images) == 2  # Figure 1 and the Table 3 distractor
    assert next(v for v in shown(items, vision=True, with_captions=True)[0] if v["label"] == "Figure 1")["caption"]


def test_published_records_caption_their_evidence_from_meta_data(release):
    """MCiteBench's released locating records carry the evidence image's caption in
    meta_data.img_caption (itable_caption for a table): it is the caption shown (Table 14's setting),
    with no release table of captions beside the JSONL."""
    folder = release.parent / "v1"
    locating = reference_records()[2]
    assert locating["question_type"] == "locating" and locating["meta_data"]["img_caption"].startswith("Figure 1: Initialisation")
    items = items_of(locating, folder)
    figure = next(i for i in items if i["is_evidence"])
    assert figure["label"] == "Figure 1" and figure["caption"] == locating["meta_data"]["img_caption"].strip()
    assert all(i["caption"] is None for i in items if not i["is_evidence"])  # distractors have none published
    text_only, _ = shown(items, vision=False, with_captions=True)
    assert next(v for v in text_only if v["label"] == "Figure 1")["caption"] == figure["caption"]
    # the same record with its evidence a table: the caption is itable_caption (null in this published
    # record: no caption, and img_caption is not a table's), and a table caption given is shown
    as_table = copy.deepcopy(locating)
    [evidence] = as_table["evidence_contents"]
    as_table["image_2_idx"].pop(evidence)
    as_table["table_2_idx"] = {evidence: "2"}
    as_table["evidence_keys"], as_table["evidence_modal"] = ["Table 2"], ["table"]
    assert as_table["meta_data"]["itable_caption"] is None
    table = next(i for i in items_of(as_table, folder) if i["is_evidence"])
    assert table["label"] == "Table 2" and table["caption"] is None
    assert next(v for v in shown(items_of(as_table, folder), vision=False, with_captions=True)[0] if v["label"] == "Table 2")["caption"] is None
    as_table["meta_data"]["itable_caption"] = " Table 2: Escaping times per gain. "
    assert next(i for i in items_of(as_table, folder) if i["is_evidence"])["caption"] == "Table 2: Escaping times per gain."
    as_table["meta_data"] = {**as_table["meta_data"], "itable_caption": 7}  # a non-text caption is none
    assert next(i for i in items_of(as_table, folder) if i["is_evidence"])["caption"] is None
    explanation = reference_records()[0]  # no meta_data captions: none invented
    assert all(i["caption"] is None for i in items_of(explanation, folder) if i["modality"] != "text")


def test_stage_cli_with_embedded_model(release, tmp_path):
    folder = release.parent / "v1"
    records = [shrink(r) for r in reference_records()]
    broken = copy.deepcopy(records[0])
    broken["question_id"] = "broken"
    broken["evidence_contents"] = ["images/not-there.jpg"]
    broken["image_2_idx"] = {"images/not-there.jpg": "9"}
    # the model answers two short questions (one of each type); `limit` leaves the last record unread
    lines = [json.dumps(broken), "{not json", json.dumps(records[2]), json.dumps(records[1]), json.dumps(records[0])]
    (folder / "mcitebench.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "responses.parquet"
    params = {"model": "smol", "llm": llm_params(tmp_path), "max_tokens": 8, "limit": 4}
    STAGE.main(["--input", f"release={release}", "--output", f"responses={out}", "--params", json.dumps(params)])
    rows = pq.read_table(out).to_pylist()
    report = json.loads(Path(f"{out}.report.json").read_text())
    assert report["rows_in"] == 4 and report["rows_out"]["responses"] == 2
    assert report["rejected_by_reason"] == {"bad_json": 1, "missing_image": 1}
    assert report["stats"]["llm_calls"] == 2 and report["stats"]["records_in_release"] == 5
    assert [r["question_type"] for r in rows] == ["locating", "explanation"]
    assert all(r["response"] and r["model"] == "smol" and not r["vision"] for r in rows)
    assert [r["gold"] for r in rows] == [["Figure 1"], ["Figure 1"]]
    assert json.loads(rows[0]["meta_json"])["Gold"] == "B"
    # a rerun is answered from the call cache
    STAGE.main(["--input", f"release={release}", "--output", f"responses={out}", "--params", json.dumps(params)])
    again = json.loads(Path(f"{out}.report.json").read_text())
    assert again["stats"].get("llm_calls", 0) == 0 and again["stats"]["llm_cache_hits"] == 2
    assert pq.read_table(out).to_pylist() == rows


def test_lines_that_are_json_but_not_objects_are_rejected(release, tmp_path):
    folder = release.parent / "v1"
    (folder / "mcitebench.jsonl").write_text('[1, 2]\n"a string"\n{not json\n')
    out = tmp_path / "responses.parquet"
    params = {"model": "smol", "llm": llm_params(tmp_path)}
    STAGE.main(["--input", f"release={release}", "--output", f"responses={out}", "--params", json.dumps(params)])
    report = json.loads(Path(f"{out}.report.json").read_text())
    assert report["rows_in"] == 3 and report["rows_out"]["responses"] == 0
    assert report["rejected_by_reason"] == {"bad_record": 2, "bad_json": 1}
    rejects = pq.read_table(f"{out}.rejects.parquet").to_pylist()
    assert [r["id"] for r in rejects] == ["line:1", "line:2", "line:3"]
    assert "not a JSON object" in rejects[0]["detail"] and "not JSON" in rejects[2]["detail"]
