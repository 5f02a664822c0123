"""One family's figures for Snakemake's HTML report (`snakemake report --report report.html`).

Reads the `*.report.json` sidecars every stage writes beside its first output (rows in, rejects by
reason, model calls, cache hits, seconds; stages/core/stage.py), in the folders of the family's
stage outputs, sums each step's shards, and draws (a step is a rule's output folder, so a stage the
DAG runs twice, like MAVIS's fact_cache_images beside cache_images, is two bars, not one sum):

- `funnel`: one bar per stage in pipeline order (the order the stages first finished), as long as
  the rows the stage read, split into the rows it kept and its rejects stacked by reason;
- `stages`: per stage its seconds (shards summed) and its model calls beside its cache hits;
- `card`: the release's dataset card (README.md of the folder the manifest names) as HTML.

The figures are SVG with their text kept as text, so stage and reason names stay searchable in
the report. Items: the report sidecars read; one that is not a stage report is rejected
`bad_report`. Invariant: sidecars read = sidecars drawn + rejected.
"""
from __future__ import annotations

import collections
import io
import json
from pathlib import Path

from stages.core.stage import Input, Output, Param, Reject, Stage
from stages.core.tables import atomic_write_bytes

VERSION = "2"  # 2: one bar per output folder (a stage run twice is two steps)
_NUMBERS = ("rows_in", "rejected", "seconds")


def _read(path: Path) -> dict:
    try:
        report = json.loads(path.read_text())
        if not isinstance(report, dict) or not isinstance(report.get("stage"), str):
            raise ValueError("no stage name")
        for key in _NUMBERS:
            float(report[key])
        dict(report["rejected_by_reason"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise Reject("bad_report", f"{path}: {err}") from None
    return report


def collect(ctx) -> list[dict]:
    """Every step's report with its shards summed, in the order the steps first finished."""
    files = ctx.input_paths("outputs") + ctx.input_paths("release")
    sidecars = sorted({p for raw in files for p in Path(raw).resolve().parent.glob("*.report.json")})
    stages: dict[str, dict] = {}
    for path in sidecars:
        with ctx.item(str(path)):
            report = _read(path)
            step = path.parent.name  # the rule's folder: the stage name, or e.g. fact_cache_images
            stage = stages.setdefault(step, {"stage": step, "first": path.stat().st_mtime, "rows_in": 0, "rejected": 0,
                                                         "seconds": 0.0, "reasons": collections.Counter(), "stats": collections.Counter()})
            stage["first"] = min(stage["first"], path.stat().st_mtime)
            for key in _NUMBERS:
                stage[key] += report[key]
            stage["reasons"].update(report["rejected_by_reason"])
            stage["stats"].update({k: v for k, v in report.get("stats", {}).items() if isinstance(v, (int, float))})
            ctx.count_output("funnel", 1)
    return sorted(stages.values(), key=lambda s: s["first"])


def _svg(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    return buf.getvalue()


def draw_funnel(family: str, stages: list[dict]):
    import matplotlib.pyplot as plt

    names = [s["stage"] for s in stages]
    reasons = sorted({(s["stage"], r) for s in stages for r in s["reasons"]})
    colours = plt.get_cmap("tab20")
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(names) + 2.2))
    y = range(len(names))[::-1]  # the first stage on top
    kept = [s["rows_in"] - s["rejected"] for s in stages]
    ax.barh(list(y), kept, color="#555555", label="kept")
    left = list(kept)
    for i, (stage, reason) in enumerate(reasons):
        widths = [s["reasons"].get(reason, 0) if s["stage"] == stage else 0 for s in stages]
        ax.barh(list(y), widths, left=left, color=colours(i % 20), label=f"{reason} ({stage})")
        left = [a + b for a, b in zip(left, widths)]
    for yi, s in zip(y, stages):
        ax.text(s["rows_in"], yi, f"  {s['rows_in'] - s['rejected']} of {s['rows_in']}", va="center", fontsize=8)
    ax.set_yticks(list(y), names)
    ax.set_xlabel("rows read by the stage: kept, then rejects by reason")
    ax.set_title(f"{family}: rows through each stage")
    ax.set_xlim(0, max([s["rows_in"] for s in stages] + [1]) * 1.2)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.2 / max(len(names), 1)), ncol=2, fontsize=8, frameon=False)
    return fig


def draw_stages(family: str, stages: list[dict]):
    import matplotlib.pyplot as plt

    names = [s["stage"] for s in stages]
    y = list(range(len(names))[::-1])
    fig, (secs, calls) = plt.subplots(1, 2, figsize=(10, 0.4 * len(names) + 1.6), sharey=True)
    secs.barh(y, [s["seconds"] for s in stages], color="#55a868")
    secs.set_yticks(y, names)
    secs.set_xlabel("seconds (shards summed)")
    height = 0.4
    calls.barh([v + height / 2 for v in y], [s["stats"].get("llm_calls", 0) for s in stages], height, label="model calls", color="#c44e52")
    calls.barh([v - height / 2 for v in y], [s["stats"].get("llm_cache_hits", 0) for s in stages], height, label="cache hits", color="#8172b2")
    calls.set_xlabel("model calls and call-cache hits")
    calls.legend(fontsize=8, frameon=False)
    fig.suptitle(f"{family}: time and model calls per stage")
    return fig


def card_html(manifest: str) -> str:
    """The release card as a page; the YAML block `datasets` reads is left in the card file."""
    from markdown_it import MarkdownIt

    release = json.loads(Path(manifest).read_text())
    text = (Path(release["path"]) / "README.md").read_text()
    if text.startswith("---\n"):
        text = text.split("---\n", 2)[2]
    body = MarkdownIt("commonmark").enable("table").render(text)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{release['name']} {release['version']}</title>"
            "<style>body{font-family:sans-serif;max-width:60em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}</style>"
            f"</head><body><p><code>{release['path']}</code></p>{body}</body></html>")


def run(ctx):
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text in the SVG
    family = ctx.params["family"]
    stages = collect(ctx)
    for name, draw in (("funnel", draw_funnel), ("stages", draw_stages)):
        fig = draw(family, stages)
        atomic_write_bytes(ctx.output_path(name), _svg(fig))
        matplotlib.pyplot.close(fig)
    atomic_write_bytes(ctx.output_path("card"), card_html(ctx.input_path("release")).encode())


STAGE = Stage(
    name="report_funnel",
    version=VERSION,
    doc=__doc__,
    inputs={
        "outputs": Input("the family's stage outputs (any file): the report sidecars in their folders are read", many=True, kind="file"),
        "release": Input("the family's release manifest (release.json); its folder's report is read too", kind="file"),
    },
    outputs={
        "funnel": Output(None, "SVG: rows through each stage, rejects stacked by reason"),
        "stages": Output(None, "SVG: seconds, model calls and cache hits per stage", counted=False),
        "card": Output(None, "the release's dataset card as HTML", counted=False),
    },
    params={"family": Param(str, "", "the family named in the figures' titles")},
    run=run,
)

if __name__ == "__main__":
    STAGE.main()
