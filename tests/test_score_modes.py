"""score_mcitebench's two aggregations on one hand-computed set of four responses: our strict mode
and `scoring: reference` (MCiteBench's public scorer's aggregation, stages/core/reference_scoring.py).

R1 cites [1] (support 2, relevance 1) then [1], [2] (support 1, relevance 1 and 0); gold [1]; rated 2.
   C-R = (1 + 0.5)/2, C-P = (1 + 0.5)/2, C-F1 = 75; S-P 50, S-R 100, S-F1 66.67, S-EM 0; Acc 100.
R2 cites nothing; gold [2]; rated 1.
   strict: citation and source metrics 0, Acc 50; reference: left out of the citation and source means, Acc 50.
R3 cites [1], its support call failed, relevance 1; gold [1]; the answer judge call failed.
   strict: C-R missing so C-F1 missing, S-F1 = S-EM = 100, Acc missing;
   reference: C-R 0 so C-F1 0, S-F1 = S-EM = 100, Acc -50 (rating -1).
R4 is empty; gold [1]; judge_answers rates it 0 without a call (status empty_response).
   strict: everything 0; reference: left out of citation and source means, Acc -50.

strict:    C-F1 (75+0+0)/3 = 25;   S-F1 (66.67+0+100+0)/4 = 41.67; S-EM 100/4 = 25; Acc (100+50+0)/3 = 50
reference: C-F1 (75+0)/2 = 37.5;   S-F1 (66.67+100)/2 = 83.33;     S-EM 100/2 = 50; Acc (100+50-50-50)/4 = 12.5
"""
import json

import pyarrow.parquet as pq
import pytest

from eval_fixtures import response_row
from stages.core.tables import write_table
from stages.eval_mcitebench.score_mcitebench import STAGE
from stages.eval_mcitebench.split_citations import parse_response

NAMES = ("responses", "citations", "sentences", "citation_judgements", "answer_judgements")


def judgement(sentence, kind, score, item=None):
    return {"id": f"{sentence['id']}:{kind}:{item}", "response_id": sentence["response_id"], "sentence_id": sentence["id"],
            "model": "m", "judge": "j", "kind": kind, "item": item, "shown": [], "mode": "text", "score": score, "status": "judged"}


def build(tmp_path):
    rows = [response_row("q1", "It rises [1]. It falls [1][2].", ["[1]"]), response_row("q2", "Nothing is cited.", ["[2]"]),
            response_row("q3", "It rises [1].", ["[1]"]), response_row("q4", "", ["[1]"])]
    parsed, sentences = zip(*(parse_response(r) for r in rows))
    s1, s2 = sentences[0]
    (s3,) = sentences[2]
    judgements = [judgement(s1, "support", 2), judgement(s1, "relevance", 1, "[1]"),
                  judgement(s2, "support", 1), judgement(s2, "relevance", 1, "[1]"), judgement(s2, "relevance", 0, "[2]"),
                  judgement(s3, "relevance", 1, "[1]")]  # s3's support call failed: no row
    answer = lambda row, rating, status="judged": {"id": row["id"], "model": "m", "judge": "j", "question_type": "explanation",  # noqa: E731
                                                  "rating": rating, "status": status}
    answers = [answer(rows[0], 2), answer(rows[1], 1), answer(rows[3], 0, "empty_response")]  # q3's call failed: no row
    data = dict(zip(NAMES, (rows, list(parsed), [s for ss in sentences for s in ss], judgements, answers)))
    tables = dict(zip(NAMES, ("eval_responses", "eval_citations", "eval_sentences", "eval_citation_judgements", "eval_answer_judgements")))
    for name in NAMES:
        write_table(tmp_path / f"{name}.parquet", data[name], tables[name])


def run(tmp_path, scoring):
    build(tmp_path)
    STAGE.main([*[a for n in NAMES for a in ("--input", f"{n}={tmp_path / (n + '.parquet')}")],
                "--output", f"scores={tmp_path / 'scores.parquet'}", "--output", f"summary={tmp_path / 'summary.parquet'}",
                "--params", json.dumps({"scoring": scoring})])
    summary = {(r["scoring"], r["grouping"], r["grp"], r["metric"]): r for r in pq.read_table(tmp_path / "summary.parquet").to_pylist()}
    return pq.read_table(tmp_path / "scores.parquet").to_pylist(), summary


EXPECTED = {
    "strict": {"citation_f1": (25.0, 3, 1), "source_f1": (125 / 3, 4, 0), "source_em": (25.0, 4, 0), "accuracy": (50.0, 3, 1)},
    "reference": {"citation_f1": (37.5, 2, 2), "source_f1": (250 / 3, 2, 2), "source_em": (50.0, 2, 2), "accuracy": (12.5, 4, 0)},
}


@pytest.mark.parametrize("scoring", ["strict", "reference"])
def test_both_modes_hand_computed(tmp_path, scoring):
    scores, summary = run(tmp_path, scoring)
    for mode, metrics in EXPECTED.items():  # the summary always holds both modes
        for metric, (value, n, left_out) in metrics.items():
            row = summary[(mode, "overall", "all", metric)]
            assert row["value"] == pytest.approx(value, abs=1e-3) and (row["n"], row["missing"]) == (n, left_out), (mode, metric)
    per_response = {"strict": ([75.0, 0.0, None, 0.0], [100.0, 50.0, None, 0.0]),
                    "reference": ([75.0, None, 0.0, None], [100.0, 50.0, -50.0, -50.0])}[scoring]
    assert [s["citation_f1"] for s in scores] == per_response[0]
    assert [s["accuracy"] for s in scores] == per_response[1]


def test_unknown_mode_fails(tmp_path):
    with pytest.raises(SystemExit):
        run(tmp_path, "paper")


def test_a_repeated_citation_counts_per_occurrence_in_reference_only(tmp_path):
    """MCiteBench's extraction lists "[1][1][3]" as ["1", "1", "3"] and judge_entailment.py scores
    relevance once per listed citation; calculate_citation_source_score.py then averages them.
    One response "It rises [1][1][3]." (gold [1]); support 2, relevance [1] = 1, [3] = 0:
      reference: C-R = 2/2 = 1, C-P = (1 + 1 + 0) / 3 = 2/3, C-F1 = 2 * 1 * 2/3 / (1 + 2/3) = 0.8
      strict:    C-P over the distinct items (1 + 0) / 2 = 1/2, C-F1 = 2 * 1 * 1/2 / (1 + 1/2) = 2/3
      both:      S-P = |{[1]} & {[1], [3]}| / 2 = 1/2, S-R = 1, S-F1 = 2/3 (sets: the repeat never matters)."""
    row = response_row("q1", "It rises [1][1][3].", ["[1]"])
    parsed, (sentence,) = parse_response(row)
    assert (sentence["citations"], sentence["citations_as_written"]) == (["[1]", "[3]"], ["[1]", "[1]", "[3]"])
    judgements = [judgement(sentence, "support", 2), judgement(sentence, "relevance", 1, "[1]"), judgement(sentence, "relevance", 0, "[3]")]
    answers = [{"id": row["id"], "model": "m", "judge": "j", "question_type": "explanation", "rating": 2, "status": "judged"}]
    tables = dict(zip(NAMES, ("eval_responses", "eval_citations", "eval_sentences", "eval_citation_judgements", "eval_answer_judgements")))
    for name, data in zip(NAMES, ([row], [parsed], [sentence], judgements, answers)):
        write_table(tmp_path / f"{name}.parquet", data, tables[name])
    STAGE.main([*[a for n in NAMES for a in ("--input", f"{n}={tmp_path / (n + '.parquet')}")],
                "--output", f"scores={tmp_path / 'scores.parquet'}", "--output", f"summary={tmp_path / 'summary.parquet'}"])
    summary = {(r["scoring"], r["metric"]): r["value"] for r in pq.read_table(tmp_path / "summary.parquet").to_pylist()
               if r["grouping"] == "overall"}
    assert summary[("reference", "citation_precision")] == pytest.approx(100 * 2 / 3, abs=1e-3)
    assert summary[("reference", "citation_f1")] == pytest.approx(80.0, abs=1e-3)
    assert summary[("strict", "citation_precision")] == pytest.approx(50.0, abs=1e-3)
    assert summary[("strict", "citation_f1")] == pytest.approx(100 * 2 / 3, abs=1e-3)
    for mode in ("strict", "reference"):
        assert summary[(mode, "source_f1")] == pytest.approx(100 * 2 / 3, abs=1e-3)


# Four responses whose reference C-F1 the public scorer (calculate_citation_source_score.py: its
# compute_cit_recall / compute_cit_precision / compute_f1, then mean_rpf and `.2f`) gives as
# 61.29032258064516, 33.33333333333333, 45.45454545454545, 68.18181818181817 and prints as 52.07
# (exact mean 52.0650049); rounding each response to 4 decimals first printed 52.06.
PUBLIC_ROUNDING_CASE = [
    ([["[1]", "[4]"], ["[4]", "[5]", "[3]"], ["[4]"], ["[2]"]], [2, 1, 1, 0], [[1, 0], [1, 1, 0], [1], [1]]),
    ([["[2]", "[3]", "[1]"], ["[2]", "[5]", "[3]"], ["[2]"]], [1, 1, 2], [[0, 0, 0], [1, 1, 0], [0]]),
    ([["[4]", "[2]", "[1]"], ["[3]"], ["[1]", "[4]", "[5]"], ["[3]"]], [2, 0, 0, 2], [[1, 1, 0], [0], [0, 0, 0], [1]]),
    ([["[5]", "[3]"], ["[3]"], ["[1]", "[2]"], ["[5]"]], [2, 1, 0, 2], [[1, 0], [1], [0, 1], [1]]),
]
PUBLIC_C_F1 = [61.29032258064516, 33.33333333333333, 45.45454545454545, 68.18181818181817]


def test_reference_scores_follow_the_public_arithmetic_to_the_last_bit_and_are_not_rounded():
    from stages.eval_mcitebench.mcitebench_metrics import reference_scores
    from stages.eval_mcitebench.score_mcitebench import summarize

    rows = []
    for k, (cited, supports, relevances) in enumerate(PUBLIC_ROUNDING_CASE):
        sentences = [{"id": f"r{k}s{i}", "citations": list(dict.fromkeys(c)), "citations_as_written": c} for i, c in enumerate(cited)]
        judgements = [{"sentence_id": s["id"], "kind": "support", "item": None, "score": sup} for s, sup in zip(sentences, supports)]
        judgements += [{"sentence_id": s["id"], "kind": "relevance", "item": item, "score": score}
                       for s, scores in zip(sentences, relevances) for item, score in zip(s["citations_as_written"], scores)]
        scores = reference_scores(sentences, judgements, [c for s in cited for c in s], ["[1]"], {"rating": 2, "status": "judged"})
        rows.append({**scores, "model": "m", "question_type": "explanation", "source": "single", "modality": "text"})
    assert [r["citation_f1"] for r in rows] == PUBLIC_C_F1
    summary = {(r["grouping"], r["metric"]): r["value"] for r in summarize("m", rows, "reference")}
    assert f"{summary[('type_source', 'citation_f1')]:.2f}" == "52.07"


@pytest.mark.parametrize("field,value", [("question", "  "), ("answer", ""), ("answer", None), ("explanation", ""), ("explanation", 7)])
def test_reference_accuracy_is_the_sentinel_where_the_public_judge_skips_the_call(field, value):
    """eval_response_acc.py rates -1 without asking when a field it sends is empty after strip (a
    value that is not text fails its .strip(), also -1); strict still judges the answer."""
    from stages.eval_mcitebench.score_mcitebench import score_response

    row = response_row("q1", "It rises [1].", ["[1]"])
    row.update(question_type="locating", meta_json=json.dumps({"explanation": "Figure 1 shows it.", "answer": "A"}))
    parsed, sentences = parse_response(row)
    answer = {"rating": 2, "status": "judged"}
    assert score_response(row, parsed, sentences, [], answer, "reference")["accuracy"] == 100.0
    if field == "explanation":
        row["meta_json"] = json.dumps({"explanation": value, "answer": "A"})
    else:
        row[field] = value
    assert score_response(row, parsed, sentences, [], answer, "reference")["accuracy"] == -50.0
    assert score_response(row, parsed, sentences, [], answer, "strict")["accuracy"] == 100.0
