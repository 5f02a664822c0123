"""The human review round trip of MCiteBench construction (§3.4 evidence pairing, §3.5 quality
control; App. C.1-C.2): a stage exports a CSV sheet with one row per item and the columns a
reviewer fills in; the edited copy, named in the config, is read back by the stage that honours it.
One writer and one reader for every sheet, so every sheet has the same rules: UTF-8 CSV with a
header, the key column names the item, filled columns are checked and a bad value fails naming the
file, the line and the item.

- quality_control exports `review_sheet.csv` (decision keep | reject), release_mcitebench reads it;
- pair_evidence exports `pairing_sheet.csv` (elements: element ids to use instead of the parser's
  proposal) and reads the edited copy itself, so distractors and quality control see the pairs.

`SHEET_KINDS` says, per kind of sheet, which columns name an item and what keep and reject write,
so the review page (stages/core/review_app.py) writes the same file a person would edit by hand.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path
from dataclasses import dataclass
from typing import Callable

from .stage import StageError
from .tables import atomic_write_bytes


def write_sheet(path: str | Path, columns: list[str], rows: list[dict]) -> None:
    """The sheet, written atomically (a reader never sees half a file)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_bytes(str(path), buf.getvalue().encode("utf-8"))


def read_sheet(path: str | Path, key: str, required: list[str], check: Callable[[dict], str | None] | None = None,
               item: tuple[str, ...] | None = None) -> list[dict]:
    """The rows of an edited sheet (each with its `line` number); fails naming the file and line
    when a required column is absent or `check(row)` returns a problem. The `item` columns (default:
    `key`) name one item: a row repeating an earlier row's item is dropped when it says the same,
    and fails naming the item and both lines when it says something else (two decisions for one
    item: neither is taken over the other)."""
    try:
        fh = open(path, newline="", encoding="utf-8")
    except OSError as err:
        raise StageError(f"review sheet {path}: {err}") from None
    with fh:
        reader = csv.DictReader(fh)
        absent = [c for c in [key, *required] if c not in (reader.fieldnames or [])]
        if absent:
            raise StageError(f"review sheet {path}: needs columns {[key, *required]}, lacks {absent} (has {reader.fieldnames})")
        rows, first = [], {}
        for line, row in enumerate(reader, start=2):
            row = {k: (v or "").strip() for k, v in row.items() if k is not None}
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
    show: tuple[str, ...]  # the columns shown, in order
    proposal: str | None = None  # the column prefilling the typed value
    # DuckDB SQL over the run's catalog giving (label, image_sha256) of the item's images, with
    # $question_id and $elements (element ids named in the row) bound
    images: str | None = None
    note: str = "note"


_MC_IMAGES = """
    select coalesce(nullif(el.label, ''), x.key), el.image_sha256 from (
        select element_id, key, rank from mcitebench.evidence where question_id = $question_id
        union all select element_id, 'distractor', 100 + rank from mcitebench.distractors where question_id = $question_id
        union all select unnest($elements), 'element', 200) x
    join mcitebench.elements el on el.id = x.element_id where el.image_sha256 is not null order by x.rank"""

SHEET_KINDS = [
    SheetKind("quality control (MCiteBench §3.5)", key=("question_id",), column="decision", keep="keep", reject="reject",
              show=("question_type", "paper_id", "question", "answer", "options", "gold", "evidence", "distractors",
                    "relevance", "clarity", "evidence_alignment", "judge_reason"), images=_MC_IMAGES),
    SheetKind("evidence pairing (MCiteBench §3.4)", key=("question_id", "reference"), column="elements", keep=None, reject="none",
              show=("question_type", "paper_id", "question", "answer", "reference", "proposed", "proposed_evidence", "problem"),
              proposal="proposed", images=_MC_IMAGES),
]


def sheet_kind(columns: list[str]) -> SheetKind:
    """The kind of a sheet, from its header; fails naming the columns when none fits."""
    for kind in SHEET_KINDS:
        if {*kind.key, kind.column, kind.note} <= set(columns):
            return kind
    raise StageError(f"no review sheet kind has the columns {columns} (kinds: {[k.name for k in SHEET_KINDS]})")
