import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from eval_fixtures import llm_params, response_row
from stages.core.tables import write_table
from stages.eval_mcitebench.probe_source_identification import STAGE, parse_choice


@pytest.mark.parametrize("text, letters, expected", [
    ("B", "ABCDE", "B"), ("B. It holds the table.", "ABCDE", "B"), ("**C** because", "ABCDE", "C"),
    ("(D) the figure", "ABCDE", "D"), ("Answer: E", "ABCDE", "E"), ("E", "ABC", None),
    ("The answer is B", "ABCDE", None), ("b) lower case", "ABCDE", None), ("Figure 1", "ABCDE", None), ("", "ABCDE", None),
])
def test_parse_choice(text, letters, expected):
    assert parse_choice(text, letters) == expected


def test_stage_cli_with_embedded_model(tmp_path):
    labels = ["[1]", "Figure 1", "[2]", "Table 2", "[3]"]
    rows = [
        response_row("q1", "r", ["Figure 1"], labels, modality="figure"),
        response_row("q2", "r", ["[3]"], labels),
        response_row("q3", "r", ["[1]", "[2]"], labels),  # multi-source: not probed
        response_row("q4", "r", ["[1]"], labels, question_type="locating"),  # locating: not probed
    ]
    write_table(tmp_path / "responses.parquet", rows, "eval_responses")
    out = tmp_path / "probe.parquet"
    STAGE.main(["--input", f"responses={tmp_path / 'responses.parquet'}", "--output", f"probe={out}",
                "--params", json.dumps({"model": "smol", "llm": llm_params(tmp_path)})])
    got = pq.read_table(out).to_pylist()
    report = json.loads(Path(f"{out}.report.json").read_text())
    assert report["rows_in"] == 2 and report["rows_out"]["probe"] == 2 and report["stats"]["not_probed"] == 2
    assert [(r["question_id"], r["gold_letter"], r["modality"]) for r in got] == [("q1", "B", "figure"), ("q2", "E", "text")]
    for r in got:
        assert r["options"] == labels and r["raw"]
        assert r["correct"] == (r["choice"] == r["gold_letter"]) and r["choice"] in (None, "A", "B", "C", "D", "E")


def test_a_single_source_question_without_exactly_one_evidence_item_is_bad_options(tmp_path):
    """A response marked single-source must show exactly one evidence item among its options; one
    showing none or two (a crafted or mislabelled row) is bad_options, not a StopIteration, and
    no model is asked."""
    labels = ["[1]", "Figure 1", "[2]"]
    none_marked, two_marked = response_row("q1", "r", ["[1]"], labels), response_row("q2", "r", ["[1]"], labels)
    none_marked["items"] = [item | {"is_evidence": False} for item in none_marked["items"]]
    two_marked["items"] = [item | {"is_evidence": item["label"] in ("[1]", "[2]")} for item in two_marked["items"]]
    write_table(tmp_path / "responses.parquet", [none_marked, two_marked], "eval_responses")
    out = tmp_path / "probe.parquet"
    STAGE.main(["--input", f"responses={tmp_path / 'responses.parquet'}", "--output", f"probe={out}",
                "--params", json.dumps({"model": "smol", "llm": llm_params(tmp_path)})])
    rejects = {r["id"]: (r["reason"], r["detail"]) for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()}
    assert rejects == {none_marked["id"]: ("bad_options", "0 evidence items; a single-source question shows exactly one"),
                       two_marked["id"]: ("bad_options", "2 evidence items; a single-source question shows exactly one")}
    assert json.loads(Path(f"{out}.report.json").read_text())["stats"].get("llm_calls", 0) == 0
