"""The human review round trip of MCiteBench construction (§3.4 evidence pairing, §3.5 quality
control; App. C.1-C.2): a stage exports a CSV sheet with one row per item and the columns a
reviewer fills in; the edited copy, named in the config, is read back by the stage that honours it.
One writer and one reader for every sheet, so every sheet has the same rules: UTF-8 CSV with a
header (a byte-order mark, as spreadsheets save "CSV UTF-8", is read too), the key column names the
item, filled columns are checked and a bad value fails naming the file, the line and the item. A
file that is not such a CSV (another encoding, binary data, a field past MAX_FIELD_CHARS, a broken
quote) fails with one line naming the file and where.

Sheets are opened in spreadsheets, which run a cell that starts with = + - @ (or a tab or carriage
return) as a formula: a record's text such as `=HYPERLINK(...)` would become a live link or worse
(CSV/formula injection). The writer neutralises such a text value the way the OWASP guidance says,
with a leading apostrophe (the spreadsheets' mark for "this is text"); numbers such as -3 are left
alone. The reader removes that apostrophe exactly where the writer adds one, so writing a value and
reading it back gives the value again.

- quality_control exports `review_sheet.csv` (decision keep | reject), release_mcitebench reads it;
- pair_evidence exports `pairing_sheet.csv` (elements: element ids to use instead of the parser's
  proposal) and reads the edited copy itself, so distractors and quality control see the pairs;
- MAVIS's sample_annotation exports `annotation_sheet.csv` (relevant, and grounded_k per shown
  document: yes | no), release_mavis reads it (MAVIS §3.2 Step 3).

`SHEET_KINDS` says, per kind of sheet, which columns name an item and what keep and reject write,
so the review page (stages/core/review_app.py) writes the same file a person would edit by hand.
"""
from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from dataclasses import dataclass
from typing import Callable

from .stage import StageError
from .tables import atomic_write_bytes


MAX_FIELD_CHARS = 1 << 24  # one cell; csv's own default (128 KiB) is less than some evidence texts
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _quoted_by_writer(value: str) -> bool:
    """Whether the writer puts an apostrophe before `value`: it starts like a formula (after any
    apostrophes already there, so that a value that itself begins with one survives the reader)."""
    rest = value.lstrip("'")
    return rest.startswith(_FORMULA_START) and not _NUMBER.fullmatch(rest)


def escape_cell(value):
    """A value as written into a sheet: text that a spreadsheet would run as a formula gets a
    leading apostrophe; anything else (numbers, other text) is written as it is."""
    return "'" + value if isinstance(value, str) and _quoted_by_writer(value) else value


def unescape_cell(value: str) -> str:
    """A cell as read from a sheet: the writer's apostrophe removed, exactly where it put one."""
    return value[1:] if value.startswith("'") and _quoted_by_writer(value[1:]) else value


def write_sheet(path: str | Path, columns: list[str], rows: list[dict]) -> None:
    """The sheet, formula-like text neutralised, written atomically (a reader never sees half a file)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns)
    writer.writeheader()
    writer.writerows({k: escape_cell(v) for k, v in row.items()} for row in rows)
    atomic_write_bytes(str(path), buf.getvalue().encode("utf-8"))


def read_csv(path: str | Path) -> tuple[list[str], list[dict]]:
    """A sheet's header and rows (values unescaped, missing cells ""), or StageError in one line
    naming the file and what is wrong with it."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise StageError(f"review sheet {path}: {err.strerror or err}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise StageError(f"review sheet {path}: not UTF-8 (byte 0x{data[err.start]:02x} on line {line}): save it as CSV UTF-8") from None
    nul = text.find("\x00")
    if nul >= 0:
        raise StageError(f"review sheet {path}: a NUL byte on line {text.count(chr(10), 0, nul) + 1}: binary data, not a CSV sheet")
    csv.field_size_limit(max(csv.field_size_limit(), MAX_FIELD_CHARS))
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, [])
        rows = [{c: unescape_cell(v) for c, v in zip(header, values)} | {c: "" for c in header[len(values):]} for values in reader if values]
    except csv.Error as err:
        raise StageError(f"review sheet {path}, line {reader.line_num}: not a readable CSV ({err})") from None
    return header, rows


def read_sheet(path: str | Path, key: str, required: list[str], check: Callable[[dict], str | None] | None = None,
               item: tuple[str, ...] | None = None) -> list[dict]:
    """The rows of an edited sheet (each with its `line` number); fails naming the file and line
    when the file is not a UTF-8 CSV, a required column is absent or `check(row)` returns a problem.
    The `item` columns (default: `key`) name one item: a row repeating an earlier row's item is
    dropped when it says the same, and fails naming the item and both lines when it says something
    else (two decisions for one item: neither is taken over the other)."""
    header, raw = read_csv(path)
    absent = [c for c in [key, *required] if c not in header]
    if absent:
        raise StageError(f"review sheet {path}: needs columns {[key, *required]}, lacks {absent} (has {header})")
    rows, first = [], {}
    for line, row in enumerate(raw, start=2):
        row = {k: v.strip() for k, v in row.items()}
        problem = check(row) if check else None
        if problem:
            raise StageError(f"review sheet {path}, line {line} ({row[key]}): {problem}")
        name = tuple(row.get(c, "") for c in item or (key,))
        if name in first:
            earlier = first[name]
            if {k: v for k, v in earlier.items() if k != "line"} != row:
                raise StageError(f"review sheet {path}: {' / '.join(name)} is on line {earlier['line']} and again on line {line} "
                                 "with different values; keep one")
            continue
        first[name] = {**row, "line": line}
        rows.append(first[name])
    return rows


# --- the review page (stages/core/review_app.py) -------------------------------------------------
# Each kind of sheet says how one of its rows is decided, so the page writes exactly what a person
# would type into the CSV: the page and the CSV are interchangeable.
@dataclass(frozen=True)
class SheetKind:
    name: str
    key: tuple[str, ...]  # the columns naming one item
    column: str  # the column a decision fills; empty = not decided yet
    keep: str | None  # the value "keep" writes; None: the value typed on the page (prefilled from `proposal`)
    reject: str  # the value "reject" writes
    show: tuple[str, ...]  # the columns shown as fields, in order
    layout: str  # how the page lays out the item's evidence (review_app.ENTRIES): quality_control | pairing | annotation
    proposal: str | None = None  # the column prefilling the typed value
    # per shown entry k, the yes | no column a keep must fill (MAVIS: grounded_{k} for the shown
    # document doc_{k}); reject leaves them as chosen
    entry_decision: str | None = None
    note: str = "note"


SHEET_KINDS = [
    SheetKind("quality control (MCiteBench §3.5)", key=("question_id",), column="decision", keep="keep", reject="reject",
              show=("question_type", "paper_id", "question", "answer", "options", "gold", "relevance", "clarity",
                    "evidence_alignment", "judge_reason"), layout="quality_control"),
    SheetKind("evidence pairing (MCiteBench §3.4)", key=("question_id", "reference"), column="elements", keep=None, reject="none",
              show=("question_type", "paper_id", "question", "answer", "reference", "problem"), layout="pairing", proposal="proposed"),
    SheetKind("fact annotation (MAVIS §3.2 Step 3)", key=("fact_id",), column="relevant", keep="yes", reject="no",
              show=("instance_id", "domain", "question", "fact"), layout="annotation", entry_decision="grounded_{k}"),
]


def sheet_kind(columns: list[str]) -> SheetKind:
    """The kind of a sheet, from its header; fails naming the columns when none fits."""
    for kind in SHEET_KINDS:
        if {*kind.key, kind.column, kind.note} <= set(columns):
            return kind
    raise StageError(f"no review sheet kind has the columns {columns} (kinds: {[k.name for k in SHEET_KINDS]})")
