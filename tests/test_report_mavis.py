"""report_mavis through its CLI (mavis.txt §5.3-5.6, Tables 4-5, Figure 4) on hand-written evaluation
tables of two models (one file per model and table): the main table's numbers are the summary's on a
0-100 scale with their coverage "(k/n)" and "n/a" when nothing was judged, strict scoring before reference, rows
ordered by model, setting and method, the test split (human-annotated) before and apart from the train split; coverage
comes from the tables (failed generations are responses with an error) and the responses' report
sidecar (rejected answers); every input row is in the DuckDB file; the two Figure 4 plots are PNG files."""
from __future__ import annotations

import json

import duckdb

from conftest import run_stage
from contract_rows import filled
from stages.core.tables import write_table

PERCENT = ("informativeness_f1", "completeness", "relevance", "groundedness_f1", "recall", "precision", "mauve")
COUNTS = ("retrieved_text", "retrieved_image", "used_text", "used_image")


def _summary(model, split, setting, method, scoring, values, missing=None, note=None):
    return [{"model": model, "split": split, "setting": setting, "method": method, "scoring": scoring, "metric": metric, "value": value,
             "n": 0 if value is None else 2, "missing": (missing or {}).get(metric, 0), "note": note if metric == "mauve" else None}
            for metric, value in values.items()]


def _tables():
    """Per model, per table: the rows. alpha: 2 instances, 3 responses (one cut by max_tokens, one a
    failed generation), one failed judge call and one answer whose groundedness F1 is missing, test
    split; beta: one instance of the train split, Multi-RAG CoT."""
    alpha_strict = dict(zip(PERCENT + COUNTS, (0.5, 0.75, 0.25, None, 0.5, 0.25, 0.8, 3.0, 0.0, 2.0, 0.0)))
    alpha_reference = dict(alpha_strict, groundedness_f1=0.4, precision=0.125)
    beta_strict = dict(zip(PERCENT + COUNTS, (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, None, 2.0, 1.0, 1.0, 0.0)),
                       precision_text=0.4, precision_image=None, utilisation_text=0.5, utilisation_image=0.0)
    return {
        "alpha": {
            "queries": [{"id": f"mq:a{i}", "model": "alpha", "instance_id": f"i{i}", "split": "test", "query_index": 0, "query": "q"}
                        for i in (1, 2)],
            "retrieved": [{"id": "mr:a", "model": "alpha", "instance_id": "i1", "setting": "text", "rank": 1, "doc_id": "d", "retriever": "minilm:x"}],
            "responses": [{"id": f"mresp:a{i}" + ("" if m == "vanilla" else f":{m}"), "model": "alpha", "instance_id": f"i{i}", "split": "test", "setting": "text", "method": m,
                           "vision": False, "finish_reason": reason, "error": error} for i, m, reason, error in (
                               (1, "vanilla", "stop", None), (2, "vanilla", "length", None), (2, "cot", None, "empty: the model returned no text"))],
            "sentences": [{"id": "ms:a", "response_id": "mresp:a1", "model": "alpha", "sentence_index": 0}],
            "judgements": [{"id": f"mj:a{k}", "response_id": "mresp:a1", "model": "alpha", "kind": "support", "ok": ok} for k, ok in ((1, True), (2, False))],
            "scores": [{"response_id": f"mresp:a{i}", "model": "alpha", "setting": "text", "method": "vanilla", "scoring": "strict",
                        "informativeness_f1": 0.5, "groundedness_f1": f1} for i, f1 in ((1, 0.5), (2, None))],
            "summary": _summary("alpha", "test", "text", "vanilla", "strict", alpha_strict, {"groundedness_f1": 1, "precision": 1}, "MiniLM features")
            + _summary("alpha", "test", "text", "vanilla", "reference", alpha_reference, note="MiniLM features"),
        },
        "beta": {
            "queries": [{"id": "mq:b", "model": "beta", "instance_id": "i3", "split": "train", "query_index": 0, "query": "q"}],
            "retrieved": [{"id": "mr:b", "model": "beta", "instance_id": "i3", "setting": "multi", "rank": 1, "doc_id": "d", "retriever": "minilm:x"}],
            "responses": [{"id": "mresp:b", "model": "beta", "instance_id": "i3", "split": "train", "setting": "multi", "method": "cot", "vision": True, "finish_reason": "stop"}],
            "sentences": [{"id": "ms:b", "response_id": "mresp:b", "model": "beta", "sentence_index": 0}],
            "judgements": [{"id": "mj:b", "response_id": "mresp:b", "model": "beta", "kind": "support", "ok": True}],
            "scores": [{"response_id": "mresp:b", "model": "beta", "setting": "multi", "method": "cot", "scoring": "strict",
                        "informativeness_f1": 0.1, "groundedness_f1": 0.4}],
            "summary": _summary("beta", "train", "multi", "cot", "strict", beta_strict, note="MiniLM features"),
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
        {"params": {"model": "alpha"}, "rows_in": 4, "rejected": 1, "rejected_by_reason": {"missing_image": 1}}))
    # Table 3 and Table 6 from their stages
    write_table(tmp_path / "retrieval.parquet", [{"model": "alpha", "retriever": "minilm:x", "split": "all", "instances": 2, "ndcg_k": 10,
                                                  "ndcg": 0.25, "recall_k": 100, "recall": 0.75}], "mavis_eval_retrieval_summary")
    write_table(tmp_path / "agreement.parquet", [{"judge": "j", "metric": "recall", "level": "answer", "n": 2, "pearson": 0.9},
                                                  {"judge": "j", "metric": "relevance", "level": "item", "n": 1, "pearson": None}],
                "mavis_eval_judge_agreement")
    args += [f"--input=retrieval={tmp_path / 'retrieval.parquet'}", f"--input=agreement={tmp_path / 'agreement.parquet'}"]
    out = {name: tmp_path / "out" / name for name in ("report.md", "groundedness.png", "utilisation.png", "evaluation.duckdb")}
    run_stage("report_mavis", *args, f"--output=report={out['report.md']}", f"--output=groundedness_plot={out['groundedness.png']}",
              f"--output=utilisation_plot={out['utilisation.png']}", f"--output=db={out['evaluation.duckdb']}", "--params", '{"title": "T"}')
    text = out["report.md"].read_text()
    assert text.startswith("# T\n")
    # beside each number its coverage, answers judged (strict) / answers; a mean over nothing judged is n/a in both modes
    strict = ("| alpha | + Text-RAG | Vanilla | 50.0 (2/2) | 75.0 (2/2) | 25.0 (2/2) | n/a (0/1) | 50.0 (2/2) | 25.0 (2/3) | 80.0 (2/2) "
              "| 3.0 (2/2) | 0.0 (2/2) | 2.0 (2/2) | 0.0 (2/2) |")
    # the reference mode scores the failed judge call 0: its 40.0 groundedness F1 was judged on nothing, so n/a
    reference = ("| alpha | + Text-RAG | Vanilla | 50.0 (2/2) | 75.0 (2/2) | 25.0 (2/2) | n/a (0/1) | 50.0 (2/2) | 12.5 (2/3) | 80.0 (2/2) "
                 "| 3.0 (2/2) | 0.0 (2/2) | 2.0 (2/2) | 0.0 (2/2) |")
    beta = ("| beta | + Multi-RAG | CoT | 10.0 (2/2) | 20.0 (2/2) | 30.0 (2/2) | 40.0 (2/2) | 50.0 (2/2) | 60.0 (2/2) | n/a (0/0) "
            "| 2.0 (2/2) | 1.0 (2/2) | 1.0 (2/2) | 0.0 (2/2) |")
    beta_reference = "| beta | + Multi-RAG | CoT | – | – | – | – | – | – | – | – | – | – | – |"  # no reference rows for beta
    test_at, train_at = text.index("## Main results (cf. Tables 4-5), test split"), text.index("## Main results (cf. Tables 4-5), train split")
    assert test_at < text.index(strict) < text.index("reference scoring") < text.index(reference) < train_at
    assert train_at < text.index(beta) < text.index(beta_reference) and text.count(beta) == 1 and text.count(strict) == 1
    assert "| beta | Multi-RAG | CoT | 40.0 | n/a | 50.0 | 0.0 |" in text  # by modality, strict
    assert "Fluency: MiniLM features" in text
    assert "| minilm:x | alpha | all | 2 | 0.2500 (k=10) | 0.7500 (k=100) |" in text  # Table 3
    assert "| j | recall | answer | 2 | 0.900 |" in text and "| j | relevance | item | 1 | n/a |" in text  # Table 6
    con = duckdb.connect(str(out["evaluation.duckdb"]), read_only=True)
    for name in tables["alpha"]:
        assert con.execute(f"select count(*) from {name}").fetchone()[0] == len(tables["alpha"][name]) + len(tables["beta"][name])
    coverage = con.execute("select * exclude (failed_by_reason) from coverage order by model").fetchall()
    # model, instances, by split, answers asked, responses, failed generations, rejected, truncated, failed judge calls, missing F1,
    # retriever, vision
    assert coverage == [("alpha", 2, "test 2", 4, 3, 1, 1, 1, 1, 1, "minilm:x", False),
                        ("beta", 1, "train 1", None, 1, 0, None, 0, 0, 0, "minilm:x", True)]
    assert json.loads(con.execute("select failed_by_reason from coverage where model = 'alpha'").fetchone()[0]) == {"empty": 1}
    for name in ("groundedness.png", "utilisation.png"):
        assert out[name].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_nothing_evaluated_says_why(tmp_path):
    """A release whose test split is empty (no annotations imported) and no other split asked: the
    report says so instead of printing empty tables."""
    args = []
    for name in ("queries", "retrieved", "responses", "sentences", "judgements", "scores", "summary"):
        path = tmp_path / f"{name}.parquet"
        write_table(path, [], f"mavis_eval_{name}")
        args.append(f"--input={name}={path}")
    out = tmp_path / "out"
    run_stage("report_mavis", *args, f"--output=report={out / 'report.md'}", f"--output=groundedness_plot={out / 'g.png'}",
              f"--output=utilisation_plot={out / 'u.png'}", f"--output=db={out / 'e.duckdb'}")
    text = (out / "report.md").read_text()
    assert "No instance was evaluated" in text and "mavis.annotations" in text and "Main results" not in text
