"""`snakemake evaluate` end to end on MCiteBench's released data as published (the JSONL beside
visual_resources_example/<pdf_id>/images/, made from the reference records), with the embedded model
as candidate, judge and swap judge, in a copy of the repository."""
import json
import subprocess

import duckdb
import pytest
import yaml

from eval_fixtures import copy_repo_subset, make_mcitebench_data, reference_records, shrink


@pytest.mark.slow
def test_snakemake_evaluate(tmp_path):
    work = copy_repo_subset(tmp_path / "repo")
    jsonl = make_mcitebench_data(tmp_path / "released", [shrink(r) for r in reference_records()])
    config = {
        "run": "t", "mavis": {"enabled": False}, "mcitebench": {"enabled": False}, "m2rag": {"enabled": False}, "attribution": {"enabled": False},
        "eval_mcitebench": {"enabled": True, "release": str(jsonl), "generate_answers": {"limit": 2, "max_tokens": 24},
                     "score_mcitebench": {"scoring": "reference"},
                     "judge": {"name": "judge-smol"}, "swap_judge": {"name": "judge-smol-b", "llm": {"llamacpp": {"n_ctx": 4096}}},
                     "models": [{"name": "smol-a"}, {"name": "smol-b", "with_captions": False}]},
    }
    (work / "config" / "test.yaml").write_text(yaml.safe_dump(config))
    done = subprocess.run(["snakemake", "--cores", "2", "evaluate", "--configfile", "config/demo.yaml", "config/test.yaml"],
                          cwd=work, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    out = work / "data" / "runs" / "t" / "eval_mcitebench"
    report = (out / "report_mcitebench" / "report.md").read_text()
    assert "## Main results (cf. Table 2), reference scoring\n" in report
    assert "## Main results (cf. Table 2), strict scoring (for comparison)" in report
    # captions are on by default (the seed's main setting); a model may run the "No Cap." ablation
    assert "| smol-a | Cap., text-only |" in report and "| smol-b | No Cap., text-only |" in report
    assert "## RQ2: S-EM by modality combination (cf. Figure 5" in report and "## Judge swap (cf. Table 13" in report
    assert (out / "report_mcitebench" / "sem_by_modality_pair.png").stat().st_size > 0
    assert (out / "validate_judge" / "label_sheet.csv").read_text().startswith("judgement_id,")
    assert (out / "report_mcitebench" / "sem_by_modality.png").stat().st_size > 0
    con = duckdb.connect(str(out / "report_mcitebench" / "evaluation.duckdb"), read_only=True)
    assert con.execute("select model, count(*) from scores group by model order by model").fetchall() == [("smol-a", 2), ("smol-b", 2)]
    assert con.execute("select distinct model from responses where not with_captions").fetchall() == [("smol-b",)]
    sidecar = json.loads((out / "generate_answers" / "responses.00000.parquet.report.json").read_text())
    assert sidecar["params"]["model"] == "smol-a" and sidecar["rows_in"] == 2
    # an unchanged rerun has nothing to do
    again = subprocess.run(["snakemake", "--cores", "2", "evaluate", "--configfile", "config/demo.yaml", "config/test.yaml", "-n"],
                           cwd=work, capture_output=True, text=True, timeout=300)
    assert "Nothing to be done" in again.stdout + again.stderr
