"""The real Snakemake DAG on the bundled Reddit demo: release, catalog, no-op rerun, targeted
rerun after a config change, and a typo'd config key failing before any job."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
import yaml

from conftest import make_up_to_date, run_snakemake, demo_config

pytestmark = pytest.mark.slow


def _only_mavis(workdir, **filter_overrides):
    config = demo_config()
    for family in ("m2rag", "mcitebench"):
        if family in config:
            config[family]["enabled"] = False
    config["mavis"]["filter_questions"].update(filter_overrides)
    path = workdir / "only_mavis.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _jobs(dry_run_stdout):
    """Rule names a dry run would execute."""
    return sorted({line.split()[1].rstrip(":") for line in dry_run_stdout.splitlines() if line.startswith(("rule ", "localrule "))})


def test_demo_release_rerun_and_catalog(workflow_copy):
    config = _only_mavis(workflow_copy)
    result = run_snakemake(workflow_copy, "release", "--configfile", str(config))
    assert "release: data/releases/mavis-reddit/v-" in result.stdout + result.stderr
    manifest = json.loads((workflow_copy / "data/runs/demo/mavis/release_mavis/release.json").read_text())
    con = duckdb.connect(str(workflow_copy / "data/runs/demo/catalog.duckdb"), read_only=True)
    by_domain = dict(con.execute("select domain, count(*) from mavis.questions group by 1").fetchall())
    assert manifest["tables"]["questions"] > 0 and manifest["tables"]["instances"] > 0
    # instances fan out of questions; the released ones passed the visual-dependency filter
    assert con.execute("select count(*) from mavis.instances").fetchone()[0] >= sum(by_domain.values())
    # every harvested post is either a question or a filter reject
    posts = con.execute("select count(*) from mavis.posts").fetchone()[0]
    filtered = con.execute("select count(*) from mavis.filter_questions_rejects").fetchone()[0]
    assert posts == sum(by_domain.values()) + filtered

    # the per-fact documents (§3.2 Step 2): every table, a fact with a scored text and a scored image
    # document, the image files, every upstream stage's rejects, the annotators' sheet
    folder = Path(manifest["path"])
    rel = duckdb.connect(str(folder / "benchmark.duckdb"), read_only=True)
    assert set(manifest["tables"]) == {"instances", "questions", "facts", "documents", "fact_documents", "images", "reject_counts"}
    both = rel.execute("""select count(*) from (select fd.fact_id from fact_documents fd join documents d using (doc_id)
                          group by 1 having count(distinct d.modality) = 2)""").fetchone()[0]
    assert both >= 1
    shas = [r[0] for r in rel.execute("select sha256 from images where role = 'document'").fetchall()]
    assert shas and all((folder / "images" / f"{sha}.jpg").exists() for sha in shas)
    assert {"harvest_pushshift", "filter_questions", "cache_images"} <= {r[0] for r in rel.execute("select stage from reject_counts").fetchall()}
    rel.close()
    sheet = workflow_copy / "data/runs/demo/mavis/sample_annotation/annotation_sheet.csv"
    assert sheet.exists() and sheet.read_text().startswith("instance_id,domain,question,fact_id,fact,relevant")

    # the duckdb CLI (an older reader than the Python module) opens the catalog from another folder
    con.close()
    cli = subprocess.run(["duckdb", str(workflow_copy / "data/runs/demo/catalog.duckdb"), "-csv", "-noheader",
                          "select count(*) from mavis.questions"], cwd=workflow_copy.parent, capture_output=True, text=True)
    assert cli.stdout.strip() == str(sum(by_domain.values())), cli.stderr

    again = run_snakemake(workflow_copy, "release", "--configfile", str(config), "--dry-run")
    assert "Nothing to be done" in again.stdout + again.stderr

    changed = _only_mavis(workflow_copy, min_answer_chars=300)
    planned = run_snakemake(workflow_copy, "release", "--configfile", str(changed), "--dry-run")
    assert _jobs(planned.stdout) == ["build_catalog", "cache_images", "decide_entailment", "extract_atomic_facts", "fact_cache_images",
                                     "filter_entailment_image", "filter_entailment_text",
                                     "filter_images", "filter_questions", "filter_visual_dependency", "phash_dedup", "release",
                                     "release_mavis", "retrieve_fact_documents", "sample_annotation"]
    # the post images (rules/images.smk) descend from the questions, the instance filters from both


@pytest.mark.parametrize("text, message", [
    ("mavis:\n  filter_questions:\n    min_answer_char: 300\n", "unknown config key 'mavis.filter_questions.min_answer_char'"),
    ("mavis:\n  filter:\n    min_answer_chars: 300\n", "config key 'mavis.filter' was renamed to 'mavis.filter_questions'"),
])
def test_bad_config_fails_before_any_job(workflow_copy, text, message):
    bad = workflow_copy / "bad.yaml"
    bad.write_text(text)
    result = run_snakemake(workflow_copy, "release", "--configfile", str(bad), check=False)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
    assert not (workflow_copy / "data" / "runs").exists()


MAVIS_RELEASE = "data/runs/demo/mavis/release_mavis/release.json"
MAVIS_SAMPLE = "data/runs/demo/mavis/sample_annotation/annotation_sample.parquet"
DOWNSTREAM_OF_ENTAILMENT = {"decide_entailment", "sample_annotation", "release_mavis"}


def _planned_for(workdir, *targets):
    out = run_snakemake(workdir, *targets, "-n", "--rerun-triggers", "mtime").stdout
    return set(re.findall(r"^(?:local)?rule (\w+):", out, re.M))


def test_table10_prompt_edit_reruns_exactly_extract_atomic_facts_and_descendants(workflow_copy):
    """Every output made up to date, then the Table 10 prompt edited: the dry run plans
    extract_atomic_facts and everything downstream of the facts (per-fact documents, their images,
    entailment, the annotation sample, the release), nothing upstream; an App. A.3 image prompt
    edit plans only the image entailment and what follows it."""
    make_up_to_date(workflow_copy, MAVIS_RELEASE, MAVIS_SAMPLE)
    assert _planned_for(workflow_copy, MAVIS_RELEASE, MAVIS_SAMPLE) == set()

    prompt = workflow_copy / "prompts/mavis_fact_filter.md"
    prompt.write_text(prompt.read_text().replace("You and your partners decide", "You and your partners carefully decide"))
    assert _planned_for(workflow_copy, MAVIS_RELEASE, MAVIS_SAMPLE) == {
        "extract_atomic_facts", "retrieve_fact_documents", "fact_cache_images",
        "filter_entailment_text", "filter_entailment_image", *DOWNSTREAM_OF_ENTAILMENT}

    make_up_to_date(workflow_copy, MAVIS_RELEASE, MAVIS_SAMPLE)
    prompt = workflow_copy / "prompts/mavis_entail_image.md"
    prompt.write_text(prompt.read_text().replace("Determine whether", "Decide whether"))
    assert _planned_for(workflow_copy, MAVIS_RELEASE, MAVIS_SAMPLE) == {"filter_entailment_image", *DOWNSTREAM_OF_ENTAILMENT}


def test_post_images_are_only_cached_unless_images_filters_is_on(workflow_copy):
    """MAVIS §3.2 keeps every post with an image: with images.filters off (the default) the judges
    and the release read cache_images' rows; the demo turns M2RAG's filters on (see above)."""
    config = yaml.safe_load(_only_mavis(workflow_copy).read_text())
    config["images"]["filters"] = False
    path = workflow_copy / "no_filters.yaml"
    path.write_text(yaml.safe_dump(config))
    planned = run_snakemake(workflow_copy, "release", "--configfile", str(path), "--dry-run").stdout
    jobs = _jobs(planned)
    assert "cache_images" in jobs and "filter_images" not in jobs and "phash_dedup" not in jobs
    judge = planned.split("rule filter_visual_dependency:", 1)[1].split("\n\n", 1)[0]
    assert "mavis/cache_images/images_cached." in judge and "images_deduped" not in judge


def test_subreddit_dumps_reads_the_pair_of_every_configured_subreddit(workflow_copy):
    """mavis.harvest_pushshift.subreddit_dumps (the recipe's: the per-subreddit 2005-06 to 2023-12
    dumps): each subreddit of domains gets its submissions and comments file from the folder, names
    matched without regard to case; a missing one stops the run naming the file and the config key."""
    config = yaml.safe_load(_only_mavis(workflow_copy).read_text())
    subreddits = sorted({s for subs in config["mavis"]["harvest_pushshift"]["domains"].values() for s in subs})
    folder = workflow_copy / "subreddits"
    folder.mkdir()
    files = {f"{sub.lower() if i % 2 else sub}_{kind}.zst" for i, sub in enumerate(subreddits) for kind in ("submissions", "comments")}
    files -= {"Physics_comments.zst", "physics_comments.zst"}
    for name in files | {"notconfigured_comments.zst"}:
        (folder / name).write_bytes(b"")
    del config["mavis"]["harvest_pushshift"]["files"]
    config["mavis"]["harvest_pushshift"]["subreddit_dumps"] = str(folder)
    path = workflow_copy / "subreddit_dumps.yaml"
    path.write_text(yaml.safe_dump(config))
    explained = subprocess.run([sys.executable, "-m", "stages.core.explain", "--configfile", str(path)], cwd=workflow_copy,
                               capture_output=True, text=True).stdout
    assert f"{folder}/Physics_comments.zst  (config mavis.harvest_pushshift.subreddit_dumps)" in explained
    (folder / "PHYSICS_comments.zst").write_bytes(b"")
    planned = run_snakemake(workflow_copy, "release", "--configfile", str(path), "--dry-run").stdout
    harvest = planned.split("rule harvest_pushshift:", 1)[1].split("\n\n", 1)[0]
    assert set(re.findall(r"subreddits/(\w+\.zst)", harvest)) == files | {"PHYSICS_comments.zst"}
    assert len(files) == 2 * len(subreddits) - 1
