import json
from pathlib import Path

import duckdb
import pytest

from eval_fixtures import response_row
from stages.core.release import PORTABLE_STORAGE, check_row_counts
from stages.core.stage import StageError
from stages.core.tables import write_table
from stages.eval_mcitebench.report_mcitebench import STAGE
from stages.eval_mcitebench.score_mcitebench import summarize

METRICS = ("citation_recall", "citation_precision", "citation_f1", "source_precision", "source_recall", "source_f1", "source_em", "accuracy")


def score(model, qid, qtype, source, modality, f1, sem, acc):
    values = {m: 50.0 for m in METRICS}
    values.update(citation_f1=f1, source_em=sem, accuracy=acc)
    return {"id": f"{model}:{qid}", "model": model, "question_id": qid, "question_type": qtype, "source": source, "modality": modality,
            "n_cited_sentences": 1, **values, "missing_judgements": 1 if f1 is None else 0, "accuracy_missing": acc is None,
            "predicted": ["[1]"], "gold": ["[1]"]}


def probe(model, qid, modality, correct):
    return {"id": f"p:{model}:{qid}", "model": model, "question_id": qid, "modality": modality, "options": ["[1]", "Figure 1"],
            "gold_letter": "A", "choice": "A" if correct else "B", "correct": correct, "vision": False, "raw": "A"}


@pytest.fixture()
def inputs(tmp_path):
    scores = {
        "small": [score("small", "q1", "explanation", "single", "figure", 40.0, 100.0, 50.0),
                  score("small", "q2", "explanation", "multi", "mixed", None, 0.0, 100.0),
                  score("small", "q3", "locating", "single", "text", 80.0, 0.0, None)],
        "large": [score("large", "q1", "explanation", "single", "figure", 90.0, 100.0, 100.0)],
    }
    probes = {"small": [probe("small", "q1", "figure", True), probe("small", "q4", "text", False)], "large": [probe("large", "q1", "figure", True)]}
    args = []
    for model in scores:
        rows = [response_row(s["question_id"], "r", ["[1]"], model=model) for s in scores[model]]
        rows[0]["finish_reason"] = "length" if model == "small" else "stop"  # one answer cut at max_tokens
        paths = {name: tmp_path / f"{name}_{model}.parquet" for name in ("responses", "scores", "summary", "probe")}
        write_table(paths["responses"], rows, "eval_responses")
        Path(f"{paths['responses']}.report.json").write_text(json.dumps(
            {"params": {"model": model}, "rows_in": len(rows) + 1, "rows_out": {"responses": len(rows)}, "rejected": 1,
             "rejected_by_reason": {"invalid_answer": 1}}))
        write_table(paths["scores"], scores[model], "eval_scores")
        reference = [{**row, "citation_f1": 10.0} for row in scores[model]]  # stands in for the reference mode's numbers
        write_table(paths["summary"], summarize(model, scores[model]) + summarize(model, reference, "reference"), "eval_summary")
        write_table(paths["probe"], probes[model], "eval_probe")
        args += [a for name, path in paths.items() for a in ("--input", f"{name}={path}")]
    return args


def test_report_tables_plot_and_db(tmp_path, inputs):
    out = {"report": tmp_path / "report.md", "plot": tmp_path / "sem.png", "rq2_plot": tmp_path / "rq2.png", "db": tmp_path / "evaluation.duckdb"}
    STAGE.main(inputs + [a for name, path in out.items() for a in ("--output", f"{name}={path}")])
    text = out["report"].read_text()
    assert out["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    con = duckdb.connect(str(out["db"]), read_only=True)
    # written in the storage format the duckdb CLI (an older reader) opens
    storage = con.execute("select tags['storage_version'] from duckdb_databases() where database_name = 'evaluation'").fetchone()[0]
    assert storage.startswith(PORTABLE_STORAGE), storage
    assert con.execute("select count(*) from scores").fetchone()[0] == 4
    assert con.execute("select count(*) from probe").fetchone()[0] == 3
    coverage = con.execute("select model, questions_read, responses, failed_generations, missing_citation_f1, missing_accuracy "
                           "from coverage order by model").fetchall()
    assert coverage == [("large", 2, 1, 1, 0, 0), ("small", 4, 3, 1, 1, 1)]
    assert con.execute("select model, truncated from coverage order by model").fetchall() == [("large", 0), ("small", 1)]
    assert "| Truncated |" in text.replace("Failed generations | Truncated |", "| Truncated |")
    # Table 2 cells equal a query over the scores; a missing C-F1 is excluded and counted
    f1 = con.execute("select avg(citation_f1) from scores where model = 'small'").fetchone()[0]
    # beside each number its coverage, responses scored / responses: one C-F1 judge call failed
    assert f1 == 60.0 and "| small | No Cap., text-only | 50.00 (3/3) | 50.00 (3/3) | 60.00 (2/3) |" in text.split("## All metrics, overall")[1]
    table2 = text.split("## Main results (cf. Table 2)")[1].split("##")[0]
    assert "Explanation Single C-F1" in table2 and "Locating Single Acc" in table2 and "Locating Multi" not in table2
    assert "| small | No Cap., text-only | 40.00 (1/1) | 50.00 (1/1) | 100.00 (1/1) | 50.00 (1/1) | n/a (0/1) |" in table2
    table4 = text.split("(cf. Table 4)")[1].split("##")[0]
    assert "| large | No Cap., text-only | 90.00 (1/1) | – | – | – |" in table4
    table3 = text.split("(cf. Table 3)")[1].split("##")[0]
    assert "| small | 0.50 (n=2) | 1.00 (n=1) | – | 0.00 (n=1) |" in table3
    assert "![S-EM by modality](sem.png)" in text
    assert "judgements by how items were shown" not in text  # no citation_judgements input given


def test_report_counts_judge_modes(tmp_path, inputs):
    judgements = [{"id": f"j{i}", "response_id": "r", "sentence_id": "s", "model": "small", "judge": "j", "kind": "relevance",
                   "item": "Figure 1", "shown": ["Figure 1"], "score": 1, "status": "judged", "mode": mode}
                  for i, mode in enumerate(["caption", "caption", "label", "text"])]
    write_table(tmp_path / "cj.parquet", judgements, "eval_citation_judgements")
    out = {"report": tmp_path / "r.md", "plot": tmp_path / "p.png", "rq2_plot": tmp_path / "q.png", "db": tmp_path / "e.duckdb"}
    STAGE.main(inputs + ["--input", f"citation_judgements={tmp_path / 'cj.parquet'}"]
               + [a for name, path in out.items() for a in ("--output", f"{name}={path}")])
    section = out["report"].read_text().split("how items were shown")[1]
    assert "| small | 0 | 2 | 1 | 1 |" in section and "| large | 0 | 0 | 0 | 0 |" in section


def test_stored_row_counts_are_checked_against_the_inputs(tmp_path):
    path = tmp_path / "e.duckdb"
    con = duckdb.connect(str(path))
    con.execute("create table scores as select * from range(2)")
    con.close()
    check_row_counts(str(path), {"scores": 2})
    with pytest.raises(StageError, match="scores"):
        check_row_counts(str(path), {"scores": 3})


def test_report_prints_both_scoring_modes_labelled(tmp_path, inputs):
    for headline, other in (("strict", "reference"), ("reference", "strict")):
        out = {"report": tmp_path / f"{headline}.md", "plot": tmp_path / f"{headline}.png", "rq2_plot": tmp_path / f"{headline}-rq2.png", "db": tmp_path / f"{headline}.duckdb"}
        STAGE.main(inputs + [a for name, path in out.items() for a in ("--output", f"{name}={path}")] + ["--param", f"scoring={headline}"])
        text = out["report"].read_text()
        first = text.index(f"## Main results (cf. Table 2), {headline} scoring\n")
        second = text.index(f"## Main results (cf. Table 2), {other} scoring (for comparison)")
        assert first < second
        assert "left out of the citation and source means" in text and "a failed judge call is missing" in text
        reference_table = text.split("reference scoring")[1].split("##")[0]
        assert "| large | No Cap., text-only | 10.00 (1/1) |" in reference_table
        # the reference mode has a number (10.00) where the only judge call failed: nothing judged prints n/a, not the score
        assert "| small | No Cap., text-only | 10.00 (1/1) | 50.00 (1/1) | 100.00 (1/1) | 50.00 (1/1) | n/a (0/1) |" in reference_table
        overall = text.split(f"## All metrics, overall ({headline} scoring)")[1].split("##")[0]
        assert ("| small | No Cap., text-only | 50.00 (3/3) | 50.00 (3/3) | 10.00 (2/3) |" in overall) == (headline == "reference")
        rules = text.split("## Which rule each scoring mode follows")[1].split("##")[0]
        assert "| C-P | per cited sentence the mean relevance over its distinct items" in rules and "repeats kept" in rules


def test_rq2_judge_validation_and_judge_swap(tmp_path):
    """RQ2 over two-gold explanation questions (others ignored), Table 12 from validate_judge's
    agreement rows, Table 13 from a second judge's summaries (rankings: C-F1 agree, Acc flips)."""
    args = []
    rows_by_model = {
        "a": [("q1", ["[1]", "Figure 1"], 100.0, 80.0, 60.0), ("q2", ["[1]", "[2]"], 0.0, 80.0, 60.0), ("q3", ["[1]"], 100.0, 80.0, 60.0)],
        "b": [("q1", ["[1]", "Figure 1"], 0.0, 40.0, 50.0), ("q2", ["[1]", "[2]"], 100.0, 40.0, 50.0), ("q3", ["[1]"], 0.0, 40.0, 50.0)],
    }
    swap_values = {"a": (70.0, 40.0), "b": (30.0, 90.0)}  # C-F1, Acc under the swap judge
    for model, rows in rows_by_model.items():
        responses = [response_row(q, "r", gold, model=model) for q, gold, *_ in rows]
        scores = [{**score(model, q, "explanation", "multi" if len(gold) > 1 else "single", "text", f1, sem, acc), "id": r["id"]}
                  for (q, gold, sem, f1, acc), r in zip(rows, responses)]
        swapped = [{**s, "citation_f1": swap_values[model][0], "accuracy": swap_values[model][1]} for s in scores]
        paths = {name: tmp_path / f"{name}_{model}.parquet" for name in ("responses", "scores", "summary", "probe", "swap_summary")}
        write_table(paths["responses"], responses, "eval_responses")
        write_table(paths["scores"], scores, "eval_scores")
        write_table(paths["summary"], summarize(model, scores), "eval_summary")
        write_table(paths["swap_summary"], summarize(model, swapped), "eval_summary")
        write_table(paths["probe"], [probe(model, "q1", "figure", True)], "eval_probe")
        args += [a for name, path in paths.items() for a in ("--input", f"{name}={path}")]
    agreement = [{"judge": "j", "scope": scope, "kind": "all", "n": 4, "precision": 0.5, "recall": 1.0, "f1": 2 / 3, "exact": 0.25}
                 for scope in ("subjective", "objective", "all")]
    write_table(tmp_path / "agreement.parquet", agreement, "eval_judge_agreement")
    out = {"report": tmp_path / "r.md", "plot": tmp_path / "p.png", "rq2_plot": tmp_path / "rq2.png", "db": tmp_path / "e.duckdb"}
    outputs = [a for name, path in out.items() for a in ("--output", f"{name}={path}")]
    for judges in ("[j]", "[j, k, l]"):  # the table has a column per judge of the two
        with pytest.raises(SystemExit):
            STAGE.main(args + ["--param", f"judges={judges}"] + outputs)
        assert not out["report"].exists()
    STAGE.main(args + ["--input", f"agreement={tmp_path / 'agreement.parquet'}", "--param", "judges=[j, k]"] + outputs)
    text = out["report"].read_text()
    assert out["rq2_plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rq2 = text.split("## RQ2: S-EM by modality combination (cf. Figure 5")[1].split("##")[0]
    assert "| a | text+figure | 100.00 | 1 | 0 |" in rq2 and "| a | text+text | 0.00 | 1 | 0 |" in rq2
    assert "| b | text+figure | 0.00 | 1 | 0 |" in rq2 and "| b | text+text | 100.00 | 1 | 0 |" in rq2
    table12 = text.split("(cf. Table 12)")[1].split("##")[0]
    assert "| j | subjective | all | 4 | 0.67 | 1.00 | 0.50 | 0.25 |" in table12
    table13 = text.split("## Judge swap (cf. Table 13")[1].split("##")[0]
    assert "| Model | C-F1 (j) | C-F1 (k) | Acc (j) | Acc (k) |" in table13
    assert "| a | 80.00 | 70.00 | 60.00 | 40.00 |" in table13 and "| b | 40.00 | 30.00 | 50.00 | 90.00 |" in table13
    assert "Model ranking agrees under both judges: C-F1 yes, Acc no." in table13
    con = duckdb.connect(str(out["db"]), read_only=True)
    assert con.execute("select count(*) from agreement").fetchone()[0] == 3
