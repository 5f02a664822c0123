import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from eval_fixtures import llm_params, response_row
from stages.core.tables import table_schema
from stages.eval_mcitebench.judge_answers import STAGE, request_for


def test_locating_request_carries_explanation():
    row = response_row("q", "It is B.", ["Figure 1"], question_type="locating")
    row["meta_json"] = json.dumps({"Gold": "B", "explanation": "Figure 1 shows the curve."})
    request = request_for(row)
    assert request.prompt == "mcitebench_judge_locating" and request.variables["explanation"] == "Figure 1 shows the curve."
    assert request_for(response_row("q", "x", ["[1]"])).prompt == "mcitebench_judge_explanation"


def test_stage_cli_with_embedded_judge(tmp_path):
    rows = [
        response_row("q1", "The loss falls [1].", ["[1]"], question_type="locating"),
        response_row("q2", "   ", ["[1]"]),  # blank: rated 0 without a call
        response_row("q3", "It is fine.", ["[1]"], question_type="survey"),  # unknown type: the runner's reject (the table's values)
        response_row("q4", "word " * 1500, ["[1]"], question_type="locating"),  # longer than the judge's context: the call fails
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema=table_schema("eval_responses")), tmp_path / "responses.parquet")  # no stage writes "survey"
    out = tmp_path / "judgements.parquet"
    llm = {**llm_params(tmp_path), "llamacpp": {"n_ctx": 1024}}
    STAGE.main(["--input", f"responses={tmp_path / 'responses.parquet'}", "--output", f"judgements={out}",
                "--params", json.dumps({"judge": "smol", "llm": llm})])
    got = {r["id"]: r for r in pq.read_table(out).to_pylist()}
    report = json.loads(Path(f"{out}.report.json").read_text())
    assert report["rows_in"] == 4 and report["rows_out"]["judgements"] == 2
    assert report["rejected_by_reason"] == {"bad_value": 1, "invalid_answer": 1}
    assert got[rows[0]["id"]]["rating"] in (0, 1, 2) and got[rows[0]["id"]]["status"] == "judged"
    assert got[rows[1]["id"]]["rating"] == 0 and got[rows[1]["id"]]["status"] == "empty_response"
    assert rows[3]["id"] not in got  # missing, never 0
    detail = next(r["detail"] for r in pq.read_table(f"{out}.rejects.parquet").to_pylist() if r["reason"] == "invalid_answer")
    assert detail.startswith("backend:")
