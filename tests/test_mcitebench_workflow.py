"""The MCiteBench rules: editing the Table 5 prompt reruns extract_explanation_qa and what follows,
and nothing else (Snakemake dry run over a workflow copy whose outputs are all up to date)."""
import os
import re

import pytest

from tests.conftest import run_snakemake

UPSTREAM = [  # in DAG order: each file is older than the ones after it
    "harvest_openreview/papers.parquet", "harvest_openreview/reviews.parquet", "harvest_openreview/comments.parquet",
    "harvest_openreview/threads.parquet", "parse_pdfs/elements.parquet",
    "extract_explanation_qa/explanation_qa.parquet", "generate_locating_qa/locating_qa.parquet",
    "pair_evidence/paired_questions.parquet", "pair_evidence/evidence.parquet", "pair_evidence/pairing_sheet.csv",
    "sample_distractors/sampled_questions.parquet", "sample_distractors/distractors.parquet",
    "check_questions/screened_questions.parquet",
    "quality_control/checked_questions.parquet", "quality_control/judgements.parquet", "quality_control/review_sheet.csv",
    "release_mcitebench/release.json",
]
TARGET = "data/runs/demo/mcitebench/release_mcitebench/release.json"


def planned_rules(workdir):
    out = run_snakemake(workdir, "-n", TARGET, "--rerun-triggers", "mtime").stdout
    return set(re.findall(r"^(?:local)?rule (\w+):", out, re.M))


@pytest.mark.slow
def test_prompt_edit_reruns_exactly_its_rule_and_descendants(workflow_copy):
    base = workflow_copy / "data/runs/demo/mcitebench"
    stamp = 1_700_000_000
    for path in [workflow_copy / "prompts" / p for p in os.listdir(workflow_copy / "prompts")] + \
                [workflow_copy / "schemas/answers" / p for p in os.listdir(workflow_copy / "schemas/answers")] + \
                list((workflow_copy / "stages").rglob("*.py")):
        os.utime(path, (stamp, stamp))
    for i, name in enumerate(UPSTREAM, start=1):
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
        os.utime(path, (stamp + i * 10, stamp + i * 10))
    assert planned_rules(workflow_copy) == set()

    prompt = workflow_copy / "prompts/mcitebench_explanation_qa.md"
    prompt.write_text(prompt.read_text().replace("extract valid", "carefully extract valid"))
    assert planned_rules(workflow_copy) == {"extract_explanation_qa", "pair_evidence", "sample_distractors", "check_questions", "quality_control",
                                              "release_mcitebench"}
