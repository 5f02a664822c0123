"""What `snakemake evaluate` leaves behind, on the demo workflow with every output marked up to date
(conftest.make_up_to_date: Snakemake records the rules' params and inputs as if they had run):

- an evaluation reruns when what it evaluates changes: another release folder in the config, or
  the same folder whose records changed under old file times (issue 33 item 5);
- after `evaluate` the catalog is current, so `snakemake -n release` has nothing to do, and
  `evaluate` names the evaluation reports when it ends; the MAVIS evaluation's report is in
  Snakemake's HTML report (issue 33 item 6)."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import REPO, demo_config, make_up_to_date, run_snakemake

pytestmark = pytest.mark.slow


def _release(folder: Path, records: list[str]) -> Path:
    folder.mkdir(parents=True)
    (folder / "mcitebench.jsonl").write_text("\n".join(records) + "\n")
    return folder


def _config(workdir: Path, name: str, release: Path) -> str:
    config = demo_config()  # config.yaml + demo.yaml: a --configfile replaces the demo layer
    config["eval_mcitebench"]["release"] = str(release)  # MCiteBench's published records, in a folder of their own
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _planned(result) -> set[str]:
    return set(re.findall(r"^(?:local)?rule (\w+):", result.stdout, re.M))


def test_evaluate_reruns_on_another_release_and_leaves_the_catalog_current(workflow_copy):
    records = (REPO / "tests" / "data" / "mcitebench_data_example.jsonl").read_text().splitlines()
    first = _release(workflow_copy / "published" / "a", records)
    other = _release(workflow_copy / "published" / "b", records[:2])
    config = _config(workflow_copy, "first", first)
    make_up_to_date(workflow_copy, "release", "evaluate", "--configfile", config)
    # the evaluation as if it had run: Snakemake records its params and inputs (a plain touch of files does not)
    evaluated = run_snakemake(workflow_copy, "evaluate", "--configfile", config, "--touch", "--forcerun", "generate_answers")
    reports = re.findall(r"^evaluation report: (\S+)$", evaluated.stdout + evaluated.stderr, re.M)  # `evaluate` says where they are
    assert "data/runs/demo/eval_mavis/report_mavis/report.md" in reports
    assert "data/runs/demo/eval_mcitebench/report_mcitebench/report.md" in reports

    done = run_snakemake(workflow_copy, "evaluate", "--configfile", config)
    assert "Nothing to be done" in done.stdout + done.stderr
    # the evaluation's tables are in the catalog `evaluate` built: the release target has nothing to do
    again = run_snakemake(workflow_copy, "-n", "release", "--configfile", config)
    assert _planned(again) == set() and "Nothing to be done" in again.stdout + again.stderr, again.stdout[-2000:]

    # the same folder, its records changed under old file times: the release's content is a param
    stamp = os.stat(first / "mcitebench.jsonl")
    (first / "mcitebench.jsonl").write_text("\n".join(records[1:]) + "\n")
    os.utime(first / "mcitebench.jsonl", ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    changed = run_snakemake(workflow_copy, "-n", "evaluate", "--configfile", config)
    assert "generate_answers" in _planned(changed) and "Params have changed" in changed.stdout, changed.stdout[-3000:]
    # another release folder
    moved = run_snakemake(workflow_copy, "-n", "evaluate", "--configfile", _config(workflow_copy, "other", other))
    assert "generate_answers" in _planned(moved), moved.stdout[-3000:]
    assert "build_catalog" in _planned(moved)  # the catalog follows the evaluation it exposes


def test_mavis_evaluation_is_in_snakemakes_report(workflow_copy):
    make_up_to_date(workflow_copy, "report", "evaluate")
    run_snakemake(workflow_copy, "report", "evaluate", "--report", "report.html")
    html = (workflow_copy / "report.html").read_text()  # its results are keyed by path
    for name in ("report.md", "groundedness_by_modality.png", "utilisation_by_modality.png"):
        assert f'"data/runs/demo/eval_mavis/report_mavis/{name}": {{"name": "{name}"' in html, name


def _keep_times(path: Path, text: bytes) -> None:
    """New content under the file's old times: only a content version can tell."""
    stamp = os.stat(path)
    path.write_bytes(text)
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))


def test_m2rag_and_mavis_evaluations_rerun_on_what_they_read(workflow_copy):
    """eval_m2rag.release (M2RAG-Bench's published dev_set.jsonl) and eval_mavis.release (a released
    MAVIS folder, read through its benchmark.duckdb): a change of content under old file times, or
    another path, reruns the evaluation that reads it and leaves the other alone."""
    dev_set = workflow_copy / "published/m2rag/data/dev_set/dev_set.jsonl"
    dev_set.parent.mkdir(parents=True)
    dev_set.write_text('{"query_id": 1, "content": "Why is the sky blue?", "webpages": [], "aux_images": [], "level": 1}\n')
    mavis = workflow_copy / "published/mavis"
    (mavis / "parquet").mkdir(parents=True)
    (mavis / "benchmark.duckdb").write_bytes(b"db")
    (mavis / "parquet/instances.parquet").write_bytes(b"v1")
    config = demo_config()
    config["eval_m2rag"]["release"], config["eval_mavis"]["release"] = str(dev_set), str(mavis)
    path = workflow_copy / "given.yaml"
    path.write_text(yaml.safe_dump(config))
    make_up_to_date(workflow_copy, "evaluate", "--configfile", str(path))
    run_snakemake(workflow_copy, "evaluate", "--configfile", str(path), "--touch", "--forcerun", "m2rag_generate", "mavis_generate_queries")
    planned = lambda: _planned(run_snakemake(workflow_copy, "-n", "evaluate", "--configfile", str(path)))  # noqa: E731
    assert planned() == set()

    _keep_times(dev_set, dev_set.read_bytes().replace(b"sky blue", b"sea blue"))
    m2rag = planned()
    assert {"m2rag_generate", "m2rag_judge", "m2rag_report", "build_catalog"} <= m2rag and not any(r.startswith("mavis_") for r in m2rag)
    run_snakemake(workflow_copy, "evaluate", "--configfile", str(path), "--touch", "--forcerun", "m2rag_generate")
    assert planned() == set()

    _keep_times(mavis / "parquet/instances.parquet", b"v2")  # benchmark.duckdb, the file the rules name, untouched
    reading = {"mavis_generate_queries", "mavis_retrieve", "mavis_generate_answers", "mavis_judge", "mavis_retrieval_quality",
               "mavis_validate_judge"}
    changed = planned()
    assert reading <= changed and not any(r.startswith("m2rag_") for r in changed), changed

    shutil.copytree(mavis, workflow_copy / "published/mavis_b")
    config["eval_mavis"]["release"] = str(workflow_copy / "published/mavis_b")
    path.write_text(yaml.safe_dump(config))
    assert reading <= planned()
