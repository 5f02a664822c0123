"""Query tables for the retrieval stages: any Parquet table (a stage output) or JSON-lines file (a
bundled sample) with an id column and a text column, read as (id, text, where) rows. The columns
are the caller's choice, so no table schema states their contract: `check_query` does, with the
runner's reasons (stages.core.tables.CONTRACT_REJECTS)."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.json as pajson

from .stage import Reject
from .tables import read_tables


def read_queries(paths: list[str], id_column: str, text_column: str) -> list[tuple[object, object, str]]:
    """(id, text, where) for every row, `where` naming the file and row; a number is read as its
    text (an integer id 7 as '7'), anything else as it is (`check_query` judges it). Raises
    ValueError naming the file when a column is missing."""
    out: list[tuple[object, object, str]] = []
    for path in paths:
        try:
            table = pajson.read_json(path) if path.endswith((".jsonl", ".json")) else read_tables([path])
        except (OSError, pa.ArrowInvalid) as err:
            raise ValueError(f"cannot read queries from {path}: {err}") from None
        missing = [c for c in (id_column, text_column) if c not in table.column_names]
        if missing:
            raise ValueError(f"{path} has no column(s) {missing} (columns: {table.column_names})")
        ids = table.column(id_column).to_pylist()
        texts = table.column(text_column).to_pylist()
        name = Path(path).name
        out.extend((_text(i), _text(t), f"{name} row {n}") for n, (i, t) in enumerate(zip(ids, texts)))
    return out


def _text(value):
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def check_query(query_id, text, where: str, seen: set[str], id_column: str, text_column: str, use: str) -> None:
    """Raise Reject when a query row cannot be `use`d (asked, searched): a null, empty or non-text
    id, a null or non-text text (the runner's reasons), an id already in `seen` (duplicate_query:
    the first row is used), a text of only whitespace (empty_query). Adds the id to `seen`."""
    for column, value in ((id_column, query_id), (text_column, text)):
        if value is None:
            raise Reject("null_column", f"column {column!r} is null ({where})")
        if not isinstance(value, str):
            raise Reject("bad_value", f"column {column!r} is {str(value)[:200]!r}, not text ({where})")
    if not query_id:
        raise Reject("bad_value", f"key column {id_column!r} is empty ({where})")
    if query_id in seen:
        raise Reject("duplicate_query", f"query id {query_id!r} appears again: the first row is {use}")
    seen.add(query_id)
    if not text.strip():
        raise Reject("empty_query", f"query {query_id!r} has no text in column {text_column!r}")
