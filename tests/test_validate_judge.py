"""validate_judge (MCiteBench App. C.3, Table 12): the label sheet round trip and the judge's
precision / recall / F1 against human labels, hand-computed.

explanation (subjective): s1 support judge 2 / human 2, s1 relevance [1] judge 1 / human 0,
                          s2 support judge 0 / human 1, s2 relevance [2] judge 0 / human 0
locating (objective):     s3 support judge 1 / human 1, s3 relevance Table 2 judge 1 / human 1
entailment = score >= 1.
subjective/support: judge {s1}, human {s1, s2}: P 1, R 0.5, F1 2/3
subjective/all: judge {s1 sup, s1 rel}, human {s1 sup, s2 sup}: P 0.5, R 0.5, F1 0.5, exact 2/4
objective/all: P = R = F1 = 1; all/all: TP 3 of 4 judged, 4 human: P 0.75, R 0.75, exact 4/6
"""
import csv
import json
import re

import pyarrow.parquet as pq
import pytest

from eval_fixtures import response_row
from stages.core.tables import write_table
from stages.eval_mcitebench.split_citations import parse_response
from stages.eval_mcitebench.validate_judge import STAGE


def judgement(sentence, kind, score, item=None):
    return {"id": f"judge:{sentence['id']}:{kind}:{item}", "response_id": sentence["response_id"], "sentence_id": sentence["id"],
            "model": "m", "judge": "j", "kind": kind, "item": item, "shown": [item or "[1]"], "score": score, "status": "judged", "mode": "text"}


@pytest.fixture()
def evaluation(tmp_path):
    r1 = response_row("q1", "It rises [1]. It falls [2].", ["[1]"])
    r2 = response_row("q2", "Table 2 lists it.", ["Table 2"], question_type="locating", modality="table")
    (_, (s1, s2)), (_, (s3,)) = parse_response(r1), parse_response(r2)
    judged = [(judgement(s1, "support", 2), 2), (judgement(s1, "relevance", 1, "[1]"), 0), (judgement(s2, "support", 0), 1),
              (judgement(s2, "relevance", 0, "[2]"), 0), (judgement(s3, "support", 1), 1), (judgement(s3, "relevance", 1, "Table 2"), 1),
              (judgement(s3, "relevance", 0, "[9]"), 3)]  # relevance takes 0/1: this label is a reject
    paths = {"responses": (tmp_path / "responses.parquet", [r1, r2], "eval_responses"),
             "sentences": (tmp_path / "sentences.parquet", [s1, s2, s3], "eval_sentences"),
             "citation_judgements": (tmp_path / "judgements.parquet", [j for j, _ in judged], "eval_citation_judgements")}
    for path, rows, table in paths.values():
        write_table(path, rows, table)
    return [a for name, (path, _, _) in paths.items() for a in ("--input", f"{name}={path}")], dict((j["id"], h) for j, h in judged)


def run(tmp_path, inputs, *extra):
    out = tmp_path / "out"
    STAGE.main(inputs + list(extra) + ["--output", f"labels={out}/labels.parquet", "--output", f"agreement={out}/agreement.parquet",
                                       "--output", f"label_sheet={out}/label_sheet.csv"])
    return out


def test_sheet_then_agreement(tmp_path, evaluation):
    inputs, human = evaluation
    out = run(tmp_path, inputs)
    with open(out / "label_sheet.csv", newline="", encoding="utf-8") as fh:
        sheet = list(csv.DictReader(fh))
    assert len(sheet) == 7 and all(r["human_score"] == "" for r in sheet) and "score" not in sheet[0]
    assert {r["question_type"] for r in sheet} == {"explanation", "locating"}
    assert pq.read_table(out / "agreement.parquet").num_rows == 0  # nothing labelled yet
    for row in sheet:
        row["human_score"] = str(human[row["judgement_id"]])
    sheet.append({**sheet[0], "judgement_id": "judge:gone", "human_score": "1"})
    sheet.append({**sheet[2], "judgement_id": "judge:unlabelled", "human_score": ""})
    sheet.append(dict(sheet[3]))  # a copied line: counted once
    labelled = write_sheet(tmp_path / "labelled.csv", sheet)
    out = run(tmp_path, inputs, "--input", f"labels={labelled}")
    got = {(r["scope"], r["kind"]): r for r in pq.read_table(out / "agreement.parquet").to_pylist()}
    assert (got[("subjective", "support")]["precision"], got[("subjective", "support")]["recall"]) == (1.0, 0.5)
    assert got[("subjective", "support")]["f1"] == pytest.approx(2 / 3)
    sub = got[("subjective", "all")]
    assert (sub["n"], sub["precision"], sub["recall"], sub["f1"], sub["exact"]) == (4, 0.5, 0.5, 0.5, 0.5)
    obj = got[("objective", "all")]
    assert (obj["precision"], obj["recall"], obj["f1"], obj["exact"]) == (1.0, 1.0, 1.0, 1.0)
    every = got[("all", "all")]
    assert (every["n"], every["precision"], every["recall"]) == (6, 0.75, 0.75) and every["exact"] == pytest.approx(4 / 6)
    report = json.loads((out / "labels.parquet.report.json").read_text())
    assert report["rows_in"] == 8 and report["rows_out"]["labels"] == 6
    assert report["rejected_by_reason"] == {"bad_label": 1, "no_judgement": 1} and report["stats"]["unlabelled_rows"] == 1
    # one judgement labelled twice, differently: neither label is taken, the stage says which and where
    conflicting = write_sheet(tmp_path / "conflicting.csv", [*sheet, {**sheet[1], "human_score": "1"}])
    with pytest.raises(SystemExit, match=re.escape(f"{sheet[1]['judgement_id']} is on line 3 and again on line 12 with different values")):
        run(tmp_path, inputs, "--input", f"labels={conflicting}")


def write_sheet(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_a_label_written_in_a_digit_int_cannot_read_is_a_bad_label(tmp_path, evaluation):
    """"²" passes str.isdigit but int() refuses it: a bad_label reject naming it, not a crash."""
    inputs, human = evaluation
    out = run(tmp_path, inputs)
    with open(out / "label_sheet.csv", newline="", encoding="utf-8") as fh:
        sheet = list(csv.DictReader(fh))
    for row in sheet:
        row["human_score"] = "\u00b2" if row["judgement_id"].endswith(":[9]") else str(human[row["judgement_id"]])
    out = run(tmp_path, inputs, "--input", f"labels={write_sheet(tmp_path / 'labelled.csv', sheet)}")
    rejects = pq.read_table(out / "labels.parquet.rejects.parquet").to_pylist()
    assert [r["reason"] for r in rejects] == ["bad_label"] and rejects[0]["detail"].endswith("got '\u00b2'")
