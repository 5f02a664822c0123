"""citeeval_from_mcitebench: MCiteBench evaluation responses become the shared citeeval_responses
table, through the stage's real CLI on a hand-made eval_responses row."""
from __future__ import annotations

import json

import pyarrow.parquet as pq

from conftest import run_stage
from eval_fixtures import response_row
from stages.core.tables import write_table


def test_mcitebench_responses_become_numbered_passages(tmp_path):
    row = response_row("q1", "Accuracy rises with depth [3], Figure 1 and Table 2 show it [1, 2]. Fig. 9 is unrelated.",
                       ["[3]"], labels=["[1]", "[2]", "Figure 1", "Table 2", "[3]"])
    row["items"][2]["caption"] = "Accuracy by depth."
    src = tmp_path / "eval_responses.parquet"
    write_table(src, [row], "eval_responses")
    out = tmp_path / "ce.parquet"
    run_stage("citeeval_from_mcitebench", "--input", f"responses={src}", "--output", f"responses={out}")
    got = pq.read_table(out).to_pylist()[0]
    assert [(p["id"], p["title"], p["mode"]) for p in got["passages"]] == [
        (1, "", "text"), (2, "", "text"), (4, "Figure 1", "caption"), (5, "Table 2", "label"), (3, "", "text")]
    assert got["passages"][2]["text"] == "Accuracy by depth."
    assert got["response"] == "Accuracy rises with depth [3], Figure 1 [4] and Table 2 [5] show it [1][2]. Fig. 9 is unrelated."
    assert got["mode"] == "caption+label" and got["query"] == "Why?" and got["source"] == "mcitebench"
    assert json.loads(out.with_name("ce.parquet.report.json").read_text())["stats"]["refs_not_in_input"] == 1
