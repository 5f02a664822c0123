"""The human review round trip of MCiteBench construction (§3.4 evidence pairing, §3.5 quality
control; App. C.1-C.2): a stage exports a CSV sheet with one row per item and the columns a
reviewer fills in; the edited copy, named in the config, is read back by the stage that honours it.
One writer and one reader for every sheet, so every sheet has the same rules: UTF-8 CSV with a
header, the key column names the item, filled columns are checked and a bad value fails naming the
file, the line and the item.

- quality_control exports `review_sheet.csv` (decision keep | reject), release_mcitebench reads it;
- pair_evidence exports `pairing_sheet.csv` (elements: element ids to use instead of the parser's
  proposal) and reads the edited copy itself, so distractors and quality control see the pairs.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path
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


def read_sheet(path: str | Path, key: str, required: list[str], check: Callable[[dict], str | None] | None = None) -> list[dict]:
    """The rows of an edited sheet (each with its `line` number); fails naming the file and line
    when a required column is absent or `check(row)` returns a problem."""
    try:
        fh = open(path, newline="", encoding="utf-8")
    except OSError as err:
        raise StageError(f"review sheet {path}: {err}") from None
    with fh:
        reader = csv.DictReader(fh)
        absent = [c for c in [key, *required] if c not in (reader.fieldnames or [])]
        if absent:
            raise StageError(f"review sheet {path}: needs columns {[key, *required]}, lacks {absent} (has {reader.fieldnames})")
        rows = []
        for line, row in enumerate(reader, start=2):
            row = {k: (v or "").strip() for k, v in row.items() if k is not None}
            problem = check(row) if check else None
            if problem:
                raise StageError(f"review sheet {path}, line {line} ({row[key]}): {problem}")
            rows.append({**row, "line": line})
    return rows
