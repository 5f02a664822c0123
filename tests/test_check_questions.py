"""check_questions: the deterministic checks before quality control, one reject reason each."""
import json

import pyarrow.parquet as pq

from mcitebench_fixtures import PAPER, element, write
from stages.mcitebench.check_questions import STAGE, grounding_problem, normalise, prompt_examples

ELEMENTS = [
    element(PAPER, 0, "text", "We report 91.2% accuracy on the W-100 benchmark with GatedNet, trained for 3 hours.", section="1"),
    element(PAPER, 1, "text", "The ablation removes the gate and accuracy drops by 4.1 points on W-100.", section="4"),
    element(PAPER, 2, "figure", "Figure 3: Training curves.", label="Figure 3", section="4", image="f" * 64),
    element("openreview:paper2", 0, "text", "Paper two reports 50.0% accuracy with the plain model.", section="1"),
]


def question(qid, text, answer, *, qtype="locating", paper=PAPER, options=None, evidence="el:openreview:paper1:0:0"):
    options = options if options is not None else ([answer, "80.5%", "70.1%", "60.3%"] if qtype == "locating" else [])
    return {"id": qid, "paper_id": paper, "question_type": qtype, "question": text, "answer": answer, "options": options,
            "gold": "A" if qtype == "locating" else None, "explanation": None, "source_id": evidence,
            "evidence_count": 1, "evidence_modality": "text", "source_type": "single", "page_idx": 0, "distractor_count": 4}


def evidence_rows(questions):
    return [{"id": f"ev:{q['id']}", "question_id": q["id"], "paper_id": q["paper_id"], "element_id": q["source_id"],
             "key": "Section 1", "rank": 0, "modality": "text"} for q in questions]


def run_stage(tmp_path, questions, **params):
    out = tmp_path / "checked.parquet"
    STAGE.main([
        "--input", f"questions={write(tmp_path / 'q.parquet', questions, 'mcitebench_questions')}",
        "--input", f"evidence={write(tmp_path / 'e.parquet', evidence_rows(questions), 'mcitebench_evidence')}",
        "--input", f"elements={write(tmp_path / 'el.parquet', ELEMENTS, 'mcitebench_elements')}",
        "--output", f"questions={out}", "--params", json.dumps(params),
    ])
    kept = [r["id"] for r in pq.read_table(out).to_pylist()]
    rejects = {r["id"]: (r["reason"], r["detail"]) for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()}
    return kept, rejects, json.loads((tmp_path / "checked.parquet.report.json").read_text())


def test_examples_are_read_from_the_prompt_files():
    examples = prompt_examples(["mcitebench_locating_qa"])
    assert normalise("What is the accuracy of Llama3 on the MMLU dataset?") in examples
    assert normalise("Which model had the lowest error rate?") in examples


def test_each_reason(tmp_path):
    questions = [
        question("q-good", "What accuracy does GatedNet reach on W-100?", "91.2%"),
        question("q-copy", "What is the accuracy of Llama3 on the MMLU dataset?", "91.2%"),
        question("q-copy-near", "what is the accuracy of Llama-3 on the MMLU dataset", "91.2%"),
        question("q-answer-copy", "Which metric is reported for GatedNet?", "What is the reported accuracy for Model B?"),
        question("q-options", "How long does GatedNet train?", "3 hours", options=["3 hours", "3 Hours.", "5 hours", "9 hours"]),
        question("q-ungrounded", "How accurate is Llama3 on MMLU?", "Llama3 reaches 85.2% on MMLU"),
        question("q-words", "What does removing the gate do?", "Quantisation shrinks memory footprint considerably",
                 evidence="el:openreview:paper1:1:1"),
        question("q-zdup", "What accuracy does GatedNet reach on W-100 ?", "91.2%"),
        question("q-other-paper", "What accuracy does GatedNet reach on W-100?", "50.0%", paper="openreview:paper2",
                 evidence="el:openreview:paper2:0:0"),
        question("q-expl", "Why does accuracy drop without the gate?", "See Section 4: it drops by 4.1 points.", qtype="explanation"),
        question("q-figure", "Which curve rises fastest?", "The purple line", evidence="el:openreview:paper1:0:2"),
    ]
    kept, rejects, report = run_stage(tmp_path, questions)
    assert sorted(kept) == ["q-expl", "q-figure", "q-good", "q-other-paper"]
    reasons = {qid: reason for qid, (reason, _) in rejects.items()}
    assert reasons == {
        "q-copy": "copies_prompt_example", "q-copy-near": "copies_prompt_example", "q-answer-copy": "copies_prompt_example",
        "q-options": "repeated_options", "q-ungrounded": "answer_not_in_evidence", "q-words": "answer_not_in_evidence",
        "q-zdup": "duplicate_question",
    }
    assert "85.2" in rejects["q-ungrounded"][1] and "llama3" in rejects["q-ungrounded"][1]
    assert "q-good" in rejects["q-zdup"][1]
    assert report["rows_in"] == 11 and report["rejected"] == 7
    assert report["stats"]["grounding_not_checked_figure"] == 1


def test_figures_checked_on_request(tmp_path):
    kept, rejects, _ = run_stage(tmp_path, [question("q-figure", "Which curve rises fastest?", "The purple line",
                                                     evidence="el:openreview:paper1:0:2")], check_figures=True)
    assert kept == [] and rejects["q-figure"][0] == "answer_not_in_evidence"


def test_grounding_rules():
    text = "GatedNet reaches 91.2% accuracy on W-100, 1,024 examples."
    assert grounding_problem("91.2%", text, 0.5) is None
    assert grounding_problem("It uses 1024 examples", text, 0.5) is None  # thousands separators fold
    assert "93.0" in grounding_problem("93.0%", text, 0.5)
    assert "resnet50" in grounding_problem("A ResNet50 backbone", text, 0.5)
    assert grounding_problem("The gated network reaches high accuracy", text, 0.5) is None  # stems: gated, reach, accur
