"""citeeval_report on the real citeeval_score outputs of two models (hand-made judge tables): the
Table 4 layout per model and mode with statement and response level side by side, the rules
table, coverage from the judge stages' report sidecars, every input row in the DuckDB file, and the
meta-evaluation section only when human ratings were given."""
from __future__ import annotations

import json

import duckdb
import pyarrow.parquet as pq

from conftest import run_stage
from stages.citeeval.citeeval import PUBLIC_COEFFICIENTS as C
from stages.core.tables import write_table

ACTIONS = ("keep", "delete_misleading", "delete_substandard", "delete_redundant", "add_evidence", "add_refinement", "add_credibility")


def scored(tmp_path, model: str, ratings: list[int | None]) -> dict[str, str]:
    """citeeval_score's four tables for one model: one response per rating, one cited statement
    (rated `rating`, left alone: EDITDIST = d(KEEP) + b; None: its ITERCOE answer lost the rating tag)
    and one uncited model-knowledge statement."""
    folder = tmp_path / model
    folder.mkdir()
    prepared, statements, contexts, itercoe, distances = [], [], [], [], []
    for n, rating in enumerate(ratings):
        rid = f"{model}-r{n}"
        prepared.append({"id": rid, "model": model, "source": "test", "query": "q", "passages": [], "mode": "text", "prediction": "p",
                         "thinking_dropped": False, "unanswerable": False, "n_statements": 2, "dropped_citations": [],
                         "empty": False, "thinking_unclosed": False, "no_answer_reference": False})
        for i, (citations, context) in enumerate([([1], 2), ([], 4)], start=1):
            ids = {"id": f"{rid}/{i}", "response_id": rid, "model": model, "sentence_id": i}
            statements.append({**ids, "sentence": "s", "citations": citations, "dropped": [], "unanswerable": False})
            contexts.append({**ids, "context": context, "model_context": context, "rule": "model", "applicable": context == 2,
                             "reference_context": context, "invalid": None, "judge": "j"})
        ids = {"id": f"{rid}/1", "response_id": rid, "model": model, "sentence_id": 1}
        itercoe.append({**ids, "rating": rating, "itercoe": None if rating is None else (rating - 1) / 4, "edits": [],
                        "invalid": "no rating tag" if rating is None else None, "reference_rating": rating, "reference_edits": [],
                        "judge": "j"})
        distances.append({**ids, **dict.fromkeys(ACTIONS, 0), "keep": 1, "n_actions": 1, "ignored_edits": 0,
                          "editdist": C["keep"] + C["intercept"], "editdist_reference": 1.0})
    inputs = {}
    for name, rows, table in [("prepared", prepared, "citeeval_prepared"), ("statements", statements, "citeeval_statements"),
                              ("contexts", contexts, "citeeval_contexts"), ("ratings", itercoe, "citeeval_itercoe"),
                              ("distances", distances, "citeeval_editdist")]:
        write_table(folder / f"{name}.parquet", rows, table)
        inputs[name] = str(folder / f"{name}.parquet")
    # the ITERCOE stage's sidecar: one statement's call failed, two answers were invalid for the strict parse
    (folder / "ratings.parquet.report.json").write_text(json.dumps({"rejected": 1, "stats": {"llm_calls": len(ratings) + 2, "strict_invalid": 2}}))
    outs = {n: str(folder / f"score_{n}.parquet") for n in ("responses", "statements", "summary", "meta")}
    run_stage("citeeval_score", *[x for n in ("statements", "contexts", "ratings", "distances") for x in ("--input", f"{n}={inputs[n]}")],
              "--input", f"responses={inputs['prepared']}", *[x for n, p in outs.items() for x in ("--output", f"{n}={p}")])
    return {**outs, "contexts": inputs["contexts"], "ratings": inputs["ratings"], "distances": inputs["distances"]}


def test_report_per_model_with_coverage_and_every_row_in_duckdb(tmp_path):
    models = {"alpha": scored(tmp_path, "alpha", [5, 3]), "beta": scored(tmp_path, "beta", [1])}
    args = [x for files in models.values() for name, path in files.items() for x in ("--input", f"{name}={path}")]
    report, db = tmp_path / "report.md", tmp_path / "citeeval.duckdb"
    run_stage("citeeval_report", *args, "--output", f"report={report}", "--output", f"db={db}", "--params", '{"title": "CiteEval on demo"}')
    text = report.read_text()
    assert text.startswith("# CiteEval on demo\n")

    def auto(model: str, scenario: str, mode: str, metric: str) -> float:
        rows = pq.read_table(models[model]["summary"]).to_pylist()
        return next(r["value"] for r in rows if (r["scenario"], r["mode"], r["metric"]) == (scenario, mode, metric))

    # Full and Cited agree here (the uncited statement is model knowledge): per statement (ITERCOE + EDITDIST) / 2;
    # strict counts the one cited statement per response, so statement and response level agree;
    # reference weighs each response by its 2 statements, the N/A one standing in with the response's rating
    strict = text.split("## CiteEval-Auto, strict")[1].split("##")[0]
    reference = text.split("## CiteEval-Auto, reference-compatible")[1].split("##")[0]
    for model, ratings in (("alpha", [5, 3]), ("beta", [1])):
        expected = sum(((r - 1) / 4 + C["keep"] + C["intercept"]) / 2 for r in ratings) / len(ratings)
        n = len(ratings)  # coverage beside each score: responses rated / responses with a statement to rate
        assert abs(auto(model, "full", "strict", "citeeval_auto") - expected) < 1e-9
        assert abs(auto(model, "full", "strict", "citeeval_auto_statement") - expected) < 1e-9
        cells = " | ".join(f"{auto(model, sc, 'strict', m):.3f} ({n}/{n})" for sc in ("full", "cited")
                           for m in ("citeeval_auto_statement", "citeeval_auto"))
        assert f"| {model} | {cells} | 2.000 | 0.500 |" in strict, strict
        public = [((r - 1) / 4 + 1.0) / 2 for r in ratings]  # editdist_reference 1.0 (no edit)
        assert abs(auto(model, "full", "reference", "citeeval_auto_statement") - sum(2 * p for p in public) / (2 * len(ratings))) < 1e-9
        cells = " | ".join(f"{auto(model, sc, 'reference', m):.3f} ({n}/{n})" for sc in ("full", "cited")
                           for m in ("citeeval_auto_statement", "citeeval_auto"))
        assert f"| {model} | {cells} | 2.000 | 0.500 |" in reference, reference
    assert "| Metric | Strict | Reference-compatible |" in text and "evaluate_all_systems.py default" in text
    coverage = text.split("## Coverage")[1].split("##")[0]
    assert "| alpha | 2 | 4 | – | – | 1 | 2 | 4 |" in coverage and "| beta | 1 | 2 | – | – | 1 | 2 | 3 |" in coverage, coverage
    assert "Meta-evaluation" not in text  # no human ratings given
    con = duckdb.connect(str(db), read_only=True)
    for name in ("responses", "statements", "summary", "meta", "contexts", "ratings", "distances"):
        expected = sum(pq.read_metadata(files[name]).num_rows for files in models.values())
        assert con.execute(f"select count(*) from {name}").fetchone()[0] == expected, name


def test_nothing_judged_prints_na_not_the_reference_default(tmp_path):
    """Every ITERCOE answer of gamma lost its rating tag: the public code's rule scores such a statement 1.0, so its
    reference-compatible mean is a perfect 1.000; the table prints n/a with the coverage (0/2), in both
    modes, and the 1.000 is only in the summary table (issue 33 item 7)."""
    files = scored(tmp_path, "gamma", [None, None])
    reference = {(r["scenario"], r["metric"]): r["value"] for r in pq.read_table(files["summary"]).to_pylist() if r["mode"] == "reference"}
    assert reference[("full", "citeeval_auto")] == 1.0  # what a reader skimming the table would have seen
    report, db = tmp_path / "report.md", tmp_path / "citeeval.duckdb"
    run_stage("citeeval_report", *[x for name, path in files.items() for x in ("--input", f"{name}={path}")],
              "--output", f"report={report}", "--output", f"db={db}")
    text = report.read_text()
    for section in ("## CiteEval-Auto, strict", "## CiteEval-Auto, reference-compatible"):
        table = text.split(section)[1].split("##")[0]
        assert "| gamma | n/a (0/2) | n/a (0/2) | n/a (0/2) | n/a (0/2) | 2.000 | 0.500 |" in table, table
    assert "1.000" not in text.split("## CiteEval-Auto, reference-compatible")[1].split("## Which rule")[0]
