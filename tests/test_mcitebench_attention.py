"""MCiteBench's attention analyses (mcitebench.txt §5.3, Figures 6-7): the length-normalised
modality shares on synthetic attention with a known answer, and the stage through its CLI on two
evaluation responses with a tiny random vision-language model (tests/tiny_vlm.py)."""
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import run_stage
from eval_fixtures import response_row
from stages.attribution.mcitebench_attention import figure_prefix, modality_shares
from stages.core.tables import table_schema
from tiny_vlm import build_tiny_vlm


def test_modality_shares_are_length_normalised_and_sum_to_one():
    # items: 0 text (2 tokens), 1 figure (1 token); layer 0: 0.4 on the text, 0.4 on the figure
    labels = np.array([0, 0, 1])
    per_layer = np.array([[0.2, 0.2, 0.4], [0.3, 0.3, 0.0]])
    shares = modality_shares(per_layer, labels, ["text", "figure"])
    assert shares["text"] == pytest.approx([0.2 / 0.6, 1.0])  # 0.4/2 = 0.2 against 0.4/1 = 0.4
    assert shares["figure"] == pytest.approx([0.4 / 0.6, 0.0])
    assert set(shares) == {"text", "figure"}


def test_figure_prefix_drops_citations():
    assert figure_prefix("Logic-LM is more accurate [1] Figure 2. It also helps.") == "Logic-LM is more accurate. According to Figure"
    assert figure_prefix("") == "According to Figure"


def test_stage_on_two_responses(tmp_path):
    folder = tmp_path / "vlm"
    build_tiny_vlm(folder)
    rows = [response_row("q1", "the eye is red [1] Figure 1.", ["[1]", "Figure 1"]),
            response_row("q2", "it hurts [2].", ["[2]"], ["[1]", "[2]", "[3]"])]
    for row in rows:
        for item in row["items"]:
            if item["modality"] != "text":
                item["caption"] = "the eye is red"
    responses = tmp_path / "responses.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=table_schema("eval_responses")), responses)
    out = tmp_path / "out"
    outputs = {"modality": "modality.parquet", "figure_map": "figure_map.parquet", "report": "report.md",
               "plot_modality": "fig6.png", "plot_map": "fig7.png"}
    run_stage("mcitebench_attention", "--input", f"responses={responses}",
              *[a for k, v in outputs.items() for a in ("--output", f"{k}={out / v}")],
              "--params", json.dumps({"model": str(folder), "model_name": "tiny", "max_new_tokens": 3, "device": "cpu", "dtype": "float32"}))
    modality = pq.read_table(out / "modality.parquet").to_pylist()
    by_layer = {}
    for r in modality:
        by_layer.setdefault((r["response_id"], r["layer"]), []).append(r)
    assert {layer for _, layer in by_layer} == {0, 1}  # the decoder's 2 layers
    for cell in by_layer.values():
        assert sum(r["share"] for r in cell) == pytest.approx(1.0)
    assert {r["modality"] for r in modality if r["response_id"] == rows[1]["id"]} == {"text"}
    fmap = pq.read_table(out / "figure_map.parquet").to_pylist()
    assert {r["response_id"] for r in fmap} == {rows[0]["id"]}  # only the response with a figure
    assert len(fmap) == 2 * 5 and {r["label"] for r in fmap if r["is_evidence"]} == {"[1]", "Figure 1"}
    assert all(r["tokens"] > 0 and r["mass"] >= 0 for r in fmap)
    report = (out / "report.md").read_text()
    assert "Figure 6 over 2 responses" in report and "Figure 7 for" in report
    assert (out / "fig6.png").read_bytes()[:4] == b"\x89PNG" and (out / "fig7.png").read_bytes()[:4] == b"\x89PNG"
    stats = json.loads((out / "modality.parquet.report.json").read_text())
    assert stats["rows_in"] == 2 and stats["stats"]["figure_maps"] == 1
