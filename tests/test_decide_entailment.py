"""decide_entailment through its CLI (MAVIS §3.2 Step 2, App. A.3): the thresholds of each modality
applied to stored P(yes) scores, no model involved (none is configured or reachable here); a score
of a pair that was never retrieved is the stage's reject, a second score of a pair the runner's
(the table's key); the bad scores of issue 32 are in tests/bad_inputs/test_contract.py."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from conftest import run_stage
from entailment_fixtures import PAIRS
from stages.core.tables import table_schema, write_table

SCORES = [("c4:a", "text", 0.8), ("c4:b", "text", 0.1), ("webimg:1", "image", 0.9), ("webimg:2", "image", 0.3),
          ("c4:zzz", "text", 0.99), ("c4:a", "text", 0.2)]


def test_thresholds_per_modality_and_rejects(tmp_path):
    pairs, scores = tmp_path / "fact_documents.parquet", tmp_path / "scores.parquet"
    write_table(pairs, PAIRS, "mavis_fact_documents")
    rows = [{"fact_id": "i1#0.0", "doc_id": d, "modality": m, "score": s, "mode": m, "model": "stored"} for d, m, s in SCORES]
    pq.write_table(pa.Table.from_pylist(rows, schema=table_schema("mavis_entailment_scores")), scores)  # a pair twice: no stage writes that

    def decide(**thresholds):
        out = tmp_path / "judged.parquet"
        run_stage("decide_entailment", f"--input=fact_documents={pairs}", f"--input=scores={scores}", f"--output=judged={out}",
                  "--params", json.dumps(thresholds))
        rows = pq.read_table(out).to_pylist()
        rejects = pq.read_table(f"{out}.rejects.parquet").to_pylist()
        report = json.loads(open(f"{out}.report.json").read())
        assert report["rows_in"] == len(SCORES) == len(rows) + report["rejected"]
        return rows, rejects, report

    rows, rejects, report = decide()
    # ordered by fact, modality, rank; the pair's rank and query carried from fact_documents
    assert [(r["doc_id"], r["modality"], r["rank"], r["entailed"]) for r in rows] == [
        ("webimg:1", "image", 1, True), ("webimg:2", "image", 2, False), ("c4:a", "text", 1, True), ("c4:b", "text", 2, False)]
    assert all(r["query"] == PAIRS[0]["query"] for r in rows)
    assert [(r["id"], r["reason"]) for r in rejects] == [("i1#0.0|c4:a", "duplicate_id"), ("i1#0.0|c4:zzz", "unknown_pair")]
    assert (report["stats"]["entailed_text"], report["stats"]["entailed_image"]) == (1, 1)
    # a threshold per modality: lowering the text one flips c4:b only; the image decisions stay
    rows, _, _ = decide(text_threshold=0.05)
    assert {r["doc_id"]: r["entailed"] for r in rows} == {"c4:a": True, "c4:b": True, "webimg:1": True, "webimg:2": False}
    rows, _, _ = decide(image_threshold=0.3)
    assert {r["doc_id"]: r["entailed"] for r in rows} == {"c4:a": True, "c4:b": False, "webimg:1": True, "webimg:2": True}
