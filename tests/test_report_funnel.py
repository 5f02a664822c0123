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


# The samplers' reports count the rows they read and left behind by design under these stats
LEFT_BEHIND = {"sample_queries": ("not_sampled", "others_only"), "sample_annotation": ("not_eligible", "not_sampled")}


def expected_lines(family_dir: Path) -> dict[str, str]:
    """Per step (rule folder), what its report sidecars say, shards summed, in the funnel's words:
    rows read, rows written per output, rejects by reason, rows not carried on (LEFT_BEHIND)."""
    steps: dict[str, dict] = {}
    for sidecar in sorted(family_dir.glob("*/*.report.json")):
        report = json.loads(sidecar.read_text())
        step = steps.setdefault(sidecar.parent.name, {"stage": report["stage"], "in": 0, "out": collections.Counter(), "rejected": 0,
                                                      "reasons": collections.Counter(), "stats": collections.Counter()})
        step["in"] += report["rows_in"]
        step["out"].update(report["rows_out"])
        step["rejected"] += report["rejected"]
        step["reasons"].update(report["rejected_by_reason"])
        step["stats"].update(report.get("stats", {}))
    lines = {}
    for name, step in steps.items():
        line = f"{name}: read {step['in']}; wrote " + (", ".join(f"{k} {v}" for k, v in step["out"].items()) or "nothing")
        line += f"; rejected {step['rejected']}"
        if step["reasons"]:
            line += " (" + ", ".join(f"{r} {n}" for r, n in sorted(step["reasons"].items(), key=lambda kv: (-kv[1], kv[0]))) + ")"
        left = {k: step["stats"][k] for k in LEFT_BEHIND.get(step["stage"], ()) if step["stats"][k]}
        if left:
            line += f"; not carried on {sum(left.values())} (" + ", ".join(f"{k} {v}" for k, v in left.items()) + ")"
        lines[name] = line
    return lines


def html_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


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

    assert {"harvest_pushshift", "filter_questions", "filter_visual_dependency", "extract_atomic_facts",
            "release_mavis"} <= set(expected_lines(workflow_copy / "data/runs/demo/mavis"))

    funnel = _embedded(html, "funnel.svg")
    assert funnel.lstrip().startswith("<?xml") and "<svg" in funnel
    for step, line in expected_lines(workflow_copy / "data/runs/demo/mavis").items():
        assert html_escape(line) in funnel, (step, line)
    assert "filter_questions" in _embedded(html, "stages.svg")
    card = _embedded(html, "card.html")
    manifest = json.loads((workflow_copy / "data/runs/demo/mavis/release_mavis/release.json").read_text())
    assert manifest["version"] in card and "<table>" in card
    assert '"mavis"' in html  # the family's category


def check_every_funnel(run: Path) -> set[tuple[str, str]]:
    """Every family's funnel (reports/<family>/funnel.svg) prints, for each of its steps, the line the
    step's report sidecars give; every step of the run that wrote a report is in its family's funnel.
    The (family, step) pairs checked."""
    drawn = set()
    for funnel_file in sorted(run.glob("reports/*/funnel.svg")):
        family = funnel_file.parent.name
        funnel = funnel_file.read_text()
        for step, line in expected_lines(run / family).items():
            assert html_escape(line) in funnel, (family, step, line)
            drawn.add((family, step))
    ran = {(p.parent.parent.name, p.parent.name) for p in run.glob("*/*/*.report.json") if p.parent.parent.name != "reports"}
    assert ran == drawn, f"steps without a funnel: {sorted(ran - drawn)}"
    return drawn


def test_every_stage_of_the_demo_is_drawn_as_it_reports(workflow_copy):
    """The whole demo (every family, as `snakemake --cores 2 report` runs it from a fresh clone: the
    README's numbers, 7 to 20 minutes on 2 cores): each family's funnel, and the shared retrieval
    layer's, prints for every stage exactly what its report sidecars say (issue 33, "Done when")."""
    run_snakemake(workflow_copy, "report")
    drawn = check_every_funnel(workflow_copy / "data/runs/demo")
    assert {"mavis", "m2rag", "mcitebench", "retrieval"} == {family for family, _ in drawn}
    assert {("m2rag", "sample_queries"), ("mavis", "extract_atomic_facts"), ("mavis", "fact_cache_images"),
            ("retrieval", "build_text_index")} <= drawn
    for step in ("m2rag/sample_queries", "mavis/sample_annotation"):  # each sampler's rows add up, none vanish
        [sidecar] = (workflow_copy / "data/runs/demo" / step).glob("*.report.json")
        report = json.loads(sidecar.read_text())
        left = sum(report["stats"][k] for k in LEFT_BEHIND[report["stage"]])
        assert report["rows_in"] == sum(report["rows_out"].values()) + report["rejected"] + left, report
    card = (workflow_copy / "data/runs/demo/reports/retrieval/card.html").read_text()
    assert "retrieval has no release" in card


def test_a_family_without_a_release_has_a_funnel(tmp_path):
    """The shared retrieval layer writes no release: its funnel is drawn from its stages alone and
    its card page says there is none."""
    (tmp_path / "build_text_index").mkdir()
    index = tmp_path / "build_text_index" / "text_index.00000.parquet"
    index.write_bytes(b"")
    (tmp_path / "build_text_index" / "text_index.00000.parquet.report.json").write_text(json.dumps({
        "stage": "build_text_index", "version": "1", "params": {}, "rows_in": 700, "rows_out": {"index": 1}, "rejected": 2,
        "rejected_by_reason": {"empty_text": 2}, "stats": {}, "seconds": 1.0}))
    run_stage("report_funnel", "--input", f"outputs={index}", "--output", f"funnel={tmp_path / 'funnel.svg'}",
              "--output", f"stages={tmp_path / 'stages.svg'}", "--output", f"card={tmp_path / 'card.html'}",
              "--params", json.dumps({"family": "retrieval"}))
    assert "build_text_index: read 700; wrote index 1; rejected 2 (empty_text 2)" in (tmp_path / "funnel.svg").read_text()
    assert expected_lines(tmp_path) == {"build_text_index": "build_text_index: read 700; wrote index 1; rejected 2 (empty_text 2)"}
    assert "retrieval has no release" in (tmp_path / "card.html").read_text()


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
    # cache_images's two shards summed; fact_cache_images apart
    assert "cache_images: read 16; wrote images 13; rejected 3 (not_an_image 2, too_large 1)" in funnel
    assert "fact_cache_images: read 4; wrote images 1; rejected 3 (not_an_image 3)" in funnel
    report = json.loads((tmp_path / "funnel.svg.report.json").read_text())
    assert report["rows_in"] == 3 == report["rows_out"]["funnel"] and report["rejected"] == 0


def test_funnel_draws_what_each_stage_reports(tmp_path):
    """A stage that writes many rows per row read (extract_atomic_facts: answers in, facts out, facts
    rejected), one that writes one file for many rows (build_text_index) and one that leaves rows
    behind by design (sample_queries: 20 read, 9 written, 0 rejected, 11 not drawn) are drawn as
    they report: nothing is subtracted, the rows not carried on are named (issue 33 item 3)."""
    def sidecar(folder, name, stage, rows_in, rows_out, reasons, stats):
        (tmp_path / folder).mkdir()
        out = tmp_path / folder / name
        out.write_bytes(b"")
        (tmp_path / folder / f"{name}.report.json").write_text(json.dumps({
            "stage": stage, "version": "1", "params": {}, "rows_in": rows_in, "rows_out": rows_out, "rejected": sum(reasons.values()),
            "rejected_by_reason": reasons, "stats": stats, "seconds": 1.0}))
        return out
    outputs = [sidecar("extract_atomic_facts", "facts.00000.parquet", "extract_atomic_facts", 4, {"facts": 63},
                       {"not_verifiable": 40, "irrelevant": 23}, {"facts_extracted": 126}),
               sidecar("build_text_index", "text_index.00000.parquet", "build_text_index", 700, {"index": 1}, {}, {"documents_indexed": 700}),
               sidecar("sample_queries", "sampled_queries.parquet", "sample_queries", 20, {"sampled_queries": 9}, {},
                       {"sampled": 9, "not_sampled": 11, "others_only": 0})]
    (tmp_path / "release").mkdir()
    (tmp_path / "release" / "README.md").write_text("# card\n")
    (tmp_path / "release.json").write_text(json.dumps({"name": "r", "version": "v-1", "path": str(tmp_path / "release")}))
    run_stage("report_funnel", *[arg for o in outputs for arg in ("--input", f"outputs={o}")], "--input", f"release={tmp_path / 'release.json'}",
              "--output", f"funnel={tmp_path / 'funnel.svg'}", "--output", f"stages={tmp_path / 'stages.svg'}",
              "--output", f"card={tmp_path / 'card.html'}", "--params", json.dumps({"family": "demo"}))
    funnel = (tmp_path / "funnel.svg").read_text()
    lines = expected_lines(tmp_path)
    assert lines["sample_queries"] == "sample_queries: read 20; wrote sampled_queries 9; rejected 0; not carried on 11 (not_sampled 11)"
    assert lines["extract_atomic_facts"] == "extract_atomic_facts: read 4; wrote facts 63; rejected 63 (not_verifiable 40, irrelevant 23)"
    for line in lines.values():
        assert line in funnel, line
    assert "of 4" not in funnel and "-59" not in funnel and "20 of 20" not in funnel  # nothing derived by subtraction


def test_a_long_stage_line_stays_clear_of_the_legend_and_rejects_are_not_grey():
    """harvest_pushshift's line (a dozen reasons) once ran into the legend to the right of the axes:
    the legend sits below the axes, so no text of the figure overlaps it; no reason is drawn in
    the grey of "rows read"."""
    from matplotlib.colors import to_hex

    from stages.catalog.report_funnel import draw_funnel

    reasons = collections.Counter({f"reason_number_{i:02d}_with_a_long_name": 3 + i for i in range(16)})
    stages = [{"stage": step, "name": step, "rows_in": 400, "rows_out": collections.Counter({"rows": 100}), "rejected": sum(reasons.values()),
               "reasons": reasons, "stats": collections.Counter()} for step in ("harvest_pushshift", "filter_questions")]
    fig = draw_funnel("mavis", stages)
    fig.canvas.draw()
    [ax] = fig.axes
    legend = ax.get_legend().get_window_extent()
    assert all(not text.get_window_extent().overlaps(legend) for text in ax.texts)
    greys = {to_hex(h.get_facecolor()) for h in ax.get_legend().legend_handles if h.get_label().startswith("rejected:")} & {"#888888", "#7f7f7f", "#c7c7c7"}
    assert not greys


@pytest.mark.parametrize("field, value", [("rows_in", "3"), ("rows_in", float("nan")), ("rejected", True), ("seconds", -1.0),
                                          ("rejected_by_reason", [["empty_text", 1]]), ("rejected_by_reason", {"empty_text": "two"}),
                                          ("rows_out", {"index": float("inf")}), ("rows_out", {"index": 1e300})])
def test_a_sidecar_whose_counts_are_no_counts_is_a_bad_report(tmp_path, field, value):
    """A sidecar is read from disk: a count of another type (text, a bool, NaN, infinity, a
    negative number, pairs for a mapping) rejects that sidecar; the others are drawn."""
    for step, report in (("build_text_index", {"rows_in": 7}), ("split_pages", {field: value})):
        (tmp_path / step).mkdir()
        (tmp_path / step / "out.parquet").write_bytes(b"")
        (tmp_path / step / "out.parquet.report.json").write_text(json.dumps({
            "stage": step, "version": "1", "params": {}, "rows_in": 7, "rows_out": {"index": 1}, "rejected": 0,
            "rejected_by_reason": {}, "stats": {}, "seconds": 1.0, **report}))
    run_stage("report_funnel", *[f"--input=outputs={tmp_path / step / 'out.parquet'}" for step in ("build_text_index", "split_pages")],
              f"--output=funnel={tmp_path / 'funnel.svg'}", f"--output=stages={tmp_path / 'stages.svg'}", f"--output=card={tmp_path / 'card.html'}",
              "--params", json.dumps({"family": "retrieval"}))
    assert "build_text_index: read 7; wrote index 1; rejected 0" in (tmp_path / "funnel.svg").read_text()
    import pyarrow.parquet as pq

    rejects = pq.read_table(tmp_path / "funnel.svg.rejects.parquet").to_pylist()
    assert [r["reason"] for r in rejects] == ["bad_report"] and "split_pages" in rejects[0]["id"], rejects


def test_a_release_manifest_without_its_card_fails_in_one_line(tmp_path):
    (tmp_path / "step").mkdir()
    (tmp_path / "step" / "out.parquet").write_bytes(b"")
    (tmp_path / "step" / "out.parquet.report.json").write_text(json.dumps({
        "stage": "step", "rows_in": 1, "rows_out": {"out": 1}, "rejected": 0, "rejected_by_reason": {}, "seconds": 1.0}))
    (tmp_path / "release.json").write_text(json.dumps({"name": "x", "version": "v1", "path": str(tmp_path / "nowhere")}))
    result = run_stage("report_funnel", f"--input=outputs={tmp_path / 'step' / 'out.parquet'}", f"--input=release={tmp_path / 'release.json'}",
                       f"--output=funnel={tmp_path / 'o' / 'funnel.svg'}", f"--output=stages={tmp_path / 'o' / 'stages.svg'}",
                       f"--output=card={tmp_path / 'o' / 'card.html'}", check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].startswith(f"report_funnel: error: input 'release': {tmp_path / 'release.json'} is not a release manifest")
