"""pair_evidence: references resolve to the right elements; appendix and missing targets are rejects."""
import csv

import pyarrow.parquet as pq

from stages.core.images import ImageStore
from tests.conftest import run_stage
from tests.mcitebench_fixtures import PAPER, element, paper_elements, qa_row, write


def _run(tmp_path, qas, line_numbers=True, review=None, out="out", extra_elements=()):
    elements = paper_elements(ImageStore(tmp_path / "images"), line_numbers=line_numbers) + list(extra_elements)
    el = write(tmp_path / "elements.parquet", elements, "mcitebench_elements")
    qa = write(tmp_path / "qa.parquet", qas, "mcitebench_qa")
    out = tmp_path / out
    run_stage("pair_evidence", "--input", f"qa={qa}", "--input", f"elements={el}", *(["--input", f"review={review}"] if review else []),
              "--output", f"questions={out}/questions.parquet", "--output", f"evidence={out}/evidence.parquet",
              "--output", f"pairing_sheet={out}/pairing_sheet.csv", "--params", '{"max_evidence": 4}')
    questions = {q["id"]: q for q in pq.read_table(out / "questions.parquet").to_pylist()}
    evidence = pq.read_table(out / "evidence.parquet").to_pylist()
    rejects = {r["id"]: r for r in pq.read_table(out / "questions.parquet.rejects.parquet").to_pylist()}
    return questions, evidence, rejects, {e["id"]: e for e in elements}


def explanation(answer, source):
    return qa_row(PAPER, "explanation", f"What supports claim {source}?", answer, source=source)


def test_table_and_section_line_pair_to_the_right_elements(tmp_path):
    good = explanation("We report this in Table 2 and discuss it in Section 4.2, Line 39.", "t1")
    questions, evidence, rejects, elements = _run(tmp_path, [good])
    assert not rejects
    q = questions[good["id"]]
    rows = sorted((e for e in evidence if e["question_id"] == good["id"]), key=lambda e: e["rank"])
    assert [(e["key"], e["element_id"]) for e in rows] == [
        ("Table 2", f"el:{PAPER}:2:5"),
        ("Section 4.2, Line 39", f"el:{PAPER}:2:4"),  # the paragraph whose lines 39-45 hold line 39
    ]
    assert elements[rows[1]["element_id"]]["line_start"] == 39
    assert (q["evidence_count"], q["evidence_modality"], q["source_type"], q["page_idx"]) == (2, "mixed", "multi", 2)


def test_appendix_and_missing_figure_are_rejects(tmp_path):
    appendix = explanation("The full list is in Appendix A.1.", "t2")
    appendix_table = explanation("See Table 5 for the values.", "t3")
    missing = explanation("Figure 7 shows the curves.", "t4")
    partly = explanation("Table 2 and the missing Figure 9 show it.", "t5")
    questions, evidence, rejects, _ = _run(tmp_path, [appendix, appendix_table, missing, partly])
    assert not questions and not evidence
    assert rejects[appendix["id"]]["reason"] == "appendix_reference"
    assert rejects[appendix_table["id"]]["reason"] == "appendix_reference"
    assert rejects[missing["id"]]["reason"] == "unresolved_reference"
    assert "Figure 7" in rejects[missing["id"]]["detail"]
    assert rejects[partly["id"]]["reason"] == "unresolved_reference"


def test_sections_figures_lines_and_locating(tmp_path):
    section = explanation("As Section 4.2 explains, the gate matters (Fig. 3b).", "t6")
    line = explanation("This is stated at Lines 46-50.", "t7")
    too_many = explanation("Tables 1 and 2, Figures 3 and 4 and Section 4.2.", "t8")
    locating = qa_row(PAPER, "locating", "How long does training take?", "3 hours", source=f"el:{PAPER}:1:1",
                      evidence=[f"el:{PAPER}:1:1"], options=["1 hour", "3 hours", "5 hours", "8 hours"], gold="B")
    questions, evidence, rejects, _ = _run(tmp_path, [section, line, too_many, locating])
    by_q = {}
    for e in sorted(evidence, key=lambda e: e["rank"]):
        by_q.setdefault(e["question_id"], []).append(e["element_id"])
    assert by_q[section["id"]] == [f"el:{PAPER}:2:3", f"el:{PAPER}:2:4", f"el:{PAPER}:3:6"]
    assert questions[section["id"]]["evidence_modality"] == "mixed"
    assert by_q[line["id"]] == [f"el:{PAPER}:3:7"]
    assert (questions[line["id"]]["source_type"], questions[line["id"]]["evidence_modality"]) == ("single", "text")
    assert rejects[too_many["id"]]["reason"] == "too_much_evidence"
    assert by_q[locating["id"]] == [f"el:{PAPER}:1:1"]
    assert [e["key"] for e in evidence if e["question_id"] == locating["id"]] == ["Section 3"]
    # count invariant: every QA row is a question or a reject
    assert len(questions) + len(rejects) == 4


def test_without_line_numbers(tmp_path):
    with_section = explanation("See Section 4.3, Line 47.", "t9")
    bare_line = explanation("See Line 47.", "t10")
    questions, evidence, rejects, _ = _run(tmp_path, [with_section, bare_line], line_numbers=False)
    assert [e["element_id"] for e in evidence] == [f"el:{PAPER}:3:7"]  # falls back to the section's paragraphs
    assert rejects[bare_line["id"]]["reason"] == "unresolved_reference"


def test_pairing_sheet_round_trip_overrides_the_parser(tmp_path):
    """The sheet lists each reference with the parser's proposal (or why there is none); an edited
    copy re-pairs a reference, drops one and pairs one the parser could not resolve."""
    table = explanation("See Table 2 and Section 4.2, Line 39.", "t1")
    missing = explanation("It is in Table 9.", "t2")
    _, _, rejects, _ = _run(tmp_path, [table, missing])
    assert rejects[missing["id"]]["reason"] == "unresolved_reference"
    with open(tmp_path / "out" / "pairing_sheet.csv", newline="", encoding="utf-8") as fh:
        sheet = list(csv.DictReader(fh))
    proposals = {(r["question_id"], r["reference"]): (r["proposed"], r["problem"]) for r in sheet}
    assert proposals[(table["id"], "Table 2")] == (f"el:{PAPER}:2:5", "")
    assert proposals[(table["id"], "Section 4.2, Line 39")] == (f"el:{PAPER}:2:4", "")
    assert proposals[(missing["id"], "Table 9")][0] == "" and proposals[(missing["id"], "Table 9")][1].startswith("unresolved_reference")
    for row in sheet:
        row["elements"] = {"Table 2": f"el:{PAPER}:1:2", "Section 4.2, Line 39": "none", "Table 9": f"el:{PAPER}:2:5"}[row["reference"]]
    edited = tmp_path / "pairing_reviewed.csv"
    with open(edited, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(sheet[0]))
        writer.writeheader()
        writer.writerows(sheet)
    questions, evidence, rejects, _ = _run(tmp_path, [table, missing], review=edited, out="reviewed")
    assert not rejects
    pairs = {q: [(e["key"], e["element_id"]) for e in sorted(evidence, key=lambda e: e["rank"]) if e["question_id"] == q] for q in questions}
    assert pairs == {table["id"]: [("Table 2", f"el:{PAPER}:1:2")], missing["id"]: [("Table 9", f"el:{PAPER}:2:5")]}
    assert questions[table["id"]]["evidence_modality"] == "table" and questions[table["id"]]["source_type"] == "single"


def test_pairing_review_naming_an_unknown_element_fails(tmp_path):
    table = explanation("See Table 2.", "t1")
    edited = tmp_path / "edited.csv"
    edited.write_text(f"question_id,reference,elements\n{table['id']},Table 2,el:nope\n")
    result = run_stage_failing(tmp_path, table, edited)
    assert result.returncode != 0 and "el:nope" in result.stderr


def run_stage_failing(tmp_path, qa_row_, edited):
    el = write(tmp_path / "elements.parquet", paper_elements(ImageStore(tmp_path / "images")), "mcitebench_elements")
    qa = write(tmp_path / "qa.parquet", [qa_row_], "mcitebench_qa")
    return run_stage("pair_evidence", "--input", f"qa={qa}", "--input", f"elements={el}", "--input", f"review={edited}",
                     "--output", f"questions={tmp_path}/q.parquet", "--output", f"evidence={tmp_path}/e.parquet",
                     "--output", f"pairing_sheet={tmp_path}/s.csv", check=False)


def test_an_equation_element_is_no_evidence(tmp_path):
    """MCiteBench's evidence is text, a figure or a table: a locating question (or a review) naming
    a parsed equation is a reject, never an evidence row the table contract refuses at the write."""
    equation = element(PAPER, 12, "equation", "L = -sum y log p", section="3", page=1)
    locating = qa_row(PAPER, "locating", "Which loss is used?", "cross-entropy", source=equation["id"], evidence=[equation["id"]],
                      options=["cross-entropy", "hinge", "L1", "L2"], gold="A")
    questions, evidence, rejects, _ = _run(tmp_path, [locating], extra_elements=[equation])
    assert not questions and not evidence
    assert rejects[locating["id"]]["reason"] == "unsupported_evidence" and "equation" in rejects[locating["id"]]["detail"]
