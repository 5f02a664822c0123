"""Build the run's catalog: one DuckDB file over every stage output (docs/ARCHITECTURE.md "Storage, catalog and releases").

`data/runs/<run>/catalog.duckdb` gets one schema per benchmark family and one view per stage
output table (shards unioned), one `<stage>_rejects` view per stage over its rejects sidecars, a
`stage_reports` table per family from the report sidecars, one row per report naming the stage,
the rule that ran it (its output folder: MAVIS runs cache_images for the question images as
`cache_images` and for the fact images as `fact_cache_images`) and the output file the report
sits beside, and a `reject_reasons` table per family (stage, reason, meaning): every reason the
family's stages declare (read from the stage manifest, schemas/stages.yaml), rejected or not, so
`select * from mavis.reject_reasons` explains them all. Views use absolute paths, so the catalog
answers from any working directory. Stages never open a shared DuckDB file while others run; this
stage runs after them.

Inputs follow the run layout `data/runs/<run>/<family>/<stage>/<table>[.<shard>].parquet`; a
file that does not is a reject (`not_in_run_layout`), and so is a file whose Parquet footer does
not read (`not_parquet`). A rejects or report sidecar that does not read is left out of its view
or of `stage_reports`, with a warning, and counted (`unreadable_sidecars`). Evaluation outputs (eval_mcitebench,
eval_mavis, ...) are inputs like any stage output: the rule (rules/catalog.smk,
`_catalog_tables`) names all of them under `snakemake evaluate`, which so leaves the catalog
current, and those that exist otherwise, so the default `release` target never runs an evaluation.
Invariant: input files = files exposed by a view + rejected files.
"""
from __future__ import annotations

import collections
import functools
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from stages.core.declarations import load_manifest
from stages.core.release import portable_duckdb_file
from stages.core.stage import Input, Output, Reject, Stage, is_count, log

VERSION = "6"  # 2: evaluation tables; 3: stage_reports name the rule and output path; 4: evaluation tables are inputs; 5: reject_reasons; 6: a report whose counts do not fit is left out
_SHARD = re.compile(r"^(?P<table>.+?)(?:\.(?P<shard>\d{5}))?\.parquet$")


def _layout(path: Path) -> tuple[str, str, str]:
    match = _SHARD.match(path.name)
    if not match:
        raise Reject("not_in_run_layout", f"{path} is not a stage output (<table>[.<shard>].parquet)")
    return path.parent.parent.name, path.parent.name, match["table"]


def _readable(path: Path) -> str | None:
    """Why a Parquet file cannot be read (its footer), or None when it can."""
    try:
        pq.read_metadata(path)
    except (OSError, pa.ArrowException) as err:
        return str(err).splitlines()[0][:300] if str(err) else type(err).__name__
    return None


def _report_row(report_file: Path, rule: str) -> tuple | None:
    """A stage_reports row from a report sidecar, or None when it is not one (not JSON, a field
    missing or of another type, a count outside a BIGINT or below 0, NaN or infinity anywhere)."""
    try:
        report = json.loads(report_file.read_text())
        first_output = report_file.with_name(report_file.name.removesuffix(".report.json"))
        as_json = functools.partial(json.dumps, allow_nan=False)  # the json columns hold JSON, which has no NaN
        row = (report["stage"], rule, str(first_output), first_output.name, report["rows_in"], as_json(report["rows_out"]),
               report["rejected"], as_json(report["rejected_by_reason"]), as_json(report.get("stats", {})), report["seconds"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    types = (str, str, str, str, int, str, int, str, str, (int, float))
    if not all(isinstance(v, t) and not isinstance(v, bool) for v, t in zip(row, types)):
        return None
    return row if is_count(row[4], (int,)) and is_count(row[6], (int,)) and is_count(row[9]) else None


def _sql_list(paths: list[Path]) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in sorted(paths)) + "]"


def run(ctx):
    views: dict[tuple[str, str], list[Path]] = collections.defaultdict(list)
    stage_dirs: set[tuple[str, Path]] = set()
    for raw in ctx.input_paths("tables"):
        path = Path(raw).resolve()
        with ctx.item(str(path)):
            family, _stage, table = _layout(path)
            problem = _readable(path)
            if problem:
                raise Reject("not_parquet", f"{path}: {problem}")
            views[(family, table)].append(path)
            stage_dirs.add((family, path.parent))
    with portable_duckdb_file(ctx.output_path("catalog")) as con:
        for family in sorted({f for f, _ in views}):
            con.execute(f'create schema if not exists "{family}"')
        for (family, table), paths in sorted(views.items()):
            con.execute(f'create view "{family}"."{table}" as select * from read_parquet({_sql_list(paths)}, union_by_name=true)')
            ctx.stats["views"] += 1
            ctx.count_output("catalog", len(paths))
        reports = collections.defaultdict(list)
        for family, folder in sorted(stage_dirs):
            rejects = []
            for sidecar in sorted(folder.glob("*.rejects.parquet")):
                if _readable(sidecar):  # not an input of this stage: counted and named in the log, left out of the view
                    log.warning("%s is not a readable Parquet file; left out of %s_rejects", sidecar, folder.name)
                    ctx.stats["unreadable_sidecars"] += 1
                else:
                    rejects.append(sidecar)
            if rejects:
                con.execute(f'create view "{family}"."{folder.name}_rejects" as select * from read_parquet({_sql_list(rejects)})')
                ctx.stats["reject_views"] += 1
            for report_file in sorted(folder.glob("*.report.json")):
                row = _report_row(report_file, folder.name)
                if row is None:
                    log.warning("%s is not a stage report; left out of stage_reports", report_file)
                    ctx.stats["unreadable_sidecars"] += 1
                else:
                    reports[family].append(row)
        for family, rows in reports.items():
            con.execute(
                f'create table "{family}".stage_reports (stage varchar, rule varchar, path varchar, output varchar, rows_in bigint, '
                "rows_out json, rejected bigint, rejected_by_reason json, stats json, seconds double)"
            )
            con.executemany(f'insert into "{family}".stage_reports values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)', rows)
        manifest = load_manifest()
        for family in sorted({f for f, _ in views}):
            ran = sorted({row[0] for row in reports.get(family, [])})  # the stages whose reports the family holds
            declared = [(stage, reason, meaning) for stage in ran for reason, meaning in manifest.get(stage, {}).get("rejects", {}).items()]
            con.execute(f'create table "{family}".reject_reasons (stage varchar, reason varchar, meaning varchar)')
            if declared:
                con.executemany(f'insert into "{family}".reject_reasons values (?, ?, ?)', declared)


STAGE = Stage(
    name="build_catalog",
    version=VERSION,
    doc=__doc__,
    inputs={"tables": Input("stage output Parquet files in the run layout (any table: each becomes a view)", many=True, kind="file",
                            optional=True)},  # none: a run of evaluations only
    outputs={"catalog": Output(None, "the catalog DuckDB file")},
    params={},
    run=run,
    rejects={"not_in_run_layout": "the file is not a stage output <table>[.<shard>].parquet of the run layout",
             "not_parquet": "the file is not a readable Parquet file (its footer does not read)"},
)

if __name__ == "__main__":
    STAGE.main()
