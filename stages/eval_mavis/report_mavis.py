"""The MAVIS evaluation report (mavis.txt §5.3-5.6, Tables 4-5, Figure 4): a markdown report laid
out like the seed's main table, two plots and a DuckDB file with every evaluation table.

- Per release split, the test split (human-annotated, §3.2 Step 3: the paper's numbers) first and
  any other split asked for after it, under its own heading (never mixed with the test split):
- Main results (cf. Tables 4 and 5): per model, one row per (setting, method): Informativeness F1,
  Complete, Relevant, Groundedness F1, Recall, Precision, MAUVE (0-100), and the statistics
  Retrieved text / image and Utilised text / image (documents per answer). Printed for the strict
  scoring first, then the reference-compatible one, labelled, with what differs.
- Per-modality groundedness and utilisation (cf. §5.6, Figure 4): precision per document modality
  and the utilisation ratio, as tables and as the plots `groundedness_plot` and `utilisation_plot`.
- Coverage: per model the instances (per split), responses, failed generations by reason (responses
  with an `error`), rejected answers (the responses' report sidecar), failed judge calls, and the
  answers whose metrics are missing. A run that evaluated no instance says why (an empty test split:
  no annotations imported).
- Retrieval quality (cf. Table 3, optional input `retrieval`: mavis_retrieval_quality's summary):
  NDCG@10 and Recall@100 per retriever, model and split.
- Judge validation (cf. Table 6, optional input `agreement`: mavis_validate_judge's): Pearson r of
  the judge against human labels per metric, per answer and per judgement.
Every number is read from the score stage's summary, with its coverage beside it, "(k/n)": k answers
judged under strict scoring (a failed judge call leaves one out) of n, in both modes; "n/a" where
nothing was judged, so a reference-mode mean of failed calls scored 0 never reads as a score.

Inputs: queries, retrieved, responses, sentences, judgements, scores, summary (one file per model
each); retrieval, agreement (optional).
Outputs: report (markdown), groundedness_plot, utilisation_plot (PNG), db (DuckDB file: one table per
input name, plus coverage). Invariant: each input table's rows are in the DuckDB file (checked on the
written file before it is moved into place); the stage writes no table (0 = 0).
Params: title.
"""
from __future__ import annotations

from pathlib import Path

from stages.eval_mavis.mavis_eval import METHODS, SETTINGS
from stages.core.plots import grouped_bars
from stages.core.release import check_row_counts, covered, insert_rows, load_table, md_table, portable_duckdb_file
from stages.core.stage import Input, Output, Param, Stage, read_report
from stages.core.tables import atomic_write_bytes

VERSION = "4"  # 2: splits, Tables 3 and 6; 3: coverage (k/n) beside every number, n/a when nothing was judged; 4: reference rules text
TABLES = ("queries", "retrieved", "responses", "sentences", "judgements", "scores", "summary")
OPTIONAL = {"retrieval": "mavis_eval_retrieval_summary", "agreement": "mavis_eval_judge_agreement"}
SETTING_NAMES = {"text": "Text-RAG", "image": "Image-RAG", "multi": "Multi-RAG"}
METHOD_NAMES = {"vanilla": "Vanilla", "cot": "CoT", "vanilla_ke": "Vanilla + KE", "cot_ke": "CoT + KE"}
PERCENT = [("informativeness_f1", "Inf. F1"), ("completeness", "Complete"), ("relevance", "Relevant"),
           ("groundedness_f1", "Grd. F1"), ("recall", "Recall"), ("precision", "Precision"), ("mauve", "MAUVE")]
COUNTS = [("retrieved_text", "Retrieved text"), ("retrieved_image", "Retrieved image"), ("used_text", "Utilised text"),
          ("used_image", "Utilised image")]
SPLIT_HEADINGS = {"test": "test split (human-annotated, §3.2 Step 3: the paper's evaluation set)",
                  "train": "train split (automatically built, not human-annotated: reported apart, not comparable to the paper)"}
NOTES = {
    "strict": "Strict scoring (the paper's formulas, §4), on the answer's sentences: relevance, recall and precision average "
              "over every sentence; a sentence without citations has recall and precision 0; a citation to a number that names "
              "no retrieved document counts in the sentence's citations with support 0; duplicates count once; a failed judge "
              "call makes that metric missing for the answer (never 0); an empty answer and a failed generation score 0. F1 is "
              "the harmonic mean per answer, averaged over answers. MAUVE: gold answer vs answer, no question prefix, failed "
              "generations left out.",
    "reference": "Reference-compatible scoring (the computation of MAVIS's public scripts): statements are the sentences before "
                 "each citation bracket as its extract_references finds them; relevance is judged on those statements with the "
                 "question and the gold answer shown (not the image), and an answer containing \"Error\" is left out; "
                 "completeness shows the answer with its citations; recall and precision average over the statements that cite "
                 "a retrieved document (an answer with none scores 0), with repeated citations kept, citations past the "
                 "retrieved documents dropped; every metric left out for gold answers of at most 500 characters (groundedness.py "
                 "rewrites the answers file the later scripts read, in the public README's order); a failed "
                 "judge call counts 0; a failed generation is the public client's \"Error\" answer. Utilised documents as "
                 "aggregate.py counts them. MAUVE as fluency.py after relevance.py: instances whose gold documents include a "
                 "text and an image, less the \"Error\" answers relevance.py dropped, "
                 "question + text on both sides, model texts with \"Error\", \"document\" or \"information\" dropped. "
                 "\"(k/n)\" is the strict coverage (answers judged); the answers the public scripts leave out are the "
                 "summary table's `missing` (DuckDB file).",
}


def _fmt(value, percent: bool) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:.1f}" if percent else f"{value:.1f}"


def _covered(summary: dict, key: tuple, scoring: str, metric: str, percent: bool) -> str:
    """The mean with its coverage, answers judged / answers, both from the strict row (a failed
    judge call leaves an answer out there; the reference mode scores it 0), so a mode's number over
    nothing judged prints n/a; "–" where the mode has no row."""
    row = summary.get((*key, scoring, metric))
    if row is None:
        return "–"
    judged = summary.get((*key, "strict", metric)) or row
    return covered(None if row["value"] is None else _fmt(row["value"], percent), judged["n"], judged["n"] + judged["missing"])


def main_table(summary: dict, combos: list[tuple[str, str, str, str]], scoring: str) -> str:
    rows = [[model, f"+ {SETTING_NAMES[setting]}", METHOD_NAMES[method]]
            + [_covered(summary, (model, split, setting, method), scoring, metric, i < len(PERCENT))
               for i, (metric, _) in enumerate(PERCENT + COUNTS)]
            for model, split, setting, method in combos]
    return md_table(["Model", "Setting", "Method"] + [label for _, label in PERCENT + COUNTS], rows)


def modality_table(summary: dict, combos: list[tuple[str, str, str, str]], scoring: str) -> str:
    rows = [[m, SETTING_NAMES[s], METHOD_NAMES[t]] + [_fmt((summary.get((m, sp, s, t, scoring, metric)) or {}).get("value"), True)
                                                   for metric in ("precision_text", "precision_image", "utilisation_text", "utilisation_image")]
            for m, sp, s, t in combos]
    return md_table(["Model", "Setting", "Method", "Grd. (precision) text", "Grd. (precision) image", "Utilisation text",
                     "Utilisation image"], rows)


def plot(summary: dict, combos: list[tuple[str, str, str, str]], metrics: tuple[str, str], title: str, ylabel: str, path: str) -> None:
    groups = [f"{m}\n{SETTING_NAMES[s]}\n{METHOD_NAMES[t]}" + (f"\n({sp})" if sp != "test" else "") for m, sp, s, t in combos]
    series = {label: [None if (summary.get((m, sp, s, t, "strict", metric)) or {}).get("value") is None
                      else 100 * summary[(m, sp, s, t, "strict", metric)]["value"] for m, sp, s, t in combos]
              for metric, label in zip(metrics, ("text documents", "image documents"))}
    grouped_bars(groups, series, title, ylabel, path)


def coverage_rows(con, responses_paths: list[str]) -> list[tuple]:
    rows = []
    for path in responses_paths:
        report = read_report(path)
        model = report.get("params", {}).get("model")
        model = model if isinstance(model, str) and model else Path(path).stem
        counts = con.execute(
            "select (select count(distinct instance_id) from queries where model = $m), "
            "(select string_agg(split || ' ' || n, ', ' order by split = 'train', split) from "
            " (select split, count(distinct instance_id) as n from queries where model = $m group by split)), "
            "(select count(*) from responses where model = $m), "
            "(select count(*) from responses where model = $m and error is not null), "
            "(select coalesce(json_group_object(reason, n), '{}') from (select split_part(error, ':', 1) as reason, count(*) as n "
            "  from responses where model = $m and error is not null group by 1)), "
            "(select count(*) from responses where model = $m and finish_reason = 'length'), "
            "(select count(*) from judgements where model = $m and not ok), "
            "(select count(*) from scores where model = $m and scoring = 'strict' and (groundedness_f1 is null or informativeness_f1 is null)), "
            "(select any_value(retriever) from retrieved where model = $m), (select any_value(vision) from responses where model = $m)",
            {"m": model}).fetchone()
        rows.append((model, counts[0], counts[1], report.get("rows_in"), counts[2], counts[3], counts[4], report.get("rejected"), *counts[5:]))
    return rows


def extra_sections(ctx) -> list[str]:
    """Table 3 and Table 6, when their stages' outputs are given."""
    parts = []
    if ctx.has_input("retrieval"):
        rows = sorted(ctx.read_rows("retrieval"), key=lambda r: (r["retriever"], r["model"], r["split"]))
        parts += ["## Retrieval quality (cf. Table 3)",
                  "Each retriever ranks the whole release database for an instance (its queries' mean embedding) against the "
                  "documents `fact_documents` marks entailed for its facts; means over the instances with gold documents.",
                  md_table(["Retriever", "Queries of", "Split", "Instances", "NDCG@k", "Recall@k"],
                           [[r["retriever"], r["model"], r["split"], r["instances"], f"{r['ndcg']:.4f} (k={r['ndcg_k']})",
                             f"{r['recall']:.4f} (k={r['recall_k']})"] for r in rows])]
    if ctx.has_input("agreement"):
        rows = sorted(ctx.read_rows("agreement"), key=lambda r: (r["judge"], r["metric"], r["level"]))
        parts += ["## Judge validation (cf. Table 6)",
                  "Pearson r between the judge's and the human scores (annotators of one judgement averaged): `answer` per answer "
                  "(the metric's mean over its labelled judgements, as Table 6), `item` per labelled judgement.",
                  md_table(["Judge", "Metric", "Level", "n", "Pearson r"],
                           [[r["judge"], r["metric"], r["level"], r["n"], "n/a" if r["pearson"] is None else f"{r['pearson']:.3f}"]
                            for r in rows])]
    return parts


def split_sections(summary: dict, combos: list[tuple[str, str, str, str]]) -> list[str]:
    """The result tables of each split under its own heading, the test split first."""
    splits = sorted({c[1] for c in combos}, key=lambda s: (s != "test", s))
    if not splits:
        return ["No instance was evaluated. The default is the release's test split (the human-annotated sample, "
                "§3.2 Step 3), which is empty until the annotators' sheet is imported (mavis.annotations); other splits "
                "are evaluated only when asked (eval_mavis.mavis_generate_queries.splits), and reported apart."]
    parts = []
    for split in splits:
        of_split = [c for c in combos if c[1] == split]
        heading = SPLIT_HEADINGS.get(split, f"{split} split")
        for scoring in ("strict", "reference"):
            parts += [f"## Main results (cf. Tables 4-5), {heading}, {scoring} scoring", NOTES[scoring], main_table(summary, of_split, scoring)]
        parts += [f"## Groundedness and utilisation by document modality (cf. §5.6, Figure 4), {heading}, strict scoring",
                  "Groundedness here is precision (each citation judged alone) over citations to documents of that modality; "
                  "utilisation is cited / retrieved documents of that modality, per answer.",
                  modality_table(summary, of_split, "strict")]
    return parts


def run(ctx):
    loaded: dict[str, int] = {}
    with portable_duckdb_file(ctx.output_path("db"), check=lambda tmp: check_row_counts(tmp, loaded)) as con:
        for name in TABLES:
            loaded[name] = ctx.stats[f"{name}_rows"] = load_table(con, name, ctx.read(name))
        for name in OPTIONAL:
            if ctx.has_input(name):
                loaded[name] = ctx.stats[f"{name}_rows"] = load_table(con, name, ctx.read(name))
        con.execute("create table coverage (model varchar, instances_with_queries bigint, instances_by_split varchar, answers_asked bigint, "
                    "responses bigint, failed_generations bigint, failed_by_reason json, rejected bigint, truncated bigint, "
                    "failed_judge_calls bigint, answers_with_missing_f1 bigint, retriever varchar, vision boolean)")
        insert_rows(con, "insert into coverage values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", coverage_rows(con, ctx.input_paths("responses")))
        summary = {(r["model"], r["split"], r["setting"], r["method"], r["scoring"], r["metric"]): r for r in ctx.read_rows("summary")}
        order = {k: i for i, k in enumerate(SETTINGS + METHODS)}
        combos = sorted({k[:4] for k in summary}, key=lambda c: (c[1] != "test", c[1], c[0], order[c[2]], order[c[3]]))
        notes = sorted({r["note"] for r in summary.values() if r["metric"] == "mauve" and r["note"]})
        coverage = con.execute("select * exclude (failed_by_reason) from coverage order by model").fetchall()
        markdown = "\n\n".join([
            f"# {ctx.params['title']}",
            "Scores on a 0-100 scale; statistics in documents per answer. Informativeness F1 = harmonic mean of completeness "
            "(Table 13) and relevance (Table 14), groundedness F1 = harmonic mean of recall and precision (Table 12), each "
            "computed per answer and then averaged (mavis.txt §4). \"(k/n)\" beside every number: k answers judged "
            "(strict scoring, whatever the table's mode: a failed judge call leaves an answer out) of the n answers; "
            "\"n/a\" where none was, never a score; \"–\" no row in that mode.",
            "## Coverage",
            md_table(["Model", "Instances", "By split", "Answers asked", "Responses", "Failed generations", "Rejected", "Truncated",
                      "Failed judge calls", "Answers with a missing F1", "Retriever", "Vision"], [list(r) for r in coverage]),
            "Failed generations (the answer call, or a +KE extraction, failed or came back empty) are responses: strict scores "
            "them 0 on every metric, reference as the public code's \"Error\" answer (see the notes below). Rejected: answers "
            "not asked (a release image missing).",
            *split_sections(summary, combos),
            "Fluency: " + (" ".join(notes) if notes else "MAUVE as configured."),
            f"![groundedness by modality]({Path(ctx.output_path('groundedness_plot')).name})",
            f"![utilisation by modality]({Path(ctx.output_path('utilisation_plot')).name})",
            *extra_sections(ctx),
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
    inputs={**{name: Input(f"mavis_eval_{name}, one file per model", many=True, table=f"mavis_eval_{name}") for name in TABLES},
            "retrieval": Input("mavis_eval_retrieval_summary from mavis_retrieval_quality (Table 3)", optional=True, table=OPTIONAL["retrieval"]),
            "agreement": Input("mavis_eval_judge_agreement from mavis_validate_judge (Table 6)", optional=True, table=OPTIONAL["agreement"])},
    outputs={
        "report": Output(None, "markdown report"),
        "groundedness_plot": Output(None, "PNG: precision by document modality (Figure 4)"),
        "utilisation_plot": Output(None, "PNG: utilisation by document modality (Figure 4)"),
        "db": Output(None, "DuckDB file with the evaluation tables"),
    },
    params={"title": Param(str, "MAVIS evaluation", "report heading")},
    run=run,
    rejects={},
)

if __name__ == "__main__":
    STAGE.main()
