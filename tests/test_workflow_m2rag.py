"""The real Snakemake DAG for the M2RAG family on a few demo queries with the embedded model:
release (sampled queries, pages, images and auxiliary images cached, filtered, deduplicated,
captioned, every element scored) + catalog; editing the classifier prompt reruns only
classify_queries and its descendants and calls the model only for that prompt; a forced filter
rerun is answered from the shared cache. On an up-to-date DAG (make_up_to_date): editing the
figure 8 prompt reruns the text scorer and its descendants only; changing the image score
threshold reruns no model-calling rule."""
from __future__ import annotations

import json

import duckdb
import pytest
import yaml

from conftest import make_up_to_date, run_snakemake, demo_config
from stages.core.ids import content_id

pytestmark = pytest.mark.slow
RUN = "data/runs/demo/m2rag"


def only_m2rag(workdir, limit=4):
    config = demo_config()
    for name, section in config.items():
        if isinstance(section, dict) and "enabled" in section and name != "m2rag":
            section["enabled"] = False
    config["m2rag"]["harvest_hub_dataset"]["limit"] = limit
    path = workdir / "only_m2rag.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def jobs(dry_run_stdout):
    return sorted({line.split()[1].rstrip(":") for line in dry_run_stdout.splitlines() if line.startswith(("rule ", "localrule "))})


def reports(workdir, stage, table):
    return {p.name: json.loads(p.read_text()) for p in sorted((workdir / RUN / stage).glob(f"{table}.*.parquet.report.json"))}


def test_prompt_edit_reruns_only_the_classifier(workflow_copy):
    config = only_m2rag(workflow_copy)
    run_snakemake(workflow_copy, "release", "--configfile", str(config))
    manifest = json.loads((workflow_copy / RUN / "release_m2rag/release.json").read_text())
    con = duckdb.connect(str(workflow_copy / "data/runs/demo/catalog.duckdb"), read_only=True)
    assert con.execute("select count(*) from m2rag.queries").fetchone()[0] == 4
    classified = con.execute("select count(*) from m2rag.classified_queries").fetchone()[0]
    rejected = con.execute("select count(*) from m2rag.filter_queries_rejects").fetchone()[0] + \
        con.execute("select count(*) from m2rag.classify_queries_rejects").fetchone()[0]
    assert classified + rejected == 4
    # the release's queries are the per-topic sample; every sampled query's pages are released and scored
    assert manifest["tables"]["queries"] == con.execute("select count(*) from m2rag.sampled_queries").fetchone()[0] > 0
    assert manifest["tables"]["elements"] == con.execute("select count(*) from m2rag.scored_elements where kind != 'aux_image'").fetchone()[0] > 0
    caption_rejects = {row[0] for row in con.execute("select id from m2rag.caption_images_rejects").fetchall()}
    con.close()
    # the release: pages with text pieces and images, every image a cached file, scored and captioned (or its caption rejected)
    release = duckdb.connect(f"{manifest['path']}/benchmark.duckdb", read_only=True)
    one = lambda sql: release.execute(sql).fetchone()[0]  # noqa: E731
    assert one("select count(*) from images where sha256 = '' or score is null") == 0 < manifest["tables"]["images"]
    uncaptioned = release.execute("select page_id, url from images where caption is null union all "
                                  "select query_id, url from aux_images where caption is null").fetchall()
    assert {content_id("imgref", owner, url) for owner, url in uncaptioned} <= caption_rejects
    assert one("select count(*) from images where caption_mode = 'text_stand_in'") > 0
    assert one("select count(*) from elements where kind = 'text'") > 0 and manifest["tables"]["aux_images"] == one("select count(*) from aux_images") > 0
    for (sha,) in release.execute("select sha256 from images union select sha256 from aux_images").fetchall():
        assert len(list((workflow_copy / manifest["path"] / "images").glob(f"{sha}.*"))) == 1
    release.close()
    filter_before = reports(workflow_copy, "filter_queries", "filtered_queries")
    assert sum(r["stats"]["llm_calls"] for r in filter_before.values()) == 8  # 4 queries x 2 prompts (apply: false)

    prompt = workflow_copy / "prompts" / "m2rag_query_classify.md"
    prompt.write_text(prompt.read_text().replace("# Input Question", "Keep the analysis to one sentence.\n\n# Input Question"))
    planned = run_snakemake(workflow_copy, "release", "--configfile", str(config), "--dry-run")
    assert jobs(planned.stdout) == ["build_catalog", "caption_images", "classify_queries", "image_score_elements", "m2rag_cache_images", "m2rag_fetch_pages",
                                    "m2rag_filter_images", "m2rag_gather_images", "m2rag_phash_dedup", "m2rag_search_web", "m2rag_split_pages",
                                    "release", "release_m2rag", "sample_queries", "text_score_elements"]
    run_snakemake(workflow_copy, "release", "--configfile", str(config))
    assert reports(workflow_copy, "filter_queries", "filtered_queries") == filter_before  # not rerun: 0 filter calls
    classify = reports(workflow_copy, "classify_queries", "classified_queries").values()
    assert sum(r["stats"].get("llm_calls[m2rag_query_classify]", 0) for r in classify) >= sum(r["rows_in"] for r in classify) > 0
    assert all(r["stats"].get("llm_cache_hits", 0) == 0 for r in classify)  # the edited prompt's calls are all new

    run_snakemake(workflow_copy, "release", "--configfile", str(config), "--forcerun", "filter_queries")
    for report in reports(workflow_copy, "filter_queries", "filtered_queries").values():
        assert report["stats"].get("llm_calls", 0) == 0 and report["stats"]["llm_cache_hits"] == 2 * report["rows_in"]
    for report in reports(workflow_copy, "classify_queries", "classified_queries").values():
        assert report["stats"].get("llm_calls", 0) == 0


MODEL_RULES = {"filter_queries", "classify_queries", "caption_images", "text_score_elements", "image_score_elements"}


def test_figure8_edit_reruns_text_scores_and_threshold_reruns_no_model(workflow_copy):
    config = only_m2rag(workflow_copy)
    make_up_to_date(workflow_copy, "release", "--configfile", str(config))
    planned = run_snakemake(workflow_copy, "release", "--configfile", str(config), "--dry-run", "--rerun-triggers", "mtime")
    assert jobs(planned.stdout) == []
    prompt = workflow_copy / "prompts" / "m2rag_score_text.md"
    prompt.write_text(prompt.read_text().replace("# Output Format", "Be brief.\n\n# Output Format"))
    planned = run_snakemake(workflow_copy, "release", "--configfile", str(config), "--dry-run", "--rerun-triggers", "mtime")
    assert jobs(planned.stdout) == ["build_catalog", "release", "release_m2rag", "text_score_elements"]

    make_up_to_date(workflow_copy, "release", "--configfile", str(config))
    settings = yaml.safe_load(config.read_text())
    settings["m2rag"]["release_m2rag"]["min_image_score"] = 5
    config.write_text(yaml.safe_dump(settings))
    planned = run_snakemake(workflow_copy, "release", "--configfile", str(config), "--dry-run", "--rerun-triggers", "mtime", "params")
    assert jobs(planned.stdout) == ["release", "release_m2rag"] and not MODEL_RULES & set(jobs(planned.stdout))
