import json

import pyarrow.parquet as pq
import pytest

from eval_fixtures import response_row
from stages.core.ids import content_id
from stages.core.tables import write_table
from stages.eval_mcitebench.score_mcitebench import STAGE, citation_scores, score_response, source_scores, summarize
from stages.eval_mcitebench.split_citations import parse_response


def judgement(sentence_id, kind, score, item=None, status="judged", response_id="r"):
    return {"id": content_id("judge", sentence_id, kind, item), "response_id": response_id, "sentence_id": sentence_id,
            "model": "m", "judge": "j", "kind": kind, "item": item, "shown": [] if item is None else [item],
            "score": score, "status": status, "mode": "text"}


def sent(sid, citations):
    return {"id": sid, "citations": citations}


# --- citation recall / precision / F1 (Figure 3) ------------------------------------------------

def test_citation_scores_known_values():
    sentences = [sent("s1", ["[1]"]), sent("s2", ["[1]", "Figure 2"]), sent("s3", [])]
    judgements = [
        judgement("s1", "support", 2), judgement("s1", "relevance", 1, "[1]"),
        judgement("s2", "support", 1), judgement("s2", "relevance", 1, "[1]"), judgement("s2", "relevance", 0, "Figure 2"),
    ]
    got = citation_scores(sentences, judgements)
    # recall: (1 + 0.5) / 2 over cited sentences only; precision: (1 + 0.5) / 2
    assert got["recall"] == pytest.approx(0.75)
    assert got["precision"] == pytest.approx(0.75)
    assert got["f1"] == pytest.approx(0.75)
    assert got["missing"] == 0


def test_citation_scores_partial_support_levels():
    sentences = [sent("a", ["[1]"]), sent("b", ["[2]"]), sent("c", ["[3]"])]
    judgements = [judgement(s, "support", v) for s, v in (("a", 0), ("b", 1), ("c", 2))]
    judgements += [judgement(s, "relevance", 1, i) for s, i in (("a", "[1]"), ("b", "[2]"), ("c", "[3]"))]
    got = citation_scores(sentences, judgements)
    assert got["recall"] == pytest.approx(0.5)
    assert got["precision"] == 1.0
    assert got["f1"] == pytest.approx(2 * 0.5 / 1.5)


def test_empty_citation_set_scores_zero_not_dropped():
    assert citation_scores([sent("s1", []), sent("s2", [])], []) == {"recall": 0.0, "precision": 0.0, "f1": 0.0, "missing": 0}
    assert citation_scores([], []) == {"recall": 0.0, "precision": 0.0, "f1": 0.0, "missing": 0}


def test_failed_support_call_is_missing_not_zero():
    # a failed call has no judgement row (judge_citations rejects it with the raw answer)
    sentences = [sent("s1", ["[1]"]), sent("s2", ["[2]"])]
    judgements = [judgement("s1", "support", 2), judgement("s1", "relevance", 1, "[1]"), judgement("s2", "relevance", 1, "[2]")]
    got = citation_scores(sentences, judgements)
    assert got["recall"] is None and got["f1"] is None
    assert got["precision"] == 1.0
    assert got["missing"] == 1


def test_failed_relevance_call_is_missing():
    got = citation_scores([sent("s1", ["[1]", "[2]"])], [judgement("s1", "support", 2), judgement("s1", "relevance", 1, "[1]")])
    assert got["precision"] is None and got["recall"] == 1.0 and got["missing"] == 1


def test_not_in_input_citation_scores_zero_precision():
    # judge_citations scores an item that is not in the input 0 without a call (status not_in_input)
    sentences = [sent("s1", ["[1]", "[9]"])]
    judgements = [judgement("s1", "support", 2), judgement("s1", "relevance", 1, "[1]"),
                  judgement("s1", "relevance", 0, "[9]", status="not_in_input")]
    assert citation_scores(sentences, judgements)["precision"] == 0.5


# --- source precision / recall / F1 / EM (Figure 4, Eq. 1-3) ------------------------------------

def test_source_scores_exact_match():
    assert source_scores(["Figure 1"], ["Figure 1"]) == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "em": 1.0}


def test_source_scores_multi_source_partial_credit():
    got = source_scores(["Figure 1"], ["Figure 1", "[2]"])
    assert got["precision"] == 1.0 and got["recall"] == 0.5 and got["em"] == 0.0
    assert got["f1"] == pytest.approx(2 / 3)


def test_source_scores_duplicates_and_unknown_items():
    got = source_scores(["[1]", "[1]", "[9]"], ["[1]"])  # duplicates count once, [9] is not in the input: wrong
    assert got["precision"] == 0.5 and got["recall"] == 1.0 and got["em"] == 0.0


def test_source_scores_empty_prediction():
    assert source_scores([], ["Table 2"]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "em": 0.0}


# --- whole responses through the real parser ------------------------------------------------------

def scored(text, gold, judge_scores, rating=2):
    row = response_row("q", text, gold)
    parsed, sentences = parse_response(row)
    judgements = []
    for s in sentences:
        if not s["citations"]:
            continue
        judgements.append(judgement(s["id"], "support", judge_scores.get(s["sentence_index"], 2)))
        judgements += [judgement(s["id"], "relevance", 1, c) for c in s["citations"]]
    answer = None if rating is None else {"rating": rating}
    return score_response(row, parsed, sentences, judgements, answer)


@pytest.mark.parametrize("text", ["It rises (Fig. 1).", "It rises, see Figure 1a.", "Figures 1 and 1 agree."])
def test_figure_forms_reach_the_source_metrics(text):
    got = scored(text, ["Figure 1"], {})
    assert got["source_em"] == 100.0 and got["source_f1"] == 100.0 and got["citation_f1"] == 100.0


def test_response_scores_scale_and_accuracy():
    got = scored("It rises [1][2]. It is shown in Tab. 2.", ["[1]", "Table 2"], {0: 1}, rating=1)
    assert got["source_precision"] == pytest.approx(100 * 2 / 3)
    assert got["source_recall"] == 100.0
    assert got["citation_recall"] == 75.0
    assert got["accuracy"] == 50.0 and not got["accuracy_missing"]
    assert got["predicted"] == ["[1]", "[2]", "Table 2"]


def test_failed_answer_judge_is_missing():
    got = scored("It rises [1].", ["[1]"], {}, rating=None)
    assert got["accuracy"] is None and got["accuracy_missing"]
    assert got["source_em"] == 100.0  # source metrics never depend on a judge


def test_summary_excludes_missing_and_counts_it():
    rows = [
        {"model": "m", "question_type": "explanation", "source": "single", "modality": "text",
         "citation_f1": 80.0, "accuracy": 100.0, **{k: 50.0 for k in ("citation_recall", "citation_precision", "source_precision", "source_recall", "source_f1", "source_em")}},
        {"model": "m", "question_type": "explanation", "source": "multi", "modality": "mixed",
         "citation_f1": None, "accuracy": 0.0, **{k: 0.0 for k in ("citation_recall", "citation_precision", "source_precision", "source_recall", "source_f1", "source_em")}},
    ]
    summary = {(r["grouping"], r["grp"], r["metric"]): r for r in summarize("m", rows)}
    overall_f1 = summary[("overall", "all", "citation_f1")]
    assert overall_f1["value"] == 80.0 and overall_f1["n"] == 1 and overall_f1["missing"] == 1
    assert summary[("overall", "all", "accuracy")]["value"] == 50.0
    assert summary[("type_source", "explanation/multi", "citation_f1")]["value"] is None
    assert summary[("modality", "mixed", "source_em")]["value"] == 0.0


def test_stage_cli_counts_and_missing(tmp_path):
    rows = [response_row("q1", "It rises [1].", ["[1]"]), response_row("q2", "Nothing cited.", ["[2]"]),
            response_row("q3", "It is Table 2.", ["Table 2"], question_type="locating", modality="table")]
    parsed, sentences, judgements, answers = [], [], [], []
    for i, row in enumerate(rows):
        p, s = parse_response(row)
        parsed.append(p)
        sentences += s
        for x in s:
            if x["citations"]:
                if i != 2:  # q3's support call failed: no row
                    judgements.append(judgement(x["id"], "support", 2, response_id=row["id"]))
                judgements += [judgement(x["id"], "relevance", 1, c, response_id=row["id"]) for c in x["citations"]]
        if i != 1:  # q2's answer judge call failed: no row
            answers.append({"id": row["id"], "model": "m", "judge": "j", "question_type": row["question_type"],
                            "rating": 2, "status": "judged"})
    for name, data, table in (("responses", rows, "eval_responses"), ("citations", parsed, "eval_citations"),
                              ("sentences", sentences, "eval_sentences"), ("citation_judgements", judgements, "eval_citation_judgements"),
                              ("answer_judgements", answers, "eval_answer_judgements")):
        write_table(tmp_path / f"{name}.parquet", data, table)
    STAGE.main([*[a for n in ("responses", "citations", "sentences", "citation_judgements", "answer_judgements")
                  for a in ("--input", f"{n}={tmp_path / (n + '.parquet')}")],
                "--output", f"scores={tmp_path / 'scores.parquet'}", "--output", f"summary={tmp_path / 'summary.parquet'}"])
    scores = pq.read_table(tmp_path / "scores.parquet").to_pylist()
    assert [s["citation_f1"] for s in scores] == [100.0, 0.0, None]
    assert [s["accuracy"] for s in scores] == [100.0, None, 100.0]
    report = json.loads((tmp_path / "scores.parquet.report.json").read_text())
    assert report["rows_in"] == 3 and report["rows_out"]["scores"] == 3
    assert report["stats"]["responses_missing_citation_scores"] == 1
    assert report["stats"]["responses_missing_accuracy"] == 1
    assert report["stats"]["missing_citation_judgements"] == 1
    summary = pq.read_table(tmp_path / "summary.parquet").to_pylist()
    f1 = next(r for r in summary if r["grouping"] == "overall" and r["metric"] == "citation_f1")
    assert f1["value"] == 50.0 and f1["n"] == 2 and f1["missing"] == 1


def test_a_sentence_whose_citations_disagree_with_how_they_were_written_rejects_its_response(tmp_path):
    """split_citations writes `citations` as the distinct labels of `citations_as_written`; a row
    that breaks this (crafted: labels listed, none as written) would divide by nothing in the
    reference mean. Its response is rejected naming the sentence; the others are scored."""
    rows = [response_row("q1", "It rises [1].", ["[1]"]), response_row("q2", "It falls [2].", ["[2]"])]
    parsed, sentences = [], []
    for row in rows:
        p, s = parse_response(row)
        parsed.append(p)
        sentences += s
    broken = next(s for s in sentences if s["response_id"] == rows[1]["id"])
    broken["citations_as_written"] = []
    for name, data, table in (("responses", rows, "eval_responses"), ("citations", parsed, "eval_citations"),
                              ("sentences", sentences, "eval_sentences"), ("citation_judgements", [], "eval_citation_judgements"),
                              ("answer_judgements", [], "eval_answer_judgements")):
        write_table(tmp_path / f"{name}.parquet", data, table)
    STAGE.main([*[a for n in ("responses", "citations", "sentences", "citation_judgements", "answer_judgements")
                  for a in ("--input", f"{n}={tmp_path / (n + '.parquet')}")],
                "--output", f"scores={tmp_path / 'scores.parquet'}", "--output", f"summary={tmp_path / 'summary.parquet'}",
                "--params", json.dumps({"scoring": "reference"})])
    assert [s["id"] for s in pq.read_table(tmp_path / "scores.parquet").to_pylist()] == [rows[0]["id"]]
    [reject] = pq.read_table(tmp_path / "scores.parquet.rejects.parquet").to_pylist()
    assert (reject["id"], reject["reason"]) == (rows[1]["id"], "inconsistent_sentence")
    assert f"sentence {broken['id']}: citations ['[2]'] are not the distinct labels of citations_as_written []" in reject["detail"]
