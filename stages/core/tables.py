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

Temp files are `.<target name>.<random>.tmp` beside their target, locked (flock) while their
writer lives. `commit_together` renames several at once, all or none; `sweep_stale_temps`
removes the temps of given targets that a killed run left (older than the sweeping run, and not
locked, so never one a live process is writing).
"""
from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
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
        self._fd, self._tmp = temp_beside(self.path)  # the fd holds the temp's lock until commit/abort
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

    def finish(self) -> tuple[Path, Path]:
        """Complete the temp file; (temp, target) for `commit_together`."""
        self._flush()
        self._writer.close()
        os.chmod(self._tmp, 0o644)
        return self._tmp, self.path

    def commit(self) -> None:
        commit_together([self.finish()])
        self.release()

    def abort(self) -> None:
        try:
            self._writer.close()
        finally:
            self._tmp.unlink(missing_ok=True)
            self.release()

    def release(self) -> None:
        """Drop the temp's lock (after a commit renamed it, or an abort removed it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


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
    tmp = stage_bytes(path, data)
    try:
        commit_together([(tmp, Path(path))])
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def stage_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """`data` in a complete temp file beside `path`, for `commit_together`."""
    fd, tmp = temp_beside(Path(path))
    try:
        with os.fdopen(fd, "wb") as fh:  # closing it drops the lock: the file is complete
            fh.write(data)
        os.chmod(tmp, 0o644)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def temp_beside(path: Path) -> tuple[int, Path]:
    """A new temp file `.<name>.<random>.tmp` in `path`'s folder (created if missing), with an
    exclusive lock on the returned fd: `sweep_stale_temps` leaves it alone while the fd is open."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd, Path(tmp)


def commit_together(staged: list[tuple[Path, Path]]) -> None:
    """Rename every (temp, target) into place, all or none. A target that already exists is first
    hard-linked aside (so it never vanishes); if a rename fails, the targets already renamed get
    their old file back (or are removed when there was none) and the error is raised. A kill mid-way can leave a mix of old and new targets
    but no partial file, and temps that a later sweep removes."""
    done: list[tuple[Path, Path | None]] = []  # (target, where its old file went)
    try:
        for tmp, target in staged:
            target, backup = Path(target), None
            if len(staged) > 1 and os.path.lexists(target):  # keep the old file under a second name; the target never vanishes
                backup = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
                os.link(target, backup, follow_symlinks=False)
            done.append((target, backup))
            os.replace(tmp, target)
    except BaseException:
        for target, backup in reversed(done):
            if backup is None:
                Path(target).unlink(missing_ok=True)
            else:
                os.replace(backup, target)
        raise
    for _, backup in done:
        if backup is not None:
            backup.unlink(missing_ok=True)


def sweep_stale_temps(targets: Iterable[str | os.PathLike], before: float) -> list[Path]:
    """Remove the temps of `targets` (`.<name>.<random>.tmp`, files or folders) that a killed run
    left: only those last modified before `before` (the sweeping run's start) whose lock nobody
    holds. Returns what was removed."""
    removed = []
    for target in map(Path, targets):
        pattern = re.compile(rf"\.{re.escape(target.name)}\.[A-Za-z0-9_]{{8}}\.tmp")
        try:
            candidates = [p for p in target.parent.iterdir() if pattern.fullmatch(p.name)]
        except FileNotFoundError:
            continue
        for tmp in candidates:
            try:
                if tmp.lstat().st_mtime >= before:
                    continue
                if tmp.is_dir():
                    shutil.rmtree(tmp)
                else:
                    with open(tmp, "rb") as fh:
                        try:
                            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        except BlockingIOError:
                            continue  # a live writer holds it
                        tmp.unlink()
            except FileNotFoundError:
                continue
            removed.append(tmp)
    return removed
