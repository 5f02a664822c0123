"""citeeval_from_mavis: MAVIS evaluation responses become the shared citeeval_responses table,
through the stage's real CLI on hand-made mavis_eval_responses rows: passages keep the numbers the
model saw, image documents are their text stand-ins, +KE shows the extractions, "[1, 2]" becomes
"[1][2]", the report row names the setting and method (and a split other than test), and a response
from no document is rejected."""
from __future__ import annotations

import json

import pyarrow.parquet as pq

from conftest import run_stage
from stages.core.tables import write_table

DOCUMENTS = [
    {"number": 2, "doc_id": "d:i1", "modality": "image", "text": "A tomato leaf turning yellow.", "image_sha256": "ab" * 32, "extraction": "The leaf is yellow."},
    {"number": 1, "doc_id": "d:t1", "modality": "text", "text": "Nitrogen deficiency yellows old leaves.", "image_sha256": None,
     "extraction": "Nitrogen deficiency yellows leaves."},
    {"number": 3, "doc_id": "d:i2", "modality": "image", "text": "", "image_sha256": "cd" * 32, "extraction": None},
]


def _response(rid, method, raw, split="test", documents=DOCUMENTS):
    return {"id": rid, "model": "cand", "instance_id": "reddit:p1/c1", "split": split, "setting": "multi", "method": method,
            "question": "Why are my tomato leaves yellow?", "gold_answer": "Nitrogen.", "retriever": "minilm", "vision": False,
            "documents": documents, "raw": raw, "answer": raw, "finish_reason": "stop",
            "error": None, "positive_text_documents": 1, "positive_image_documents": 1}


def test_mavis_responses_become_numbered_passages(tmp_path):
    rows = [_response("r1", "cot", "<thinking>Docs [1] and [2].</thinking>\nThe leaves lack nitrogen [1, 2]. It is common [3; 1]."),
            _response("r2", "vanilla_ke", "Nitrogen is short [1].", split="train"),
            _response("r3", "vanilla", "No documents.", documents=[])]
    src = tmp_path / "responses.parquet"
    write_table(src, rows, "mavis_eval_responses")
    out = tmp_path / "ce.parquet"
    run_stage("citeeval_from_mavis", "--input", f"responses={src}", "--output", f"responses={out}")
    got = {r["response_id"]: r for r in pq.read_table(out).to_pylist()}
    cot = got["r1"]
    assert [(p["id"], p["title"], p["text"], p["mode"]) for p in cot["passages"]] == [
        (1, "", "Nitrogen deficiency yellows old leaves.", "text"), (2, "image", "A tomato leaf turning yellow.", "stand_in"),
        (3, "image", "image document d:i2 (no text stand-in)", "label")]
    assert cot["response"] == "<thinking>Docs [1] and [2].</thinking>\nThe leaves lack nitrogen [1][2]. It is common [3][1]."
    assert (cot["model"], cot["source"], cot["query"], cot["mode"]) == ("cand [multi, cot]", "mavis", "Why are my tomato leaves yellow?",
                                                                        "label+stand_in")
    ke = got["r2"]
    assert [(p["id"], p["mode"]) for p in ke["passages"]] == [(1, "extraction"), (2, "extraction"), (3, "extraction")]
    assert ke["passages"][0]["text"] == "Nitrogen deficiency yellows leaves." and ke["passages"][2]["text"] == ""
    assert ke["model"] == "cand [multi, vanilla_ke, train]"  # another split: a row of its own
    rejects = pq.read_table(f"{out}.rejects.parquet").to_pylist()
    assert [(r["id"], r["reason"]) for r in rejects] == [("r3", "no_documents")]
    report = json.loads(out.with_name("ce.parquet.report.json").read_text())
    assert report["rows_in"] == 3 == report["rows_out"]["responses"] + report["rejected"]
