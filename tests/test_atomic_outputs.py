"""Outputs are committed together or not at all, and a killed run's temp files are swept by the
next successful run of the same stage (and only those)."""
from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stages.core import tables
from stages.core.stage import Output, Param, Stage
from stages.core.tables import table_schema


@pytest.fixture
def schema_dir(tmp_path, monkeypatch):
    folder = tmp_path / "schemas"
    folder.mkdir()
    (folder / "things.yaml").write_text("table: things\ncolumns:\n  id: string\n  n: int64\n")
    monkeypatch.setattr(tables, "SCHEMA_DIR", folder)
    table_schema.cache_clear()
    yield folder
    table_schema.cache_clear()


def two_outputs(n: int) -> Stage:
    def run(ctx):
        for i in range(n):
            with ctx.item(f"t{i}"):
                ctx.write("first" if i % 2 else "second", [{"id": f"t{i}", "n": i}])

    return Stage(name="things", version="1", doc="Two tables.", inputs={},
                 outputs={"first": Output("things"), "second": Output("things")},
                 params={"tag": Param(str, "x", "unused")}, run=run)


def argv(folder: Path, second: Path | None = None) -> list[str]:
    return ["--output", f"first={folder / 'first.parquet'}", "--output", f"second={second or folder / 'second.parquet'}"]


def test_a_failure_between_renames_rolls_back_the_outputs_already_renamed(tmp_path, schema_dir):
    out = tmp_path / "out"
    two_outputs(4).main(argv(out))  # a first, complete run
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(before) == ["first.parquet", "first.parquet.rejects.parquet", "first.parquet.report.json", "second.parquet"]

    # The rerun writes 6 rows, but its second output's target turns out to be a folder: the rename
    # of `second` fails after `first` (renamed first) is in place.
    blocked = tmp_path / "elsewhere" / "second.parquet"
    blocked.mkdir(parents=True)
    (blocked / "keep").write_text("a folder in the way")
    with pytest.raises(SystemExit, match="cannot commit the outputs, none was"):
        two_outputs(6).main(argv(out, blocked))
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert after == before  # the first run's files, byte for byte: nothing of the failed run
    assert pq.read_table(out / "first.parquet").num_rows == 2
    assert [p.name for p in blocked.parent.iterdir()] == ["second.parquet"] and (blocked / "keep").exists()


def test_a_failure_between_renames_on_a_first_run_leaves_nothing(tmp_path, schema_dir):
    out = tmp_path / "out"
    blocked = out / "second.parquet"
    blocked.mkdir(parents=True)
    with pytest.raises(SystemExit, match="cannot commit"):
        two_outputs(4).main(argv(out, blocked))
    assert sorted(p.name for p in out.iterdir()) == ["second.parquet"]  # only the folder that was in the way


def test_commit_together_restores_old_files_when_a_later_rename_fails(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b"
    a.write_text("old a")
    b.mkdir()
    new_a, new_b = tables.stage_bytes(a, b"new a"), tables.stage_bytes(tmp_path / "x", b"new b")
    with pytest.raises(OSError):
        tables.commit_together([(new_a, a), (new_b, b)])
    assert a.read_text() == "old a" and b.is_dir() and not new_a.exists()
    new_a = tables.stage_bytes(a, b"new a")
    tables.commit_together([(new_a, a), (new_b, tmp_path / "c.txt")])
    assert a.read_text() == "new a" and (tmp_path / "c.txt").read_text() == "new b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b", "c.txt"]  # no backup, no temp


def test_the_next_successful_run_sweeps_only_its_own_stale_temps(tmp_path, schema_dir):
    out = tmp_path / "out"
    out.mkdir()
    old = time.time() - 3600
    killed = [out / ".first.parquet.ab12cd34.tmp", out / ".first.parquet.rejects.parquet.zz99yy88.tmp",
              out / ".second.parquet.q1w2e3r4.tmp", out / ".first.parquet.report.json.k9k9k9k9.tmp"]
    others = [out / ".other.parquet.ab12cd34.tmp",  # another stage's output
              out / "first.parquet.notes.tmp",  # not a temp name of ours
              out / ".first.parquet.fresh123.tmp"]  # modified after the run started: being written now
    for path in killed + others:
        path.write_bytes(b"half a parquet file")
        os.utime(path, (old, old))
    os.utime(others[-1], (time.time() + 60, time.time() + 60))
    live = out / ".second.parquet.live5678.tmp"  # old, but a live process holds its lock
    live.write_bytes(b"being written")
    os.utime(live, (old, old))
    with open(live, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        two_outputs(4).main(argv(out))
    names = sorted(p.name for p in out.iterdir())
    assert not any(p.name in names for p in killed)
    assert all(p.name in names for p in others) and live.name in names
    assert sorted(n for n in names if not n.startswith(".") and not n.endswith(".tmp")) == [
        "first.parquet", "first.parquet.rejects.parquet", "first.parquet.report.json", "second.parquet"]
    report = json.loads((out / "first.parquet.report.json").read_text())
    assert report["rows_in"] == 4 and report["rows_out"] == {"first": 2, "second": 2}


def test_a_failed_run_sweeps_nothing(tmp_path, schema_dir):
    out = tmp_path / "out"
    out.mkdir()
    stale = out / ".first.parquet.ab12cd34.tmp"
    stale.write_bytes(b"x")
    os.utime(stale, (1, 1))

    def run(ctx):
        raise ValueError("the stage broke")

    stage = two_outputs(0)
    stage.run = run
    with pytest.raises(ValueError):
        stage.main(argv(out))
    assert [p.name for p in out.iterdir()] == [stale.name]
