"""`snakemake evaluate` with only the M2RAG evaluation, on the fixture release (a released folder,
no aux_images table and no caption columns: the pre-image-helper contract), two approaches and the
embedded SmolLM2 as candidate and judge with tiny answer budgets, in a copy of the workflow. The
tiny judge budget cuts most JSON answers short: they are failed judgements, reported as missing."""
from __future__ import annotations

import json

import duckdb
import pytest
import yaml

from conftest import run_snakemake
from m2rag_eval_fixtures import make_m2rag_release


@pytest.mark.slow
def test_snakemake_evaluate_m2rag(workflow_copy, tmp_path):
    folder = make_m2rag_release(tmp_path / "rel", aux=False, captions=False, pages=1, manifest=False)
    config = {
        "run": "t", "mavis": {"enabled": False}, "mcitebench": {"enabled": False}, "m2rag": {"enabled": False}, "attribution": {"enabled": False},
        "eval_mcitebench": {"enabled": False}, "citeeval": {"enabled": False},
        "eval_m2rag": {"enabled": True, "release": str(folder), "approaches": ["single_stage", "separate"],
                       "models": [{"name": "smol"}], "judge": {"name": "smol-judge", "llm": {"max_attempts": 1}},
                       "m2rag_generate": {"limit": 1, "max_tokens": 24, "text_per_page": 1, "max_images": 1},
                       "m2rag_judge": {"max_tokens": 24, "context_chars": 200}},
    }
    (workflow_copy / "config" / "test.yaml").write_text(yaml.safe_dump(config))
    run_snakemake(workflow_copy, "evaluate", "--configfile", "config/demo.yaml", "config/test.yaml")
    out = workflow_copy / "data" / "runs" / "t" / "eval_m2rag"
    report = (out / "m2rag_report" / "report.md").read_text()
    assert "## Results (cf. Table 2), strict scoring" in report and "## Results (cf. Table 2), reference scoring" in report
    assert "| smol | single_stage |" in report and "| smol | separate |" in report
    con = duckdb.connect(str(out / "m2rag_report" / "evaluation.duckdb"), read_only=True)
    assert con.execute("select approach, count(*) from responses group by 1 order by 1").fetchall() == [("separate", 1), ("single_stage", 1)]
    # every response's inputs: the best page image, captioned by its alt text (no caption column in this release)
    assert con.execute("select distinct unnest(inputs).caption_mode from responses").fetchall() == [("alt",)]
    assert con.execute("select min(prompt_tokens) > 0 and min(completion_tokens) > 0 from responses").fetchone() == (True,)
    # failed judgements are rows without a score, never 0, and also rejects with their raw text
    failed = con.execute("select count(*) from judgements where status = 'failed' and score is null").fetchone()[0]
    side = json.loads((out / "m2rag_judge" / "judgements.00000-single_stage.parquet.report.json").read_text())
    side2 = json.loads((out / "m2rag_judge" / "judgements.00000-separate.parquet.report.json").read_text())
    assert failed == side["rejected"] + side2["rejected"]
    assert con.execute("select count(*) from summary where scoring = 'strict' and metric = 'overall'").fetchone()[0] == 2
    again = run_snakemake(workflow_copy, "evaluate", "--configfile", "config/demo.yaml", "config/test.yaml", "-n")
    assert "Nothing to be done" in again.stdout + again.stderr
