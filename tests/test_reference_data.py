"""Evaluation on MCiteBench's released data as published (the JSONL beside visual_resources*/<pdf_id>/images/,
the three reference records of tests/data): every item resolves, the ground truth is what MCiteBench's
scorer derives from evidence_keys and text_2_idx, and both scoring modes run on responses to them."""
import pytest

from eval_fixtures import make_mcitebench_data, reference_records
from stages.core.images import ImageStore
from stages.core.stage import Reject
from stages.eval_mcitebench.generate_answers import evidence_modality, task_items
from stages.eval_mcitebench.score_mcitebench import score_response
from stages.eval_mcitebench.split_citations import parse_response


def released(tmp_path):
    jsonl = make_mcitebench_data(tmp_path / "data")
    return jsonl.parent, ImageStore(tmp_path / "store")


def test_items_resolve_in_the_released_layout(tmp_path):
    folder, store = released(tmp_path)
    got = []
    for record in reference_records():
        items = task_items(record, folder, 42, {}, store)
        assert all(i["image_sha256"] for i in items if i["modality"] != "text")
        assert len(items) == record["info_count"]
        got.append((sorted(i["label"] for i in items if i["is_evidence"]), evidence_modality(items)))
    # MCiteBench's scorer: "Table 2" / "Figure 1" from the evidence keys of image items, text_2_idx numbers for text
    assert got == [(["Table 2", "Table 6"], "table"), (["Figure 1"], "figure"), (["Figure 1"], "figure")]


def test_a_missing_image_names_both_places(tmp_path):
    folder, store = released(tmp_path)
    record = reference_records()[1]
    next((folder / "visual_resources_example" / record["pdf_id"]).rglob("*.jpg")).unlink()
    with pytest.raises(Reject) as err:
        task_items(record, folder, 42, {}, store)
    assert err.value.reason == "missing_image" and "visual_resources*" in str(err.value)


def test_both_scoring_modes_on_a_reference_record(tmp_path):
    """The first record (gold Table 2 and Table 6): a response citing Table 2 and [1]."""
    folder, store = released(tmp_path)
    record = reference_records()[0]
    items = task_items(record, folder, 42, {}, store)
    response = {"id": "r1", "model": "m", "question_id": record["question_id"], "question_type": record["question_type"],
                "source": "multi", "modality": "table", "gold": ["Table 2", "Table 6"], "items": items,
                "response": "GROD beats NPOS on every task (Table 2). Gaussian noise is worse [1]."}
    parsed, sentences = parse_response(response)
    assert parsed["citations"] == ["Table 2", "[1]"]
    judgements = [{"sentence_id": sentences[0]["id"], "kind": "support", "item": None, "score": 2},
                  {"sentence_id": sentences[0]["id"], "kind": "relevance", "item": "Table 2", "score": 1},
                  {"sentence_id": sentences[1]["id"], "kind": "relevance", "item": "[1]", "score": 0}]  # s2's support call failed
    strict = score_response(response, parsed, sentences, judgements, {"rating": 1, "status": "judged"})
    reference = score_response(response, parsed, sentences, judgements, None, scoring="reference")
    # S-P 1/2, S-R 1/2 -> S-F1 50 in both; C-R: strict missing, reference (1 + 0)/2; C-P (1 + 0)/2
    assert (strict["source_f1"], reference["source_f1"], strict["source_em"]) == (50.0, 50.0, 0.0)
    assert strict["citation_f1"] is None and strict["accuracy"] == 50.0
    assert reference["citation_recall"] == 50.0 and reference["citation_precision"] == 50.0 and reference["citation_f1"] == 50.0
    assert reference["accuracy"] == -50.0  # the failed answer judge call is the -1 sentinel
