"""The wiring layer (stages/core/wiring.py, stages/core/explain.py): the paper is the default and the
demo an overlay, one resolver from configuration to params with the origin of every value, rules
derived from the stage declarations and checked against them at DAG-parse time."""
from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
import yaml

from conftest import REPO, demo_config
from stages.core.config import validate_config
from stages.core.explain import explain, layered_config
from stages.core.wiring import Wiring, WiringError, declaration, load_steps, manifest


@pytest.fixture(scope="module")
def real():
    config, layers = layered_config([str(REPO / "config" / "recipe_real.yaml")], [])
    validate_config(config)
    return config, layers, explain(config, layers)


def _recipe_sets(recipe: dict, rule_section: str, leaf: str) -> bool:
    node = recipe
    for part in [*rule_section.split("."), *leaf.split(".")]:
        if isinstance(node, list) and part.isdigit():
            node = node[int(part)] if int(part) < len(node) else None
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return False
    return True


def test_the_real_recipe_inherits_nothing_from_the_demo(real):
    """Every param of every rule under config/recipe_real.yaml is the stage's default, the base
    config's papers' tables, the model layer's default, the rule's wiring or a key the recipe sets."""
    config, layers, report = real
    assert report["layers"] == ["base", f"recipe {REPO / 'config' / 'recipe_real.yaml'}"]
    assert report["rules"], "no rule under the real recipe"
    origins = {item["origin"] for rule in report["rules"].values() for job in rule["jobs"] for item in job["params"].values()}
    assert "demo overlay" not in origins
    assert origins <= {"stage default", "base", "rule wiring", "model layer default", f"recipe {REPO / 'config' / 'recipe_real.yaml'}"}
    for name, rule in report["rules"].items():
        params = manifest()[rule["stage"]]["params"]
        for leaf, item in rule["jobs"][0]["params"].items():
            if item["origin"] == "stage default":  # not set by any layer: exactly the declared default
                assert item["value"] == params[leaf].get("default", "<required>"), (name, leaf)


def test_the_demo_caps_live_in_the_overlay_only():
    demo_keys = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())
    base = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert "run" in demo_keys and "run" not in base  # a recipe must name its run
    config, layers = layered_config([], [])
    report = explain(config, layers, "filter_visual_dependency")
    limit = report["rules"]["filter_visual_dependency"]["jobs"][0]["params"]["limit"]
    assert limit == {"value": 2, "origin": "demo overlay"}
    assert declaration("filter_visual_dependency")["params"]["limit"]["default"] == 0  # the paper: every instance


def test_merge_order_and_origins():
    """run-wide section < shared stage section < the rule's own section < the rule's wiring."""
    config = demo_config()
    config["images"]["filter_images"]["min_bytes"] = 5000
    config["m2rag"]["filter_images"] = {"min_bytes": 1234}
    wiring = load_steps(config)
    values, origins = wiring.steps["m2rag_filter_images"].params({})
    assert values["min_bytes"] == 1234 and origins["min_bytes"] == "m2rag.filter_images.min_bytes"
    values, origins = wiring.steps["filter_images"].params({"shard": "00000"})
    assert values["min_bytes"] == 5000 and origins["min_bytes"] == "images.filter_images.min_bytes"
    assert values["store"] == config["images"]["store"] and origins["store"] == "images.store"
    assert values["text_column"] == "question" and origins["text_column"] == "wiring"
    values, origins = wiring.steps["m2rag_search_web"].params({})
    assert origins["provider_settings.engine_id"] == "retrieval.search_web.google.engine_id"
    # a model param: the llm: section, then the stage's override, leaf by leaf
    config["llm"]["openai"] = {"base_url": "http://127.0.0.1:9/v1"}
    config["mavis"]["extract_atomic_facts"]["llm"] = {"backend": "openai", "model": "m"}
    values, origins = load_steps(config).steps["extract_atomic_facts"].params({"shard": "00000"})
    assert values["llm"]["openai"]["base_url"] == "http://127.0.0.1:9/v1" and origins["llm.openai.base_url"] == "llm.openai.base_url"
    assert values["llm"]["model"] == "m" and origins["llm.model"] == "mavis.extract_atomic_facts.llm.model"
    assert origins["llm.max_attempts"] == "model layer default"


def test_rules_are_derived_from_the_declarations():
    """Outputs, sidecars, code and prompt inputs come from the stage's declaration."""
    wiring = load_steps(demo_config())
    step = wiring.steps["filter_entailment_text"]
    outs = step.outputs()
    assert outs["scores"] == "data/runs/demo/mavis/filter_entailment_text/scores.{shard}.parquet"
    assert outs["sidecar_rejects"] == outs["scores"] + ".rejects.parquet"
    assert outs["sidecar_report"] == outs["scores"] + ".report.json"
    code = step.code()
    assert "stages/mavis/filter_entailment_text.py" in code
    for prompt in declaration("filter_entailment_text")["prompts"]:
        assert f"prompts/{prompt}.md" in code
    # a release counts the rejects of every step upstream of it, and only those
    rejects = wiring.steps["release_mavis"].inputs({})["rejects"]
    assert any("/filter_questions/" in p for p in rejects) and any("/harvest_pushshift/" in p for p in rejects)
    assert not any("/m2rag/" in p or "/sample_annotation/" in p for p in rejects)
    # the catalog: every table of a build step, none of an evaluation
    tables = wiring.catalog_tables("build")
    assert "data/runs/demo/mavis/filter_questions/questions.00001.parquet" in tables
    assert not any("/eval_" in p for p in tables)


@pytest.mark.parametrize("change, message", [
    (dict(inputs={"postz": []}), "rule filter_questions: stage filter_questions needs inputs ['comments', 'posts']"),
    (dict(inputs={"posts": "a.parquet", "comments": "b.parquet", "extra": "c"}), "rule filter_questions: inputs ['extra'] are not inputs"),
    (dict(inputs={"posts": "a", "comments": "b"}, wiring={"nope": 1}), "rule filter_questions: wires params ['nope']"),
    (dict(inputs={"posts": "a", "comments": "b"}, files={"answers": "x"}), "rule filter_questions: files= names ['answers']"),
])
def test_a_rule_that_disagrees_with_its_stage_fails_naming_it(change, message):
    wiring = Wiring(demo_config())
    with pytest.raises(WiringError) as err:
        wiring.step("filter_questions", family="mavis", slot="{shard}", **change)
    assert message in str(err.value)


def test_the_dag_check_fails_before_any_job_with_one_line(workflow_copy):
    """A rule file naming an input its stage does not declare stops the parse with one line."""
    smk = workflow_copy / "rules" / "mavis.smk"
    smk.write_text(smk.read_text().replace('"posts": W.out(HARVEST, "posts")', '"post": W.out(HARVEST, "posts")'))
    done = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1"], cwd=workflow_copy, capture_output=True, text=True)
    assert done.returncode != 0
    assert "wiring: rule filter_questions: inputs ['post'] are not inputs of stage filter_questions" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr


def test_explain_json_for_the_real_recipe_names_every_model_role():
    done = subprocess.run([sys.executable, "-m", "stages.core.explain", "--configfile", "config/recipe_real.yaml", "--json", "--no-dry-run"],
                          cwd=REPO, capture_output=True, text=True, check=True)
    report = json.loads(done.stdout)
    roles = {(r["rule"], r["role"]): r for r in report["models"]}
    assert roles[("filter_entailment_text", "llm")]["model"] == "Qwen/Qwen3-8B"
    assert roles[("filter_visual_dependency", "judge")]["model"] == "OpenGVLab/InternVL2_5-38B"
    assert {r["backend"] for r in report["models"]} <= {"openai", "vllm", "llamacpp"}
    assert all(item["origin"] != "demo overlay" for rule in report["rules"].values() for job in rule["jobs"]
               for item in job["params"].values())


def test_explain_read_through_head_ends_without_a_traceback():
    """`explain ... | head`: the reader closes the pipe early; explain stops quietly."""
    done = subprocess.run(f"{sys.executable} -m stages.core.explain --configfile config/recipe_real.yaml --no-dry-run | head -1",
                          shell=True, cwd=REPO, capture_output=True, text=True)
    assert done.stdout.startswith("layers (later wins)") and done.stderr == ""


def test_explain_lines_up_each_rules_origins_past_its_longest_name():
    """A param name longer than the default column (answerers.0.llm.openai.max_in_flight) pushed
    its value and origin right; the rule's longest name now sets the column."""
    done = subprocess.run([sys.executable, "-m", "stages.core.explain", "--configfile", "config/recipe_real.yaml", "--no-dry-run",
                           "--rule", "filter_visual_dependency"], cwd=REPO, capture_output=True, text=True, check=True)
    rows = [line for line in done.stdout.splitlines() if line.startswith("  answerers.")]
    starts = {line.rfind(origin) for line in rows for origin in ("recipe config/recipe_real.yaml", "model layer default", "base")
              if line.endswith(origin)}
    assert len(rows) > 20 and len(starts) == 1, starts
    assert any(".openai.max_in_flight" in line for line in rows)


def test_explain_names_the_rules_that_would_run(workflow_copy):
    done = subprocess.run([sys.executable, "-m", "stages.core.explain", "--rule", "sample_queries", "--targets", "release"],
                          cwd=workflow_copy, capture_output=True, text=True, check=True)
    assert "rule sample_queries (stage sample_queries, m2rag)" in done.stdout
    assert "per_category" in done.stdout and "demo overlay" in done.stdout
    assert "would run (snakemake -n release)" in done.stdout and "release_m2rag" in done.stdout


def test_explain_says_which_config_key_names_a_missing_input(workflow_copy):
    """Snakemake's dry run stops at the first rule whose input files are missing and says so on
    stdout; explain shows those files with the config key that names each."""
    overlay = workflow_copy / "missing.yaml"
    overlay.write_text("mavis:\n  harvest_pushshift:\n    files: [/nonexistent/RS_2099-01.zst]\n")
    done = subprocess.run([sys.executable, "-m", "stages.core.explain", "--rule", "harvest_pushshift", "--targets", "release",
                           "--configfile", "config/demo.yaml", str(overlay)], cwd=workflow_copy, capture_output=True, text=True)
    tail = done.stdout.split("would run (snakemake -n release):")[1]
    assert "rule harvest_pushshift misses input files" in tail
    assert "/nonexistent/RS_2099-01.zst  (config mavis.harvest_pushshift.files[0])" in tail
    # the whole report is printed, and the status says the run cannot be planned yet
    assert done.returncode == 1 and "rule harvest_pushshift (stage harvest_pushshift" in done.stdout
    assert done.stderr.strip().splitlines()[-1] == "explain: Snakemake cannot plan release with this configuration yet (see above)"


def test_explain_reads_config_overrides_as_snakemake_does():
    """A top-level --config is the `command line` layer; a dotted key, which Snakemake's --config
    refuses, is refused here too, with the way to set it."""
    done = subprocess.run([sys.executable, "-m", "stages.core.explain", "--config", "shards=4", "--rule", "filter_questions", "--no-dry-run"],
                          cwd=REPO, capture_output=True, text=True, check=True)
    assert "4 jobs" in done.stdout and "< command line" in done.stdout
    dotted = subprocess.run([sys.executable, "-m", "stages.core.explain", "--config", "mavis.filter_questions.min_answer_chars=400", "--no-dry-run"],
                            cwd=REPO, capture_output=True, text=True)
    assert dotted.returncode != 0 and "takes top-level keys" in dotted.stderr and "recipe file of its own" in dotted.stderr


def test_old_section_names_are_refused_with_the_new_name():
    config = demo_config()
    config["evaluate"] = copy.deepcopy(config.pop("eval_mcitebench"))
    with pytest.raises(Exception) as err:
        validate_config(config)
    assert "config key 'evaluate' was renamed to 'eval_mcitebench'" in str(err.value)


def test_a_given_release_is_a_rerun_param_and_evaluate_feeds_the_catalog(tmp_path, monkeypatch):
    """rerun_on: the steps reading a release named in the config carry its path and content hash as
    a rule param (not a stage param), which changes with the records; the catalog reads every
    evaluation table when `evaluate` is a target, else only those that exist (none here)."""
    import hashlib

    from stages.core.wiring import release_version

    folder = tmp_path / "published"
    folder.mkdir()
    (folder / "mcitebench.jsonl").write_text('{"id": 1}\n')
    config = demo_config()
    config["eval_mcitebench"]["release"] = str(folder)
    wiring = load_steps(config, targets=["evaluate"])
    digest = hashlib.sha256(b"mcitebench.jsonl\0" + hashlib.sha256(b'{"id": 1}\n').digest()).hexdigest()[:16]
    step = wiring.steps["generate_answers"]
    assert step.rerun_on == {"release": f"{folder.resolve()}:{digest}"} == {"release": release_version(str(folder))}
    assert "release" not in step.params({"m": "00000"})[0]  # the stage never sees it
    assert wiring.steps["mavis_judge"].rerun_on == {"release": ""}  # this run's own release: its manifest is an input
    (folder / "mcitebench.jsonl").write_text('{"id": 2}\n')
    assert release_version(str(folder)) != step.rerun_on["release"]

    # under `evaluate`, the build tables the evaluations read (MAVIS's from this run's release), not
    # those of a family whose release is given by path (MCiteBench here), which the run never builds
    monkeypatch.chdir(tmp_path)  # no stage output exists here
    tables = wiring.steps["build_catalog"].inputs({})["tables"]
    assert set(wiring.catalog_tables("evaluation")) <= set(tables)
    assert "data/runs/demo/mavis/filter_questions/questions.00001.parquet" in tables
    assert not any("/mcitebench/" in p for p in tables)
    assert set(load_steps(config, targets=["evaluate", "release"]).steps["build_catalog"].inputs({})["tables"]) >= set(wiring.catalog_tables("build"))
    assert not set(load_steps(config).steps["build_catalog"].inputs({})["tables"]) & set(wiring.catalog_tables("evaluation"))


def test_two_tables_of_a_family_under_one_view_name_fail_the_parse():
    """The table-name convention: a table's file name is its catalog view, so a family's outputs of
    different tables need different names."""
    wiring = load_steps(demo_config())
    assert wiring.steps["mavis_retrieval_quality"].output("summary").endswith("/retrieval_summary.parquet")
    wiring.step("mavis_score_again", stage="mavis_retrieval_quality", family="eval_mavis", inputs={"queries": "q", "release": "r"})
    with pytest.raises(WiringError, match="rules mavis_score and mavis_score_again both write eval_mavis.summary"):
        wiring.check_table_names()


def test_job_params_run_the_stage_alone(tmp_path):
    """`explain --rule R --job-params` prints what the README tells a user to hand a stage run by
    hand: its --params, which the stage accepts as they are (the required question words included)."""
    import pyarrow.parquet as pq

    from stages.core.tables import table_schema

    done = subprocess.run([sys.executable, "-m", "stages.core.explain", "--rule", "filter_questions", "--job-params"],
                          cwd=REPO, capture_output=True, text=True, check=True)
    params = json.loads(done.stdout)
    assert params["question_words"][:3] == ["what", "why", "how"] and params["min_answer_chars"] == 500
    (tmp_path / "params.json").write_text(done.stdout)
    for name, table in (("posts", "reddit_posts"), ("comments", "reddit_comments")):
        pq.write_table(table_schema(table).empty_table(), tmp_path / f"{name}.parquet")
    run = subprocess.run([sys.executable, "-m", "stages.mavis.filter_questions", f"--input=posts={tmp_path}/posts.parquet",
                          f"--input=comments={tmp_path}/comments.parquet", f"--output=questions={tmp_path}/q.parquet",
                          f"--output=instances={tmp_path}/i.parquet", "--params", str(tmp_path / "params.json")],
                         cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads((tmp_path / "q.parquet.report.json").read_text())["params"] == params
    refused = subprocess.run([sys.executable, "-m", "stages.core.explain", "--job-params"], cwd=REPO, capture_output=True, text=True)
    assert refused.returncode == 2 and "--job-params needs --rule" in refused.stderr
