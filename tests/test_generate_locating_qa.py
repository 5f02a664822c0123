"""generate_locating_qa: candidate choice (no model) and a real run with the embedded model."""
import json

import pyarrow.parquet as pq

from stages.core.images import ImageStore
from stages.core.refs import parse_refs
from stages.generate_locating_qa import choose, eligible
from tests.conftest import run_stage
from tests.mcitebench_fixtures import PAPER, element, paper_elements, write

MODEL_OUTCOMES = {"refused", "invalid_answer", "question_cites_evidence", "duplicate_options"}


def test_candidates_and_balanced_choice(tmp_path):
    elements = paper_elements(ImageStore(tmp_path / "images"))
    elements.append(element(PAPER, 20, "text", "A paragraph without any measurable statement, long enough to qualify otherwise " * 2, section="2"))
    elements.append(element(PAPER, 21, "figure", "Figure A1: appendix-numbered figure.", label="Figure A1", section="4", image="ab" * 32))
    ok = {e["id"] for e in elements if eligible(e, 60)}
    assert f"el:{PAPER}:0:20" not in ok  # no number in it
    assert f"el:{PAPER}:0:21" not in ok  # lettered label: appendix material
    assert f"el:{PAPER}:5:10" not in ok and f"el:{PAPER}:5:11" not in ok  # appendix
    assert {f"el:{PAPER}:2:5", f"el:{PAPER}:3:6", f"el:{PAPER}:1:1"} <= ok
    pool = [e for e in elements if e["id"] in ok]
    three = choose(pool, 3, 0, PAPER)
    assert sorted(e["modality"] for e in three) == ["figure", "table", "text"]
    assert [e["id"] for e in choose(list(reversed(pool)), 3, 0, PAPER)] == [e["id"] for e in three]


def test_generates_with_the_embedded_model(tmp_path):
    store = ImageStore(tmp_path / "images")
    el = write(tmp_path / "elements.parquet", paper_elements(store), "mcitebench_elements")
    params = {"llm": {"cache": {"path": str(tmp_path / "llm.sqlite")}, "image_store": str(store.root)},
              "per_paper": 2, "min_text_chars": 60, "seed": 1}
    run_stage("generate_locating_qa", "--input", f"elements={el}", "--output", f"qa={tmp_path}/qa.parquet", "--params", json.dumps(params))
    qa = pq.read_table(tmp_path / "qa.parquet").to_pylist()
    rejects = pq.read_table(tmp_path / "qa.parquet.rejects.parquet").to_pylist()
    report = json.loads((tmp_path / "qa.parquet.report.json").read_text())
    assert report["rows_in"] == 2 == len(qa) + len(rejects)
    assert report["stats"]["llm_calls"] == 2 and report["stats"]["elements_read"] == 12
    assert {r["reason"] for r in rejects} <= MODEL_OUTCOMES
    for row in qa:
        assert row["question_type"] == "locating" and row["evidence_element_ids"] == [row["source_id"]]
        assert len(row["options"]) == len({o.casefold() for o in row["options"]}) == 4
        assert row["answer"] == row["options"]["ABCD".index(row["gold"])]
        assert not parse_refs(row["question"])
