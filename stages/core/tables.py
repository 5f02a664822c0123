"""Table schemas and atomic Parquet writes.

Every table a stage writes has a schema file `schemas/tables/<table>.yaml`:

    table: reddit_posts
    description: one row per kept image post
    columns:
      id: string                      # column: type
      images: list<string>
      comments: list<struct<id:string, score:int64>>

Types: string, int32, int64, float32, float64, bool, binary, timestamp,
list<T>, struct<name:T, ...>, map<K,V>. Writing checks the data against the schema, and a
mismatch fails with the table and column named. Writes go to a temp file in the same folder and
are renamed into place on commit, so a killed stage never leaves a partial table.
"""
from __future__ import annotations

import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Iterable

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas" / "tables"

_SCALARS = {
    "string": pa.string(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "binary": pa.binary(),
    "timestamp": pa.timestamp("s", tz="UTC"),
}


class SchemaError(ValueError):
    """Data that does not fit its table's declared schema."""


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def parse_type(spec: str) -> pa.DataType:
    """Arrow type from the schema files' type language (see module docstring)."""
    spec = spec.strip()
    if spec in _SCALARS:
        return _SCALARS[spec]
    if spec.endswith(">") and "<" in spec:
        kind, inner = spec[: spec.index("<")].strip(), spec[spec.index("<") + 1 : -1]
        if kind == "list":
            return pa.list_(parse_type(inner))
        if kind == "map":
            key, value = _split_top_level(inner)
            return pa.map_(parse_type(key), parse_type(value))
        if kind == "struct":
            fields = []
            for part in _split_top_level(inner):
                name, _, ftype = part.partition(":")
                fields.append(pa.field(name.strip(), parse_type(ftype)))
            return pa.struct(fields)
    raise SchemaError(f"unknown column type {spec!r}")


@lru_cache(maxsize=None)
def table_schema(table: str) -> pa.Schema:
    path = SCHEMA_DIR / f"{table}.yaml"
    if not path.exists():
        raise SchemaError(f"no schema file for table {table!r} (expected {path})")
    spec = yaml.safe_load(path.read_text())
    fields = []
    for column, ctype in spec["columns"].items():
        try:
            fields.append(pa.field(column, parse_type(str(ctype))))
        except SchemaError as err:
            raise SchemaError(f"{path}: column {column!r}: {err}") from None
    return pa.schema(fields, metadata={"citeforge.table": table})


REJECTS_SCHEMA = table_schema("rejects")  # every stage's <first output>.rejects.parquet


def to_arrow(rows: list[dict] | pa.Table, schema: pa.Schema, table: str) -> pa.Table:
    """Rows (or an Arrow table) checked and cast to `schema`; errors name table and column."""
    if isinstance(rows, pa.Table):
        missing = [n for n in schema.names if n not in rows.column_names]
        extra = [n for n in rows.column_names if n not in schema.names]
        if missing or extra:
            raise SchemaError(f"table {table!r}: missing columns {missing}, unexpected columns {extra}")
        columns = []
        for field in schema:
            col = rows.column(field.name)
            if not col.type.equals(field.type):
                try:
                    col = col.cast(field.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                    raise SchemaError(
                        f"table {table!r}, column {field.name!r}: expected {field.type}, got {col.type}: {err}"
                    ) from None
            columns.append(col)
        return pa.Table.from_arrays(columns, schema=schema)
    # from_pylist would turn a missing key into null and drop an unknown one, silently. Checking
    # every row's key set costs more than the conversion, so: full key check on the first row
    # (rows of one batch come from one dict literal), and a key count on all of them.
    names = set(schema.names)
    for i, row in enumerate(rows):
        if (i == 0 or len(row) != len(names)) and row.keys() != names:
            missing = sorted(names - row.keys())
            if missing:
                raise SchemaError(f"table {table!r}, column {missing[0]!r}: missing in row {i} ({_row_id(row)})")
            raise SchemaError(f"table {table!r}: unexpected columns {sorted(row.keys() - names)}")
    try:
        return pa.Table.from_pylist(rows, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
        pass
    for field in schema:  # find the column and row that do not fit, for a precise message
        values = [row[field.name] for row in rows]
        try:
            pa.array(values, type=field.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as err:
            bad = _first_bad(values, field.type)
            raise SchemaError(
                f"table {table!r}, column {field.name!r}: expected {field.type}; "
                f"row {bad[0]} ({_row_id(rows[bad[0]])}) has {bad[1]!r}: {err}"
            ) from None
    raise SchemaError(f"table {table!r}: rows do not fit the schema")


def _row_id(row: dict) -> str:
    return f"id={row.get('id')!r}" if "id" in row else "no id"


def _first_bad(values: list, dtype: pa.DataType) -> tuple[int, object]:
    for i, value in enumerate(values):
        try:
            pa.array([value], type=dtype)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
            return i, value
    return 0, values[0] if values else None


class TableWriter:
    """Streams row batches of one table into a temp Parquet file; `commit` renames it into place."""

    def __init__(self, path: str | os.PathLike, schema: pa.Schema, table: str, batch_rows: int = 50_000):
        self.path = Path(path)
        self.schema = schema
        self.table = table
        self.batch_rows = batch_rows
        self.rows_written = 0
        self._pending: list[dict] = []
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        os.close(fd)
        self._tmp = Path(tmp)
        self._writer = pq.ParquetWriter(self._tmp, schema, compression="zstd")

    def write(self, row: dict) -> None:
        self._pending.append(row)
        if len(self._pending) >= self.batch_rows:
            self._flush()

    def write_many(self, rows: Iterable[dict] | pa.Table) -> None:
        if isinstance(rows, pa.Table):
            self._flush()
            table = to_arrow(rows, self.schema, self.table)
            self._writer.write_table(table)
            self.rows_written += table.num_rows
            return
        for row in rows:
            self.write(row)

    def _flush(self) -> None:
        if self._pending:
            table = to_arrow(self._pending, self.schema, self.table)
            self._writer.write_table(table)
            self.rows_written += table.num_rows
            self._pending = []

    def commit(self) -> None:
        self._flush()
        self._writer.close()
        os.chmod(self._tmp, 0o644)
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        try:
            self._writer.close()
        finally:
            self._tmp.unlink(missing_ok=True)


def write_table(path: str | os.PathLike, rows: list[dict] | pa.Table, table: str) -> int:
    """Write a whole table atomically; returns its row count."""
    writer = TableWriter(path, table_schema(table), table)
    try:
        writer.write_many(rows)
        writer.commit()
    except BaseException:
        writer.abort()
        raise
    return writer.rows_written


def check_columns(path: str | os.PathLike, schema: pa.Schema, table: str, named: Iterable[str] = ()) -> None:
    """A Parquet file holds every column of `schema` with its type, and the `named` columns of any
    type (read from the footer only). Extra columns are allowed: a stage reads what it declares."""
    try:
        found = pq.read_schema(path)
    except (OSError, pa.ArrowInvalid) as err:
        raise SchemaError(f"{path} is not a readable Parquet file (table {table!r}): {err}") from None
    for column in named:
        if found.get_field_index(column) < 0:
            raise SchemaError(f"{path} (table {table!r}): column {column!r} is missing")
    for field in schema:
        index = found.get_field_index(field.name)
        if index < 0:
            raise SchemaError(f"{path} (table {table!r}): column {field.name!r} is missing")
        got = found.field(index).type
        if not got.equals(field.type):
            raise SchemaError(f"{path} (table {table!r}): column {field.name!r} is {got}, expected {field.type}")


def read_tables(paths: list[str] | str) -> pa.Table:
    """One Arrow table from one or many Parquet files (shards) of the same schema."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not paths:
        raise ValueError("read_tables needs at least one path")
    tables = [pq.read_table(p) for p in paths]
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
