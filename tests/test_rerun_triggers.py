"""Reruns follow code: a rule lists its stage's import closure inside stages/ (stages/core/layout.py),
so touching a shared module plans exactly the rules whose stages import it, directly or not, and
what depends on them; touching a core module no stage imports plans nothing.

The expectation is computed independently of the AST scan under test: each stage module is
imported in a fresh interpreter and asked whether `stages.core.refs` ended up in sys.modules."""
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from stages.core.layout import LayoutError, stage_module
from tests.conftest import make_up_to_date, run_snakemake

TARGETS = ["release", "evaluate"]


def _rule_graph(workdir) -> dict[str, set[str]]:
    """rule -> rules that consume its outputs, from Snakemake's own rule graph."""
    dot = run_snakemake(workdir, *TARGETS, "--rulegraph").stdout
    names = dict(re.findall(r'^\s*(\d+)\[label = "(\w+)"', dot, re.M))
    children: dict[str, set[str]] = {name: set() for name in names.values()}
    for src, dst in re.findall(r"^\s*(\d+) -> (\d+)", dot, re.M):
        children[names[src]].add(names[dst])
    return children


def _descendants(rules: set[str], children: dict[str, set[str]]) -> set[str]:
    seen, todo = set(), list(rules)
    while todo:
        rule = todo.pop()
        if rule not in seen:
            seen.add(rule)
            todo.extend(children.get(rule, ()))
    return seen


def _stage_of(rule: str) -> str:
    """The stage a rule runs: its own name, or a shared stage run for a family (`m2rag_search_web`)."""
    try:
        return stage_module(rule)
    except LayoutError:
        return stage_module(rule.split("_", 1)[1])


def _imports_module(rule: str, module: str) -> bool:
    code = f"import importlib, sys; importlib.import_module({_stage_of(rule)!r}); print({module!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip() == "True"


def _planned(workdir) -> set[str]:
    out = run_snakemake(workdir, *TARGETS, "-n", "--rerun-triggers", "mtime").stdout
    return set(re.findall(r"^(?:local)?rule (\w+):", out, re.M)) - {"release", "evaluate", "catalog"}


@pytest.mark.slow
def test_touching_a_core_module_reruns_exactly_its_importers(workflow_copy):
    children = _rule_graph(workflow_copy)
    stages = sorted(rule for rule in children if rule not in ("release", "evaluate", "catalog"))
    with ThreadPoolExecutor(2) as pool:
        uses_refs = {s for s, used in zip(stages, pool.map(lambda s: _imports_module(s, "stages.core.refs"), stages)) if used}
    assert {"pair_evidence", "split_citations"} <= uses_refs  # direct importers
    assert "sample_distractors" in uses_refs  # through stages.core.evidence
    assert "harvest_pushshift" not in uses_refs

    make_up_to_date(workflow_copy, *TARGETS)
    assert _planned(workflow_copy) == set()

    refs = workflow_copy / "stages/core/refs.py"
    refs.write_text(refs.read_text() + "\n")
    assert _planned(workflow_copy) == _descendants(uses_refs, children) - {"release", "evaluate", "catalog"}

    make_up_to_date(workflow_copy, *TARGETS)
    unused = workflow_copy / "stages/core/config.py"  # the Snakefile validates config with it; no stage imports it
    assert not any(_imports_module(s, "stages.core.config") for s in ("pair_evidence", "filter_questions"))
    unused.write_text(unused.read_text() + "\n")
    assert _planned(workflow_copy) == set()


@pytest.mark.slow
def test_editing_an_answer_schema_reruns_the_rules_that_render_its_prompts(workflow_copy):
    make_up_to_date(workflow_copy, *TARGETS)
    schema = workflow_copy / "schemas/answers/mcitebench_judge_support.schema.json"
    schema.write_text(schema.read_text() + "\n")
    planned = _planned(workflow_copy)
    assert "judge_citations" in planned
    assert not planned & {"generate_answers", "split_citations", "judge_answers", "extract_explanation_qa"}


@pytest.mark.slow
def test_editing_the_figure_8_prompt_reruns_element_scoring_and_its_descendants_only(workflow_copy):
    children = _rule_graph(workflow_copy)
    make_up_to_date(workflow_copy, *TARGETS)
    prompt = workflow_copy / "prompts/m2rag_score_text.md"
    prompt.write_text(prompt.read_text() + "\n")
    planned = _planned(workflow_copy)
    assert "text_score_elements" in planned
    assert planned == _descendants({"text_score_elements"}, children) - {"release", "evaluate", "catalog"}
    assert not planned & {"sample_queries", "m2rag_split_pages", "classify_queries", "image_score_elements", "caption_images"}
