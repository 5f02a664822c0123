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


def _items(tmp_path, text: str | bytes, folder="items"):
    """The stage on an items file written byte for byte: (rows, {key: (reason, detail)}, report)."""
    (tmp_path / folder).mkdir(exist_ok=True)
    jsonl = tmp_path / folder / "items.jsonl"
    jsonl.write_bytes(text if isinstance(text, bytes) else text.encode())
    out = tmp_path / "items.parquet"
    run_stage("attribution_inputs", "--input", f"jsonl={jsonl}", "--output", f"source_items={out}")
    rejects = {r["id"]: (r["reason"], r["detail"]) for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()}
    return pq.read_table(out).to_pylist(), rejects, json.loads(open(f"{out}.report.json").read())


def test_lines_end_at_newline_only_and_a_bom_is_dropped(tmp_path):
    """JSONL lines end at "\\n" (a CRLF's "\\r" dropped): U+2028, U+0085 and a form feed, written raw
    inside a JSON string, are the string's text; the first line's byte-order mark is no bad_json."""
    sources = ["One\u2028line. Two.", "Three\x85x. Four\x0cy."]
    lines = [json.dumps({"id": f"i{n}", "source": s}, ensure_ascii=False) for n, s in enumerate(sources)]
    rows, rejects, report = _items(tmp_path, "\ufeff" + "\r\n".join(lines) + "\r\n")
    assert [r["source"] for r in rows] == sources and rejects == {}
    assert report["rows_in"] == 2


def test_an_image_must_stay_under_the_items_folder(tmp_path):
    """An image name leaving the items file's folder ("../x", an absolute path) is image_missing,
    even where the file is there; one under the folder is kept."""
    from PIL import Image

    (tmp_path / "items" / "img").mkdir(parents=True)
    for path in (tmp_path / "outside.png", tmp_path / "items" / "img" / "eye.png"):
        Image.new("RGB", (8, 8), "red").save(path)
    lines = [{"id": "in", "source": "Kept.", "image": "img/../img/eye.png"},
             {"id": "up", "source": "Up and out.", "image": "../outside.png"},
             {"id": "abs", "source": "Absolute.", "image": str(tmp_path / "outside.png")},
             {"id": "etc", "source": "A system file.", "image": "/etc/passwd"}]
    rows, rejects, _ = _items(tmp_path, "\n".join(json.dumps(line) for line in lines) + "\n")
    assert [(r["id"], r["image"]) for r in rows] == [("in", str(tmp_path / "items" / "img" / "eye.png"))]
    assert {key: reason for key, (reason, _) in rejects.items()} == {f"items.jsonl:{n}": "image_missing" for n in (2, 3, 4)}
    assert "is not under" in rejects["items.jsonl:4"][1]


def test_a_blank_id_is_a_reject(tmp_path):
    """An empty or blank id is its line's bad_field, not the stage's failure at write (nor a kept row)."""
    lines = [{"id": "", "source": "Empty id."}, {"id": " \t", "source": "Blank id."}, {"id": "ok", "source": "Kept."}]
    rows, rejects, report = _items(tmp_path, "\n".join(json.dumps(line) for line in lines) + "\n")
    assert [r["id"] for r in rows] == ["ok"]
    assert rejects == {"items.jsonl:1": ("bad_field", "'id' is blank"), "items.jsonl:2": ("bad_field", "'id' is blank")}
    assert report["rows_in"] == 3


def test_an_items_file_without_items_is_an_error_naming_it(tmp_path):
    """A blank items file (the wrong file, most likely) stops the stage with one line naming it."""
    jsonl = tmp_path / "items.jsonl"
    jsonl.write_text("\n  \n")
    result = run_stage("attribution_inputs", "--input", f"jsonl={jsonl}", "--output", f"source_items={tmp_path / 'o.parquet'}",
                       check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].endswith(f"error: no items in jsonl {jsonl}: it holds no non-blank line")
