"""One family's figures for Snakemake's HTML report (`snakemake report --report report.html`).

Reads the `*.report.json` sidecars every stage writes beside its first output (rows in, rows out
per output, rejects by reason, model calls, cache hits, seconds; stages/core/stage.py), in the
folders of the family's stage outputs, sums each step's shards, and draws (a step is a rule's output
folder, so a stage the DAG runs twice, like MAVIS's fact_cache_images beside cache_images, is two
steps, not one sum):

- `funnel`: per step in pipeline order (the order the steps first finished) what it reported, each
  its own bar with its number: the rows it read; the rows it wrote, one bar per output (a stage may
  write several rows per row read, or one file for many: extract_atomic_facts writes a fact table
  from answers, build_text_index one index from documents); its rejects, stacked by reason; and
  the rows it read and neither wrote on nor rejected by design, named as the stage counts them
  (`NOT_CARRIED_ON`: sample_queries' queries not drawn, sample_annotation's instances not
  eligible or not drawn). Nothing is derived by subtraction: units
  differ between a stage's input and its outputs. A text line per step says the same in numbers;
  `funnel_lines` is that text, which the tests compare with the stage reports;
- `stages`: per step its seconds (shards summed) and its model calls beside its cache hits;
- `card`: the release's dataset card (README.md of the folder the manifest names) as HTML; a
  family without a release (the shared retrieval layer the demo runs on its own queries) gets a
  page saying so, its stages drawn like any family's.

The figures are SVG with their text kept as text, so stage and reason names stay searchable in
the report. Items: the report sidecars read; one that is not a stage report is rejected
`bad_report`. Invariant: sidecars read = sidecars drawn + rejected.
"""
from __future__ import annotations

import collections
import io
import json
from pathlib import Path

from stages.core.stage import Input, Output, Param, Reject, Stage, StageError, is_count
from stages.core.tables import atomic_write_bytes

VERSION = "6"  # 2: one bar per output folder (a stage run twice is two steps); 3: rows out per output, rows not carried on; 4: release optional; 5: legend below the axes; 6: counts checked
_NUMBERS = ("rows_in", "rejected", "seconds")
# Stages that read rows and leave some behind by design, neither written on nor rejected, and the
# stats their reports count them in.
NOT_CARRIED_ON = {"sample_queries": ("not_sampled", "others_only"), "sample_annotation": ("not_eligible", "not_sampled")}


def _read(path: Path) -> dict:
    try:
        report = json.loads(path.read_text())
        if not isinstance(report, dict) or not isinstance(report.get("stage"), str):
            raise ValueError("no stage name")
        for key in _NUMBERS:
            if not is_count(report[key]):
                raise ValueError(f"{key} is {report[key]!r}, not a number >= 0")
        for key in ("rows_out", "rejected_by_reason"):
            counts = report.get(key, {}) if key == "rows_out" else report[key]
            if not isinstance(counts, dict) or not all(is_count(n) for n in counts.values()):
                raise ValueError(f"{key} is not a count per name: {str(counts)[:200]}")
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
            stage = stages.setdefault(step, {"stage": step, "name": report["stage"], "first": path.stat().st_mtime, "rows_in": 0,
                                             "rejected": 0, "seconds": 0.0, "rows_out": collections.Counter(),
                                             "reasons": collections.Counter(), "stats": collections.Counter()})
            stage["first"] = min(stage["first"], path.stat().st_mtime)
            for key in _NUMBERS:
                stage[key] += report[key]
            stage["rows_out"].update(report.get("rows_out", {}))
            stage["reasons"].update(report["rejected_by_reason"])
            stats = report.get("stats")
            stage["stats"].update({k: v for k, v in stats.items() if is_count(v)} if isinstance(stats, dict) else {})
            ctx.count_output("funnel", 1)
    return sorted(stages.values(), key=lambda s: s["first"])


def _svg(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    return buf.getvalue()


def not_carried_on(stage: dict) -> dict[str, int]:
    """The rows a step read and left behind by design, by the name its stage counts them under."""
    return {name: int(stage["stats"][name]) for name in NOT_CARRIED_ON.get(stage["name"], ()) if stage["stats"][name]}


def funnel_lines(stages: list[dict]) -> list[str]:
    """One line per step, what its reports say: rows read, rows written per output, rejects by
    reason, rows not carried on. The figure prints these lines."""
    lines = []
    for s in stages:
        written = ", ".join(f"{name} {int(n)}" for name, n in s["rows_out"].items()) or "nothing"
        line = f"{s['stage']}: read {int(s['rows_in'])}; wrote {written}; rejected {int(s['rejected'])}"
        if s["reasons"]:
            line += " (" + ", ".join(f"{r} {int(n)}" for r, n in sorted(s["reasons"].items(), key=lambda kv: (-kv[1], kv[0]))) + ")"
        left = not_carried_on(s)
        if left:
            line += f"; not carried on {sum(left.values())} (" + ", ".join(f"{k} {n}" for k, n in left.items()) + ")"
        lines.append(line)
    return lines


def draw_funnel(family: str, stages: list[dict]):
    import matplotlib.pyplot as plt

    palette = [plt.get_cmap("tab20")(i) for i in range(20) if i not in (14, 15)]  # not its greys: grey is "rows read"
    reasons = sorted({r for s in stages for r in s["reasons"]})
    colour = {r: palette[i % len(palette)] for i, r in enumerate(reasons)}
    bars = []  # (step index, label, [(width, colour, hatch, legend)])
    for i, s in enumerate(stages):
        bars.append((i, f"read {int(s['rows_in'])}", [(s["rows_in"], "#888888", None, "rows read")]))
        for name, n in s["rows_out"].items():
            bars.append((i, f"wrote {name} {int(n)}", [(n, "#4c72b0", None, "rows written (per output)")]))
        by_reason = sorted(s["reasons"].items(), key=lambda kv: (-kv[1], kv[0]))
        bars.append((i, f"rejected {int(s['rejected'])}", [(n, colour[r], None, f"rejected: {r}") for r, n in by_reason]))
        left = not_carried_on(s)
        if left:
            bars.append((i, f"not carried on {sum(left.values())} ({', '.join(left)})",
                         [(n, "#ffffff", "//", "not carried on (by design)") for n in left.values()]))
    height, gap = 0.22, 0.5
    fig, ax = plt.subplots(figsize=(11, height * len(bars) + gap * len(stages) + 2.2))
    y, ticks, legend, top = 0.0, [], {}, max([w for _, _, parts in bars for w in [sum(p[0] for p in parts)]] + [1])
    lines = funnel_lines(stages)
    for i in range(len(stages)):
        mine = [b for b in bars if b[0] == i]
        start = y
        for _, label, parts in mine:
            left = 0.0
            for width, fill, hatch, name in parts:
                handle = ax.barh(-y, width, height=height * 0.9, left=left, color=fill, hatch=hatch, edgecolor="#444444", linewidth=0.4)
                legend.setdefault(name, handle)
                left += width
            ax.text(left + top * 0.01, -y, label, va="center", fontsize=7)
            y += height
        ticks.append((-(start + y - height) / 2, stages[i]["stage"]))
        ax.text(0, -(y - height / 2) - 0.12, lines[i], fontsize=6.5, color="#333333", va="top")
        y += gap
    ax.set_yticks([t for t, _ in ticks], [name for _, name in ticks])
    ax.set_xlabel("rows as each stage reports them (shards summed; units differ between input and outputs)")
    ax.set_title(f"{family}: what each stage read, wrote, rejected and left behind")
    ax.set_xlim(0, top * 1.45)
    ax.set_ylim(-y, height)
    # below the axes: a stage's text line may run past the axes to the right, never into the legend
    ax.legend(legend.values(), legend.keys(), loc="upper left", bbox_to_anchor=(0.0, -0.6 / fig.get_figheight()), ncol=3, fontsize=7, frameon=False)
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


def card_html(family: str, manifest: str | None) -> str:
    """The release card as a page; the YAML block `datasets` reads is left in the card file."""
    from markdown_it import MarkdownIt

    if manifest is None:
        return (f"<!doctype html><html><head><meta charset='utf-8'><title>{family}</title></head><body>"
                f"<p>{family} has no release: its stages feed the families' or stand on their own (see its funnel).</p></body></html>")
    try:
        release = json.loads(Path(manifest).read_text())
        text = (Path(release["path"]) / "README.md").read_text()
        title = f"{release['name']} {release['version']}"
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise StageError(f"input 'release': {manifest} is not a release manifest whose card can be read ({type(err).__name__}: {err})") from None
    if text.startswith("---\n"):
        text = text.split("---\n", 2)[2]
    body = MarkdownIt("commonmark").enable("table").render(text)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
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
    release = ctx.input_paths("release")
    atomic_write_bytes(ctx.output_path("card"), card_html(family, release[0] if release else None).encode())


STAGE = Stage(
    name="report_funnel",
    version=VERSION,
    doc=__doc__,
    inputs={
        "outputs": Input("the family's stage outputs (any file): the report sidecars in their folders are read", many=True, kind="file"),
        "release": Input("the family's release manifest (release.json); its folder's report is read too", kind="file", optional=True),
    },
    outputs={
        "funnel": Output(None, "SVG: rows through each stage, rejects stacked by reason"),
        "stages": Output(None, "SVG: seconds, model calls and cache hits per stage", counted=False),
        "card": Output(None, "the release's dataset card as HTML (a page saying there is none for a family without one)", counted=False),
    },
    params={"family": Param(str, "", "the family named in the figures' titles")},
    run=run,
    rejects={"bad_report": "the file is not a stage report sidecar (unreadable, or a key is missing)"},
)

if __name__ == "__main__":
    STAGE.main()
