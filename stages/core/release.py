"""Releases: `<releases_dir>/<name>/<version>/` with benchmark.duckdb (materialized tables), the
same tables as Parquet under parquet/, a dataset card README.md, the tables that hold splits once
more per split under splits/<table>/<split>.parquet (what the card's configs load), and any
seed-format exports.

The version is a content hash of the release's inputs and params, so an identical rebuild gets
the same version and a changed input or setting gets a new one. The folder is assembled under a
temp name and renamed into place, so a release is either complete or absent.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from .dataset_card import citation_section, front_matter, reject_meaning, split_files
from .errors import StageError
from .tables import atomic_write_bytes, sweep_stale_temps

STARTED = time.time()  # temps older than this process are a killed run's


def manifest_folder(manifest: Path) -> Path:
    """The release folder a manifest JSON names ({"path": folder}, as the release stages write it);
    one StageError line naming the file when it is not one (not JSON, no path, a path that does
    not read)."""
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise StageError(f"release manifest {manifest}: not a readable JSON file ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("path"), str) or not data["path"]:
        raise StageError(f"release manifest {manifest} has no 'path' (the release folder)")
    folder = Path(data["path"])
    try:
        folder.stat()
    except (OSError, ValueError) as err:
        raise StageError(f"release manifest {manifest}: its path {data['path'][:200]!r} does not read ({type(err).__name__})") from None
    return folder


# DuckDB files we hand to people (releases, the catalog) are written in a storage format that
# older DuckDB readers, the duckdb CLI included, can open. v1.3.0 is also the newest format whose
# file header holds nothing random: from v1.4.0 on, DuckDB writes a random 16-byte database
# identifier (and a checksum over it) into every new file, so two identical builds would differ.
PORTABLE_STORAGE = "v1.3.0"


def connect_portable(path: str | os.PathLike, **config) -> duckdb.DuckDBPyConnection:
    """A connection that creates `path` in the portable storage format (plus DuckDB `config`)."""
    return duckdb.connect(str(path), config={"storage_compatibility_version": PORTABLE_STORAGE, **config})


@contextmanager
def portable_duckdb_file(path: str | os.PathLike, check: Callable[[str], None] | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """Build a DuckDB file for people (the catalog, an evaluation) under a temp name beside `path`;
    on success close it, run `check(temp path)` and rename it into place, else remove it."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    os.unlink(tmp)  # duckdb creates the file itself
    con = connect_portable(tmp)
    try:
        yield con
        con.close()
        if check is not None:
            check(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        con.close()
        Path(tmp).unlink(missing_ok=True)
        raise


def load_table(con: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> int:
    """Copy an input table (the rows `ctx.read` kept: its contract's rejects stay out) into table
    `name`; returns its row count, for `check_row_counts`."""
    con.register("loading", table)
    con.execute(f"create table {name} as select * from loading")
    con.unregister("loading")
    return table.num_rows


def insert_rows(con: duckdb.DuckDBPyConnection, sql: str, rows: list) -> None:
    """`sql` (an insert with placeholders) once per row; no rows inserts nothing (DuckDB's
    executemany refuses an empty list)."""
    if rows:
        con.executemany(sql, rows)


def check_row_counts(path: str, expected: dict[str, int]) -> None:
    """Reopen a written DuckDB file and compare each table's row count with its inputs'; a
    difference raises naming the tables (a `portable_duckdb_file` check)."""
    con = duckdb.connect(path, read_only=True)
    try:
        stored = {name: con.execute(f"select count(*) from {name}").fetchone()[0] for name in expected}
    finally:
        con.close()
    wrong = {name: (n, stored[name]) for name, n in expected.items() if stored[name] != n}
    if wrong:
        raise StageError(f"{path}: (input rows, stored rows) differ for {wrong}")


def file_digest(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def release_version(input_paths: list[str], params: dict) -> str:
    """Content hash of the inputs' bytes (order-independent) and the params."""
    h = hashlib.sha256()
    for digest in sorted(file_digest(p) for p in input_paths):
        h.update(digest.encode())
    h.update(json.dumps(params, sort_keys=True, default=str).encode())
    return "v-" + h.hexdigest()[:12]


def write_release(
    releases_dir: str,
    name: str,
    version: str,
    tables: dict[str, pa.Table],
    card: str,
    extra: Callable[[Path], None] | None = None,
) -> Path:
    """Assemble the release folder atomically and return its final path.

    `extra(folder)` may add seed-format exports (e.g. JSONL plus images) inside the temp folder.
    benchmark.duckdb is byte-identical for identical tables: written in PORTABLE_STORAGE (no random
    identifier) by one thread (parallel inserts lay out row groups in the order threads finish),
    under the same name (DuckDB stores the catalog's name, taken from the file's, inside it).
    """
    final = Path(releases_dir) / name / version
    final.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale_temps([final], before=STARTED)  # a killed earlier build's half folder
    tmp = Path(tempfile.mkdtemp(prefix=f".{version}.", suffix=".tmp", dir=final.parent))
    try:
        (tmp / "parquet").mkdir()
        con = connect_portable(tmp / "benchmark.duckdb", threads=1)
        try:
            for table_name, table in tables.items():
                pq.write_table(table, tmp / "parquet" / f"{table_name}.parquet", compression="zstd")
                con.register("_incoming", table)
                con.execute(f'create table "{table_name}" as select * from _incoming')
                con.unregister("_incoming")
        finally:
            con.close()
        for table_name, splits in split_files(tables).items():  # what the card's split configs load
            (tmp / "splits" / table_name).mkdir(parents=True)
            for split, rows in splits.items():
                pq.write_table(rows, tmp / "splits" / table_name / f"{split}.parquet", compression="zstd")
        (tmp / "README.md").write_text(card)
        if extra is not None:
            extra(tmp)
        if final.exists():  # same version = same content: swap the folder whole, never mix the two
            old = final.with_name(f".{version}.{secrets.token_hex(4)}.tmp")
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def write_manifest(path: str, name: str, version: str, folder: Path, tables: dict[str, pa.Table]) -> None:
    manifest = {
        "name": name,
        "version": version,
        "path": str(folder.resolve()),  # absolute: readable by stages run from any folder
        "tables": {t: tables[t].num_rows for t in tables},
    }
    atomic_write_bytes(path, json.dumps(manifest, indent=2).encode())


def reject_counts(counts: pa.Table) -> pa.Table:
    """(stage, reason, rows) over the family's rejects, from Context.count_rows's per-file counts
    of them (`stage`, `reason`, `rows`; other columns summed over): what was dropped and why."""
    with duckdb.connect() as con:
        con.register("counts", counts.select(["stage", "reason", "rows"]))
        return con.sql("select stage, reason, sum(rows)::bigint as rows from counts group by 1, 2 order by 1, 2").to_arrow_table()


def publish_release(
    ctx,
    tables: dict[str, pa.Table],
    make_card: Callable[[str, str], str],
    extra: Callable[[Path], None] | None = None,
    unsplit: str = "test",
) -> Path:
    """What every release stage ends with: count the release's unit (the first table: one row per
    question or query) as the manifest's rows and check the count invariant before anything is
    published; version the release by its stage's input files and params (not `releases_dir`,
    which says where, not what) and the declared meanings of the reasons its `reject_counts` table
    counts; write it and the manifest. `make_card(name, version)` returns the
    dataset card's body; the YAML front matter `datasets` reads and the citation are added here
    (stages/core/dataset_card.py), so every family's release loads with `datasets.load_dataset`; a
    table with a `split` column loads as its splits, any other as the one split `unsplit`."""
    ctx.count_output("manifest", next(iter(tables.values())).num_rows)
    ctx.check_invariant()
    inputs = [path for name in ctx.stage.inputs for path in ctx.input_paths(name)]
    params = {k: v for k, v in ctx.params.items() if k != "releases_dir"} | {"stage_version": ctx.stage.version}
    counts = tables.get("reject_counts")
    if counts is not None and counts.num_rows:  # the card prints the reasons' declared meanings: a new meaning is a new release
        params["reject_meanings"] = sorted({reject_meaning(s, r) for s, r in zip(counts["stage"].to_pylist(), counts["reason"].to_pylist())})
    name = ctx.params["name"]
    version = release_version(inputs, params)
    card = front_matter(name, tables, unsplit) + make_card(name, version).rstrip("\n") + citation_section(ctx.stage.name, tables, unsplit)
    folder = write_release(ctx.params["releases_dir"], name, version, tables, card, extra)
    write_manifest(ctx.output_path("manifest"), name, version, folder, tables)
    return folder


def covered(formatted: str | None, judged: int | None, total: int | None) -> str:
    """A headline number with its coverage beside it, "0.53 (12/14)": what the mean is over out of
    everything it could have been over. Nothing judged prints "n/a (0/14)", never a score: a mean
    over nothing (or a placeholder the scorer fills in) must not read as a result."""
    judged, total = judged or 0, total or 0
    return f"{formatted if judged and formatted is not None else 'n/a'} ({judged}/{total})"


def md_table(headers: list[str], rows: list[list]) -> str:
    """A GitHub-flavoured markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
