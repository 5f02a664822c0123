"""The bundled demo config plans every target with every family and evaluation on.

A plan of the whole demo is the one place every rule file's steps meet (each reads the steps of
the files before it); the other workflow tests switch families off to stay small, so this one
plans them all without running anything."""
import re

from tests.conftest import run_snakemake

# one rule per rules file that the demo's release, evaluate and report targets must plan
EXPECTED = {
    "harvest_pushshift", "retrieve_fact_documents", "filter_entailment_image", "release_mavis",  # mavis.smk
    "m2rag_phash_dedup", "caption_images", "image_score_elements", "release_m2rag",  # m2rag.smk
    "harvest_openreview", "parse_pdfs", "release_mcitebench",  # openreview.smk, mcitebench.smk
    "build_text_index", "cache_images",  # retrieval.smk, images.smk
    "generate_answers", "report_mcitebench",  # eval_mcitebench.smk
    "mavis_generate_queries", "report_mavis",  # eval_mavis.smk
    "m2rag_generate", "m2rag_report",  # eval_m2rag.smk
    "citeeval_score", "citeeval_report",  # citeeval.smk
    "generate_attributed", "score_attribution",  # attribution.smk
    "report_funnel", "build_catalog",  # catalog.smk
}


def test_demo_plans_release_evaluate_and_report(workflow_copy):
    result = run_snakemake(workflow_copy, "-n", "release", "evaluate", "report", "--quiet", "rules")
    planned = set(re.findall(r"^\s*(\w+)\s+\d+\s*$", result.stdout, re.MULTILINE))
    assert EXPECTED <= planned, f"not planned: {sorted(EXPECTED - planned)}"


def test_release_runs_no_evaluation(workflow_copy):
    """The default target builds releases; evaluations (and their tables in the catalog) wait for
    `evaluate`, so a release never pays for a model under test."""
    result = run_snakemake(workflow_copy, "-n", "release", "--quiet", "rules")
    planned = set(re.findall(r"^\s*(\w+)\s+\d+\s*$", result.stdout, re.MULTILINE))
    evaluations = {"generate_answers", "mavis_generate_queries", "m2rag_generate", "attribution_inputs",
                   "generate_attributed", "citeeval_prepare"}
    assert "release_mavis" in planned and not planned & evaluations, sorted(planned & evaluations)
