"""attribution_inputs through its CLI: the items JSONL becomes attr_items, every malformed line a
reject with its reason, rows in = rows out + rejected."""
import json

import pyarrow.parquet as pq

from attribution_fixtures import LINES, make_items
from conftest import run_stage


def test_items_and_their_rejects(tmp_path):
    items = make_items(tmp_path)
    rows = pq.read_table(items).to_pylist()
    assert [r["id"] for r in rows] == ["a", "b"]
    a = rows[0]
    assert a["sentences"] == ["Doctor: Your knee is swollen.", "Patient: It hurts when I walk.", "Doctor: Take ibuprofen."]
    assert a["image_position"] == 2 and a["image"].endswith("eye.png")
    assert a["reference_citations"][1]["sources"] == ["2", "IMG"]
    rejects = {r["reason"] for r in pq.read_table(f"{items}.rejects.parquet").to_pylist()}
    assert rejects == {"bad_json", "duplicate_id", "bad_placeholder", "image_missing", "bad_field", "empty_source"}
    report = json.loads(open(f"{items}.report.json").read())
    assert report["rows_in"] == len(LINES) and report["rejected"] == len(LINES) - 2


def test_odd_citation_lists_and_image_names_are_rejects_not_crashes(tmp_path):
    """A reference whose citations are not a list, and an image name no file can have (a NUL, a
    name past the file system's length), are each their line's reject; the good line is kept."""
    lines = [{"id": "ok", "source": "One sentence."},
             {"id": "g", "source": "Citations not a list.", "reference": {"citations": 5}},
             {"id": "h", "source": "A NUL in the image name.", "image": "a\u0000b.png"},
             {"id": "i", "source": "A name too long for a file.", "image": "x" * 5000}]
    jsonl = tmp_path / "items.jsonl"
    jsonl.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    out = tmp_path / "items.parquet"
    run_stage("attribution_inputs", "--input", f"jsonl={jsonl}", "--output", f"source_items={out}")
    assert [r["id"] for r in pq.read_table(out).to_pylist()] == ["ok"]
    rejects = {r["id"]: (r["reason"], r["detail"]) for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()}
    assert rejects["items.jsonl:2"] == ("bad_field", "reference.citations must be a list, got int")
    assert rejects["items.jsonl:3"][0] == rejects["items.jsonl:4"][0] == "image_missing"
