"""The MAVIS evaluation report (mavis.txt §5.3-5.6, Tables 4-5, Figure 4): a markdown report laid
out like the seed's main table, two plots and a DuckDB file with every evaluation table.

- Main results (cf. Tables 4 and 5): per model, one row per (setting, method): Informativeness F1,
  Complete, Relevant, Groundedness F1, Recall, Precision, MAUVE (0-100), and the statistics
  Retrieved text / image and Utilised text / image (documents per answer). Printed for the strict
  scoring first, then the reference-compatible one, labelled, with what differs.
- Per-modality groundedness and utilisation (cf. §5.6, Figure 4): precision per document modality
  and the utilisation ratio, as tables and as the plots `groundedness_plot` and `utilisation_plot`.
- Coverage: per model the instances, responses, rejected generations by reason (from the
  responses' report sidecar), failed judge calls, and the answers whose metrics are missing.
Every number is read from the score stage's summary; "n/a" marks a metric missing everywhere.

Inputs: queries, retrieved, responses, sentences, judgements, scores, summary (one file per model each).
Outputs: report (markdown), groundedness_plot, utilisation_plot (PNG), db (DuckDB file: one table per
input name, plus coverage). Invariant: each input table's rows are in the DuckDB file (checked on the
written file before it is moved into place); the stage writes no table (0 = 0).
Params: title.
"""
from __future__ import annotations

import json
from pathlib import Path

from stages.core.mavis_eval import METHODS, SETTINGS
from stages.core.plots import grouped_bars
from stages.core.release import check_row_counts, insert_rows, load_table, md_table, portable_duckdb_file
from stages.core.stage import Input, Output, Param, Stage
from stages.core.tables import atomic_write_bytes

VERSION = "1"
TABLES = ("queries", "retrieved", "responses", "sentences", "judgements", "scores", "summary")
SETTING_NAMES = {"text": "Text-RAG", "image": "Image-RAG", "multi": "Multi-RAG"}
METHOD_NAMES = {"vanilla": "Vanilla", "cot": "CoT", "vanilla_ke": "Vanilla + KE", "cot_ke": "CoT + KE"}
PERCENT = [("informativeness_f1", "Inf. F1"), ("completeness", "Complete"), ("relevance", "Relevant"),
           ("groundedness_f1", "Grd. F1"), ("recall", "Recall"), ("precision", "Precision"), ("mauve", "MAUVE")]
COUNTS = [("retrieved_text", "Retrieved text"), ("retrieved_image", "Retrieved image"), ("used_text", "Utilised text"),
          ("used_image", "Utilised image")]
NOTES = {
    "strict": "Strict scoring (the paper's formulas, §4): relevance, recall and precision average over every sentence of "
              "the answer; a sentence without citations has recall and precision 0; a citation to a number that names no "
              "retrieved document counts in the sentence's citations with support 0; duplicates count once; a failed judge "
              "call makes that metric missing for the answer (never 0); an empty answer scores 0. F1 is the harmonic mean "
              "per answer, averaged over answers.",
    "reference": "Reference-compatible scoring (the aggregation of MAVIS's public evaluation code): recall and precision "
                 "average over the cited sentences only (an answer with none scores 0) and a failed judge call counts 0. "
                 "Its parsing quirks are not reproduced (a relevance label search reading \"not fully relevant\" as fully "
                 "relevant, \"[12]\" read as documents 1 and 2, citation 0 resolving to the last document, duplicate "
                 "citations kept): citations are parsed as in the strict numbers.",
}


def _fmt(value, percent: bool) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:.1f}" if percent else f"{value:.1f}"


def main_table(summary: dict, combos: list[tuple[str, str, str]], scoring: str) -> str:
    rows = []
    for model, setting, method in combos:
        cells = [summary.get((model, setting, method, scoring, metric)) for metric, _ in PERCENT + COUNTS]
        rows.append([model, f"+ {SETTING_NAMES[setting]}", METHOD_NAMES[method]]
                    + [_fmt(c["value"] if c else None, i < len(PERCENT)) + (f" ({c['missing']} missing)" if c and c["missing"] else "")
                       for i, c in enumerate(cells)])
    return md_table(["Model", "Setting", "Method"] + [label for _, label in PERCENT + COUNTS], rows)


def modality_table(summary: dict, combos: list[tuple[str, str, str]], scoring: str) -> str:
    rows = [[m, SETTING_NAMES[s], METHOD_NAMES[t]] + [_fmt((summary.get((m, s, t, scoring, metric)) or {}).get("value"), True)
                                                   for metric in ("precision_text", "precision_image", "utilisation_text", "utilisation_image")]
            for m, s, t in combos]
    return md_table(["Model", "Setting", "Method", "Grd. (precision) text", "Grd. (precision) image", "Utilisation text",
                     "Utilisation image"], rows)


def plot(summary: dict, combos: list[tuple[str, str, str]], metrics: tuple[str, str], title: str, ylabel: str, path: str) -> None:
    groups = [f"{m}\n{SETTING_NAMES[s]}\n{METHOD_NAMES[t]}" for m, s, t in combos]
    series = {label: [None if (summary.get((m, s, t, "strict", metric)) or {}).get("value") is None
                      else 100 * summary[(m, s, t, "strict", metric)]["value"] for m, s, t in combos]
              for metric, label in zip(metrics, ("text documents", "image documents"))}
    grouped_bars(groups, series, title, ylabel, path)


def coverage_rows(con, responses_paths: list[str]) -> list[tuple]:
    rows = []
    for path in responses_paths:
        sidecar = Path(f"{path}.report.json")
        report = json.loads(sidecar.read_text()) if sidecar.exists() else {}
        model = report.get("params", {}).get("model") or Path(path).stem
        counts = con.execute(
            "select (select count(distinct instance_id) from queries where model = $m), (select count(*) from responses where model = $m), "
            "(select count(*) from responses where model = $m and finish_reason = 'length'), "
            "(select count(*) from judgements where model = $m and not ok), "
            "(select count(*) from scores where model = $m and scoring = 'strict' and (groundedness_f1 is null or informativeness_f1 is null)), "
            "(select any_value(retriever) from retrieved where model = $m), (select any_value(vision) from responses where model = $m)",
            {"m": model}).fetchone()
        rows.append((model, counts[0], report.get("rows_in"), counts[1], report.get("rejected"),
                     json.dumps(report.get("rejected_by_reason", {})), counts[2], counts[3], counts[4], counts[5], counts[6]))
    return rows


def run(ctx):
    loaded: dict[str, int] = {}
    with portable_duckdb_file(ctx.output_path("db"), check=lambda tmp: check_row_counts(tmp, loaded)) as con:
        for name in TABLES:
            loaded[name] = ctx.stats[f"{name}_rows"] = load_table(con, name, ctx.read(name))
        con.execute("create table coverage (model varchar, instances_with_queries bigint, answers_asked bigint, responses bigint, "
                    "failed_generations bigint, failed_by_reason json, truncated bigint, failed_judge_calls bigint, "
                    "answers_with_missing_f1 bigint, retriever varchar, vision boolean)")
        insert_rows(con, "insert into coverage values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", coverage_rows(con, ctx.input_paths("responses")))
        summary = {(r["model"], r["setting"], r["method"], r["scoring"], r["metric"]): r for r in ctx.read_rows("summary")}
        order = {k: i for i, k in enumerate(SETTINGS + METHODS)}
        combos = sorted({k[:3] for k in summary}, key=lambda c: (c[0], order[c[1]], order[c[2]]))
        notes = sorted({r["note"] for r in summary.values() if r["metric"] == "mauve" and r["note"]})
        coverage = con.execute("select * exclude (failed_by_reason) from coverage order by model").fetchall()
        markdown = "\n\n".join([
            f"# {ctx.params['title']}",
            "Scores on a 0-100 scale; statistics in documents per answer. Informativeness F1 = harmonic mean of completeness "
            "(Table 13) and relevance (Table 14), groundedness F1 = harmonic mean of recall and precision (Table 12), each "
            "computed per answer and then averaged (mavis.txt §4). \"(k missing)\" counts the answers left out of a mean "
            "because a judge call failed.",
            "## Coverage",
            md_table(["Model", "Instances", "Answers asked", "Responses", "Failed generations", "Truncated", "Failed judge calls",
                      "Answers with a missing F1", "Retriever", "Vision"], [list(r) for r in coverage]),
            *[part for scoring in ("strict", "reference") for part in (
                f"## Main results (cf. Tables 4-5), {scoring} scoring", NOTES[scoring], main_table(summary, combos, scoring))],
            "Fluency: " + (" ".join(notes) if notes else "MAUVE as configured."),
            "## Groundedness and utilisation by document modality (cf. §5.6, Figure 4), strict scoring",
            "Groundedness here is precision (each citation judged alone) over citations to documents of that modality; "
            "utilisation is cited / retrieved documents of that modality, per answer.",
            modality_table(summary, combos, "strict"),
            f"![groundedness by modality]({Path(ctx.output_path('groundedness_plot')).name})",
            f"![utilisation by modality]({Path(ctx.output_path('utilisation_plot')).name})",
        ]) + "\n"
        plot(summary, combos, ("precision_text", "precision_image"), "Groundedness (precision) by document modality",
             "precision (0-100)", ctx.output_path("groundedness_plot"))
        plot(summary, combos, ("utilisation_text", "utilisation_image"), "Document utilisation by modality",
             "cited / retrieved (%)", ctx.output_path("utilisation_plot"))
        atomic_write_bytes(ctx.output_path("report"), markdown.encode())


STAGE = Stage(
    name="report_mavis",
    version=VERSION,
    doc=__doc__,
    inputs={name: Input(f"mavis_eval_{name}, one file per model", many=True, table=f"mavis_eval_{name}") for name in TABLES},
    outputs={
        "report": Output(None, "markdown report"),
        "groundedness_plot": Output(None, "PNG: precision by document modality (Figure 4)"),
        "utilisation_plot": Output(None, "PNG: utilisation by document modality (Figure 4)"),
        "db": Output(None, "DuckDB file with the evaluation tables"),
    },
    params={"title": Param(str, "MAVIS evaluation", "report heading")},
    run=run,
)

if __name__ == "__main__":
    STAGE.main()
