"""build_catalog: views over stage outputs (shards unioned), rejects and reports, from any folder."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from conftest import run_stage
from stages.core.tables import write_table


def test_catalog_views_answer_from_another_folder(tmp_path):
    run = tmp_path / "runs" / "demo"
    rows = [{"id": f"reddit:c{i}", "post_id": "reddit:p", "body": "b", "score": i, "author": "a", "created_utc": 1} for i in range(5)]
    paths = []
    for shard in range(2):
        path = run / "mavis" / "harvest_pushshift" / f"comments.{shard:05d}.parquet"
        write_table(path, rows[shard::2], "reddit_comments")
        paths.append(path)
    (run / "mavis" / "harvest_pushshift" / "comments.00000.parquet.report.json").write_text(json.dumps(
        {"stage": "harvest_pushshift", "rows_in": 9, "rows_out": {"comments": 5}, "rejected": 4, "rejected_by_reason": {"x": 4}, "seconds": 1.0}))
    catalog = run / "catalog.duckdb"
    stray = tmp_path / "stray.csv"
    stray.write_text("not a stage output")
    run_stage("build_catalog", *[f"--input=tables={p}" for p in paths], f"--input=tables={stray}", f"--output=catalog={catalog}")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    query = (
        "import duckdb, sys; c = duckdb.connect(sys.argv[1], read_only=True); "
        "print(c.execute('select count(*), sum(score) from mavis.comments').fetchone()); "
        "print(c.execute('select stage, rule, path, output, rows_in, rejected from mavis.stage_reports').fetchone())"
    )
    out = subprocess.run([sys.executable, "-c", query, str(catalog)], cwd=elsewhere, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": ""}).stdout.splitlines()
    first_output = run / "mavis" / "harvest_pushshift" / "comments.00000.parquet"
    assert out == ["(5, 10)", f"('harvest_pushshift', 'harvest_pushshift', '{first_output.resolve()}', 'comments.00000.parquet', 9, 4)"]
    report = json.loads((run / "catalog.duckdb.report.json").read_text())
    assert report["rows_in"] == 3 and report["rows_out"] == {"catalog": 2} and report["rejected_by_reason"] == {"not_in_run_layout": 1}
    assert report["stats"]["views"] == 1


def test_reject_reasons_explain_every_declared_reason_of_the_stages_that_ran(tmp_path):
    """`<family>.reject_reasons` lists what the family's stages declare, rejected or not, with meanings."""
    import duckdb

    from stages.core.declarations import load_manifest

    run = tmp_path / "runs" / "demo"
    comments = run / "mavis" / "harvest_pushshift" / "comments.00000.parquet"
    write_table(comments, [{"id": "reddit:c1", "post_id": "reddit:p", "body": "b", "score": 1, "author": "a", "created_utc": 1}], "reddit_comments")
    (run / "mavis" / "harvest_pushshift" / "comments.00000.parquet.report.json").write_text(json.dumps(
        {"stage": "harvest_pushshift", "rows_in": 2, "rows_out": {"comments": 1}, "rejected": 1, "rejected_by_reason": {"nsfw": 1}, "seconds": 1.0}))
    catalog = run / "catalog.duckdb"
    run_stage("build_catalog", f"--input=tables={comments}", f"--output=catalog={catalog}")
    con = duckdb.connect(str(catalog), read_only=True)
    declared = load_manifest()["harvest_pushshift"]["rejects"]
    assert con.execute("select reason, meaning from mavis.reject_reasons where stage = 'harvest_pushshift' order by reason").fetchall() == sorted(declared.items())
    assert con.execute("select count(*) from mavis.reject_reasons where stage <> 'harvest_pushshift'").fetchone()[0] == 0
    assert "nsfw" in declared and "truncated_frame" in declared  # every declared reason, not only those rejected


def test_evaluation_tables_are_inputs_like_stage_outputs(tmp_path):
    """An evaluation output in the run layout gets its view under its own schema (eval_mavis); which
    ones the catalog reads is the rule's choice (rules/catalog.smk _catalog_tables: all of them
    under `evaluate`, the existing ones otherwise; tests/test_evaluate_reruns.py)."""
    import duckdb

    run = tmp_path / "runs" / "demo"
    comments = run / "mavis" / "harvest_pushshift" / "comments.00000.parquet"
    write_table(comments, [{"id": "reddit:c1", "post_id": "reddit:p", "body": "b", "score": 1, "author": "a", "created_utc": 1}], "reddit_comments")
    summary = run / "eval_mavis" / "mavis_score" / "summary.00000.parquet"
    write_table(summary, [{"model": "m", "split": "test", "setting": "multi", "method": "vanilla", "scoring": "strict", "metric": "recall",
                           "value": 0.5, "n": 2, "missing": 0, "note": None}], "mavis_eval_summary")
    catalog = run / "catalog.duckdb"
    run_stage("build_catalog", f"--input=tables={comments}", f"--input=tables={summary}", f"--output=catalog={catalog}")
    con = duckdb.connect(str(catalog), read_only=True)
    assert con.execute("select model, metric, value from eval_mavis.summary").fetchall() == [("m", "recall", 0.5)]
    assert con.execute("select count(*) from mavis.comments").fetchone()[0] == 1
    report = json.loads((run / "catalog.duckdb.report.json").read_text())
    assert report["rows_in"] == 2 and report["rows_out"] == {"catalog": 2}


def test_stage_reports_tell_two_runs_of_one_stage_apart(tmp_path):
    """MAVIS runs cache_images twice (question images, fact images): each report row names its rule
    and the output it sits beside (issue 33 item 8)."""
    import duckdb

    run = tmp_path / "runs" / "demo"
    paths = []
    for rule, n in (("cache_images", 3), ("fact_cache_images", 7)):
        path = run / "mavis" / rule / "images_cached.00000.parquet"
        write_table(path, [], "images_cached")
        (path.parent / f"{path.name}.report.json").write_text(json.dumps(
            {"stage": "cache_images", "rows_in": n, "rows_out": {"images": n}, "rejected": 0, "rejected_by_reason": {}, "seconds": 0.1}))
        paths.append(path)
    run_stage("build_catalog", *[f"--input=tables={p}" for p in paths], f"--output=catalog={run / 'catalog.duckdb'}")
    with duckdb.connect(str(run / "catalog.duckdb"), read_only=True) as con:
        rows = con.execute("select stage, rule, path, rows_in from mavis.stage_reports order by rule").fetchall()
    assert rows == [("cache_images", "cache_images", str(paths[0].resolve()), 3),
                    ("cache_images", "fact_cache_images", str(paths[1].resolve()), 7)]


def test_files_that_do_not_read_are_rejected_or_left_out_not_a_crash(tmp_path):
    """An output file whose Parquet footer does not read (empty, garbage) is its not_parquet reject;
    a rejects sidecar that does not read and a report sidecar that is not JSON or lacks a field are
    left out of their views, counted in unreadable_sidecars; the readable files still make the catalog."""
    folder = tmp_path / "data" / "runs" / "r" / "mavis" / "filter_questions"
    folder.mkdir(parents=True)
    good, garbage, empty = (folder / f"questions.0000{k}.parquet" for k in range(3))
    pq.write_table(pa.table({"id": ["a"]}), good)
    garbage.write_bytes(b"PAR1 not a table PAR1")
    empty.write_bytes(b"")
    (folder / "questions.00000.parquet.rejects.parquet").write_bytes(b"junk")
    (folder / "questions.00000.parquet.report.json").write_text("{not json")
    (folder / "questions.00001.parquet.report.json").write_text(json.dumps({"stage": "filter_questions", "rows_in": "many"}))
    out = tmp_path / "catalog.duckdb"
    run_stage("build_catalog", *[a for f in (good, garbage, empty) for a in ("--input", f"tables={f}")], "--output", f"catalog={out}")
    with duckdb.connect(str(out), read_only=True) as con:
        assert con.execute("select id from mavis.questions").fetchall() == [("a",)]
        assert con.execute("select count(*) from information_schema.tables where table_name = 'stage_reports'").fetchone() == (0,)
    rejects = {r["id"]: r["reason"] for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()}
    assert rejects == {str(garbage.resolve()): "not_parquet", str(empty.resolve()): "not_parquet"}
    report = json.loads(Path(f"{out}.report.json").read_text())
    assert report["stats"]["unreadable_sidecars"] == 3 and report["rows_in"] == 3


def test_a_report_whose_counts_do_not_fit_its_columns_is_left_out(tmp_path):
    """stage_reports holds BIGINT counts and JSON: a sidecar counting past a BIGINT or below 0, or
    holding NaN or infinity, is left out and counted (it crashed the insert, or stored text that is
    no JSON); a plain one beside it is kept."""
    folder = tmp_path / "data" / "runs" / "r" / "mavis" / "filter_questions"
    folder.mkdir(parents=True)
    base = {"stage": "filter_questions", "rows_in": 1, "rows_out": {"questions": 1}, "rejected": 0, "rejected_by_reason": {}, "stats": {}, "seconds": 1.0}
    odd = [{"rows_in": 10**30}, {"rejected": -1}, {"stats": {"x": float("nan")}}, {"rejected_by_reason": {"a": float("inf")}}, {"seconds": float("nan")}, {}]
    tables = []
    for k, fields in enumerate(odd):
        table = folder / f"questions.{k:05d}.parquet"
        pq.write_table(pa.table({"id": [f"q{k}"]}), table)
        (folder / f"{table.name}.report.json").write_text(json.dumps({**base, **fields}))
        tables += ["--input", f"tables={table}"]
    out = tmp_path / "catalog.duckdb"
    run_stage("build_catalog", *tables, "--output", f"catalog={out}")
    with duckdb.connect(str(out), read_only=True) as con:
        assert con.execute("select output, stats from mavis.stage_reports").fetchall() == [("questions.00005.parquet", "{}")]
    assert json.loads(Path(f"{out}.report.json").read_text())["stats"]["unreadable_sidecars"] == 5
