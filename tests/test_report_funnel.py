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

from conftest import run_snakemake

pytestmark = pytest.mark.slow


def _mavis_slice(workdir: Path) -> Path:
    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
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
        rows[report["stage"]][0] += report["rows_in"]
        rows[report["stage"]][1] += report["rejected"]
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
