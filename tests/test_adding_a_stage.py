"""README "Adding a stage" (issue 28), followed in a private copy of the workflow: the files the
walkthrough names are written there (its code snippets taken from the README as printed), its two
generators run, and then what it says follows from the declaration is checked against the real
tools: the files touched (`git status` of the copy), the test suite's staleness and coverage
checks in the copy, Snakemake's dry run (the rule, its output path, its code and prompt inputs,
the catalog reading its tables), explain (the llm param's origin; a `mavis.judge_fact_images.llm`
override reaching the rule), a prompt edit rerunning the new rule and the catalog only, the rule
run for real by Snakemake with the embedded model, and the catalog's views of its output."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from conftest import REPO, WORKFLOW_PARTS, demo_config, make_up_to_date, run_snakemake
from stages.core.tables import write_table

pytestmark = pytest.mark.slow

FOLDER = "data/runs/demo/mavis/judge_fact_images"
SHARDS = [f"{i:05d}" for i in range(demo_config()["shards"])]

# The stage around the README's declaration: its docstring, imports and run(ctx).
STAGE_MODULE = '''"""Ask a model whether checking each atomic fact needs the post's image (MAVIS §3.2 Step 2, the
facts of Tables 9-10; README "Adding a stage"). The yes/no prompt is scored as P(yes) by the model
layer; a fact is judged to need its image when P(yes) reaches `threshold`.

Input `facts` (mavis_facts). Output `fact_verdicts` (mavis_fact_verdicts): fact_id, p_yes, needs_image, model.
Rejects (per fact): invalid_answer. Invariant: facts in = verdicts + rejected.
"""
from __future__ import annotations

from stages.core.llm import LLMClient, LLMRequest
from stages.core.stage import Input, Output, Param, Reject, Stage


def run(ctx):
    facts = ctx.read_rows("facts")
    with LLMClient.from_params(ctx.params["llm"], stats=ctx.stats) as llm:
        answers = llm.run([LLMRequest(f["fact_id"], "mavis_fact_needs_image", {"fact": f["text"]}) for f in facts],
                          desc="fact needs image")
        model = llm.model_id
    verdicts = []
    for fact, answer in zip(facts, answers):
        with ctx.item(fact["fact_id"]):
            if not answer.ok:
                raise Reject("invalid_answer", answer.detail)
            p_yes = answer.p_yes if answer.p_yes is not None else float(answer.value == "yes")
            verdicts.append({"fact_id": fact["fact_id"], "p_yes": p_yes, "needs_image": p_yes >= ctx.params["threshold"],
                             "model": model})
    ctx.write("fact_verdicts", verdicts)


{declaration}

if __name__ == "__main__":
    STAGE.main()
'''

PROMPT = """---
# Does checking an atomic fact need the photo its asker posted? A yes/no question, scored as P(yes)
# by the model layer (judge_fact_images; README "Adding a stage").
kind: yesno
temperature: 0
max_tokens: 2
---
Fact: {{ fact }}

Can this fact be checked only by looking at the photo the asker posted? Reply with yes or no only. Answer:
"""

TABLE = """table: mavis_fact_verdicts
description: per atomic fact, whether checking it needs the post's image (judge_fact_images)
key: fact_id
columns:
  fact_id: string        # mavis_facts.fact_id
  p_yes: float64         # P(yes) of prompts/mavis_fact_needs_image.md
  needs_image: bool      # p_yes >= threshold
  model: string
range:
  p_yes: [0, 1]
"""

FACTS = [{"fact_id": f"i1#0.{k}", "instance_id": "i1", "sentence": 0, "sentence_text": "That's a cardinal; they are red.",
          "text": text, "relevance": "relevant", "verifiable": "verifiable", "mode": "title"}
         for k, text in enumerate(["The bird on the feeder in the photo is a northern cardinal.", "Male northern cardinals are red."])]

STAGE_TEST = '''"""judge_fact_images through its CLI on a small facts table, with the embedded model."""
from __future__ import annotations

import json

import pyarrow.parquet as pq

from conftest import run_stage
from stages.core.tables import write_table

FACTS = {facts!r}


def test_embedded_model_judges_every_fact(tmp_path):
    facts, out = tmp_path / "facts.parquet", tmp_path / "fact_verdicts.parquet"
    write_table(facts, FACTS, "mavis_facts")
    run_stage("judge_fact_images", f"--input=facts={{facts}}", f"--output=fact_verdicts={{out}}",
              "--params", json.dumps({{"llm": {{"cache": {{"path": str(tmp_path / "llm.sqlite")}}}}, "threshold": 0.5}}))
    rows, rejects = pq.read_table(out).to_pylist(), pq.read_table(f"{{out}}.rejects.parquet").to_pylist()
    report = json.loads((tmp_path / "fact_verdicts.parquet.report.json").read_text())
    assert len(rows) + len(rejects) == len(FACTS) and report["stats"]["llm_calls"] == len(FACTS)
    assert all(0 <= r["p_yes"] <= 1 and r["needs_image"] == (r["p_yes"] >= 0.5) and r["model"].startswith("SmolLM2") for r in rows)
'''


def walkthrough() -> str:
    text = (REPO / "README.md").read_text()
    return text[text.index("### Adding a stage"):text.index("**The stage contract**")]


def snippet(section: str, marker: str) -> str:
    """The README code block holding `marker`, less its list item's indentation."""
    blocks = [(indent, body) for indent, body in re.findall(r"^( *)```\w*\n(.*?)^\1```", section, re.M | re.S) if marker in body]
    assert len(blocks) == 1, f"the walkthrough has {len(blocks)} code blocks with {marker!r}"
    indent, body = blocks[0]
    return "".join(line[len(indent):] for line in body.splitlines(keepends=True))


def insert_after(path: Path, anchor: str, text: str) -> None:
    """`text` after the line of `path` that holds `anchor`."""
    content = path.read_text()
    at = content.index("\n", content.index(anchor)) + 1
    path.write_text(content[:at] + text + content[at:])


def git(workdir: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args], cwd=workdir,
                          capture_output=True, text=True, check=True).stdout


def python(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, *args], cwd=workdir, capture_output=True, text=True)
    assert result.returncode == 0, f"{args} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def added(tmp_path_factory) -> Path:
    """The workflow with its tests, committed to a git repository of its own, then the walkthrough."""
    wf = tmp_path_factory.mktemp("adding_a_stage") / "wf"
    for part in [*WORKFLOW_PARTS, "tests", "pyproject.toml", ".gitignore"]:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, wf / part, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        else:
            (wf / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, wf / part)
    git(wf, "init", "-q")
    git(wf, "add", "-A")
    git(wf, "commit", "-q", "-m", "before the new stage")

    section = walkthrough()
    (wf / "stages/mavis/judge_fact_images.py").write_text(STAGE_MODULE.replace("{declaration}", snippet(section, "STAGE = Stage(")))
    (wf / "prompts/mavis_fact_needs_image.md").write_text(PROMPT)
    (wf / "schemas/tables/mavis_fact_verdicts.yaml").write_text(TABLE)
    (wf / "tests/test_judge_fact_images.py").write_text(STAGE_TEST.format(facts=FACTS))
    workflow_test = wf / "tests/test_workflow_mavis.py"  # the job list a change to the questions replans
    jobs = workflow_test.read_text()
    assert jobs.count('"filter_visual_dependency", ') == 1
    workflow_test.write_text(jobs.replace('"filter_visual_dependency", ', '"filter_visual_dependency", "judge_fact_images", '))
    rules = wf / "rules/mavis.smk"  # the file ends inside `if W.enabled("mavis"):`
    rules.write_text(rules.read_text() + "    " + snippet(section, 'W.step("judge_fact_images"'))
    python(wf, "-m", "stages.core.declarations", "--write")
    python(wf, "-m", "stages.core.config_schema", "--write")
    return wf


def test_the_files_touched_are_the_ones_the_readme_names(added):
    status = git(added, "status", "--porcelain", "--untracked-files=all").splitlines()
    touched = {line[3:] for line in status}
    named = set(re.findall(r"`((?:stages|prompts|schemas|tests|rules)/[\w/.-]+)`", walkthrough())) - {"tests/test_adding_a_stage.py"}
    assert touched == named
    # five files written or extended, a line of one existing DAG test, two generated files
    assert len(touched) == 8 and {"schemas/stages.yaml", "schemas/config/mavis.schema.yaml"} <= touched


def test_the_suites_staleness_and_coverage_checks_pass_in_the_copy(added):
    """The tests that fail while the generated files are stale or a stage is missing from the
    property test, the property test on the new stage, and the new stage's own test."""
    result = python(added, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_judge_fact_images.py",
                    "tests/test_declarations.py", "tests/test_config.py::test_committed_schemas_match_the_stage_params",
                    "tests/test_stage_contract.py::test_every_stage_is_covered_or_reads_files",
                    "tests/test_stage_contract.py::test_stage_keeps_its_contract_under_generated_input[judge_fact_images]")
    assert re.search(r"\b\d+ passed\b", result.stdout) and "failed" not in result.stdout and "skipped" not in result.stdout


def planned_jobs(stdout: str) -> list[tuple[str, list[str], list[str]]]:
    """(rule, inputs, outputs) of every job a dry run lists."""
    jobs = []
    for block in re.split(r"^(?=(?:local)?rule \w+:$)", stdout, flags=re.M)[1:]:
        fields = dict(re.findall(r"^    (input|output): (.*)$", block, re.M))
        jobs.append((re.match(r"(?:local)?rule (\w+):", block)[1], fields.get("input", "").split(", "), fields.get("output", "").split(", ")))
    return jobs


def test_the_dag_runs_the_rule_on_each_shard_and_the_catalog_reads_its_tables(added):
    jobs = planned_jobs(run_snakemake(added, "-n", "release").stdout)
    judged = sorted((ins, outs) for rule, ins, outs in jobs if rule == "judge_fact_images")
    assert len(judged) == len(SHARDS)
    for shard, (ins, outs) in zip(SHARDS, judged):
        table = f"{FOLDER}/fact_verdicts.{shard}.parquet"
        assert outs == [table, f"{table}.rejects.parquet", f"{table}.report.json"]
        assert {f"data/runs/demo/mavis/extract_atomic_facts/facts.{shard}.parquet", "stages/mavis/judge_fact_images.py",
                "stages/core/llm/client.py", "prompts/mavis_fact_needs_image.md"} <= set(ins)
    [catalog] = [ins for rule, ins, _ in jobs if rule == "build_catalog"]
    assert {f"{FOLDER}/fact_verdicts.{shard}.parquet" for shard in SHARDS} <= set(catalog)
    # the release card counts the rejects of what the release reads: not this step's (README)
    [release] = [ins for rule, ins, _ in jobs if rule == "release_mavis"]
    assert not [p for p in release if p.startswith(FOLDER)]

    help_text = python(added, "-m", "stages.mavis.judge_fact_images", "--help").stdout
    assert "threshold              float [0.5]: P(yes) to keep" in help_text and "prompts (prompts/<name>.md): mavis_fact_needs_image" in help_text
    assert "invalid_answer         the judge's answer was not yes or no after every retry" in help_text


def explain(workdir: Path, *args: str) -> dict:
    return json.loads(python(workdir, "-m", "stages.core.explain", "--rule", "judge_fact_images", "--json", *args).stdout)


def test_the_llm_param_comes_from_the_llm_section_and_its_override(added, tmp_path):
    report = explain(added)
    params = report["rules"]["judge_fact_images"]["jobs"][0]["params"]
    assert params["llm.backend"] == {"value": "llamacpp", "origin": "demo overlay"}  # the demo's llm: section
    assert params["llm.model"] == {"value": "SmolLM2-135M-Instruct.Q4_1", "origin": "demo overlay"}
    assert params["threshold"] == {"value": 0.5, "origin": "stage default"}
    assert re.search(r"^judge_fact_images\s+2$", report["would_run"], re.M)  # Snakemake's own dry run: one job per shard

    override = tmp_path / "judge.yaml"
    override.write_text("mavis:\n  judge_fact_images:\n    llm: {model: judge-model}\n    threshold: 0.7\n")
    report = explain(added, "--configfile", "config/demo.yaml", str(override), "--no-dry-run")
    for job in report["rules"]["judge_fact_images"]["jobs"]:
        assert job["params"]["llm.model"] == {"value": "judge-model", "origin": f"recipe {override}"}
        assert job["params"]["llm.backend"] == {"value": "llamacpp", "origin": "recipe config/demo.yaml"}  # the rest of llm: stays
        assert job["params"]["threshold"] == {"value": 0.7, "origin": f"recipe {override}"}
    # Snakemake passes the same to the stage
    printed = run_snakemake(added, f"{FOLDER}/fact_verdicts.00000.parquet", "-n", "-p", "--configfile", "config/demo.yaml", str(override)).stdout
    command = next(line for line in printed.splitlines() if "python -m stages.mavis.judge_fact_images" in line)
    assert '"model": "judge-model"' in command and '"threshold": 0.7' in command


def planned(workdir: Path) -> set[str]:
    out = run_snakemake(workdir, "release", "-n", "--rerun-triggers", "mtime").stdout
    return set(re.findall(r"^(?:local)?rule (\w+):", out, re.M)) - {"release"}


def test_a_prompt_edit_reruns_the_rule_alone_and_snakemake_runs_it_for_real(added, tmp_path):
    wf = tmp_path / "wf"  # a copy of the copy: its outputs and edits stay in this test
    shutil.copytree(added, wf, symlinks=True, ignore=shutil.ignore_patterns(".snakemake"))
    make_up_to_date(wf, "release")
    assert planned(wf) == set()
    prompt = wf / "prompts/mavis_fact_needs_image.md"
    prompt.write_text(prompt.read_text().replace("Can this fact", "Can the fact"))
    assert planned(wf) == {"judge_fact_images", "build_catalog"}

    # the rule as Snakemake runs it (its --input/--output/--params), on a real facts table, with the embedded model
    facts = wf / "data/runs/demo/mavis/extract_atomic_facts/facts.00000.parquet"
    write_table(facts, FACTS, "mavis_facts")
    table = wf / FOLDER / "fact_verdicts.00000.parquet"
    ran = run_snakemake(wf, str(table.relative_to(wf)), "--rerun-triggers", "mtime")
    assert set(re.findall(r"^(?:local)?rule (\w+):", ran.stdout + ran.stderr, re.M)) == {"judge_fact_images"}
    rows = pq.read_table(table).to_pylist()
    rejects = pq.read_table(f"{table}.rejects.parquet").to_pylist()
    report = json.loads(Path(f"{table}.report.json").read_text())
    assert report["rows_in"] == len(FACTS) == len(rows) + len(rejects) and report["stats"]["llm_calls"] == len(FACTS)
    assert all(r["model"].startswith("SmolLM2") and r["needs_image"] == (r["p_yes"] >= 0.5) for r in rows)

    # the catalog's views of it: the table, its rejects, its report and its declared reasons
    # (shard 00001 holds make_up_to_date's empty placeholders: the real shard alone, in the run layout)
    real = tmp_path / "run/mavis/judge_fact_images"
    real.mkdir(parents=True)
    for file in (table, Path(f"{table}.rejects.parquet"), Path(f"{table}.report.json")):
        shutil.copy2(file, real / file.name)
    catalog = tmp_path / "catalog.duckdb"
    python(wf, "-m", "stages.catalog.build_catalog", f"--input=tables={real / table.name}", f"--output=catalog={catalog}")
    con = duckdb.connect(str(catalog), read_only=True)
    assert con.execute("select count(*) from mavis.fact_verdicts").fetchone()[0] == len(rows)
    assert con.execute("select count(*) from mavis.judge_fact_images_rejects").fetchone()[0] == len(rejects)
    assert con.execute("select rule, rows_in from mavis.stage_reports").fetchall() == [("judge_fact_images", len(FACTS))]
    assert con.execute("select reason, meaning from mavis.reject_reasons where stage = 'judge_fact_images'").fetchall() == [
        ("invalid_answer", "the judge's answer was not yes or no after every retry")]
    con.close()

    # a change to the questions replans the new rule: the job list tests/test_workflow_mavis.py expects
    # after one (edited as the README says) is what Snakemake plans when filter_questions' outputs change
    expected = re.search(r"assert _jobs\(planned\.stdout\) == \[(.*?)\]", (wf / "tests/test_workflow_mavis.py").read_text(), re.S)[1]
    for path in (wf / "data/runs/demo/mavis/filter_questions").iterdir():
        os.utime(path)
    assert planned(wf) | {"filter_questions", "release"} == set(re.findall(r'"(\w+)"', expected))
