import json
from pathlib import Path

import pyarrow.parquet as pq

from eval_fixtures import llm_params, response_row
from stages.core.tables import write_table
from stages.eval_mcitebench.judge_citations import STAGE, display_mode, plan
from stages.eval_mcitebench.split_citations import parse_response


def figure(caption=None, sha=None):
    return {"label": "Figure 1", "modality": "figure", "text": None, "image_sha256": sha, "caption": caption, "is_evidence": True}


def test_display_modes():
    text = {"label": "[1]", "modality": "text", "text": "t", "image_sha256": None, "caption": None, "is_evidence": False}
    assert display_mode([text], vision=False) == "text"
    assert display_mode([text, figure(sha="ab")], vision=True) == "vision"
    assert display_mode([figure(caption="Loss curves.")], vision=False) == "caption"
    assert display_mode([figure(caption="Loss curves."), figure()], vision=False) == "label"


def test_plan_scores_items_not_in_input_without_a_call():
    row = response_row("q1", "It rises [9][1]. It falls [8].", gold=["[1]"])
    _, sentences = parse_response(row)
    first = plan(sentences[0], row, vision=False)
    assert [(p["kind"], p["item"], p["status"], p["shown"]) for p in first] == [
        ("support", None, "judged", ["[1]"]), ("relevance", "[9]", "not_in_input", []), ("relevance", "[1]", "judged", ["[1]"])]
    assert first[1]["score"] == 0 and first[1]["request"] is None and first[1]["mode"] == "none"
    second = plan(sentences[1], row, vision=False)
    assert [(p["kind"], p["score"], p["status"]) for p in second] == [("support", 0, "not_in_input"), ("relevance", 0, "not_in_input")]
    assert all(p["request"] is None for p in second)


def test_stage_cli_with_embedded_judge(tmp_path):
    row = response_row("q1", "It rises [1]. It falls [9]. No citation here. Figure 1 shows it [1].", gold=["[1]"])
    for item in row["items"]:
        if item["label"] == "Figure 1":  # an image the judge's store lacks: those calls fail
            item["image_sha256"] = "f" * 64
    _, sentences = parse_response(row)
    write_table(tmp_path / "responses.parquet", [row], "eval_responses")
    write_table(tmp_path / "sentences.parquet", sentences, "eval_sentences")
    out = tmp_path / "judgements.parquet"
    params = {"judge": "smol", "llm": llm_params(tmp_path), "vision": True}
    STAGE.main(["--input", f"responses={tmp_path / 'responses.parquet'}", "--input", f"sentences={tmp_path / 'sentences.parquet'}",
                "--output", f"judgements={out}", "--params", json.dumps(params)])
    rows = pq.read_table(out).to_pylist()
    report = json.loads(Path(f"{out}.report.json").read_text())
    # planned: s0 support + [1]; s1 support + [9]; s3 support + Figure 1 + [1] = 7; the two calls showing the image fail
    assert report["rows_in"] == 4 and report["stats"]["planned_judgements"] == 7
    assert report["rows_out"]["judgements"] == 5 and report["rejected_by_reason"] == {"invalid_answer": 2}
    assert report["stats"]["llm_calls"] == 3  # the failed ones never reach the backend
    rejects = pq.read_table(f"{out}.rejects.parquet").to_pylist()
    assert all("not in the image store" in r["detail"] for r in rejects)
    assert {(r["kind"], r["item"], r["status"]) for r in rows if r["status"] == "not_in_input"} == {("support", None, "not_in_input"), ("relevance", "[9]", "not_in_input")}
    judged = [r for r in rows if r["status"] == "judged"]
    assert len(judged) == 3 and all(r["mode"] == "text" and r["judge"] == "smol" for r in judged)
    assert all(r["score"] in ((0, 1, 2) if r["kind"] == "support" else (0, 1)) for r in judged)
