"""Snakemake's own HTML report on a slice of the demo: MAVIS alone, one shard, and answers required
to be longer than any in the sample, so every post is rejected by filter_questions (the funnel's
rejects) and no model is called (seconds, not minutes, on a busy machine). The report embeds, under
the family's category, the funnel naming every stage with the rows it kept and read, the
time/model-calls figure and the release card."""
from __future__ import annotations

import base64
import collections
import json
import re
from pathlib import Path

import pytest
import yaml

from conftest import run_snakemake, run_stage, demo_config

pytestmark = pytest.mark.slow


def _mavis_slice(workdir: Path) -> Path:
    config = demo_config()
    for section in ("m2rag", "mcitebench", "images", "retrieval", "evaluate", "citeeval"):
        if isinstance(config.get(section), dict):
            config[section]["enabled"] = False
    config["shards"] = 1
    config["mavis"]["filter_questions"]["min_answer_chars"] = 100_000
    path = workdir / "mavis_slice.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _embedded(html: str, name: str) -> str:
    """The text of a file the report embeds as a base64 data URI (filename=<name>)."""
    found = re.findall(r"data:[^;]+;charset=[^;]+;filename=" + re.escape(name) + r";base64,([A-Za-z0-9+/=]+)", html)
    assert found, f"{name} is not embedded in the report"
    return base64.b64decode(found[0]).decode()


def test_report_embeds_each_family_funnel_naming_every_stage(workflow_copy):
    config = _mavis_slice(workflow_copy)
    run_snakemake(workflow_copy, "report", "--configfile", str(config))
    run_snakemake(workflow_copy, "report", "--configfile", str(config), "--report", "report.html")
    html = (workflow_copy / "report.html").read_text()

    # what the stages recorded: their report sidecars, shards summed
    rows = collections.defaultdict(lambda: [0, 0])
    for sidecar in (workflow_copy / "data/runs/demo/mavis").glob("*/*.report.json"):
        report = json.loads(sidecar.read_text())
        rows[sidecar.parent.name][0] += report["rows_in"]  # one bar per rule folder
        rows[sidecar.parent.name][1] += report["rejected"]
    assert {"harvest_pushshift", "filter_questions", "filter_visual_dependency", "extract_atomic_facts", "release_mavis"} <= set(rows)

    funnel = _embedded(html, "funnel.svg")
    assert funnel.lstrip().startswith("<?xml") and "<svg" in funnel
    for stage, (rows_in, rejected) in rows.items():
        assert stage in funnel and f"{rows_in - rejected} of {rows_in}" in funnel, stage
    assert "filter_questions" in _embedded(html, "stages.svg")
    card = _embedded(html, "card.html")
    manifest = json.loads((workflow_copy / "data/runs/demo/mavis/release_mavis/release.json").read_text())
    assert manifest["version"] in card and "<table>" in card
    assert '"mavis"' in html  # the family's category


def test_a_stage_run_by_two_rules_is_two_steps(tmp_path):
    """MAVIS runs cache_images on post images (cache_images/) and on fact images (fact_cache_images/):
    the same stage name in two rule folders, each its own bar with its own rows, shards summed."""
    def sidecar(folder, shard, rows_in, rejected, reasons):
        (tmp_path / folder).mkdir(exist_ok=True)
        out = tmp_path / folder / f"images.{shard}.parquet"
        out.write_bytes(b"")
        (tmp_path / folder / f"images.{shard}.parquet.report.json").write_text(json.dumps({
            "stage": "cache_images", "version": "1", "params": {}, "rows_in": rows_in, "rows_out": {"images": rows_in - rejected},
            "rejected": rejected, "rejected_by_reason": reasons, "stats": {}, "seconds": 1.0}))
        return out
    outputs = [sidecar("cache_images", 0, 10, 2, {"not_an_image": 2}), sidecar("cache_images", 1, 6, 1, {"too_large": 1}),
               sidecar("fact_cache_images", 0, 4, 3, {"not_an_image": 3})]
    release = tmp_path / "release"
    release.mkdir()
    (release / "README.md").write_text("# card\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    (tmp_path / "release.json").write_text(json.dumps({"name": "mavis-reddit", "version": "v-1", "path": str(release)}))
    run_stage("report_funnel", *[arg for o in outputs for arg in ("--input", f"outputs={o}")], "--input", f"release={tmp_path / 'release.json'}",
              "--output", f"funnel={tmp_path / 'funnel.svg'}", "--output", f"stages={tmp_path / 'stages.svg'}",
              "--output", f"card={tmp_path / 'card.html'}", "--params", json.dumps({"family": "mavis"}))
    funnel = (tmp_path / "funnel.svg").read_text()
    assert "13 of 16" in funnel and "1 of 4" in funnel  # cache_images's two shards summed; fact_cache_images apart
    assert "fact_cache_images" in funnel and "not_an_image (fact_cache_images)" in funnel and "not_an_image (cache_images)" in funnel
    report = json.loads((tmp_path / "funnel.svg.report.json").read_text())
    assert report["rows_in"] == 3 == report["rows_out"]["funnel"] and report["rejected"] == 0
