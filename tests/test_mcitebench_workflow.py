"""The MCiteBench rules: editing the Table 5 prompt reruns extract_explanation_qa and what follows,
and nothing else (Snakemake dry run over a workflow copy whose outputs are all up to date)."""
import re

import pytest

from tests.conftest import make_up_to_date, run_snakemake

TARGET = "data/runs/demo/mcitebench/release_mcitebench/release.json"


def planned_rules(workdir):
    out = run_snakemake(workdir, "-n", TARGET, "--rerun-triggers", "mtime").stdout
    return set(re.findall(r"^(?:local)?rule (\w+):", out, re.M))


@pytest.mark.slow
def test_prompt_edit_reruns_exactly_its_rule_and_descendants(workflow_copy):
    make_up_to_date(workflow_copy, TARGET)
    assert planned_rules(workflow_copy) == set()

    prompt = workflow_copy / "prompts/mcitebench_explanation_qa.md"
    prompt.write_text(prompt.read_text().replace("extract valid", "carefully extract valid"))
    assert planned_rules(workflow_copy) == {"extract_explanation_qa", "pair_evidence", "sample_distractors", "check_questions", "quality_control",
                                              "release_mcitebench"}
