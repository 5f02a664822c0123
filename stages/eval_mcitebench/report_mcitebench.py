"""The MCiteBench evaluation report: DuckDB tables, a markdown report laid out like the seed's
Tables 2, 3 and 4, and a plot of S-EM by evidence modality (mcitebench.txt §5.2-5.3, App. A.1).

- Table 2: per model, C-F1 / S-F1 / S-EM / Acc for Explanation single-source, Explanation
  multi-source and Locating single-source (and any other type/source group the release has).
- Table 4: per model, each metric by evidence modality (figure, table, text, mixed).
- Table 3: per model, source-identification accuracy overall and by modality (0-1, as the seed).
- Coverage: per model, questions read, responses, failed generations, and the responses whose
  C-F1 or Acc is missing because a judge call failed, so no mean hides what it left out.
Every figure is read from the score stage's summary (means over the responses where a metric is
present); "–" marks a group with no question, "n/a" a group whose metric is missing everywhere.

Inputs: responses, scores, summary, probe (one file per model each); optionally citations,
sentences, citation_judgements, answer_judgements, stored alongside for queries. Each responses
file's `.report.json` sidecar (written with it) gives the generation counts.
Outputs: report (markdown), plot (PNG), db (DuckDB file: one table per input name, plus coverage).
Invariant: every input table's rows are in the DuckDB file: the written file is reopened and each
table's row count must equal its Parquet files' row counts (from their footers), before the file
is moved into place; the stage writes no table, so the runner's row count is 0 = 0. The file is
created in the portable storage format (stages.core.release.connect_portable) so the duckdb CLI
opens it.
Params: title.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from stages.core.release import check_row_counts, load_parquet, md_table, portable_duckdb_file  # noqa: E402
from stages.core.stage import Input, Output, Param, Stage  # noqa: E402
from stages.core.tables import atomic_write_bytes  # noqa: E402

VERSION = "1"
HEADLINE = [("citation_f1", "C-F1"), ("source_f1", "S-F1"), ("source_em", "S-EM"), ("accuracy", "Acc")]
MODALITIES = [("figure", "Fig."), ("table", "Tab."), ("text", "Text"), ("mixed", "Mix")]
TYPE_SOURCE = ["explanation/single", "explanation/multi", "locating/single", "locating/multi"]
DETAIL = ("citations", "sentences", "citation_judgements", "answer_judgements")  # optional, stored for queries


def _cell(summary: dict, model: str, grouping: str, grp: str, metric: str) -> str:
    row = summary.get((model, grouping, grp, metric))
    if row is None:
        return "–"
    if row["value"] is None:
        return "n/a"
    missing = f" ({row['missing']} missing)" if row["missing"] else ""
    return f"{row['value']:.2f}{missing}"


def settings_of(con, models: list[str]) -> dict[str, str]:
    """The input setting behind each model's rows: "Cap." (captions after figure/table images, the
    setting of the seed's Table 2) or "No Cap." (the Table 14 ablation), and "text-only" when the
    model read captions or labels in place of images."""
    out = {}
    for model in models:
        captions, vision = con.execute("select bool_or(with_captions), bool_or(vision) from responses where model = ?", [model]).fetchone()
        out[model] = ("Cap." if captions else "No Cap.") + ("" if vision else ", text-only")
    return out


def table2(summary: dict, models: list[str], setting: dict[str, str]) -> str:
    groups = [g for g in TYPE_SOURCE if any((m, "type_source", g, "source_em") in summary for m in models)]
    headers = ["Model", "Setting"] + [f"{g.replace('/', ' ').title()} {label}" for g in groups for _, label in HEADLINE]
    rows = [[m, setting[m]] + [_cell(summary, m, "type_source", g, metric) for g in groups for metric, _ in HEADLINE] for m in models]
    return md_table(headers, rows)


def table4(summary: dict, models: list[str], setting: dict[str, str]) -> str:
    headers = ["Model", "Setting"] + [f"{label} {mod}" for _, label in HEADLINE for _, mod in MODALITIES]
    rows = [[m, setting[m]] + [_cell(summary, m, "modality", key, metric) for metric, _ in HEADLINE for key, _ in MODALITIES] for m in models]
    return md_table(headers, rows)


def overall(summary: dict, models: list[str], setting: dict[str, str]) -> str:
    metrics = [("citation_recall", "C-R"), ("citation_precision", "C-P"), ("citation_f1", "C-F1"), ("source_precision", "S-P"),
               ("source_recall", "S-R"), ("source_f1", "S-F1"), ("source_em", "S-EM"), ("accuracy", "Acc")]
    rows = [[m, setting[m]] + [_cell(summary, m, "overall", "all", metric) for metric, _ in metrics] for m in models]
    return md_table(["Model", "Setting"] + [label for _, label in metrics], rows)


def table3(con, models: list[str]) -> str:
    rows = []
    for model in models:
        cells = [model]
        for where in ["true", "modality = 'figure'", "modality = 'table'", "modality = 'text'"]:
            acc, n = con.execute(f"select avg(correct::int), count(*) from probe where model = ? and {where}", [model]).fetchone()
            cells.append("–" if not n else f"{acc:.2f} (n={n})")
        rows.append(cells)
    return md_table(["Model", "Overall", "Figure", "Table", "Text"], rows)


def judge_modes(con, models: list[str]) -> str:
    """How the citation judge saw the cited items (images, captions standing in, labels only, text)."""
    counts = dict(((m, mode), n) for m, mode, n in con.execute(
        "select model, mode, count(*) from citation_judgements where status = 'judged' group by all").fetchall())
    modes = ["vision", "caption", "label", "text"]
    return md_table(["Model"] + modes, [[m] + [counts.get((m, mode), 0) for mode in modes] for m in models])


def coverage_rows(con, responses_paths: list[str]) -> list[tuple]:
    rows = []
    for path in responses_paths:
        sidecar = Path(f"{path}.report.json")
        report = json.loads(sidecar.read_text()) if sidecar.exists() else {}
        model = report.get("params", {}).get("model") or Path(path).stem
        scored = con.execute(
            "select count(*), count(*) filter (where citation_f1 is null), count(*) filter (where accuracy is null), "
            "coalesce(sum(missing_judgements), 0) from scores where model = ?", [model]).fetchone()
        settings = con.execute("select any_value(vision), any_value(with_captions) from responses where model = ?", [model]).fetchone()
        rows.append((model, report.get("rows_in"), report.get("rows_out", {}).get("responses"), report.get("rejected"),
                     json.dumps(report.get("rejected_by_reason", {})), scored[0], scored[1], scored[2], scored[3], settings[0], settings[1]))
    return rows


def plot_sem(summary: dict, models: list[str], path: str) -> None:
    """Grouped bars: S-EM per evidence modality, one bar per model (cf. the seed's Figure 5)."""
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(MODALITIES)), 3.6))
    width = 0.8 / max(1, len(models))
    for i, model in enumerate(models):
        rows = [summary.get((model, "modality", key, "source_em")) for key, _ in MODALITIES]
        xs = [x + i * width for x in range(len(MODALITIES))]
        values = [row["value"] if row and row["value"] is not None else 0.0 for row in rows]
        ax.bar(xs, values, width, label=model)
        for x, value, row in zip(xs, values, rows):  # tell a 0 from a group without questions
            ax.annotate("–" if row is None else f"{value:.0f}", (x, value), ha="center", va="bottom", fontsize="small")
    ax.set_xticks([x + width * (len(models) - 1) / 2 for x in range(len(MODALITIES))], [label for _, label in MODALITIES])
    ax.set_ylabel("S-EM (0-100)")
    ax.set_ylim(0, 100)
    ax.set_title("Source Exact Match by evidence modality")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fd, tmp = tempfile.mkstemp(prefix=".plot.", suffix=".png", dir=Path(path).parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        Path(tmp).unlink(missing_ok=True)


def run(ctx):
    loaded: dict[str, int] = {}  # table -> input rows, checked against the stored tables
    with portable_duckdb_file(ctx.output_path("db"), check=lambda tmp: check_row_counts(tmp, loaded)) as con:
        for name in ("responses", "scores", "summary", "probe", *DETAIL):
            if ctx.has_input(name):
                loaded[name] = ctx.stats[f"{name}_rows"] = load_parquet(con, name, ctx.input_paths(name))
        con.execute("create table coverage (model varchar, questions_read bigint, responses bigint, failed_generations bigint, "
                    "failed_by_reason json, scored bigint, missing_citation_f1 bigint, missing_accuracy bigint, "
                    "failed_judge_calls bigint, vision boolean, with_captions boolean)")
        con.executemany("insert into coverage values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", coverage_rows(con, ctx.input_paths("responses")))
        models = [r[0] for r in con.execute("select distinct model from scores order by model").fetchall()]
        setting = settings_of(con, models)
        summary = {(r["model"], r["grouping"], r["grp"], r["metric"]): r for r in ctx.read_rows("summary")}
        coverage = con.execute("select * exclude (failed_by_reason) from coverage order by model").fetchall()
        cov_headers = ["Model", "Questions", "Responses", "Failed generations", "Scored", "C-F1 missing", "Acc missing",
                       "Failed judge calls", "Vision", "Captions"]
        markdown = "\n\n".join([
            f"# {ctx.params['title']}",
            "Scores on a 0-100 scale (Table 3: accuracy 0-1). C-F1 citation F1, S-F1 source F1, S-EM source exact match, "
            "Acc answer accuracy (mcitebench.txt §4). A failed judge call is missing, never 0: means are over the responses "
            "where the metric is present, and \"(k missing)\" counts the rest.",
            "## Coverage", md_table(cov_headers, [list(r) for r in coverage]),
            "Setting: \"Cap.\" rows had figure and table captions after their images, as in the seed's main results "
            "(Table 2); \"No Cap.\" rows are the Table 14 ablation; \"text-only\" models read captions or labels in place of images.",
            "## Main results (cf. Table 2)", table2(summary, models, setting),
            "## All metrics, overall", overall(summary, models, setting),
            "## Scores by evidence modality (cf. Table 4)", table4(summary, models, setting),
            "## Source identification, multiple choice (cf. Table 3)", table3(con, models),
            *(["## Citation judgements by how items were shown (judge calls made)", judge_modes(con, models)]
              if ctx.has_input("citation_judgements") else []),
            "## S-EM by modality", f"![S-EM by modality]({Path(ctx.output_path('plot')).name})",
        ]) + "\n"
        plot_sem(summary, models, ctx.output_path("plot"))
        atomic_write_bytes(ctx.output_path("report"), markdown.encode())


STAGE = Stage(
    name="report_mcitebench",
    version=VERSION,
    doc=__doc__,
    inputs={
        "responses": Input("eval_responses, one file per model (its .report.json gives generation counts)", many=True, table="eval_responses"),
        "scores": Input("eval_scores, one file per model", many=True, table="eval_scores"),
        "summary": Input("eval_summary, one file per model", many=True, table="eval_summary"),
        "probe": Input("eval_probe, one file per model", many=True, table="eval_probe"),
        **{name: Input(f"eval_{name}, one file per model (stored in the DuckDB file)", many=True, optional=True, table=f"eval_{name}") for name in DETAIL},
    },
    outputs={
        "report": Output(None, "markdown report"),
        "plot": Output(None, "PNG: S-EM by modality"),
        "db": Output(None, "DuckDB file with the evaluation tables"),
    },
    params={"title": Param(str, "MCiteBench evaluation", "report heading")},
    run=run,
)

if __name__ == "__main__":
    STAGE.main()
