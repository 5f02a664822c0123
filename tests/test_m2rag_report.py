"""m2rag_report through its CLI on the scripted single-stage responses and their judgements
(tests/m2rag_scripted.py): the strict and reference scorings' numbers follow by hand, a failed
judgement is missing (never 0), and the DuckDB file holds the summary."""
from __future__ import annotations

import duckdb
import pytest

from conftest import run_stage


def test_report_numbers_by_hand(tmp_path, m2rag_responses, m2rag_judgements):
    responses, judgements = m2rag_responses[0], m2rag_judgements[0]
    report, db = tmp_path / "report.md", tmp_path / "evaluation.duckdb"
    run_stage("m2rag_report", "--input", f"responses={responses}", "--input", f"judgements={judgements}",
              "--output", f"report={report}", "--output", f"db={db}")
    con = duckdb.connect(str(db), read_only=True)
    got = dict(con.execute("select metric, value from summary where scoring = 'strict'").fetchall())
    assert got["fluency"] == 0.8 and got["relevance"] is None  # failed: missing, never 0
    assert got["context_precision"] == pytest.approx(5 / 6) and got["faithfulness"] == 0.5
    assert (got["image_coherence"], got["image_helpfulness"], got["image_reference"]) == (0.6, 0.4, 0.0)
    assert got["image_recall"] == 0.5  # used 1, unused 3 wanted
    assert got["image_recall_count"] == 0.5  # inputs scored >= 8: 1 (9.0, used) and 3 (8.0, not)
    seven = [0.8, 5 / 6, 0.5, 0.6, 0.4, 0.0, 0.5]
    assert got["overall"] == pytest.approx(sum(seven) / 7) and got["overall_over"] == 7
    ref = dict(con.execute("select metric, value from summary where scoring = 'reference'").fetchall())
    assert ref["relevance"] == pytest.approx(1.1)  # the public parser: last integer of the raw text, 11
    text = report.read_text()
    assert "strict scoring" in text and "reference scoring" in text
    # coverage beside each number, judged / total: the query (text metrics) or its output images (image metrics)
    strict_row, reference_row = (next(line for line in text.split(f"(cf. Table 2), {mode} scoring")[1].splitlines() if line.startswith("| scripted"))
                                 for mode in ("strict", "reference"))
    out_images = sum(n for (n,) in con.execute("select output_images from scores").fetchall())
    assert f"| 0.80 (1/1) | n/a (0/1) | 0.83 (1/1) | 0.50 (1/1) | 0.60 ({out_images}/{out_images}) |" in strict_row, strict_row
    # the reference parser reads 11 out of the failed relevance answer (1.1): nothing was judged, so n/a, not 1.10
    assert "| n/a (0/1) |" in reference_row and "1.10" not in reference_row, reference_row
