"""attribution_inputs through its CLI: the items JSONL becomes attr_items, every malformed line a
reject with its reason, rows in = rows out + rejected."""
import json

import pyarrow.parquet as pq

from attribution_fixtures import LINES, make_items


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
