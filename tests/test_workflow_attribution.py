"""The attribution rules in the evaluate DAG: editing Algorithm 1's stage reruns only it and the
scores (the model's stored attention is reused), a prompt edit reruns the stages that send it."""
import re

from tests.conftest import make_up_to_date, run_snakemake

REPORT = "data/runs/demo/attribution/score_attribution/report.md"


def planned(workdir, *extra) -> set[str]:
    out = run_snakemake(workdir, REPORT, "-n", *extra).stdout
    return set(re.findall(r"^(?:local)?rule (\w+):", out, re.M))


def test_attribution_reruns(workflow_copy):
    wf = workflow_copy
    assert planned(wf) == {"attribution_inputs", "generate_attributed", "attribute_attention", "attribute_embedding",
                           "attribute_self", "attribution_references", "score_attribution"}
    # part of the evaluate target (the other evaluation families off: this test is about attribution)
    (wf / "config" / "attribution_only.yaml").write_text("eval_mavis: {enabled: false}\neval_m2rag: {enabled: false}\n")
    assert REPORT in run_snakemake(wf, "evaluate", "-n", "--configfile", "config/demo.yaml", "config/attribution_only.yaml").stdout
    make_up_to_date(wf, REPORT)
    assert planned(wf, "--rerun-triggers", "mtime") == set()
    stage = wf / "stages" / "attribution" / "attribute_attention.py"
    stage.write_text(stage.read_text() + "\n")
    assert planned(wf, "--rerun-triggers", "mtime") == {"attribute_attention", "score_attribution"}
    make_up_to_date(wf, REPORT)
    prompt = wf / "prompts" / "attribution_cite.md"
    prompt.write_text(prompt.read_text() + "\n")
    assert planned(wf, "--rerun-triggers", "mtime") == {"attribute_self", "attribution_references", "score_attribution"}
