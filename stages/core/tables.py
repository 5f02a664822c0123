"""Table schemas and atomic Parquet writes.

Every table a stage writes has a schema file `schemas/tables/<table>.yaml`:

    table: reddit_posts
    description: one row per kept image post
    columns:
      id: string                      # column: type
      images: list<string>
      comments: list<struct<id:string, score:int64>>

Types: string, int32, int64, float32, float64, bool, binary, timestamp,
list<T>, struct<name:T, ...>, map<K,V>.

The file also states the table's contract beyond types (all optional):

    key: id                         # the column(s) naming a row: unique and never null or empty
    nullable: [body, items.caption] # the columns (and struct fields) that may be null; no other may
    values:                         # the allowed values of an enumerated column (of a list's items)
      modality: [text, image]
    range:                          # inclusive bounds of a numeric column (of a list's items);
      score: [0, 1]                 # null = open; a ranged float is never NaN
    pattern:                        # a regular expression each value (a list's item) matches in full
      units: "[0-9]+|IMG"

values, range and pattern may name a field of a struct (or list of structs) column:
`documents.modality: [text, image]`.

    spans:                          # a list<struct<start, end, ...>> column of character offsets
      output_images: response       # into a text column: each item 0 <= start <= end <= the
                                    # text's length, in order, none overlapping the one before

    repeats: same_row               # a row repeated whole is one row (the shards of a table may
                                    # each hold it: a document two shards retrieved)

With `repeats: same_row`, reading keeps the first of rows equal in every column and counts the
others (`repeated_rows`), before the contract is checked: a repeated key with other values is
still a duplicate_id. Its columns must be flat (no list, struct or map).

"Not null" covers a list's items too (a list column that may not be null holds no null item), and
the fields of a struct column (or of a list of structs): each may not be null unless `nullable`
names it as `<column>.<field>`. A struct column that may be null is checked field by field where
it is not null.
Writing checks the data against the schema and the contract, and a mismatch fails with the table
and column named (a stage that writes a row its own contract forbids is a bug). Reading through
the runner (stages.core.stage.Context.read) rejects each input row that breaks the contract
with one of CONTRACT_REJECTS, before the stage sees it. Writes go to a temp file in the same
folder and are renamed into place on commit, so a killed stage never leaves a partial table.

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
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
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


# The runner's own reject reasons: an input row that breaks its table's contract never reaches
# the stage. Every stage may write these besides the reasons it declares.
CONTRACT_REJECTS = {
    "null_column": "a column its table declares not null is null, or a list column holds a null item",
    "bad_value": "a value outside its column's declared values or range, a NaN where a range is declared, or an empty key",
    "duplicate_id": "the row's key (the table's declared key columns) repeats an earlier row of the input; the first is kept",
}


@dataclass(frozen=True)
class Contract:
    """What a table promises beyond types (module docstring)."""

    table: str
    columns: tuple[str, ...]
    key: tuple[str, ...] = ()
    nullable: frozenset[str] = frozenset()
    values: dict[str, frozenset] = field(default_factory=dict)
    ranges: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    patterns: dict[str, str] = field(default_factory=dict)
    same_row_repeats: bool = False  # `repeats: same_row`: a row repeated whole is read once
    spans: dict[str, str] = field(default_factory=dict)  # span column -> the text column its offsets index


@lru_cache(maxsize=None)
def _load(table: str) -> tuple[pa.Schema, Contract]:
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
    schema = pa.schema(fields, metadata={"citeforge.table": table})
    key = spec.get("key") or ()
    key = (key,) if isinstance(key, str) else tuple(key)
    contract = Contract(table, tuple(schema.names), key, frozenset(spec.get("nullable") or ()),
                        {c: frozenset(v) for c, v in (spec.get("values") or {}).items()},
                        {c: (lo, hi) for c, (lo, hi) in (spec.get("range") or {}).items()},
                        {c: str(rx) for c, rx in (spec.get("pattern") or {}).items()},
                        spec.get("repeats") == "same_row", {c: str(t) for c, t in (spec.get("spans") or {}).items()})
    if spec.get("repeats") not in (None, "same_row"):
        raise SchemaError(f"{path}: repeats must be same_row, got {spec.get('repeats')!r}")
    nested_columns = [f.name for f in schema if pa.types.is_nested(f.type)]
    if contract.same_row_repeats and nested_columns:
        raise SchemaError(f"{path}: repeats: same_row needs flat columns; {nested_columns} are not")
    for what, columns in (("key", contract.key), ("nullable", contract.nullable), ("values", contract.values),
                          ("range", contract.ranges), ("pattern", contract.patterns)):
        nested = what != "key"  # these may name a struct's field: "documents.modality"
        unknown = sorted(c for c in columns if (_field_type(schema, c) if nested else (c if c in schema.names else None)) is None)
        if unknown:
            raise SchemaError(f"{path}: {what} names columns {unknown} that the table does not have")
    clash = sorted(set(contract.key) & contract.nullable)
    if clash:
        raise SchemaError(f"{path}: key columns {clash} cannot be nullable")
    for column in (*contract.values, *contract.ranges, *contract.patterns):
        base = _item_type(_field_type(schema, column))
        if column in contract.ranges and not (pa.types.is_integer(base) or pa.types.is_floating(base)):
            raise SchemaError(f"{path}: range of column {column!r}, which is {_field_type(schema, column)}, not numeric")
        if column in contract.patterns and not pa.types.is_string(base):
            raise SchemaError(f"{path}: pattern of column {column!r}, which is {_field_type(schema, column)}, not text")
    for column, text in contract.spans.items():
        item = _item_type(schema.field(column).type) if column in schema.names else None
        offsets = item is not None and pa.types.is_list(schema.field(column).type) and pa.types.is_struct(item) and all(
            item.get_field_index(f) >= 0 and pa.types.is_integer(item.field(f).type) for f in ("start", "end"))
        if not offsets or text not in schema.names or not pa.types.is_string(schema.field(text).type):
            raise SchemaError(f"{path}: spans: {column!r} must be a list of structs with integer start and end, "
                              f"and {text!r} a text column of the table")
    return schema, contract


def table_schema(table: str) -> pa.Schema:
    return _load(table)[0]


def table_contract(table: str) -> Contract:
    return _load(table)[1]


table_schema.cache_clear = _load.cache_clear  # tests that swap SCHEMA_DIR clear the one cache


REJECTS_SCHEMA, REJECTS_CONTRACT = _load("rejects")  # every stage's <first output>.rejects.parquet


def _field_type(schema: pa.Schema, name: str) -> pa.DataType | None:
    """The type of a column, or of a field of a (list of) struct column named "<column>.<field>"."""
    column, _, field_name = name.partition(".")
    if column not in schema.names:
        return None
    dtype = schema.field(column).type
    if not field_name:
        return dtype
    base = _item_type(dtype)
    if not pa.types.is_struct(base) or base.get_field_index(field_name) < 0:
        return None
    return base.field(field_name).type


def _item_type(dtype: pa.DataType) -> pa.DataType:
    return dtype.value_type if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) else dtype


def _items(column: pa.ChunkedArray) -> tuple[pa.Array | pa.ChunkedArray, pa.Array | None]:
    """(values, the row of each value): a list column's items with their parent rows, else the column."""
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
        column = column.combine_chunks()  # one array: parent indices count from its first row
        return pc.list_flatten(column), pc.list_parent_indices(column)
    return column, None


def _checked_items(table: pa.Table, name: str) -> tuple[pa.Array | pa.ChunkedArray, pa.Array | None]:
    """_items of a column, or of one field of a (list of) struct column ("documents.modality")."""
    column, _, field_name = name.partition(".")
    values, parents = _items(table.column(column))
    if field_name:
        values = pc.struct_field(values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values, field_name)
    return values, parents


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def first_of_repeats(table: pa.Table, key: tuple[str, ...]) -> np.ndarray | None:
    """The rows, in order, that are the first of the rows equal to them in every column (nulls equal
    nulls): the table without its whole-row repeats; None when no key repeats (one hash pass over
    the key, not over every column, in the common case)."""
    if key and _distinct(table.select(list(key))) == table.num_rows:
        return None
    rows = table.append_column("__row", pa.array(np.arange(table.num_rows)))
    firsts = rows.group_by(table.column_names, use_threads=False).aggregate([("__row", "min")]).column("__row_min")
    return np.sort(firsts.to_numpy())


def contract_problems(table: pa.Table, contract: Contract) -> list[tuple[int, str, str]]:
    """(row, reason, detail) for each row of `table` that breaks `contract`, its first problem only,
    ordered by row: a null where none is allowed, then a value off its declared set or range (or an
    empty key), then a key that repeats an earlier good row. Arrow compute over whole columns; only
    the offending rows are looked at one by one."""
    n = table.num_rows
    taken = np.zeros(n, dtype=bool)  # rows that already have their problem
    problems: list[tuple[int, str, str]] = []

    def claim(rows, reason: str, describe) -> None:
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        rows = rows[~taken[rows]]
        if len(rows):
            taken[rows] = True
            problems.extend((int(r), reason, describe(int(r))) for r in rows)

    for name in contract.columns:  # nulls
        if name in contract.nullable:
            continue
        column = table.column(name)
        if column.null_count:
            claim(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False)), "null_column", lambda r, c=name: f"column {c!r} is null")
        values, parents = _items(column)
        if parents is not None and values.null_count:
            rows = pc.filter(parents, values.is_null()).to_numpy()
            claim(rows, "null_column", lambda r, c=name: f"column {c!r} holds a null item")
    for name in contract.columns:  # null struct fields (where the struct itself is there)
        struct_type = _item_type(table.schema.field(name).type)
        if not pa.types.is_struct(struct_type):
            continue
        structs, parents = _items(table.column(name))
        structs = structs.combine_chunks() if isinstance(structs, pa.ChunkedArray) else structs
        for f in struct_type:
            if f"{name}.{f.name}" in contract.nullable:
                continue
            null = pc.and_(structs.is_valid(), pc.struct_field(structs, f.name).is_null())
            if pc.any(null).as_py():
                at = np.flatnonzero(null.to_numpy(zero_copy_only=False))
                rows = at if parents is None else parents.to_numpy()[at]
                claim(rows, "null_column", lambda r, c=f"{name}.{f.name}": f"field {c!r} is null")
    for name in contract.key:
        column = table.column(name)
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            empty = pc.fill_null(pc.equal(column, ""), False)
            claim(np.flatnonzero(empty.to_numpy(zero_copy_only=False)), "bad_value", lambda r, c=name: f"key column {c!r} is empty")
    fields = sorted({c for c in (*contract.values, *contract.ranges, *contract.patterns) if "." in c})
    for name in (*contract.columns, *fields):  # declared values, ranges and patterns
        allowed, bounds, pattern = contract.values.get(name), contract.ranges.get(name), contract.patterns.get(name)
        if allowed is None and bounds is None and pattern is None:
            continue
        values, parents = _checked_items(table, name)
        bad = pa.array(np.zeros(len(values), dtype=bool))
        if allowed is not None:
            bad = pc.or_(bad, pc.and_(pc.is_valid(values), pc.invert(pc.is_in(values, value_set=pa.array(sorted(allowed), values.type)))))
        if bounds is not None:
            low, high = bounds
            if pa.types.is_floating(values.type):
                bad = pc.or_(bad, pc.is_nan(values))
            if low is not None:
                bad = pc.or_(bad, pc.less(values, low))
            if high is not None:
                bad = pc.or_(bad, pc.greater(values, high))
        if pattern is not None:
            bad = pc.or_(bad, pc.invert(pc.match_substring_regex(values, f"^(?:{pattern})$")))
        bad = pc.fill_null(bad, False)
        if pc.any(bad).as_py():
            at = np.flatnonzero(bad.to_numpy(zero_copy_only=False))
            rows = at if parents is None else parents.to_numpy()[at]
            first = dict(zip(rows[::-1].tolist(), values.take(pa.array(at[::-1])).to_pylist()))  # the row's first bad value
            want = " and ".join(w for w in (f"one of {sorted(allowed)}" if allowed is not None else "",
                                            f"in [{bounds[0]}, {bounds[1]}]" if bounds is not None else "",
                                            f"matching {pattern!r}" if pattern is not None else "") if w)
            item = " holds" if parents is not None else " is"
            claim(rows, "bad_value", lambda r, c=name: f"column {c!r}{item} {_show(first[r])}, not {want}")
    for name, text in contract.spans.items():  # offsets into a text column
        spans, parents = _items(table.column(name))
        if not len(spans):
            continue
        start, end = (pc.fill_null(pc.struct_field(spans, f), 0).to_numpy(zero_copy_only=False) for f in ("start", "end"))
        rows = parents.to_numpy()
        length = pc.fill_null(pc.utf8_length(table.column(text)), 0).to_numpy(zero_copy_only=False)[rows]
        outside = (start < 0) | (end < start) | (end > length)
        overlap = np.zeros(len(rows), dtype=bool)
        overlap[1:] = (rows[1:] == rows[:-1]) & (start[1:] < end[:-1])
        at = np.flatnonzero(outside | overlap)[::-1]  # the row's first bad span wins below
        first = {int(rows[i]): (int(start[i]), int(end[i]), int(length[i]), bool(outside[i])) for i in at}
        claim(rows[at], "bad_value", lambda r, c=name, t=text: (
            f"column {c!r} holds the span [{first[r][0]}, {first[r][1]}), which "
            + (f"is not within {t!r} ({first[r][2]} characters)" if first[r][3] else "starts before the one before it ends")))
    if contract.key and n:
        keys = table.select(list(contract.key)).append_column("__row", pa.array(np.arange(n)))
        if taken.any():
            keys = keys.filter(pa.array(~taken))
        if _distinct(keys.select(list(contract.key))) < keys.num_rows:  # one hash pass; the common case ends here
            groups = keys.group_by(list(contract.key), use_threads=False).aggregate([("__row", "min"), ("__row", "count")])
            repeated = groups.filter(pc.greater(groups.column("__row_count"), 1))
            first = np.zeros(n, dtype=bool)
            first[groups.column("__row_min").to_numpy()] = True
            first_of = {"|".join(map(str, (g[c] for c in contract.key))): g["__row_min"] for g in repeated.to_pylist()}
            claim(np.flatnonzero(~taken & ~first), "duplicate_id",
                  lambda r: f"key {row_key(table, contract, r)!r} repeats row {first_of[row_key(table, contract, r)]}")
    return sorted(problems)


def _distinct(keys: pa.Table) -> int:
    """How many distinct rows `keys` holds."""
    if keys.num_columns == 1:
        return len(pc.unique(keys.column(0)))
    return keys.group_by(keys.column_names, use_threads=False).aggregate([]).num_rows


def row_key(table: pa.Table, contract: Contract, row: int) -> str | None:
    """The row's key as one string (columns joined by '|'), None when a part is null or there is no key."""
    parts = [table.column(c)[row].as_py() for c in contract.key]
    if not parts or any(p is None for p in parts):
        return None
    return "|".join(map(str, parts))


def check_contract(table: pa.Table, contract: Contract) -> None:
    """Raise SchemaError naming the table, the first bad row (by its key) and the problem."""
    problems = contract_problems(table, contract)
    if problems:
        row, reason, detail = problems[0]
        more = f" (and {len(problems) - 1} more rows)" if len(problems) > 1 else ""
        raise SchemaError(f"table {contract.table!r}: row {row} ({row_key(table, contract, row) or 'no key'}): {reason}: {detail}{more}")


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

    def __init__(self, path: str | os.PathLike, schema: pa.Schema, table: str, batch_rows: int = 50_000, contract: Contract | None = None):
        self.path = Path(path)
        self.schema = schema
        self.table = table
        self.batch_rows = batch_rows
        self.rows_written = 0
        # a schema from a schema file brings its contract; an ad-hoc schema (a cache's) has none
        if contract is None:
            contract = table_contract(table) if (schema.metadata or {}).get(b"citeforge.table") == table.encode() else Contract(table, ())
        self.contract = contract
        self._batches = 0
        self._pending: list[dict] = []
        self._fd, self._tmp = temp_beside(self.path)  # the fd holds the temp's lock until commit/abort
        self._writer = pq.ParquetWriter(self._tmp, schema, compression="zstd")

    @property
    def rows_taken(self) -> int:
        """Rows handed to the writer so far, written or waiting for their batch."""
        return self.rows_written + len(self._pending)

    def write(self, row: dict) -> None:
        self._pending.append(row)
        if len(self._pending) >= self.batch_rows:
            self._flush()

    def write_many(self, rows: Iterable[dict] | pa.Table) -> None:
        if isinstance(rows, pa.Table):
            self._flush()
            self._write_batch(to_arrow(rows, self.schema, self.table))
            return
        for row in rows:
            self.write(row)

    def _flush(self) -> None:
        if self._pending:
            self._write_batch(to_arrow(self._pending, self.schema, self.table))
            self._pending = []

    def _write_batch(self, table: pa.Table) -> None:
        check_contract(table, self.contract)
        self._writer.write_table(table)
        self.rows_written += table.num_rows
        self._batches += 1

    def finish(self) -> tuple[Path, Path]:
        """Complete the temp file; (temp, target) for `commit_together`. A key repeated across
        batches (each batch was checked alone) raises SchemaError."""
        self._flush()
        self._writer.close()
        if self.contract.key and self._batches > 1:
            keys = pq.read_table(self._tmp, columns=list(self.contract.key))
            if _distinct(keys) < keys.num_rows:
                check_contract(keys, Contract(self.table, self.contract.key, self.contract.key))
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
        if not got.equals(field.type) and not _castable(got, field.type):
            raise SchemaError(f"{path} (table {table!r}): column {field.name!r} is {got}, expected {field.type}")


def _castable(got: pa.DataType, want: pa.DataType) -> bool:
    """Arrow can cast `got` to `want` (an int64 column for an int32 one, a large string for a
    string); whether every value fits is known only when the values are read."""
    try:
        pa.array([], got).cast(want)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False
    return True


def read_tables(paths: list[str] | str, schema: pa.Schema | None = None, table: str = "") -> pa.Table:
    """One Arrow table from one or many Parquet files (shards) of the same schema (an extra column
    some shards lack is null in the others); with `schema`, each of its columns cast to its
    declared type where a file holds another type. A value that does not convert (a string
    'three' for an int64) raises SchemaError naming the file and column."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not paths:
        raise ValueError("read_tables needs at least one path")
    tables = [_cast(pq.read_table(path), schema, path, table) for path in paths]
    if len(tables) == 1:
        return tables[0]
    try:
        return pa.concat_tables(tables, promote_options="default")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise SchemaError(f"{paths[0]} and the other files (table {table!r}) do not make one table: {err}") from None


BATCH_ROWS = 1 << 20  # rows a batch of read_batches: about 150 MB of rejects


def read_batches(path: str | os.PathLike, schema: pa.Schema, table: str) -> Iterator[pa.Table]:
    """One Parquet file BATCH_ROWS rows at a time, cast as read_tables casts it: for a stage that
    needs one pass over an input too large to hold at once (a harvest's rejects)."""
    for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS):
        yield _cast(pa.Table.from_batches([batch]), schema, path, table)


def _cast(data: pa.Table, schema: pa.Schema | None, path, table: str) -> pa.Table:
    """`data` with each column of `schema` cast to its declared type where it holds another."""
    for want in schema or []:
        at = data.schema.get_field_index(want.name)
        got = data.schema.field(at).type if at >= 0 else want.type
        if not got.equals(want.type):
            try:
                data = data.set_column(at, want, data.column(at).cast(want.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as err:
                raise SchemaError(f"{path} (table {table!r}): column {want.name!r} is {got}, expected {want.type}, "
                                  f"and a value does not convert: {err}") from None
    return data


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
