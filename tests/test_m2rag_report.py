"""m2rag_report through its CLI on the scripted single-stage responses and their judgements
(tests/m2rag_scripted.py): the strict and reference scorings' numbers follow by hand from M2RAG's
public evaluate.py and evaluator (scores clamped to 0-10 before /10, recall by the count of input
images scored >= 8), a failed judgement is missing in both (never 0, never a number read from an
HTTP error body), and the DuckDB file holds the summary and Figure 3's per-topic overall."""
from __future__ import annotations

import json

import duckdb
import pytest

from conftest import run_stage
from m2rag_scripted import judge


def _report(tmp_path, responses, judgements):
    report, db = tmp_path / "report.md", tmp_path / "evaluation.duckdb"
    run_stage("m2rag_report", "--input", f"responses={responses}", "--input", f"judgements={judgements}",
              "--output", f"report={report}", "--output", f"db={db}")
    return report.read_text(), duckdb.connect(str(db), read_only=True)


def test_report_numbers_by_hand(tmp_path, m2rag_responses, m2rag_judgements):
    text, con = _report(tmp_path, m2rag_responses[0], m2rag_judgements[0])
    got = dict(con.execute("select metric, value from summary where scoring = 'strict'").fetchall())
    assert got["fluency"] == 0.8 and got["relevance"] is None  # the off-scale 11 is refused: missing, never 0
    assert got["context_precision"] == pytest.approx(5 / 6) and got["faithfulness"] == 0.5
    assert (got["image_coherence"], got["image_helpfulness"], got["image_reference"]) == (0.6, 0.4, 0.0)
    assert got["image_recall"] == 0.5  # used 1, unused 3 wanted
    assert got["image_recall_count"] == 0.5  # inputs scored >= 8: 1 (9.0, used) and 3 (8.0, not)
    seven = [0.8, 5 / 6, 0.5, 0.6, 0.4, 0.0, 0.5]
    assert got["overall"] == pytest.approx(sum(seven) / 7) and got["overall_over"] == 7
    assert got["text_average"] == pytest.approx((0.8 + 5 / 6 + 0.5) / 3)  # the defined text metrics
    ref = dict(con.execute("select metric, value from summary where scoring = 'reference'").fetchall())
    # the public evaluator: normed = max(0, min(10, 11)) / 10 = 1.0 (the judge's JSON "score" field, not the
    # "8/10" in its explanation)
    assert ref["relevance"] == 1.0
    eight = [0.8, 1.0, 5 / 6, 0.5, 0.6, 0.4, 0.0, 0.5]
    assert ref["overall"] == pytest.approx(sum(eight) / 8)
    # evaluate.py's two extra lines: Text Avg. over the four text metrics, Multi-modal P. Avg. over the three image ones
    assert ref["text_average"] == pytest.approx((0.8 + 1.0 + 5 / 6 + 0.5) / 4)
    assert ref["image_precision_average"] == pytest.approx((0.6 + 0.4 + 0.0) / 3)
    # Figure 3: the one query's topic is the category it was sampled for; one system, so the average is its overall
    topics = con.execute("select topic, model, overall from topics where scoring = 'reference' order by model").fetchall()
    assert topics == [("Science & Mathematics", "average", pytest.approx(sum(eight) / 8)),
                      ("Science & Mathematics", "scripted", pytest.approx(sum(eight) / 8))]
    assert "strict scoring" in text and "reference scoring" in text
    assert "Overall score by topic (cf. Figure 3)" in text and "Img. P. avg." in text
    # coverage beside each number, judged / total: the query (text metrics) or its output images (image metrics)
    strict_row, reference_row = (next(line for line in text.split(f"(cf. Table 2), {mode} scoring")[1].splitlines() if line.startswith("| scripted"))
                                 for mode in ("strict", "reference"))
    out_images = sum(n for (n,) in con.execute("select output_images from scores").fetchall())
    assert f"| 0.80 (1/1) | n/a (0/1) | 0.83 (1/1) | 0.50 (1/1) | 0.60 ({out_images}/{out_images}) |" in strict_row, strict_row
    # the reference rule clamps the off-scale 11 to 1.0, which strict refused: nothing was judged, so n/a, not 1.00
    assert "| scripted | single_stage | 0.80 (1/1) | n/a (0/1) |" in reference_row and "1.00" not in reference_row, reference_row


def test_failed_call_never_scores_and_scores_are_clamped(tmp_path, m2rag_responses):
    """Relevance answered by an HTTP 400 whose body holds numbers ("130512 tokens": the last-integer
    parser once read a relevance of 13051.2 from it) and fluency answered with a score of 12."""
    body = json.dumps({"error": {"message": "This model's maximum context length is 128000 tokens. However, your messages "
                                            "resulted in 130512 tokens. Please reduce the length of the messages."}})

    def override(text):
        if "Rate how relevant" in text:
            return 400, body
        if "Rate the fluency" in text:
            return 200, json.dumps({"choices": [{"message": {"content": json.dumps({"explanation": "flawless", "score": 12})},
                                                 "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
        return None

    judgements, _ = judge(tmp_path, m2rag_responses[0], override=override, name="erroring")
    text, con = _report(tmp_path, m2rag_responses[0], judgements)
    raw, error = con.execute("select raw, error from judgements where metric = 'relevance'").fetchone()
    assert "130512 tokens" in raw and error.startswith("backend: HTTP 400")
    ref = dict(con.execute("select metric, value from summary where scoring = 'reference'").fetchall())
    assert ref["relevance"] is None  # no judge answer: no score, in this mode too
    assert ref["fluency"] == 1.0  # max(0, min(10, 12)) / 10
    assert ref["overall"] is None and ref["text_average"] is None  # numpy's NaN when a metric is undefined
    strict = dict(con.execute("select metric, value from summary where scoring = 'strict'").fetchall())
    assert strict["fluency"] is None and strict["relevance"] is None  # 12 is off the scale: refused
    assert all(v is None or 0 <= v <= 1 for k, v in ref.items() if k != "overall_over")


def test_reference_reads_the_reply_as_the_public_code_wherever_the_score_stands(tmp_path, m2rag_responses):
    """The judge's JSON with `score` first and numbers in the explanation after it: the reference
    mode reads the reply as the public evaluator does, its last run of digits (fluency "9/10" -> 10
    -> 1.0; relevance "3 out of 5" -> 5 -> 0.5), odd as that is; strict reads the checked `score`
    field: fluency 7 -> 0.7, relevance 11 refused by the schema (missing)."""
    def answer(content):
        return 200, json.dumps({"choices": [{"message": {"content": json.dumps(content)}, "finish_reason": "stop"}],
                                "usage": {"prompt_tokens": 1, "completion_tokens": 1}})

    def override(text):
        if "Rate the fluency" in text:
            return answer({"score": 7, "explanation": "a 9/10 would be generous"})
        if "Rate how relevant" in text:
            return answer({"score": 11, "explanation": "about 3 out of 5"})
        return None

    judgements, _ = judge(tmp_path, m2rag_responses[0], override=override, name="score_first")
    _, con = _report(tmp_path, m2rag_responses[0], judgements)
    ref = dict(con.execute("select metric, value from summary where scoring = 'reference'").fetchall())
    strict = dict(con.execute("select metric, value from summary where scoring = 'strict'").fetchall())
    assert ref["fluency"] == 1.0 and strict["fluency"] == pytest.approx(0.7)
    assert ref["relevance"] == 0.5 and strict["relevance"] is None
