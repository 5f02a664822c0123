"""The CiteEval-Auto report of one evaluation, per model and scenario (citeeval.txt §5, Table 4 layout;
Table 3 for the meta-evaluation): markdown and a DuckDB file, written beside the evaluated family's
own report.

- Main table (strict, cf. Table 4): per model, CiteEval-Auto in the Full and Cited scenarios, |R|
  (statements per response) and M (share of statements without citation).
- Components: CiteEval-Auto, ITERCOE and EDITDIST per scenario.
- Reference-compatible numbers beside the strict ones, labelled, with the list of differences.
- Coverage: responses, statements, failed judge answers (context, ITERCOE; from the stages'
  report sidecars), responses by status (rated, not applicable, missing, uncited 0.0), so no mean
  hides what it left out. "n/a" marks a mean over no response.
- Meta-evaluation, when human ratings were given: Pearson / Spearman / Kendall per level.

Inputs (one file per model each): responses (citeeval_response_scores), statements
(citeeval_statement_scores), summary, meta; optionally contexts, ratings, distances (stored in the
DuckDB file; their `.report.json` sidecars give the failed calls).
Outputs: report (markdown), db (DuckDB: one table per input, every row of every input, checked
after writing).
Params: title.
"""
from __future__ import annotations

import json
from pathlib import Path


from stages.core.release import check_row_counts, insert_rows, load_table, md_table, portable_duckdb_file
from stages.core.stage import Input, Output, Param, Stage
from stages.core.tables import atomic_write_bytes

VERSION = "1"
TABLES = ("responses", "statements", "summary", "meta")
DETAIL = ("contexts", "ratings", "distances")
DIFFERENCES = [
    "citation ids: the public code keys a statement's original citations one too high (k as k + 1), so a DELETE of k "
    "removes k - 1 or nothing and an ADD of k is skipped when k - 1 is cited; strict matches ids as written",
    "a statement the judge did not edit: public 1.0, strict Eq. 3 = d(KEEP) + b (0.9921 with the public coefficients); "
    "an uncited statement left alone: public 1.0, strict b",
    "a cited statement whose ITERCOE answer failed: public 1.0, strict missing (the response is missing)",
    "a statement whose context answer failed: public retrieval (its default 2), strict missing",
    "Full: an uncited retrieval statement: public 0.0 without asking, strict rated by the judge",
    "a response with nothing to rate: public 1.0, strict not applicable (left out of the means)",
]


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _summary(con, model: str, scenario: str, mode: str, metric: str):
    row = con.execute("select value from summary where model = ? and scenario = ? and mode = ? and metric = ?",
                      [model, scenario, mode, metric]).fetchone()
    return row[0] if row else None


def main_table(con, models: list[str], mode: str) -> str:
    rows = []
    for m in models:
        cells = [m] + [_fmt(_summary(con, m, s, mode, "citeeval_auto")) for s in ("full", "cited")]
        cells += [_fmt(_summary(con, m, "full", mode, "statements_per_response")), _fmt(_summary(con, m, "full", mode, "missing_citation_ratio"))]
        rows.append(cells)
    return md_table(["Model", "Full", "Cited", "\\|R\\|", "M"], rows)


def components(con, models: list[str], mode: str) -> str:
    rows = [[m, s] + [_fmt(_summary(con, m, s, mode, k)) for k in ("citeeval_auto", "itercoe", "editdist")] +
            [int(_summary(con, m, s, mode, f"responses_{st}") or 0) for st in ("rated", "not_applicable", "missing", "uncited_zero")]
            for m in models for s in ("full", "cited")]
    return md_table(["Model", "Scenario", "CiteEval-Auto", "ITERCOE", "EDITDIST", "rated", "N/A", "missing", "uncited 0.0"], rows)


def _sidecars(ctx, name: str) -> list[dict]:
    """The stage reports (rows in, rejected, model calls) of an input's files, in file order."""
    if not ctx.has_input(name):
        return []
    return [json.loads(side.read_text()) if side.exists() else {} for side in (Path(f"{p}.report.json") for p in ctx.input_paths(name))]


def coverage(con, ctx) -> str:
    """One row per model file (the inputs list one file per model, in the same order)."""
    contexts, ratings = _sidecars(ctx, "contexts"), _sidecars(ctx, "ratings")
    rows = []
    for i, path in enumerate(ctx.input_paths("responses")):
        listed = "'" + path.replace("'", "''") + "'"
        model, n_resp, n_stmt = con.execute(
            f"select any_value(model), count(*), coalesce(sum(n_statements), 0) from read_parquet({listed}) "
            "where scenario = 'full' and mode = 'strict'").fetchone()
        ctx_report = contexts[i] if i < len(contexts) else {}
        itc_report = ratings[i] if i < len(ratings) else {}
        calls = sum(r.get("stats", {}).get("llm_calls", 0) for r in (ctx_report, itc_report))
        rows.append([model or Path(path).name, n_resp, n_stmt, ctx_report.get("rejected", "–"), itc_report.get("rejected", "–"), calls])
    return md_table(["Model", "Responses", "Statements", "Context: statements failed", "ITERCOE: statements failed", "Judge calls"], rows)


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
            "EDITDIST (Eq. 3 over the judge's edits); per response the mean over its rated statements. Full counts every "
            "statement attributed to the retrieval context, Cited only the cited ones (§2.4). |R| statements per response, "
            "M share of statements without citation. Means are over rated responses; failed judge answers make a response "
            "missing, never 0.",
            "## Coverage", coverage(con, ctx),
            "## CiteEval-Auto, strict (cf. Table 4)", main_table(con, models, "strict"),
            "## Components and responses by status, strict", components(con, models, "strict"),
            "## Reference-compatible (CiteEval's public implementation)", main_table(con, models, "reference"),
            components(con, models, "reference"),
            "Differences from strict:\n\n" + "\n".join(f"- {d}" for d in DIFFERENCES),
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
)

if __name__ == "__main__":
    STAGE.main()
