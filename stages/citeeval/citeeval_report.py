"""The CiteEval-Auto report of one evaluation, per model and scenario (citeeval.txt §5, Table 4 layout;
Table 3 for the meta-evaluation): markdown and a DuckDB file, written beside the evaluated family's
own report.

- Main table per mode (cf. Table 4): per model, CiteEval-Auto in the Full and Cited scenarios at
  statement level and at response level side by side, |R| (statements per response) and M (share
  of statements without citation). Strict first; the reference-compatible table (CiteEval's public
  code, whose system score is the statement-level mean) below it, labelled.
- Components: CiteEval-Auto, ITERCOE and EDITDIST per scenario and level, responses by status.
- Rules: which rule each mode follows, per metric, and the differences from strict.
- Coverage: responses, statements, failed judge calls and invalid (strict) answers of the context
  and ITERCOE stages (from their report sidecars), so no mean hides what it left out. Every score
  has its coverage beside it, "(k/n)": responses rated of those with a statement to rate (strict
  statuses, in both modes); "n/a" when none was rated, so the reference mode's 1.0 for failed
  judge answers never reads as a perfect score.
- Meta-evaluation, when human ratings were given: Pearson / Spearman / Kendall per level.

Inputs (one file per model each): responses (citeeval_response_scores), statements
(citeeval_statement_scores), summary, meta; optionally contexts, ratings, distances (stored in the
DuckDB file; their `.report.json` sidecars give the failed calls).
Outputs: report (markdown), db (DuckDB: one table per input, every row of every input, checked
after writing).
Params: title.
"""
from __future__ import annotations

from pathlib import Path


from stages.citeeval.citeeval import STATUSES
from stages.core.release import check_row_counts, covered, load_table, md_table, portable_duckdb_file
from stages.core.stage import Input, Output, Param, Stage, read_report
from stages.core.tables import atomic_write_bytes

VERSION = "4"  # 2: statement and response level, rules per mode; 3: coverage (k/n) beside every score, n/a when nothing was rated; 4: cited statements' context row
TABLES = ("responses", "statements", "summary", "meta")
DETAIL = ("contexts", "ratings", "distances")
RULES = [  # (metric, strict, reference)
    ("ITERCOE of a cited statement", "the judge's 1-5 rating as (r - 1) / 4; a malformed answer (any tag) makes the statement missing",
     "(r - 1) / 4 of its own rating tag read by the public parser (any digits, unclamped); a lost tag gives 1.0"),
    ("EDITDIST of a cited statement", "Eq. 3 over the strict edits, citation ids as written (no edit: d(KEEP) + b = 0.992)",
     "the public code: original citations keyed one too high (k as \"k+1\"), no parsed edit 1.0"),
    ("uncited statement requiring a citation", "Full: 0 (§2.4, penalised), not rated; Cited: N/A",
     "Full: 0.0; Cited: masked (all masked or N/A, one masked: the response is 0.0)"),
    ("context of an uncited statement", "the judge's category; an invalid answer makes the response missing (Full)",
     "the public parser's category, tag by tag; a lost tag is 2 (retrieval)"),
    ("context of a cited statement", "the judge's category (§4.1, citations removed): another context than retrieval is N/A; "
     "an invalid answer makes the response missing", "always retrieval (2): the public code evaluates every cited statement"),
    ("response with nothing to rate", "not applicable: left out of the means", "1.0"),
    ("\"no answer\" response", "only the single statement \"No answer is found\": context 3, not applicable",
     "any response the public regex matches is rewritten to \"No answer is found.\": 1.0, one statement (the public code "
     "asks its context judge about it and gets 1.0 only for context 3: that answer is taken without the call)"),
    ("empty response", "left out of the means (status empty)", "1.0 at response level; no statement at statement level"),
    ("unclosed <thinking>", "the text from <thinking> on is dropped",
     "the public code keeps and rates the thinking text: missing here, unless the \"no answer\" regex rewrites it"),
    ("statements", "blingfire sentences, fragments under min_statement_chars merged, citations out of range or repeated dropped",
     "the same statements (not reproduced: the public code splits with NLTK and merges a short sentence only when it "
     "ends a line or carries citations; it keeps citation numbers 1-10 whatever the number of passages, here the "
     "response's own passages: the same for CiteEval-Bench's ten)"),
    ("failed judge call (no text)", "missing", "missing (the public code would rate an exception string)"),
    ("system score", "response-level mean over rated responses; statement-level mean over their counted statements beside it",
     "statement-level mean, an N/A statement standing in with its response's rating (evaluate_all_systems.py default); "
     "response-level mean beside it"),
    ("\\|R\\| and M", "over all responses; M over responses with statements", "over all responses; an empty response's M is 1"),
]


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _summary(con, model: str, scenario: str, mode: str, metric: str):
    row = con.execute("select value from summary where model = ? and scenario = ? and mode = ? and metric = ?",
                      [model, scenario, mode, metric]).fetchone()
    return row[0] if row else None


def _judged(con, model: str, scenario: str) -> tuple[int, int]:
    """(responses the judge rated, responses with something to rate) of a model and scenario, from
    the strict statuses: a failed judge answer makes a response missing there, while the reference
    mode scores it (1.0 for a failed ITERCOE answer), so both modes show the strict coverage. A
    response with nothing that counts (not_applicable) or no statement (empty) has nothing to rate."""
    return con.execute("select count(*) filter (where status = 'rated'), "
                       "count(*) filter (where status not in ('not_applicable', 'empty')) "
                       "from responses where model = ? and scenario = ? and mode = 'strict'", [model, scenario]).fetchone()


def _covered(con, model: str, scenario: str, mode: str, metric: str) -> str:
    value = _summary(con, model, scenario, mode, metric)
    return covered(None if value is None else f"{value:.3f}", *_judged(con, model, scenario))


def main_table(con, models: list[str], mode: str) -> str:
    rows = []
    for m in models:
        cells = [m] + [_covered(con, m, s, mode, metric) for s in ("full", "cited") for metric in ("citeeval_auto_statement", "citeeval_auto")]
        cells += [_fmt(_summary(con, m, "full", mode, "statements_per_response")), _fmt(_summary(con, m, "full", mode, "missing_citation_ratio"))]
        rows.append(cells)
    return md_table(["Model", "Full, statement level", "Full, response level", "Cited, statement level", "Cited, response level",
                     "\\|R\\|", "M"], rows)


def components(con, models: list[str], mode: str) -> str:
    rows = [[m, s, level] + [_covered(con, m, s, mode, k + suffix) for k in ("citeeval_auto", "itercoe", "editdist")] +
            [int(_summary(con, m, s, mode, f"responses_{st}") or 0) for st in STATUSES]
            for m in models for s in ("full", "cited") for level, suffix in (("statement", "_statement"), ("response", ""))]
    return md_table(["Model", "Scenario", "Level", "CiteEval-Auto", "ITERCOE", "EDITDIST", *STATUSES], rows)


def _sidecars(ctx, name: str) -> list[dict]:
    """The stage reports (rows in, rejected, model calls) of an input's files, in file order."""
    if not ctx.has_input(name):
        return []
    return [read_report(path) for path in ctx.input_paths(name)]


def coverage(con, ctx) -> str:
    """One row per model file (the inputs list one file per model, in the same order), named by the
    model values it holds (an evaluation's configurations of that model)."""
    contexts, ratings = _sidecars(ctx, "contexts"), _sidecars(ctx, "ratings")
    rows = []
    for i, path in enumerate(ctx.input_paths("responses")):
        listed = "'" + path.replace("'", "''") + "'"
        model, n_resp, n_stmt = con.execute(
            f"select string_agg(distinct model, '; ' order by model), count(*), coalesce(sum(n_statements), 0) from read_parquet({listed}) "
            "where scenario = 'full' and mode = 'strict' "  # the rows ctx.read kept: a contract reject stays out
            "and id in (select id from responses where scenario = 'full' and mode = 'strict')").fetchone()
        ctx_report = contexts[i] if i < len(contexts) else {}
        itc_report = ratings[i] if i < len(ratings) else {}
        calls = sum(r.get("stats", {}).get("llm_calls", 0) for r in (ctx_report, itc_report))
        rows.append([model or Path(path).name, n_resp, n_stmt, ctx_report.get("rejected", "–"),
                     ctx_report.get("stats", {}).get("context_invalid", "–") if ctx_report else "–",
                     itc_report.get("rejected", "–"), itc_report.get("stats", {}).get("strict_invalid", "–") if itc_report else "–", calls])
    return md_table(["Model", "Responses", "Statements", "Context: failed calls (statements)", "Context: invalid answers (statements)",
                     "ITERCOE: failed calls (statements)", "ITERCOE: invalid answers (statements)", "Judge calls"], rows)


def meta_table(con) -> str:
    rows = con.execute("select model, level, scenario, mode, pearson, spearman, kendall, n from meta "
                       "where measure = 'citeeval_auto' order by all").fetchall()
    return md_table(["Model", "Level", "Scenario", "Mode", "Pearson", "Spearman", "Kendall", "n"],
                    [[r[0], r[1], r[2], r[3], _fmt(r[4]), _fmt(r[5]), _fmt(r[6]), r[7]] for r in rows])


def run(ctx):
    loaded: dict[str, int] = {}
    with portable_duckdb_file(ctx.output_path("db"), check=lambda tmp: check_row_counts(tmp, loaded)) as con:
        for name in (*TABLES, *DETAIL):
            if ctx.has_input(name):
                loaded[name] = ctx.stats[f"{name}_rows"] = load_table(con, name, ctx.read(name))
        models = [r[0] for r in con.execute("select distinct model from responses order by model").fetchall()]
        parts = [
            f"# {ctx.params['title']}",
            "CiteEval-Auto (citeeval.txt §4.2): per statement the mean of ITERCOE (the judge's 1-5 rating as (r - 1) / 4) and "
            "EDITDIST (Eq. 3 over the judge's edits); per response the mean over the statements the scenario counts. Full counts "
            "every statement that requires a citation (retrieval context), an uncited one scoring 0; Cited only the cited ones "
            "(§2.4). Statement level: the mean over statements (each response weighs its statements); response level: the mean "
            "over responses. |R| statements per response, M share of statements without citation. Strict: failed or invalid "
            "judge answers make a response missing, never 0. \"(k/n)\" beside every score: k responses the judge rated (strict "
            "statuses, in both modes) of the n with a statement to rate; \"n/a\" when none was rated, never the reference "
            "mode's default 1.0.",
            "## Coverage", coverage(con, ctx),
            "## CiteEval-Auto, strict (cf. Table 4)", main_table(con, models, "strict"),
            "## Components and responses by status, strict", components(con, models, "strict"),
            "## CiteEval-Auto, reference-compatible (CiteEval's public code; its system score is the statement level)",
            main_table(con, models, "reference"), components(con, models, "reference"),
            "## Which rule each mode follows",
            md_table(["Metric", "Strict", "Reference-compatible"], [list(r) for r in RULES]),
        ]
        if con.execute("select count(*) from meta").fetchone()[0]:
            parts += ["## Meta-evaluation against human ratings (cf. Table 3)", meta_table(con)]
        atomic_write_bytes(ctx.output_path("report"), ("\n\n".join(parts) + "\n").encode())


STAGE = Stage(
    name="citeeval_report",
    version=VERSION,
    doc=__doc__,
    inputs={
        "responses": Input("citeeval_response_scores, one file per model", many=True, table="citeeval_response_scores"),
        "statements": Input("citeeval_statement_scores, one file per model", many=True, table="citeeval_statement_scores"),
        "summary": Input("citeeval_summary, one file per model", many=True, table="citeeval_summary"),
        "meta": Input("citeeval_meta, one file per model", many=True, table="citeeval_meta"),
        "contexts": Input("citeeval_contexts, one file per model", many=True, optional=True, table="citeeval_contexts"),
        "ratings": Input("citeeval_itercoe, one file per model", many=True, optional=True, table="citeeval_itercoe"),
        "distances": Input("citeeval_editdist, one file per model", many=True, optional=True, table="citeeval_editdist"),
    },
    outputs={"report": Output(None, "markdown report"), "db": Output(None, "DuckDB file with the CiteEval tables")},
    params={"title": Param(str, "CiteEval-Auto", "report heading")},
    run=run,
    rejects={},
)

if __name__ == "__main__":
    STAGE.main()
