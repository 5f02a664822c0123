"""The MAVIS evaluation DAG (rules/eval_mavis.smk) on a tiny fixture release: 2 models x 2 methods
with the embedded SmolLM2 (tiny answer budgets, 2 instances, Text-RAG, K = 1); the report and the
DuckDB file hold every (model, setting, method, scoring) combination."""
from __future__ import annotations

import duckdb
import pytest
import yaml

from conftest import run_snakemake
from mavis_eval_fixtures import build_release

pytestmark = pytest.mark.slow

MODELS = ["smol-a", "smol-b"]  # the same embedded model twice: the second answers from the call cache
METHODS = ["vanilla", "cot"]


def _config(workdir, release):
    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    for family in ("mavis", "mcitebench", "m2rag", "evaluate", "citeeval", "retrieval", "images"):
        if family in config:
            config[family]["enabled"] = False
    config["run"] = "mavis-eval"
    config["eval_mavis"] = {
        "enabled": True,
        "release": str(release),
        "mavis_generate_queries": {"n_queries": 1, "limit": 2, "max_tokens": 12},
        "mavis_retrieve": {"settings": ["text"], "top_k": 1},
        "mavis_generate_answers": {"methods": METHODS, "max_tokens": 16, "extract_max_tokens": 16},
        "mavis_judge": {"max_tokens": 24},
        "judge": {"name": "smol-judge", "llm": {"max_attempts": 1}},
        "models": [{"name": name, "llm": {"max_attempts": 1}} for name in MODELS],
    }
    path = workdir / "eval_mavis.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_eval_mavis_dag_two_models_two_methods(workflow_copy):
    release = workflow_copy / "fixture-release" / "v1"
    build_release(release)
    config = _config(workflow_copy, release)
    run_snakemake(workflow_copy, "evaluate", "--configfile", str(config))
    out = workflow_copy / "data/runs/mavis-eval/eval_mavis/report_mavis"
    report = (out / "report.md").read_text()
    con = duckdb.connect(str(out / "evaluation.duckdb"), read_only=True)
    combos = set(con.execute("select model, setting, method, scoring from summary").fetchall())
    assert combos == {(m, "text", t, s) for m in MODELS for t in METHODS for s in ("strict", "reference")}
    for table in ("queries", "retrieved", "responses", "sentences", "judgements", "scores", "summary", "coverage"):
        assert con.execute(f"select count(*) from {table}").fetchone()[0] > 0, table
    # every answer is scored twice; a failed judge call never has a score
    assert con.execute("select count(*) from scores").fetchone()[0] == 2 * con.execute("select count(*) from responses").fetchone()[0]
    assert con.execute("select count(*) from judgements where not ok and score is not null").fetchone()[0] == 0
    assert con.execute("select count(distinct retriever) from retrieved").fetchone()[0] == 1
    # CoT answers are scored without their thinking block
    assert con.execute("select count(*) from responses where method = 'cot' and answer ilike '%<thinking>%'").fetchone()[0] == 0
    for model in MODELS:
        for method in ("Vanilla", "CoT"):
            assert f"| {model} | + Text-RAG | {method} |" in report
    assert "strict scoring" in report and "reference scoring" in report
    assert (out / "groundedness_by_modality.png").stat().st_size > 0 and (out / "utilisation_by_modality.png").stat().st_size > 0
    # nothing left to do
    again = run_snakemake(workflow_copy, "evaluate", "--configfile", str(config), "--dry-run")
    assert "Nothing to be done" in again.stdout + again.stderr
