"""sample_distractors: deterministic, never evidence, 5 items, modality-balanced when the paper allows."""
import collections
import random

import pyarrow.parquet as pq

from stages.core.ids import content_id
from stages.core.images import ImageStore
from tests.conftest import run_stage
from tests.mcitebench_fixtures import PAPER, element, paper_elements, write

TEXT_ONLY = "openreview:textonly"


def question(qid, paper, evidence_modality, count):
    return {"id": qid, "paper_id": paper, "question_type": "explanation", "question": f"q {qid}?", "answer": "a",
            "options": [], "gold": None, "explanation": None, "source_id": "t", "evidence_count": count,
            "evidence_modality": evidence_modality, "source_type": "single" if count == 1 else "multi", "page_idx": 0,
            "distractor_count": None}


def evidence_row(qid, paper, element_id, rank, modality):
    return {"id": content_id("ev", qid, element_id), "question_id": qid, "paper_id": paper, "element_id": element_id,
            "key": "k", "rank": rank, "modality": modality}


def _inputs(tmp_path, order_seed=None):
    elements = paper_elements(ImageStore(tmp_path / "images"))
    elements += [element(TEXT_ONLY, n, "text", f"Paragraph {n} of a text-only paper with {n * 7} measured units in it.") for n in range(5)]
    questions = [
        question("q1", PAPER, "table", 1),          # evidence: Table 2
        question("q2", PAPER, "mixed", 2),          # evidence: Table 2 + a section 4.2 paragraph
        question("q3", PAPER, "text", 1),
        question("q4", TEXT_ONLY, "text", 1),       # only text to draw from: 4 text distractors
        question("q5", TEXT_ONLY, "text", 2),       # 3 needed, 3 left: fine
        question("q6", "openreview:ghost", "text", 1),
    ]
    evidence = [
        evidence_row("q1", PAPER, f"el:{PAPER}:2:5", 0, "table"),
        evidence_row("q2", PAPER, f"el:{PAPER}:2:5", 0, "table"),
        evidence_row("q2", PAPER, f"el:{PAPER}:2:4", 1, "text"),
        evidence_row("q3", PAPER, f"el:{PAPER}:1:1", 0, "text"),
        evidence_row("q4", TEXT_ONLY, f"el:{TEXT_ONLY}:0:0", 0, "text"),
        evidence_row("q5", TEXT_ONLY, f"el:{TEXT_ONLY}:0:0", 0, "text"),
        evidence_row("q5", TEXT_ONLY, f"el:{TEXT_ONLY}:0:1", 1, "text"),
        evidence_row("q6", "openreview:ghost", "el:openreview:ghost:0:0", 0, "text"),
    ]
    if order_seed is not None:  # same content, different row order
        for rows in (elements, questions, evidence):
            random.Random(order_seed).shuffle(rows)
    return elements, questions, evidence


def _run(tmp_path, name, order_seed=None, info_count=5, seed=7):
    elements, questions, evidence = _inputs(tmp_path / name, order_seed)
    d = tmp_path / name
    el = write(d / "elements.parquet", elements, "mcitebench_elements")
    qs = write(d / "questions.parquet", questions, "mcitebench_questions")
    ev = write(d / "evidence.parquet", evidence, "mcitebench_evidence")
    run_stage("sample_distractors", "--input", f"questions={qs}", "--input", f"evidence={ev}", "--input", f"elements={el}",
              "--output", f"questions={d}/out_q.parquet", "--output", f"distractors={d}/out_d.parquet",
              "--params", f'{{"info_count": {info_count}, "seed": {seed}, "min_text_chars": 40}}')
    out_q = {q["id"]: q for q in pq.read_table(d / "out_q.parquet").to_pylist()}
    picks = collections.defaultdict(list)
    for row in sorted(pq.read_table(d / "out_d.parquet").to_pylist(), key=lambda r: r["rank"]):
        picks[row["question_id"]].append(row)
    rejects = {r["id"]: r["reason"] for r in pq.read_table(d / "out_q.parquet.rejects.parquet").to_pylist()}
    return out_q, picks, rejects, {e["id"]: e for e in elements}, evidence


def test_five_items_no_evidence_balanced(tmp_path):
    out_q, picks, rejects, elements, evidence = _run(tmp_path, "a")
    assert len(out_q) + len(rejects) == 6
    assert rejects == {"q6": "unknown_evidence"}
    ev_by_q = collections.defaultdict(set)
    for row in evidence:
        ev_by_q[row["question_id"]].add(row["element_id"])
    for qid, q in out_q.items():
        chosen = [row["element_id"] for row in picks[qid]]
        assert len(chosen) == len(set(chosen)) == q["distractor_count"]
        assert q["evidence_count"] + q["distractor_count"] == 5
        assert not set(chosen) & ev_by_q[qid]
        assert all(elements[e]["paper_id"] == q["paper_id"] and not elements[e]["is_appendix"] for e in chosen)
    # the rich paper allows balance: the five items split 2/2/1 over text, figure, table
    for qid in ("q1", "q2", "q3"):
        items = [elements[e] for e in ev_by_q[qid]] + [elements[r["element_id"]] for r in picks[qid]]
        counts = collections.Counter(e["modality"] for e in items)
        assert sorted(counts.values()) == [1, 2, 2], (qid, counts)
        labels = [e["label"] for e in items if e["modality"] != "text"]
        assert len(labels) == len(set(labels))  # a figure/table number appears once per input
    assert {r["modality"] for r in picks["q4"]} == {"text"}


def test_deterministic_whatever_the_row_order(tmp_path):
    _, first, _, _, _ = _run(tmp_path, "a")
    _, again, _, _, _ = _run(tmp_path, "b", order_seed=3)
    assert {q: [r["element_id"] for r in rows] for q, rows in first.items()} == {q: [r["element_id"] for r in rows] for q, rows in again.items()}
    _, other_seed, _, _, _ = _run(tmp_path, "c", seed=8)
    assert any([r["element_id"] for r in other_seed[q]] != [r["element_id"] for r in first[q]] for q in first)


def test_too_few_elements_is_a_reject(tmp_path):
    out_q, _, rejects, _, _ = _run(tmp_path, "a", info_count=6)
    assert rejects["q4"] == rejects["q5"] == "too_few_elements"  # 5 paragraphs, 1-2 are evidence, 4-5 needed
    assert {"q1", "q2", "q3"} <= set(out_q)


def test_min_distractors_that_leave_no_slot_for_evidence_is_one_line(tmp_path):
    elements, questions, evidence = _inputs(tmp_path)
    paths = {name: write(tmp_path / f"{name}.parquet", rows, f"mcitebench_{name}")
             for name, rows in (("elements", elements), ("questions", questions), ("evidence", evidence))}
    bad = run_stage("sample_distractors", *[a for name, path in paths.items() for a in ("--input", f"{name}={path}")],
                    "--output", f"questions={tmp_path}/q.parquet", "--output", f"distractors={tmp_path}/d.parquet",
                    "--param", "info_count=2", "--param", "min_distractors=2", check=False)
    assert bad.returncode != 0 and "min_distractors (2) must be below info_count (2)" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "q.parquet").exists()
