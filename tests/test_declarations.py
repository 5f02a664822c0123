"""The stage declarations: reject reasons and prompts on every stage, and the manifest
(schemas/stages.yaml) that rules, the catalog and the release cards read without importing a stage."""
from __future__ import annotations

import ast
import copy
import subprocess
import sys

from stages.core.declarations import MANIFEST, ROOT, build, declared_meaning, differences, load_manifest, main, render
from stages.core.layout import PROMPTS_DIR, import_closure, stage_path
from stages.core.tables import CONTRACT_REJECTS


def test_committed_manifest_matches_the_declarations():
    """A declaration edited without `python -m stages.core.declarations --write` fails here."""
    current = build()
    assert len(current) > 60
    assert MANIFEST.read_text(encoding="utf-8") == render(current), "run python -m stages.core.declarations --write"
    assert load_manifest() == current  # the loader reads back exactly what was declared
    assert main(["--check"]) == 0  # the command says the same


def test_every_stage_declares_reasons_with_meanings_and_prompts_that_exist():
    for name, entry in build().items():
        assert entry["module"] == f"stages.{entry['family']}.{name}"
        assert isinstance(entry["rejects"], dict), name
        for reason, meaning in entry["rejects"].items():
            assert isinstance(reason, str) and reason and reason == reason.strip(), (name, reason)
            assert isinstance(meaning, str) and meaning.strip(), f"{name}: reason {reason!r} has no meaning"
            assert "\n" not in meaning and "|" not in meaning, f"{name}: {reason!r}: one line, no table pipe"
        for prompt in entry["prompts"]:
            assert (PROMPTS_DIR / f"{prompt}.md").is_file(), f"{name}: no prompts/{prompt}.md"
        assert len(set(entry["prompts"])) == len(entry["prompts"]), name


def _literals(paths) -> set[str]:
    return {node.value for path in paths for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def test_declared_prompts_are_the_ones_the_stage_code_names():
    """A declared prompt is named (a string literal, or a `<name>.md` path) in the stage's import
    closure, and every prompt file is declared by some stage: no stale declaration, no orphan prompt.
    That a stage renders only what it declares is checked while it runs (stages/core/prompts.py)."""
    declared_anywhere = set()
    for name, entry in build().items():
        literals = _literals(import_closure(stage_path(name)))
        for prompt in entry["prompts"]:
            assert prompt in literals or f"{prompt}.md" in literals, f"{name} declares {prompt!r} but its code never names it"
        declared_anywhere |= set(entry["prompts"])
    assert {p.stem for p in PROMPTS_DIR.glob("*.md")} == declared_anywhere


def test_literal_reject_reasons_in_a_stage_module_are_declared():
    """Every `Reject("x", ...)` and `ctx.reject(id, "x", ...)` literal in a stage's own module is in its
    declaration (the runner enforces it too, but only on the paths a run takes)."""
    for name, entry in build().items():
        tree = ast.parse(stage_path(name).read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            position = {"Reject": 0, "reject": 1}.get(called)
            if position is None or len(node.args) <= position:
                continue
            arg = node.args[position]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                assert arg.value in CONTRACT_REJECTS or declared_meaning(entry["rejects"], arg.value), \
                    f"{name}: {arg.value!r} (line {node.lineno}) is not declared"


def test_check_names_the_stale_stage_and_key():
    current = load_manifest()
    stale = copy.deepcopy(current)
    stale["filter_questions"]["rejects"].pop("no_long_answer")
    stale["cache_images"]["params"]["workers"]["default"] = 1
    del stale["split_pages"]
    stale["old_stage"] = stale["retrieve_text"]
    assert differences(stale, current) == [
        "old_stage: not in the stages", "split_pages: missing", "cache_images: params differ", "filter_questions: rejects differ"]


def test_loading_the_manifest_imports_no_stage():
    """Snakemake reads the manifest at DAG-parse time: no stage module, no pyarrow."""
    code = ("import sys; from stages.core.declarations import load_manifest; m = load_manifest(); "
            "heavy = [k for k in sys.modules if k.startswith('stages.') and k not in ('stages.core', 'stages.core.declarations') "
            "or k in ('pyarrow', 'duckdb', 'torch')]; print(len(m), heavy)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split(" ", 1)
    assert int(out[0]) > 60 and out[1].strip() == "[]"


def test_declared_meaning_reads_patterns():
    rejects = {"http_<status>": "an HTTP error", "timeout": "no answer in time"}
    assert declared_meaning(rejects, "timeout") == "no answer in time"
    assert declared_meaning(rejects, "http_404") == declared_meaning(rejects, "http_503") == "an HTTP error"
    assert declared_meaning(rejects, "http_x") is None and declared_meaning(rejects, "http_<status>") == "an HTTP error"
    assert declared_meaning(rejects, "blocked_address") is None


def test_no_stage_imports_another_stage():
    """A stage imports shared machinery (stages/core) and its family's helper modules (no STAGE of
    their own: stages/mavis/entailment.py, ...), never another stage module."""
    from stages.core.declarations import stage_files

    stages = {f"stages.{p.parent.name}.{p.stem}" for p in stage_files()}
    for path in stage_files():
        tree = ast.parse(path.read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        helpers = {m for m in imported if m.startswith("stages.") and not m.startswith("stages.core")}
        assert not helpers & stages, f"{path} imports the stage(s) {sorted(helpers & stages)}"
        assert all(m.split(".")[1] == path.parent.name for m in helpers), f"{path} imports another family's helpers {sorted(helpers)}"
