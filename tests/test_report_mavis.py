"""report_mavis through its CLI (mavis.txt §5.3-5.6, Tables 4-5, Figure 4) on hand-written evaluation
tables of two models (one file per model and table): the main table's numbers are the summary's on a
0-100 scale with "(k missing)" and "n/a", strict scoring before reference, rows ordered by model,
setting and method; coverage comes from the tables and the responses' report sidecar; every input
row is in the DuckDB file; the two Figure 4 plots are PNG files."""
from __future__ import annotations

import json

import duckdb
import pyarrow as pa

from conftest import run_stage
from stages.core.tables import table_contract, table_schema, write_table

PERCENT = ("informativeness_f1", "completeness", "relevance", "groundedness_f1", "recall", "precision", "mauve")
COUNTS = ("retrieved_text", "retrieved_image", "used_text", "used_image")


def filled(table: str, row: dict) -> dict:
    """The row with the columns the report does not read filled as the table's contract allows:
    null where it may be, else an allowed value, an empty list, an empty string or the lowest number."""
    contract, out = table_contract(table), {}
    for f in table_schema(table):
        if f.name in row or f.name in contract.nullable:
            out[f.name] = row.get(f.name)
        elif f.name in contract.values:
            out[f.name] = sorted(contract.values[f.name])[0]
        elif pa.types.is_list(f.type):
            out[f.name] = []
        elif pa.types.is_string(f.type):
            out[f.name] = ""
        elif pa.types.is_boolean(f.type):
            out[f.name] = False
        else:
            out[f.name] = (contract.ranges.get(f.name) or (0, None))[0] or 0
    return out


def _summary(model, setting, method, scoring, values, missing=None, note=None):
    return [{"model": model, "setting": setting, "method": method, "scoring": scoring, "metric": metric, "value": value,
             "n": 0 if value is None else 2, "missing": (missing or {}).get(metric, 0), "note": note if metric == "mauve" else None}
            for metric, value in values.items()]


def _tables():
    """Per model, per table: the rows. alpha: 2 instances, 2 responses (one cut by max_tokens), one
    failed judge call and one answer whose groundedness F1 is missing; beta: one instance, Multi-RAG CoT."""
    alpha_strict = dict(zip(PERCENT + COUNTS, (0.5, 0.75, 0.25, None, 0.5, 0.25, 0.8, 3.0, 0.0, 2.0, 0.0)))
    alpha_reference = dict(alpha_strict, groundedness_f1=0.4, precision=0.125)
    beta_strict = dict(zip(PERCENT + COUNTS, (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, None, 2.0, 1.0, 1.0, 0.0)),
                       precision_text=0.4, precision_image=None, utilisation_text=0.5, utilisation_image=0.0)
    return {
        "alpha": {
            "queries": [{"id": f"mq:a{i}", "model": "alpha", "instance_id": f"i{i}", "query_index": 0, "query": "q"} for i in (1, 2)],
            "retrieved": [{"id": "mr:a", "model": "alpha", "instance_id": "i1", "setting": "text", "rank": 1, "doc_id": "d", "retriever": "minilm:x"}],
            "responses": [{"id": f"mresp:a{i}", "model": "alpha", "instance_id": f"i{i}", "setting": "text", "method": "vanilla", "vision": False,
                           "finish_reason": reason} for i, reason in ((1, "stop"), (2, "length"))],
            "sentences": [{"id": "ms:a", "response_id": "mresp:a1", "model": "alpha", "sentence_index": 0}],
            "judgements": [{"id": f"mj:a{k}", "response_id": "mresp:a1", "model": "alpha", "kind": "support", "ok": ok} for k, ok in ((1, True), (2, False))],
            "scores": [{"response_id": f"mresp:a{i}", "model": "alpha", "setting": "text", "method": "vanilla", "scoring": "strict",
                        "informativeness_f1": 0.5, "groundedness_f1": f1} for i, f1 in ((1, 0.5), (2, None))],
            "summary": _summary("alpha", "text", "vanilla", "strict", alpha_strict, {"groundedness_f1": 1, "precision": 1}, "MiniLM features")
            + _summary("alpha", "text", "vanilla", "reference", alpha_reference, note="MiniLM features"),
        },
        "beta": {
            "queries": [{"id": "mq:b", "model": "beta", "instance_id": "i1", "query_index": 0, "query": "q"}],
            "retrieved": [{"id": "mr:b", "model": "beta", "instance_id": "i1", "setting": "multi", "rank": 1, "doc_id": "d", "retriever": "minilm:x"}],
            "responses": [{"id": "mresp:b", "model": "beta", "instance_id": "i1", "setting": "multi", "method": "cot", "vision": True, "finish_reason": "stop"}],
            "sentences": [{"id": "ms:b", "response_id": "mresp:b", "model": "beta", "sentence_index": 0}],
            "judgements": [{"id": "mj:b", "response_id": "mresp:b", "model": "beta", "kind": "support", "ok": True}],
            "scores": [{"response_id": "mresp:b", "model": "beta", "setting": "multi", "method": "cot", "scoring": "strict",
                        "informativeness_f1": 0.1, "groundedness_f1": 0.4}],
            "summary": _summary("beta", "multi", "cot", "strict", beta_strict, note="MiniLM features"),
        },
    }


def test_report_tables_coverage_and_db(tmp_path):
    tables = _tables()
    args = []
    for model, by_table in tables.items():
        for name, rows in by_table.items():
            path = tmp_path / model / f"{model}.parquet" if name == "responses" else tmp_path / model / f"{name}.parquet"
            path.parent.mkdir(exist_ok=True)
            write_table(path, [filled(f"mavis_eval_{name}", row) for row in rows], f"mavis_eval_{name}")
            args.append(f"--input={name}={path}")
    # alpha's responses carry the generation stage's report sidecar; beta's has none (its model is read from the file name)
    (tmp_path / "alpha" / "alpha.parquet.report.json").write_text(json.dumps(
        {"params": {"model": "alpha"}, "rows_in": 3, "rejected": 1, "rejected_by_reason": {"invalid_answer": 1}}))
    out = {name: tmp_path / "out" / name for name in ("report.md", "groundedness.png", "utilisation.png", "evaluation.duckdb")}
    run_stage("report_mavis", *args, f"--output=report={out['report.md']}", f"--output=groundedness_plot={out['groundedness.png']}",
              f"--output=utilisation_plot={out['utilisation.png']}", f"--output=db={out['evaluation.duckdb']}", "--params", '{"title": "T"}')
    text = out["report.md"].read_text()
    assert text.startswith("# T\n")
    strict = "| alpha | + Text-RAG | Vanilla | 50.0 | 75.0 | 25.0 | n/a (1 missing) | 50.0 | 25.0 (1 missing) | 80.0 | 3.0 | 0.0 | 2.0 | 0.0 |"
    reference = "| alpha | + Text-RAG | Vanilla | 50.0 | 75.0 | 25.0 | 40.0 | 50.0 | 12.5 | 80.0 | 3.0 | 0.0 | 2.0 | 0.0 |"
    beta = "| beta | + Multi-RAG | CoT | 10.0 | 20.0 | 30.0 | 40.0 | 50.0 | 60.0 | n/a | 2.0 | 1.0 | 1.0 | 0.0 |"
    strict_at, reference_at = text.index("strict scoring"), text.index("reference scoring")
    assert strict_at < text.index(strict) < text.index(beta) < reference_at < text.index(reference)
    assert "| beta | + Multi-RAG | CoT | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a |" in text  # no reference rows for beta
    assert "| beta | Multi-RAG | CoT | 40.0 | n/a | 50.0 | 0.0 |" in text  # by modality, strict
    assert "Fluency: MiniLM features" in text
    con = duckdb.connect(str(out["evaluation.duckdb"]), read_only=True)
    for name in tables["alpha"]:
        assert con.execute(f"select count(*) from {name}").fetchone()[0] == len(tables["alpha"][name]) + len(tables["beta"][name])
    coverage = con.execute("select * exclude (failed_by_reason) from coverage order by model").fetchall()
    # model, instances, answers asked, responses, failed generations, truncated, failed judge calls, missing F1, retriever, vision
    assert coverage == [("alpha", 2, 3, 2, 1, 1, 1, 1, "minilm:x", False), ("beta", 1, None, 1, None, 0, 0, 0, "minilm:x", True)]
    assert json.loads(con.execute("select failed_by_reason from coverage where model = 'alpha'").fetchone()[0]) == {"invalid_answer": 1}
    for name in ("groundedness.png", "utilisation.png"):
        assert out[name].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
