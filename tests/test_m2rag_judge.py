"""m2rag_judge through its CLI on the scripted single-stage responses (tests/m2rag_scripted.py): the
App. B metrics per response, context and image; an off-scale judge score is retried then kept as a
failed (missing) judgement with its raw text and a reject; a placeholder to no image is not judged."""
from __future__ import annotations

import json

import pyarrow.parquet as pq


def test_judgements_per_metric_with_a_failed_score(m2rag_judgements):
    judgements, seen = m2rag_judgements
    rows = pq.read_table(judgements).to_pylist()
    by = {(r["metric"], r["position"]): r for r in rows}
    assert by[("fluency", 0)]["score"] == 8
    relevance = by[("relevance", 0)]
    assert relevance["status"] == "failed" and relevance["score"] is None and '"score": 11' in relevance["raw"]
    assert relevance["error"].startswith("schema:") and by[("fluency", 0)]["error"] is None  # why it failed, for the reference reading
    rejects = pq.read_table(f"{judgements}.rejects.parquet").to_pylist()
    assert [r["reason"] for r in rejects] == ["invalid_answer"] and "raw:" in rejects[0]["detail"]
    # the fan-out invariant: every planned judgement is a row, the failed ones also rejects
    stats = json.loads(open(f"{judgements}.report.json").read())["stats"]
    assert stats["judgements_planned"] == len(rows) and stats["judgements_failed"] == len(rejects) == 1
    # contexts: page 1, page 2, the caption of image_1; only image_1 is judged (image_9 points to no image)
    assert [by[("context_precision", k)]["score"] for k in range(3)] == [1, 0, 1]
    assert [by[("faithfulness", k)]["score"] for k in range(2)] == [1, 0]
    assert {m for m, _ in by if m.startswith("image_") and m != "image_recall"} == {"image_coherence", "image_helpfulness", "image_reference"}
    assert by[("image_coherence", 0)]["mode"] == "vision"
    image_calls = [b for b in seen if "Rate how coherent" in json.dumps(b)]
    assert [p["type"] for p in image_calls[0]["messages"][-1]["content"]].count("image_url") == 1
    # recall: unused inputs 2 (no file: its caption, not wanted) and 3 (aux, seen: wanted)
    assert (by[("image_recall", 2)]["score"], by[("image_recall", 2)]["mode"]) == (0, "caption")
    assert by[("image_recall", 3)]["score"] == 1
