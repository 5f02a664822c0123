"""`snakemake estimate` (stages/core/estimate.py, stages/catalog/estimate_cost.py) on the demo's MAVIS
and M2RAG families: it runs only the free steps the model steps' counts need (derived from the
declarations: no model param, no GPU, no network), projects every model step's rows, calls, tokens
and price from a profile (figures checked by hand here from the projection rule), GPU-hours from a
server's rates; and `estimate.budget` stops a run before a model step that would cost more, in one
line, before any job starts."""
from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest
import yaml

from conftest import run_snakemake, run_stage
from stages.core.estimate import over_budget
from stages.core.explain import layered_config
from stages.core.wiring import load_steps

FAMILIES = {"mcitebench": {"enabled": False}, "eval_mcitebench": {"enabled": False}, "citeeval": {"enabled": False},
            "attribution": {"enabled": False}}
PROFILE = {"source": "a test profile", "rules": {
    "filter_visual_dependency": {"items_per_row": 1.0, "out_per_item": {"instances": 0.5}, "calls_per_item": 4,
                                 "prompt_tokens_per_call": 100, "completion_tokens_per_call": 10,
                                 "roles": {"answerers[smollm2]": 0.75, "judge": 0.25}},
    "extract_atomic_facts": {"items_per_row": 2.0, "out_per_item": {"facts": 1.5}, "calls_per_item": 2,
                             "prompt_tokens_per_call": 200, "completion_tokens_per_call": 50},
    "filter_queries": {"items_per_row": 1.0, "out_per_item": {"filtered_queries": 0.4}, "calls_per_item": 2,
                       "prompt_tokens_per_call": 300, "completion_tokens_per_call": 20},
}}
MODEL = "SmolLM2-135M-Instruct.Q4_1"


def write(workdir, name: str, estimate: dict) -> str:
    (workdir / name).write_text(yaml.safe_dump({**FAMILIES, "estimate": {"profile": "profile.yaml", **estimate}}))
    return name


def test_estimate_runs_only_free_steps_and_projects_by_the_rule(workflow_copy):
    wf = workflow_copy
    (wf / "profile.yaml").write_text(yaml.safe_dump(PROFILE))
    priced = write(wf, "priced.yaml", {"prices": {MODEL: {"input_per_mtok": 2.5, "output_per_mtok": 10}},
                                       "given": {"harvest_hub_dataset.queries": 1000, "mavis_generate_queries": 7}})
    done = run_snakemake(wf, "estimate", "--configfile", "config/demo.yaml", priced)
    assert "| filter_visual_dependency |" in done.stdout and "How this is projected" in done.stdout  # the table is printed
    run = wf / "data/runs/demo"
    ran = sorted(p.stem.split(".")[0] for p in (run / "logs").rglob("*.log"))
    # filter_visual_dependency reads filter_questions' instances: those two free steps ran, nothing else
    # (harvest_hub_dataset is free too, but its count is given; the model steps and the image fetches never run)
    assert ran == ["estimate_cost", "filter_questions", "filter_questions", "harvest_pushshift"]

    estimate = json.loads((run / "estimate/estimate.json").read_text())
    steps = estimate["steps"]
    instances = sum(pq.read_metadata(p).num_rows for p in sorted((run / "mavis/filter_questions").glob("instances.*.parquet"))
                    if not p.name.endswith(("rejects.parquet",)))
    assert estimate["counted"] == {"filter_questions.instances": instances}
    # the demo caps filter_visual_dependency at 2 instances a shard (limit), 2 shards
    items = 2 * min(instances / 2, 2)
    fvd = steps["filter_visual_dependency"]
    assert (fvd["items"], fvd["basis"]) == (round(items), "counted")
    calls, prompt, completion = items * 4, items * 4 * 100, items * 4 * 10
    assert (fvd["calls"], fvd["prompt_tokens"], fvd["completion_tokens"]) == (round(calls), round(prompt), round(completion))
    assert fvd["usd"] == pytest.approx((prompt * 2.5 + completion * 10) / 1e6, abs=1e-4)
    by_role = {}
    for role in fvd["roles"]:
        by_role[role["role"]] = by_role.get(role["role"], 0) + role["calls"]
    assert by_role == {"answerers[smollm2]": round(calls * 0.75 / 2) * 2, "judge": round(calls * 0.25 / 2) * 2}  # per shard job

    facts = steps["extract_atomic_facts"]  # projected: the instances visual dependency keeps, 2 items each
    assert (facts["items"], facts["basis"], facts["calls"]) == (round(items * 0.5 * 2), "projected", round(items * 0.5 * 2 * 2))
    text = steps["filter_entailment_text"]  # no figures: an item per row of its first input, the facts
    assert (text["items"], text["basis"], text["calls"], text["profiled"]) == (round(items * 0.5 * 2 * 1.5), "projected", None, False)
    queries = steps["filter_queries"]  # the given count wins: no harvest ran for it
    assert (queries["items"], queries["basis"], queries["calls"]) == (1000, "given", 2000)
    assert steps["classify_queries"]["items"] == 400 and steps["classify_queries"]["calls"] is None
    assert steps["mavis_generate_queries"]["items"] == 2 and steps["mavis_generate_queries"]["basis"] == "given"  # the demo's limit: 2
    assert estimate["total_usd"] == round(sum(s["usd"] or 0 for s in steps.values()), 2)

    # GPU-hours from a server's rates (in-process models are keyed by model), priced by the hour
    hourly = write(wf, "hourly.yaml", {"throughput": {MODEL: {"output_tokens_per_s": 50, "prefill_tokens_per_s": 1000, "usd_per_hour": 3.6}}})
    run_snakemake(wf, "estimate", "--configfile", "config/demo.yaml", hourly)
    fvd = json.loads((run / "estimate/estimate.json").read_text())["steps"]["filter_visual_dependency"]
    hours = (prompt / 1000 + completion / 50) / 3600
    assert fvd["gpu_hours"] == pytest.approx(hours, abs=1e-4) and fvd["usd"] == pytest.approx(hours * 3.6, abs=1e-4)


def test_budget_stops_a_run_before_a_model_step_that_costs_more(workflow_copy, monkeypatch):
    wf = workflow_copy
    (wf / "profile.yaml").write_text(yaml.safe_dump(PROFILE))
    prices = {"prices": {MODEL: {"input_per_mtok": 2.5, "output_per_mtok": 10}}}
    tight = write(wf, "tight.yaml", {**prices, "budget": 0.00001})
    refused = run_snakemake(wf, "release", "--configfile", "config/demo.yaml", tight, check=False)
    assert refused.returncode != 0
    assert "budget: estimate.budget is 1e-05 USD but there is no estimate of this run" in refused.stderr
    assert not (wf / "data/runs/demo/mavis").exists()  # nothing ran

    run_snakemake(wf, "estimate", "--configfile", "config/demo.yaml", tight)  # the estimate itself is never stopped
    before = sorted(p.name for p in (wf / "data/runs/demo/logs").rglob("*.log"))
    refused = run_snakemake(wf, "release", "--configfile", "config/demo.yaml", tight, check=False)
    assert refused.returncode != 0
    line = [l for l in refused.stderr.splitlines() if l.startswith("budget:")]
    assert len(line) == 1 and line[0].startswith("budget: stopping before filter_visual_dependency (stage filter_visual_dependency): projected ")
    assert sorted(p.name for p in (wf / "data/runs/demo/logs").rglob("*.log")) == before  # no job started

    def wiring(name):
        config, _ = layered_config([str(wf / "config/demo.yaml"), str(wf / name)], [])
        return load_steps(config)

    monkeypatch.chdir(wf)  # the run's paths are relative to its folder
    usd = json.loads((wf / "data/runs/demo/estimate/estimate.json").read_text())["steps"]["filter_visual_dependency"]["usd"]
    assert over_budget(wiring(tight), usd * 2, {"filter_visual_dependency", "extract_atomic_facts"}) is None
    assert over_budget(wiring(tight), usd / 2, {"cache_images", "filter_images"}) is None  # no model step would run
    assert "filter_visual_dependency" in over_budget(wiring(tight), usd / 2, {"filter_visual_dependency"})
    dearer = write(wf, "dearer.yaml", {"prices": {MODEL: {"input_per_mtok": 5, "output_per_mtok": 10}}})
    assert "was made with other settings" in over_budget(wiring(dearer), 1000, {"filter_visual_dependency"})


def test_a_count_given_for_no_step_is_one_line_and_an_estimate_of_other_settings_is_never_printed(workflow_copy):
    wf = workflow_copy
    (wf / "profile.yaml").write_text(yaml.safe_dump(PROFILE))
    for given, line in (({"filter_visual_dependncy": 5}, "given: 'filter_visual_dependncy' names no step of this run (did you mean 'filter_visual_dependency'?)"),
                        ({"filter_questions.bogus": 5}, "given: 'filter_questions.bogus': step filter_questions has no output 'bogus' (its outputs: "),
                        ({"filter_visual_dependency": -5}, "config key 'estimate.given.filter_visual_dependency' must be >= 0, got -5")):
        bad = run_snakemake(wf, "estimate", "--configfile", "config/demo.yaml", write(wf, "bad.yaml", {"given": given}), check=False)
        assert bad.returncode != 0 and line in bad.stdout + bad.stderr, given
    # a count for a step of a family this run leaves off (MCiteBench here) is not used, and said so
    done = run_snakemake(wf, "estimate", "--configfile", "config/demo.yaml", write(wf, "good.yaml", {"given": {"harvest_openreview.threads": 46000}}))
    assert "Given for steps this run does not have (their family is off), not used: harvest_openreview.threads." in done.stdout
    # other settings, and the counted steps cannot run (their outputs deleted, a dump gone): Snakemake
    # keeps the old estimate as if it were a source file; the target says so instead of printing it
    shutil.rmtree(wf / "data/runs/demo/mavis")
    (wf / "gone.yaml").write_text(yaml.safe_dump({**FAMILIES, "estimate": {"profile": "profile.yaml", "given": {"mavis_generate_queries": 7}},
                                                  "mavis": {"harvest_pushshift": {"files": ["data/samples/reddit/gone.zst"]}}}))
    stale = run_snakemake(wf, "estimate", "--configfile", "config/demo.yaml", "gone.yaml", check=False)
    said = stale.stdout + stale.stderr
    assert stale.returncode != 0 and "estimate.json was made with other settings or another profile, and Snakemake will not remake it" in said
    assert "| **total** |" not in stale.stdout


ALIAS_BOMB = "anchors:\n  a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)) + "rules:\n  filter_queries: {items: *a8}\n"


@pytest.mark.parametrize("text, words", [
    ("rules: [1, 2", "not YAML"),
    ("- a list", "expected a mapping with `source`"),
    ("rules:\n  filter_queries: 5\n", "rules.filter_queries is 5, not a mapping of figures"),
    ("rules:\n  filter_queries: {calls_per_item: -2}\n", "rules.filter_queries.calls_per_item is -2, not a number >= 0"),
    ("rules:\n  filter_queries: {prompt_tokens_per_call: .nan}\n", "rules.filter_queries.prompt_tokens_per_call is nan"),
    ("rules:\n  filter_queries: {items: 1" + "0" * 400 + "}\n", "rules.filter_queries.items is 1000"),
    ("rules:\n  filter_queries: {out_per_item: {filtered_queries: many}}\n", "rules.filter_queries.out_per_item.filtered_queries is 'many'"),
    ("rules:\n  filter_queries: {calls_per_itme: 2}\n", "rules.filter_queries.calls_per_itme is not a figure the estimate reads"),
    (ALIAS_BOMB, "rules.filter_queries.items is a list, not a number >= 0"),  # 9**9 leaves: shown by type, not repr'd
    ("rules:\n  filter_queries: " + "[" * 5000 + "]" * 5000 + "\n", "not YAML"),
    ("rules:\n  filter_queries: {items: 1" + "0" * 5000 + "}\n", "not YAML (Exceeds the limit (4300 digits)"),
])
def test_a_profile_edited_wrong_fails_in_one_line_naming_the_key(tmp_path, text, words):
    """The profile is a file people edit: bad YAML, a figure that is not a number >= 0 and a
    misspelt key each stop the stage with one line naming the file and the key."""
    profile = tmp_path / "profile.yaml"
    profile.write_text(text)
    out = tmp_path / "estimate.json"
    result = run_stage("estimate_cost", "--input", f"profile={profile}", "--output", f"estimate={out}",
                       "--output", f"table={tmp_path / 'estimate.md'}", check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert f"profile {profile}" in last and words in last, last


def test_a_folder_given_as_the_profile_is_one_line(tmp_path):
    result = run_stage("estimate_cost", "--input", f"profile={tmp_path}", "--output", f"estimate={tmp_path / 'estimate.json'}",
                       "--output", f"table={tmp_path / 'estimate.md'}", check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == f"estimate_cost: error: profile {tmp_path}: cannot read it (Is a directory)"
