"""The MCiteBench evaluation report: DuckDB tables, a markdown report laid out like the seed's
Tables 2, 3 and 4, and a plot of S-EM by evidence modality (mcitebench.txt §5.2-5.3, App. A.1).

- Table 2: per model, C-F1 / S-F1 / S-EM / Acc for Explanation single-source, Explanation
  multi-source and Locating single-source (and any other type/source group the release has).
- Table 4: per model, each metric by evidence modality (figure, table, text, mixed).
- Table 3: per model, source-identification accuracy overall and by modality (0-1, as the seed).
- Coverage: per model, questions read, responses, failed generations, and the responses whose
  C-F1 or Acc is missing because a judge call failed, so no mean hides what it left out.
Every figure is read from the score stage's summary (means over the responses where a metric is
present), with its coverage beside it, "(k/n)": k responses scored under strict scoring (a failed
judge call leaves one out) of the group's n, in every table and mode; "–" marks a group with no
question, "n/a" a group where nothing was scored (never the number a scorer fills in for it).
Beside them (stages/eval_mcitebench/mcitebench_analyses.py): RQ2 (§5.3, Figure 5), S-EM by evidence-modality
combination over multi-source explanation questions with exactly two gold items, as a table and
`rq2_plot`; with `agreement` (validate_judge), the judge against human labels (App. C.3, Table
12); with `swap_summary` (the summaries under a second judge, `judges` naming both), each model's
C-F1 and Acc under both judges and whether the model ranking agrees (App. D.1, Table 13).
Table 2 is printed in both scoring modes, labelled, the configured one (`scoring`) first: strict
(our documented choices) and reference (MCiteBench's public scorer's aggregation), with a
sentence on what differs; the other tables use the configured mode.

Inputs: responses, scores, summary, probe (one file per model each); optionally citations,
sentences, citation_judgements, answer_judgements, stored alongside for queries. Each responses
file's `.report.json` sidecar (written with it) gives the generation counts.
Outputs: report (markdown), plot (PNG), db (DuckDB file: one table per input name, plus coverage).
Invariant: every input table's rows are in the DuckDB file: the written file is reopened and each
table's row count must equal its Parquet files' row counts (from their footers), before the file
is moved into place; the stage writes no table, so the runner's row count is 0 = 0. The file is
created in the portable storage format (stages.core.release.connect_portable) so the duckdb CLI
opens it.
Params: title, scoring (strict | reference: the headline mode), judges (names of the judge and the swap judge).
"""
from __future__ import annotations

import json
from pathlib import Path

from stages.eval_mcitebench.mcitebench_analyses import agreement_rows, ranking_agrees, rq2_rows, swap_rows
from stages.core.plots import plt, save_png  # matplotlib without a display
from stages.core.release import check_row_counts, covered, insert_rows, load_table, md_table, portable_duckdb_file
from stages.core.stage import Input, Output, Param, Stage, StageError, read_report
from stages.core.tables import atomic_write_bytes

VERSION = "4"  # 3: reference rules per metric (repeated citations); 4: coverage (k/n) beside every number, n/a when nothing was scored
HEADLINE = [("citation_f1", "C-F1"), ("source_f1", "S-F1"), ("source_em", "S-EM"), ("accuracy", "Acc")]
MODALITIES = [("figure", "Fig."), ("table", "Tab."), ("text", "Text"), ("mixed", "Mix")]
TYPE_SOURCE = ["explanation/single", "explanation/multi", "locating/single", "locating/multi"]
DETAIL = ("citations", "sentences", "citation_judgements", "answer_judgements")  # optional, stored for queries


SCORING_NOTE = {
    "strict": "Strict scoring (ours): a response without citations is kept with citation and source scores 0, "
              "a failed judge call is missing (never 0), an empty response is rated 0, a citation repeated in a sentence "
              "counts once.",
    "reference": "Reference scoring (MCiteBench's public scorer): a response without citations is left out "
                 "of the citation and source means, a failed citation judge call scores 0, a failed or empty answer "
                 "rating counts as its -1 sentinel (-50 in the accuracy mean), and a citation repeated in a sentence is "
                 "scored per occurrence; \"(k left out)\" counts the responses left out.",
}
RULES = [  # (metric, strict, reference): which rule each mode follows
    ("C-R", "mean over cited sentences of the support judgement 0 / 0.5 / 1; a failed call makes it missing",
     "the same mean; a failed call scores 0; a response without citations is left out"),
    ("C-P", "per cited sentence the mean relevance over its distinct items; a failed call makes it missing",
     "per cited sentence the mean over its citations as written, repeats kept (\"[1][1][3]\": 3 scores); a failed call 0"),
    ("C-F1", "harmonic mean of the response's C-R and C-P, averaged over responses; no citation: 0",
     "the same, over the responses with citations"),
    ("S-P, S-R, S-F1, S-EM", "the response's citation set against the gold set; no citation: 0",
     "the same sets; a response without citations is left out"),
    ("Acc", "rating 0 / 1 / 2 as 0 / 50 / 100; failed call missing; empty response 0 without a call",
     "the same; a failed call or an empty response is the -1 sentinel: -50"),
    ("both", "an item that is not in the input scores 0; the grammar reads [k], Figure N, Table N",
     "the same (the public scorer's GPT extraction may read other strings; it is not rerun)"),
]


def _cell(summary: dict, model: str, grouping: str, grp: str, metric: str, strict: dict) -> str:
    """A mean with its coverage (judged / responses), both from the strict summary (where a failed
    judge call leaves a response out, so its n counts the responses judged) whatever the mode shown:
    a reference-mode mean over failed judge calls scored 0 still reads n/a when nothing was judged."""
    row = summary.get((model, grouping, grp, metric))
    if row is None:
        return "–"
    judged = strict.get((model, grouping, grp, metric)) or row
    cell = covered(None if row["value"] is None else f"{row['value']:.2f}", judged["n"], judged["n"] + judged["missing"])
    left_out = row["missing"] if judged is not row else 0  # reference: uncited responses left out of the mean
    return cell + (f" ({left_out} left out)" if left_out else "")


def settings_of(con, models: list[str]) -> dict[str, str]:
    """The input setting behind each model's rows: "Cap." (captions after figure/table images, the
    setting of the seed's Table 2) or "No Cap." (the Table 14 ablation), and "text-only" when the
    model read captions or labels in place of images."""
    out = {}
    for model in models:
        captions, vision = con.execute("select bool_or(with_captions), bool_or(vision) from responses where model = ?", [model]).fetchone()
        out[model] = ("Cap." if captions else "No Cap.") + ("" if vision else ", text-only")
    return out


def table2(summary: dict, models: list[str], setting: dict[str, str], strict: dict) -> str:
    groups = [g for g in TYPE_SOURCE if any((m, "type_source", g, "source_em") in summary for m in models)]
    headers = ["Model", "Setting"] + [f"{g.replace('/', ' ').title()} {label}" for g in groups for _, label in HEADLINE]
    rows = [[m, setting[m]] + [_cell(summary, m, "type_source", g, metric, strict) for g in groups for metric, _ in HEADLINE] for m in models]
    return md_table(headers, rows)


def table4(summary: dict, models: list[str], setting: dict[str, str], strict: dict) -> str:
    headers = ["Model", "Setting"] + [f"{label} {mod}" for _, label in HEADLINE for _, mod in MODALITIES]
    rows = [[m, setting[m]] + [_cell(summary, m, "modality", key, metric, strict) for metric, _ in HEADLINE for key, _ in MODALITIES]
            for m in models]
    return md_table(headers, rows)


def overall(summary: dict, models: list[str], setting: dict[str, str], strict: dict) -> str:
    metrics = [("citation_recall", "C-R"), ("citation_precision", "C-P"), ("citation_f1", "C-F1"), ("source_precision", "S-P"),
               ("source_recall", "S-R"), ("source_f1", "S-F1"), ("source_em", "S-EM"), ("accuracy", "Acc")]
    rows = [[m, setting[m]] + [_cell(summary, m, "overall", "all", metric, strict) for metric, _ in metrics] for m in models]
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
        report = read_report(path)
        model = report.get("params", {}).get("model")
        model = model if isinstance(model, str) and model else Path(path).stem
        scored = con.execute(
            "select count(*), count(*) filter (where citation_f1 is null), count(*) filter (where accuracy is null), "
            "coalesce(sum(missing_judgements), 0) from scores where model = ?", [model]).fetchone()
        settings = con.execute("select any_value(vision), any_value(with_captions), count(*) filter (where finish_reason = 'length') "
                               "from responses where model = ?", [model]).fetchone()
        rows.append((model, report.get("rows_in"), report.get("rows_out", {}).get("responses"), report.get("rejected"),
                     json.dumps(report.get("rejected_by_reason", {})), settings[2], scored[0], scored[1], scored[2], scored[3],
                     settings[0], settings[1]))
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
    save_png(fig, path)


def plot_rq2(rows: list[dict], models: list[str], path: str) -> None:
    """Grouped bars: S-EM per modality combination of two gold items, one bar per model (the seed's Figure 5)."""
    combos = sorted({r["combination"] for r in rows})
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * max(1, len(combos))), 3.6))
    width = 0.8 / max(1, len(models))
    cells = {(r["model"], r["combination"]): r["sem"] for r in rows}
    for i, model in enumerate(models):
        xs = [x + i * width for x in range(len(combos))]
        ax.bar(xs, [cells.get((model, c)) or 0.0 for c in combos], width, label=model)
    ax.set_xticks([x + width * (len(models) - 1) / 2 for x in range(len(combos))], combos)
    ax.set_ylabel("S-EM (0-100)")
    ax.set_ylim(0, 100)
    ax.set_title("S-EM, multi-source explanation, two gold items" if combos else "no multi-source explanation question with two gold items")
    if models and combos:
        ax.legend(fontsize="small")
    save_png(fig, path)


def analyses(ctx, con, models: list[str], summary: dict, headline: str) -> list[str]:
    """The report's RQ2, judge validation and judge swap sections (each only when its input is there)."""
    scores = ctx.read_rows("scores")
    rq2 = rq2_rows(ctx.read_rows("responses"), scores)
    plot_rq2(rq2, models, ctx.output_path("rq2_plot"))
    parts = [f"## RQ2: S-EM by modality combination (cf. Figure 5, {headline} scoring)",
             "Multi-source explanation questions with exactly two gold items, by the modalities of the two.",
             md_table(["Model", "Gold modalities", "S-EM", "n", "left out"],
                      [[r["model"], r["combination"], "n/a" if r["sem"] is None else f"{r['sem']:.2f}", r["n"], r["left_out"]] for r in rq2])
             if rq2 else "No such question in this release.",
             f"![RQ2]({Path(ctx.output_path('rq2_plot')).name})"]
    if ctx.has_input("agreement"):
        rows = ctx.read_rows("agreement")
        parts += ["## Judge validation against human labels (cf. Table 12)",
                  "Entailment = score >= 1; precision: the judge's entailments the humans share; recall: the humans' the judge found.",
                  md_table(["Judge", "Scope", "Kind", "n", "F1", "Recall", "Precision", "Exact"], agreement_rows(rows))
                  if rows else "No labelled judgement yet: fill in validate_judge's label_sheet.csv and set evaluate.human_labels."]
    if ctx.has_input("swap_summary"):
        judges = ctx.params["judges"]
        other = {(r["model"], r["metric"]): r["value"] for r in ctx.read_rows("swap_summary")
                 if r["scoring"] == headline and r["grouping"] == "overall"}
        first = {(m, metric): row["value"] for (m, grouping, _, metric), row in summary.items() if grouping == "overall"}
        metrics = [("citation_f1", "C-F1"), ("accuracy", "Acc")]
        rows = swap_rows(first, other, models, [m for m, _ in metrics])
        fmt = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
        agrees = {label: ranking_agrees(rows, metric) for metric, label in metrics}
        parts += [f"## Judge swap (cf. Table 13, {headline} scoring)",
                  md_table(["Model"] + [f"{label} ({judge})" for _, label in metrics for judge in judges],
                           [[r["model"]] + [fmt(r[f"{metric}@{i}"]) for metric, _ in metrics for i in range(2)] for r in rows]),
                  "Model ranking agrees under both judges: " + ", ".join(
                      f"{label} {'n/a' if ok is None else 'yes' if ok else 'no'}" for label, ok in agrees.items()) + "."]
    return parts


def run(ctx):
    loaded: dict[str, int] = {}  # table -> input rows, checked against the stored tables
    with portable_duckdb_file(ctx.output_path("db"), check=lambda tmp: check_row_counts(tmp, loaded)) as con:
        for name in ("responses", "scores", "summary", "probe", *DETAIL, "swap_summary", "agreement"):
            if ctx.has_input(name):
                loaded[name] = ctx.stats[f"{name}_rows"] = load_table(con, name, ctx.read(name))
        con.execute("create table coverage (model varchar, questions_read bigint, responses bigint, failed_generations bigint, "
                    "failed_by_reason json, truncated bigint, scored bigint, missing_citation_f1 bigint, missing_accuracy bigint, "
                    "failed_judge_calls bigint, vision boolean, with_captions boolean)")
        insert_rows(con, "insert into coverage values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", coverage_rows(con, ctx.input_paths("responses")))
        models = [r[0] for r in con.execute("select distinct model from scores order by model").fetchall()]
        setting = settings_of(con, models)
        by_mode: dict[str, dict] = {"strict": {}, "reference": {}}
        for r in ctx.read_rows("summary"):
            by_mode.setdefault(r["scoring"], {})[(r["model"], r["grouping"], r["grp"], r["metric"])] = r
        headline = ctx.params["scoring"]
        if headline not in by_mode:
            raise StageError(f"param scoring must be one of {sorted(by_mode)}, got {headline!r}")
        summary = by_mode[headline]
        modes = [headline] + [m for m in by_mode if m != headline]
        coverage = con.execute("select * exclude (failed_by_reason) from coverage order by model").fetchall()
        cov_headers = ["Model", "Questions", "Responses", "Failed generations", "Truncated", "Scored", "C-F1 missing", "Acc missing",
                       "Failed judge calls", "Vision", "Captions"]
        markdown = "\n\n".join([
            f"# {ctx.params['title']}",
            "Scores on a 0-100 scale (Table 3: accuracy 0-1). C-F1 citation F1, S-F1 source F1, S-EM source exact match, "
            "Acc answer accuracy (mcitebench.txt §4). A failed judge call is missing, never 0: means are over the responses "
            "where the metric is present. \"(k/n)\" beside every number: k responses scored (strict scoring, whatever the "
            "table's mode) of the n in the group; \"n/a\" where none was, never a score.",
            "## Coverage", md_table(cov_headers, [list(r) for r in coverage]),
            "Truncated: responses the backend cut at the answer length budget (finish reason \"length\"); a truncated "
            "sentence may lose its citation, lowering source recall and accuracy.",
            "Setting: \"Cap.\" rows had figure and table captions after their images, as in the seed's main results "
            "(Table 2); \"No Cap.\" rows are the Table 14 ablation; \"text-only\" models read captions or labels in place of images.",
            *[part for mode in modes for part in (
                f"## Main results (cf. Table 2), {mode} scoring{'' if mode == headline else ' (for comparison)'}",
                SCORING_NOTE[mode], table2(by_mode[mode], models, setting, by_mode["strict"]))],
            "## Which rule each scoring mode follows", md_table(["Metric", "Strict", "Reference"], [list(r) for r in RULES]),
            f"## All metrics, overall ({headline} scoring)", overall(summary, models, setting, by_mode["strict"]),
            f"## Scores by evidence modality (cf. Table 4), {headline} scoring", table4(summary, models, setting, by_mode["strict"]),
            "## Source identification, multiple choice (cf. Table 3)", table3(con, models),
            *(["## Citation judgements by how items were shown (judge calls made)", judge_modes(con, models)]
              if ctx.has_input("citation_judgements") else []),
            "## S-EM by modality", f"![S-EM by modality]({Path(ctx.output_path('plot')).name})",
            *analyses(ctx, con, models, summary, headline),
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
        "swap_summary": Input("eval_summary under the swap judge, one file per model (Table 13)", many=True, optional=True, table="eval_summary"),
        "agreement": Input("eval_judge_agreement from validate_judge (Table 12)", optional=True, table="eval_judge_agreement"),
    },
    outputs={
        "report": Output(None, "markdown report"),
        "plot": Output(None, "PNG: S-EM by modality"),
        "rq2_plot": Output(None, "PNG: S-EM by modality combination of two gold items (Figure 5)"),
        "db": Output(None, "DuckDB file with the evaluation tables"),
    },
    params={
        "title": Param(str, "MCiteBench evaluation", "report heading"),
        "scoring": Param(str, "strict", "the headline scoring mode: strict or reference (both are printed)", choices=("strict", "reference")),
        "judges": Param(list, ["judge", "swap judge"], "the names of the judge and of the swap judge, in that order, heading the judge swap table",
                        items=str, min=2, max=2),
    },
    run=run,
    rejects={},
)

if __name__ == "__main__":
    STAGE.main()
