"""mavis_validate_judge (mavis.txt §5.5, App. B.2, Table 6) through its CLI: the label sheet lists the
answered strict judgements with what the judge read (not its label); a labelled copy, two
annotators on one judgement averaged, gives Pearson r per metric over the judgements and over the
answers, worked out by hand; bad labels and unknown judgements are rejected, empty ones skipped."""
from __future__ import annotations

import csv
import json
import math

import pyarrow.parquet as pq
import pytest

from conftest import run_stage
from mavis_eval_fixtures import build_release
from contract_rows import filled
from stages.core.tables import write_table as _write

TOMATO = "reddit:p1/c1"


def write_table(path, rows, table):
    """Rows with the columns this test names, the others any value their contract allows."""
    _write(path, [filled(table, row) for row in rows], table)


def _judgement(jid, response, kind, score, ok=True, scoring="strict", sentence=0, doc=None, fact=None):
    return {"id": jid, "response_id": response, "model": "cand", "judge": "j", "instance_id": TOMATO, "setting": "multi", "method": "vanilla",
            "scoring": scoring, "kind": kind, "sentence_index": sentence, "fact_id": fact, "doc_number": doc, "ok": ok,
            "score": score if ok else None, "label": None, "raw": ""}


def test_sheet_labels_and_pearson_by_hand(tmp_path):
    manifest = build_release(tmp_path / "rel" / "v1")
    fact_id = f"{TOMATO}#0.0"
    docs = [{"number": 1, "doc_id": "d:t1", "modality": "text", "text": "Nitrogen deficiency yellows leaves.", "image_sha256": None, "extraction": None}]
    responses = tmp_path / "responses.parquet"
    write_table(responses, [{"id": r, "model": "cand", "instance_id": TOMATO, "setting": "multi", "method": "vanilla", "question": "Why yellow?",
                             "gold_answer": "g", "documents": docs, "raw": "Low nitrogen [1].", "answer": "Low nitrogen [1]."} for r in ("r1", "r2")],
                "mavis_eval_responses")
    sentences = tmp_path / "sentences.parquet"
    write_table(sentences, [{"id": f"s{r}", "response_id": r, "model": "cand", "statement_set": "strict", "sentence_index": 0,
                             "sentence": "Low nitrogen [1].", "statement": "Low nitrogen.", "cited": [1], "unknown": [], "written": [1]}
                            for r in ("r1", "r2")], "mavis_eval_sentences")
    judgements = tmp_path / "judgements.parquet"
    write_table(judgements, [_judgement("j1", "r1", "support", 1.0), _judgement("j2", "r1", "support", 0.5), _judgement("j3", "r2", "support", 0.0),
                             _judgement("j4", "r1", "completeness", 1.0, sentence=None, fact=fact_id), _judgement("j5", "r1", "relevance", 0.5),
                             _judgement("j6", "r1", "support_doc", None, ok=False, doc=1),  # failed: not on the sheet
                             _judgement("j7", "r1", "support", 1.0, scoring="reference")],  # reference calls are not validated
                "mavis_eval_judgements")
    common = [f"--input=responses={responses}", f"--input=sentences={sentences}", f"--input=judgements={judgements}", f"--input=release={manifest}"]
    sheet, labels, agreement = tmp_path / "sheet.csv", tmp_path / "labels.parquet", tmp_path / "agreement.parquet"
    outputs = [f"--output=labels={labels}", f"--output=agreement={agreement}", f"--output=label_sheet={sheet}"]
    run_stage("mavis_validate_judge", *common, *outputs, "--params", "{}")
    with open(sheet, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted(r["judgement_id"] for r in rows) == ["j1", "j2", "j3", "j4", "j5"]
    by_id = {r["judgement_id"]: r for r in rows}
    assert by_id["j1"]["metric"] == "recall" and "[1] (text) Nitrogen deficiency" in by_id["j1"]["documents"]
    assert by_id["j4"]["statement"] == "Nitrogen deficiency makes the lower leaves of tomato plants turn yellow." and by_id["j4"]["answer"]
    assert all(r["human_score"] == "" for r in rows)  # the judge's own score is not shown
    filled = tmp_path / "filled.csv"
    with open(filled, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        for jid, score, who in (("j1", "1", "a"), ("j1", "0.5", "b"), ("j2", "partially supported", "a"), ("j3", "0", "a"),
                                ("j5", "fully", "a"), ("j4", "", "a"), ("j4", "maybe", "b"), ("j9", "1", "a")):
            writer.writerow({**by_id.get(jid, by_id["j1"]), "judgement_id": jid, "human_score": score, "annotator": who})
    run_stage("mavis_validate_judge", *common, f"--input=labels={filled}", *outputs, "--params", "{}")
    assert len(pq.read_table(labels)) == 5  # j1 twice, j2, j3, j5
    assert sorted(r["reason"] for r in pq.read_table(f"{labels}.rejects.parquet").to_pylist()) == ["bad_label", "no_judgement"]
    report = json.loads(open(f"{labels}.report.json").read())
    assert report["rows_in"] == 7 and report["stats"]["unlabelled_rows"] == 1
    got = {(r["metric"], r["level"]): r for r in pq.read_table(agreement).to_pylist()}
    # recall, per judgement: judge (1, 0.5, 0) vs humans (mean of 1 and 0.5 = 0.75, 0.5, 0)
    judge, human = [1.0, 0.5, 0.0], [0.75, 0.5, 0.0]
    mj, mh = sum(judge) / 3, sum(human) / 3
    r = sum((a - mj) * (b - mh) for a, b in zip(judge, human)) / math.sqrt(sum((a - mj) ** 2 for a in judge) * sum((b - mh) ** 2 for b in human))
    assert got[("recall", "item")]["n"] == 3 and got[("recall", "item")]["pearson"] == pytest.approx(r)
    # per answer: r1 judge (1 + 0.5) / 2 vs humans (0.75 + 0.5) / 2, r2 0 vs 0: two points lie on a rising line
    assert got[("recall", "answer")]["n"] == 2 and got[("recall", "answer")]["pearson"] == pytest.approx(1.0)
    assert got[("relevance", "item")]["n"] == 1 and got[("relevance", "item")]["pearson"] is None  # one pair: no r
