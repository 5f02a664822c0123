"""Query tables for the retrieval stages: any Parquet table (a stage output) or JSON-lines file (a
bundled sample) with an id column and a text column, read as (id, text) pairs."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.json as pajson

from .tables import read_tables


def read_queries(paths: list[str], id_column: str, text_column: str) -> list[tuple[str, str]]:
    """(id, text) for every row; raises ValueError naming the file when a column is missing."""
    out: list[tuple[str, str]] = []
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
        out.extend((str(i) if i is not None else "", t if isinstance(t, str) else "") for i, t in zip(ids, texts))
    return out
