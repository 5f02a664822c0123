"""The rehearsal of the real recipe (issue 29): scripts/rehearse.py builds `release evaluate` with
`--configfile config/recipe_real.yaml config/rehearsal.yaml <generated endpoints.yaml>` against
local stand-ins of every endpoint and replayed sources (2,000 Reddit posts, 200 ELI5 questions over
the ten topics, 20 OpenReview forums: the least the issue allows; generated once into
data/cache/rehearsal/ and reused). Then:

- every family releases and every evaluation reports;
- every model role reached its own stand-in, the one standing in for the recipe's endpoint of that
  role, with the recipe's model name, for the prompts its step asks (the stages' declared prompts,
  else the prompts their reports counted calls of); no stand-in refused a request, and the
  stand-ins answered exactly the calls the stage reports count;
- every step ran the paper's settings: explain's JSON of the rehearsal differs from the recipe's
  only in the keys config/rehearsal.yaml sets (sources, and the keys marked `CPU:` there) and the
  endpoints the generated overlay sets; nothing comes from the demo overlay;
- each release card and report carries the recipe's numbers, not the demo's.

It takes long: 8 to 17 minutes on two cores (most of it the jobs' start-up: ~200 jobs), and
more when the machine is shared. Marked slow.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import WORKFLOW_PARTS

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
RECIPE, OVERLAY = "config/recipe_real.yaml", "config/rehearsal.yaml"
# what a rehearsal may change besides the endpoints: where the sources are (CPU keys are marked in the file)
SOURCE_KEYS = {"fetch.mode", "fetch.replay_warcs", "mavis.harvest_pushshift.files", "mavis.harvest_pushshift.subreddit_dumps", "m2rag.harvest_hub_dataset.path",
               "m2rag.harvest_hub_dataset.data_files", "mcitebench.harvest_openreview.mode", "mcitebench.harvest_openreview.warc",
               "retrieval.build_text_index.corpus.path", "retrieval.build_text_index.corpus.name",
               "retrieval.build_text_index.corpus.data_files", "retrieval.build_text_index.corpus.id_prefix", "attribution.items"}
ENDPOINT_LEAVES = ("openai.base_url", "openai.api_key_env", "backend")


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory) -> Path:
    """The workflow in a folder of its own, rehearsed once for every test here."""
    wf = tmp_path_factory.mktemp("rehearsal") / "wf"
    for part in WORKFLOW_PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, wf / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (wf / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, wf / part)
    cache = REPO / "data" / "cache" / "rehearsal"  # the generated sources, kept across runs
    cache.mkdir(parents=True, exist_ok=True)
    (wf / "data" / "cache").mkdir(parents=True, exist_ok=True)
    (wf / "data" / "cache" / "rehearsal").symlink_to(cache)
    done = subprocess.run([sys.executable, "scripts/rehearse.py", "--cores", "2"], cwd=wf, capture_output=True, text=True)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return wf


def explain(wf: Path, *configfiles: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "stages.core.explain", "--configfile", *configfiles, "--json", "--no-dry-run"],
                          cwd=wf, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def generated(wf: Path) -> str:
    return str(next((wf / "data/runs").glob("*/rehearsal/endpoints.yaml")).relative_to(wf))


def leaves(node, prefix: str = "") -> set[str]:
    if isinstance(node, dict):
        return {leaf for key, value in node.items() for leaf in leaves(value, f"{prefix}{key}.")}
    return {prefix[:-1]}


def cpu_keys(text: str) -> set[str]:
    """The keys of the overlay marked `# CPU:` (on their line, or on the mapping above them)."""
    marked, stack = set(), []
    for line in text.splitlines():
        match = re.match(r"^(\s*)([\w.]+):", line)
        if not match:
            continue
        depth = len(match[1]) // 2
        stack[depth:] = [(match[2], "# CPU:" in line or bool(stack[depth - 1][1] if depth else False))]
        if stack[-1][1]:
            marked.add(".".join(k for k, _ in stack))
    return marked


def test_every_family_releases_and_every_evaluation_reports(rehearsal):
    phases = json.loads(next((rehearsal / "data/runs").glob("*/rehearsal/phases.json")).read_text())
    assert [p["status"] for p in phases] == [0, 0, 0]
    from stages.core.explain import layered_config
    from stages.core.wiring import load_steps

    config, _ = layered_config([str(rehearsal / RECIPE), str(rehearsal / OVERLAY), str(rehearsal / generated(rehearsal))], [])
    wiring = load_steps(config)
    assert {Path(m).parent.parent.name for m in wiring.releases} == {"mavis", "m2rag", "mcitebench"}
    for manifest in wiring.releases:
        release = json.loads((rehearsal / manifest).read_text())
        assert (rehearsal / release["path"] / "benchmark.duckdb").exists()
    assert len(wiring.evaluations) >= 6
    for report in wiring.evaluations:
        assert (rehearsal / report).stat().st_size > 0, report


def test_every_model_role_reached_its_own_stand_in_with_the_recipes_model(rehearsal):
    out = next((rehearsal / "data/runs").glob("*/rehearsal"))
    counts = json.loads((out / "counts.json").read_text())
    stand_ins = {s["url"]: s["recipe"] for s in json.loads((out / "endpoints.json").read_text())["stand_ins"]}
    assert all(not c["refused"] for c in counts.values()), {u: c["refused"] for u, c in counts.items() if c["refused"]}
    recipe = explain(rehearsal, RECIPE)
    rehearsed = explain(rehearsal, RECIPE, OVERLAY, generated(rehearsal))
    from stages.core.wiring import declaration

    reports = {}
    for path in (rehearsal / "data/runs").glob("*/**/*.report.json"):
        report = json.loads(path.read_text())
        reports.setdefault(report["stage"], []).append(report)
    # the stand-ins answered exactly the calls the stages sent: no model call went anywhere else
    sent = sum(r["stats"].get("llm_calls", 0) for rs in reports.values() for r in rs)
    answered = sum(n for c in counts.values() for by_prompt in c["models"].values() for n in by_prompt.values())
    assert sent == answered > 0

    def key(role):
        return role["rule"], json.dumps(role["job"], sort_keys=True), role["role"]

    planned = {key(r): r for r in recipe["models"]}
    reached: dict[tuple[str, str], bool] = {}
    for role in rehearsed["models"]:
        stage = rehearsed["rules"][role["rule"]]["stage"]
        own = planned[key(role)]  # the same role in the recipe: its model and endpoint
        assert role["model"] == own["model"] and role["endpoint"] in stand_ins, role
        expected = f"{own['backend']}:{own['model']}" if own["endpoint"] == "in process" else own["endpoint"].rstrip("/")
        assert stand_ins[role["endpoint"]] == expected, (role, expected)
        asked = {k[len("llm_calls["):-1] for r in reports.get(stage, []) for k in r["stats"] if k.startswith("llm_calls[")}
        prompts = set(declaration(stage).get("prompts") or []) or asked  # the declared prompts, once stages declare them
        answered = counts[role["endpoint"]]["models"].get(role["model"], {})
        reached[stage, role["role"]] = reached.get((stage, role["role"]), False) or any(answered.get(p, 0) for p in prompts)
    # a stage run under several rules uses some of its roles in each (score_elements: text, then images)
    assert all(reached.values()), sorted(label for label, ok in reached.items() if not ok)
    model_stages = {r["stage"] for r in rehearsed["rules"].values()
                    if any(s.get("schema") == "llm" for s in declaration(r["stage"])["params"].values())}
    assert {stage for stage, _ in reached} == model_stages
    for stage in model_stages:  # every model stage sent calls
        assert sum(r["stats"].get("llm_calls", 0) for r in reports[stage]) > 0, stage


def test_every_step_ran_the_recipes_settings(rehearsal):
    overlay_text = (rehearsal / OVERLAY).read_text()
    overlay = leaves(yaml.safe_load(overlay_text))
    cpu = cpu_keys(overlay_text) & overlay
    assert overlay == SOURCE_KEYS | cpu, sorted(overlay - SOURCE_KEYS - cpu)  # every other key says why (CPU:)
    endpoints = leaves(yaml.safe_load((rehearsal / generated(rehearsal)).read_text()))
    recipe = explain(rehearsal, RECIPE)
    rehearsed = explain(rehearsal, RECIPE, OVERLAY, generated(rehearsal))
    assert "demo overlay" not in rehearsed["layers"]
    changed = 0
    for rule, entry in rehearsed["rules"].items():
        jobs = {json.dumps(j["wildcards"], sort_keys=True): j["params"] for j in recipe["rules"][rule]["jobs"]}
        for job in entry["jobs"]:
            before = jobs.get(json.dumps(job["wildcards"], sort_keys=True))
            if before is None:  # a shard the recipe's 16 have and the rehearsal's 2 do not, or the other way
                continue
            for leaf, item in job["params"].items():
                assert item["origin"] != "demo overlay", (rule, leaf)
                if leaf in before and before[leaf]["value"] == item["value"] or rule == "estimate_cost":
                    continue
                changed += 1
                # the value comes from a key the overlays set: the same name at the end of the key
                # (fetch.mode, clip_model, corpus.path, llm.openai.base_url ...), or follows one
                # (record_warc: a fetching stage records only in fetch mode record)
                tail = leaf.split(".")
                ours = [k for k in overlay | endpoints if k.split(".")[-len(tail):] == tail or k.endswith("." + leaf)]
                pointed = item["origin"] == f"recipe {generated(rehearsal)}" and (leaf.endswith(ENDPOINT_LEAVES) or (
                    leaf.endswith("openai") and set(item["value"]) <= {"base_url", "api_key_env"}))  # a role given as keys (vision_llm)
                assert ours or pointed or leaf == "record_warc", (rule, leaf, before.get(leaf), item)
    assert changed


def test_the_estimate_of_the_rehearsal_from_its_own_profile_gives_its_calls(rehearsal, tmp_path):
    """scripts/make_estimate_profile.py measures the rehearsal; `snakemake estimate` with that profile
    then projects, for every model step whose rows it counts, exactly the calls the step made."""
    configfiles = [RECIPE, OVERLAY, generated(rehearsal)]
    out = next((rehearsal / "data/runs").glob("*/rehearsal"))
    profile = tmp_path / "profile.yaml"
    subprocess.run([sys.executable, "scripts/make_estimate_profile.py", "--configfile", *configfiles, "--counts", str(out / "counts.json"),
                    "--source", "this rehearsal", "--out", str(profile)], cwd=rehearsal, check=True, capture_output=True)
    measured = yaml.safe_load(profile.read_text())["rules"]
    stats = [json.loads(p.read_text())["stats"] for p in sorted(out.parent.glob("mavis/filter_visual_dependency/*.report.json"))]
    # the requests (calls sent and call-cache hits: the generated posts repeat question texts, real ones
    # hardly): four answers a question, a verdict on each
    assert measured["filter_visual_dependency"]["calls_per_item"] == 8.0
    assert measured["filter_visual_dependency"]["roles"]["judge"] == 0.5
    assert sum(s.get("llm_cache_hits", 0) for s in stats) > 0  # ... which the calls sent alone would have missed
    (tmp_path / "estimate.yaml").write_text(yaml.safe_dump({"estimate": {"profile": str(profile)}}))
    done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "estimate", "--configfile", *configfiles,
                           str(tmp_path / "estimate.yaml")], cwd=rehearsal, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Nothing to be done" not in done.stdout and "| filter_visual_dependency |" in done.stdout
    estimate = json.loads(next((rehearsal / "data/runs").glob("*/estimate/estimate.json")).read_text())
    counted = {rule: row for rule, row in estimate["steps"].items() if row["basis"] == "counted" and row["calls"] is not None}
    # counted where the recipe gives no count: the MAVIS questions and the attribution items (free steps)
    assert {"filter_visual_dependency", "attribute_self", "attribution_references"} <= set(counted)
    for rule, row in counted.items():
        reports = sorted((rehearsal / "data/runs").glob(f"*/*/{rule}/*.report.json"))
        asked = sum(json.loads(p.read_text())["stats"].get(k, 0) for p in reports for k in ("llm_calls", "llm_cache_hits"))
        assert abs(row["calls"] - asked) <= len(row["roles"]), (rule, row["calls"], asked)  # each role's calls are rounded


def test_release_cards_and_reports_carry_the_recipes_numbers(rehearsal):
    """Each number checked is one the recipe (or the stage default it keeps) sets and the demo sets otherwise."""
    import duckdb

    recipe = yaml.safe_load((rehearsal / RECIPE).read_text())
    run = next((rehearsal / "data/runs").glob("*/rehearsal")).parent
    releases = {json.loads(p.read_text())["path"]: p for p in run.glob("*/release_*/release.json")}
    folder = {Path(path).parent.name: rehearsal / path for path in releases}

    mavis = folder[recipe["mavis"]["release_mavis"]["name"]]  # the recipe's release names (the demo's: mavis-reddit, ...)
    card = (mavis / "README.md").read_text()
    sampled = sum(1 for _ in csvrows(run / "mavis/sample_annotation/annotation_sheet.csv"))
    with duckdb.connect(str(mavis / "benchmark.duckdb"), read_only=True) as con:
        test = con.execute("select count(*) from instances where split = 'test'").fetchone()[0]
        per_fact = dict(con.execute("select modality, max(n) from (select fd.fact_id, d.modality, count(*) n from fact_documents fd "
                                "join documents d using (doc_id) group by 1, 2) group by 1").fetchall())
    assert 0 < test <= recipe["mavis"]["sample_annotation"]["size"] and sampled > 0  # the annotated sample is the test split
    assert re.search(rf"\| test \(human-annotated\) \| {test} \|", card)
    top_k = recipe["mavis"]["retrieve_fact_documents"]  # 5 web images and 5 C4 passages a fact (the demo: 1 and 1)
    assert per_fact == {"image": top_k["image_top_k"], "text": top_k["text_top_k"]}

    m2rag = folder[recipe["m2rag"]["release_m2rag"]["name"]]
    with duckdb.connect(str(m2rag / "benchmark.duckdb"), read_only=True) as con:
        sampled = [n for n, in con.execute("select sampled from categories where id <= 10").fetchall()]
    assert 1 < max(sampled) <= recipe["m2rag"]["sample_queries"]["per_category"]  # the demo samples 1 a topic

    mcitebench = folder[recipe["mcitebench"]["release_mcitebench"]["name"]]
    card = (mcitebench / "README.md").read_text()
    quotas = recipe["mcitebench"]["release_mcitebench"]["quotas"]  # Table 1's targets (the demo sets none)
    assert f"| total | all | {quotas['total']} |" in card
    for kind, target in quotas["question_type"].items():
        assert f"| question_type | {kind} | {target} |" in card

    from stages.core.wiring import declaration

    report = (run / "eval_mavis/report_mavis/report.md").read_text()
    k = declaration("mavis_retrieve")["params"]["top_k"]["default"]  # the seed's K = 5, which the recipe keeps (the demo: 2)
    for model in recipe["eval_mavis"]["models"]:  # the recipe's models on the test split, K documents retrieved
        assert re.search(rf"\| {re.escape(model['name'])} \| {test} \| test {test} \|", report)
        cells = r"(?: (?:[\d.]+|n/a) \(\d+/\d+\) \|){7}"  # each number with its coverage, "45.0 (6/6)"
        assert re.search(rf"\| {re.escape(model['name'])} \| \+ Text-RAG \| Vanilla \|{cells} {k}\.0 \(\d+/\d+\) \| 0\.0 \(", report)
    report = (run / "eval_mcitebench/report_mcitebench/report.md").read_text()
    with duckdb.connect(str(mcitebench / "benchmark.duckdb"), read_only=True) as con:
        questions = con.execute("select count(*) from questions").fetchone()[0]
    for model in recipe["eval_mcitebench"]["models"]:  # every question of the release (the demo: its first 4), with captions
        assert re.search(rf"\| {re.escape(model['name'])} \| {questions} \| {questions} \|.* True \| True \|", report)
    report = (run / "eval_m2rag/m2rag_report/report.md").read_text()
    rows = set(re.findall(r"^\| ([\w.-]+) \| (single_stage|multi_stage|separate) \|", report, re.M))
    assert {m for m, _ in rows} == {m["name"] for m in recipe["eval_m2rag"]["models"]}
    assert {a for _, a in rows} == set(recipe["eval_m2rag"]["approaches"])
    for where in ("eval_mcitebench", "eval_mavis", "eval_m2rag"):  # CiteEval-Auto on every evaluation with cited responses
        assert (run / where / "citeeval_report/report.md").read_text().startswith("# CiteEval-Auto on the")
    report = (run / "attribution/score_attribution/report.md").read_text()
    assert re.search(r"^\| smollm2-135m \| text \| attention \|", report, re.M)  # the CPU model, named as what it is


def csvrows(path: Path):
    import csv

    with path.open(newline="", encoding="utf-8") as f:
        yield from csv.DictReader(f)
