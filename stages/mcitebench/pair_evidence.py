"""Evidence pairing (MCiteBench §3.4): resolve each question's explicit references to the paper's
parsed elements, automatically where the seed used human annotators (the review sheet of
quality_control keeps the human round-trip).

An explanation answer's references are found by the shared parser (stages/core/refs.py) and
resolved in the paper's elements (MinerU output, table mcitebench_elements):
- "Figure 3" / "Table 2": the figure/table element with that label (sub-figures are folded);
- "Section 4.2": the text paragraphs of section 4.2 and its subsections;
- "Line 39" / "Lines 39-41": the paragraph(s) whose margin line numbers hold those lines, where the
  PDF has line numbers; "Section 4.3, Line 39" prefers paragraphs of section 4.3 and falls back to
  the whole section when the PDF has no line numbers.
An explanation answer without any explicit reference is rejected (`no_reference`). A question is
rejected when any reference points into the appendix (`appendix_reference`: the seed
keeps main-body evidence only), cannot be resolved (`unresolved_reference`), is a figure/table
without an image crop (`evidence_without_image`), is an element of another kind than text, figure
or table (`unsupported_evidence`: an equation a locating question or the review names), or when it
needs more than `max_evidence` elements (`too_much_evidence`: evidence plus distractors form a
fixed-size input). A locating
question already names its element (generate_locating_qa), which is checked the same way.

Each question records its evidence modality (text, figure, table, or mixed when several) and
whether it is single- or multi-source (one evidence element or several).

Human pairing (§3.4, App. C.1: annotators map each reference to its content): the stage exports
`pairing_sheet.csv` through the review round trip of stages/core/review.py, one row per question
and reference with the parser's proposal (element ids and a preview) or the reason it found none,
and an empty `elements` column. In an edited copy (config `mcitebench.pairing_review`, the
optional input `review`), `elements` overrides the parser for that reference: element ids of the
paper separated by spaces, or `none` to drop the reference; an empty cell keeps the proposal. An
override can also pair a reference the parser left unresolved. Unknown element ids fail naming
the sheet's line.

Inputs:  qa (mcitebench_qa, explanation and locating shards), elements (mcitebench_elements),
         review (optional: the edited pairing sheet)
Outputs: questions (mcitebench_questions, counted), evidence (mcitebench_evidence, one row per
         question and element), pairing_sheet (CSV file)
Params:  max_evidence
Invariant: QA rows in = questions out + rejected.
"""
from __future__ import annotations

import collections

from stages.core.ids import content_id
from stages.core.evidence import label_key
from stages.core.refs import Ref, parse_refs, unique_refs
from stages.core.review import read_sheet, write_sheet
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "3"  # 3: an equation element is no evidence (unsupported_evidence)


def modality_of(modalities: list[str]) -> str:
    kinds = set(modalities)
    return kinds.pop() if len(kinds) == 1 else "mixed"


def evidence_key(element: dict) -> str:
    """How a locating question's element is named in MCiteBench's evidence_keys."""
    if element["modality"] in ("figure", "table") and element["label"]:
        return element["label"]
    if element["section_number"]:
        return f"Section {element['section_number']}"
    return f"Page {element['page'] + 1}"


class PaperIndex:
    """One paper's elements, indexed the ways references point at them."""

    def __init__(self, elements: list[dict]):
        self.elements = sorted(elements, key=lambda e: (e["reading_order"], e["id"]))
        self.by_id = {e["id"]: e for e in self.elements}
        self.by_label: dict[tuple[str, str], list[dict]] = collections.defaultdict(list)
        for e in self.elements:
            key = label_key(e["label"]) if e["modality"] in ("figure", "table") else None
            if key and key[0] == e["modality"]:
                self.by_label[key].append(e)
        self.paragraphs = [e for e in self.elements if e["modality"] == "text"]
        self.has_line_numbers = any(e["line_start"] is not None for e in self.paragraphs)

    def in_section(self, number: str) -> list[dict]:
        return [e for e in self.elements if e["section_number"] and (e["section_number"] == number or e["section_number"].startswith(number + "."))]

    def holding_lines(self, lines: tuple[int, int], candidates: list[dict]) -> list[dict]:
        first, last = lines
        return [e for e in candidates if e["line_start"] is not None and e["line_start"] <= last and (e["line_end"] if e["line_end"] is not None else e["line_start"]) >= first]

    def resolve(self, ref: Ref) -> list[dict]:
        """The main-body elements a reference points at; raises Reject."""
        if ref.kind == "appendix" or ref.lettered:
            raise Reject("appendix_reference", f"{ref.label} is appendix material")
        if ref.kind in ("figure", "table"):
            found = self.by_label.get((ref.kind, ref.number), [])
            element = _main_body(ref, found, f"no {ref.kind} labelled {ref.label}")[0]  # one element per label
            if not element["image_sha256"]:
                raise Reject("evidence_without_image", f"{ref.label} ({element['id']}) has no image crop")
            return [element]
        if ref.kind == "line":
            if not self.has_line_numbers:
                raise Reject("unresolved_reference", f"{ref.label}: the parsed paper has no line numbers")
            return _main_body(ref, self.holding_lines(ref.lines, self.paragraphs), f"no paragraph holds {ref.label}")
        section = [e for e in self.in_section(ref.number) if e["modality"] == "text"]
        if ref.lines and self.has_line_numbers:
            found = self.holding_lines(ref.lines, section) or self.holding_lines(ref.lines, self.paragraphs)
            return _main_body(ref, found, f"no paragraph holds {ref.label}")
        return _main_body(ref, section, f"no text paragraphs in {ref.label}")


def _main_body(ref: Ref, found: list[dict], missing: str) -> list[dict]:
    if not found:
        raise Reject("unresolved_reference", missing)
    kept = [e for e in found if not e["is_appendix"]]
    if not kept:
        raise Reject("appendix_reference", f"{ref.label} resolves to appendix elements only")
    return kept


SHEET_COLUMNS = ["question_id", "paper_id", "question_type", "question", "answer", "reference", "proposed",
                 "proposed_evidence", "problem", "elements", "note"]


def _preview(e: dict) -> str:
    text = (e["label"] or e["text"] or "").strip() if e["modality"] != "text" else (e["text"] or "").strip()
    return f"{e['id']} ({e['modality']}): {text[:120]}"


def sheet_rows(qa: dict, index: PaperIndex) -> list[dict]:
    """The pairing sheet's rows of one question: each reference with the parser's proposal or problem."""
    if qa["question_type"] == "locating":
        found = [(evidence_key(index.by_id[i]) if i in index.by_id else i, [i], None) for i in qa["evidence_element_ids"]]
    else:
        found = []
        for ref in unique_refs(parse_refs(qa["answer"])):
            try:
                found.append((ref.label, [e["id"] for e in index.resolve(ref)], None))
            except Reject as why:
                found.append((ref.label, [], f"{why.reason}: {why.detail}"))
    base = {k: qa[k] for k in ("paper_id", "question_type", "question", "answer")}
    return [{"question_id": qa["id"], **base, "reference": label, "proposed": " ".join(ids),
             "proposed_evidence": "\n".join(_preview(index.by_id[i]) for i in ids if i in index.by_id),
             "problem": problem or "", "elements": "", "note": ""} for label, ids, problem in found]


def read_pairing_review(path: str) -> dict[tuple[str, str], list[str]]:
    """(question id, reference) -> element ids ([] = drop the reference) from an edited pairing sheet."""
    rows = read_sheet(path, "question_id", ["reference", "elements"], item=("question_id", "reference"))
    return {(r["question_id"], r["reference"]): ([] if r["elements"].lower() == "none" else r["elements"].split())
            for r in rows if r["elements"]}


def _reviewed(qa: dict, label: str, ids: list[str], index: PaperIndex) -> list[dict]:
    unknown = [i for i in ids if i not in index.by_id]
    if unknown:
        raise StageError(f"pairing review: {qa['id']} / {label}: {unknown} are not elements of {qa['paper_id']}")
    return [index.by_id[i] for i in ids]


EVIDENCE_MODALITIES = ("text", "figure", "table")  # MCiteBench's evidence (an equation element is none of them)


def pair(qa: dict, index: PaperIndex, review: dict[tuple[str, str], list[str]] | None = None) -> list[tuple[str, dict]]:
    """(evidence key, element) pairs of one question, in reference order, the pairing review's
    overrides applied; raises Reject."""
    pairs = _pairs(qa, index, review or {})
    for label, element in pairs:
        if element["modality"] not in EVIDENCE_MODALITIES:
            raise Reject("unsupported_evidence", f"{label}: {element['id']} is a {element['modality']} element, "
                                                 "not text, a figure or a table")
    return pairs


def _pairs(qa: dict, index: PaperIndex, review: dict[tuple[str, str], list[str]]) -> list[tuple[str, dict]]:
    if qa["question_type"] == "locating":
        pairs = []
        for element_id in qa["evidence_element_ids"]:
            element = index.by_id.get(element_id)
            label = evidence_key(element) if element else element_id
            if (qa["id"], label) in review:
                pairs += [(label, e) for e in _reviewed(qa, label, review[(qa["id"], label)], index)]
                continue
            if element is None:
                raise Reject("unresolved_reference", f"element {element_id} is not among the paper's elements")
            if element["modality"] in ("figure", "table") and not element["image_sha256"]:
                raise Reject("evidence_without_image", f"{element_id} has no image crop")
            pairs.append((evidence_key(element), element))
        return pairs
    refs = unique_refs(parse_refs(qa["answer"]))
    if not refs:
        raise Reject("no_reference", "the answer has no explicit reference")
    pairs, seen = [], set()
    for ref in refs:
        reviewed = review.get((qa["id"], ref.label))
        for element in index.resolve(ref) if reviewed is None else _reviewed(qa, ref.label, reviewed, index):
            if element["id"] not in seen:
                seen.add(element["id"])
                pairs.append((ref.label, element))
    return pairs


def run(ctx):
    by_paper: dict[str, list[dict]] = collections.defaultdict(list)
    for element in ctx.read_rows("elements"):
        by_paper[element["paper_id"]].append(element)
    indexes = {paper: PaperIndex(elements) for paper, elements in by_paper.items()}
    empty = PaperIndex([])
    max_evidence = ctx.params["max_evidence"]
    review = read_pairing_review(ctx.input_path("review")) if ctx.has_input("review") else {}
    ctx.stats["pairing_review_overrides"] = len(review)
    sheet = []
    for qa in ctx.read_rows("qa"):
        sheet += sheet_rows(qa, indexes.get(qa["paper_id"], empty))
        with ctx.item(qa["id"]):
            pairs = pair(qa, indexes.get(qa["paper_id"], empty), review)
            if not pairs:
                raise Reject("unresolved_reference", f"{qa['paper_id']}: no evidence element")
            if len(pairs) > max_evidence:
                raise Reject("too_much_evidence", f"{len(pairs)} evidence elements > max_evidence {max_evidence}: " + ", ".join(k for k, _ in pairs))
            write_question(ctx, qa, pairs)
    ctx.stats["evidence_rows"] = ctx.rows_out("evidence")
    write_sheet(ctx.output_path("pairing_sheet"), SHEET_COLUMNS, sheet)
    ctx.stats["pairing_sheet_rows"] = len(sheet)


def write_question(ctx, qa: dict, pairs: list[tuple[str, dict]]) -> None:
    modalities = [element["modality"] for _, element in pairs]
    ctx.write("evidence", [
        {"id": content_id("ev", qa["id"], element["id"]), "question_id": qa["id"], "paper_id": qa["paper_id"],
         "element_id": element["id"], "key": key, "rank": rank, "modality": element["modality"]}
        for rank, (key, element) in enumerate(pairs)
    ])
    ctx.write("questions", [{
        "id": qa["id"], "paper_id": qa["paper_id"], "question_type": qa["question_type"], "question": qa["question"],
        "answer": qa["answer"], "options": qa["options"], "gold": qa["gold"], "explanation": qa["explanation"],
        "source_id": qa["source_id"], "evidence_count": len(pairs), "evidence_modality": modality_of(modalities),
        "source_type": "single" if len(pairs) == 1 else "multi", "page_idx": pairs[0][1]["page"], "distractor_count": None,
    }])
    ctx.stats[f"evidence_{modality_of(modalities)}"] += 1


STAGE = Stage(
    name="pair_evidence",
    version=VERSION,
    doc=__doc__,
    inputs={
        "qa": Input("QA pairs (mcitebench_qa): explanation and locating", many=True, table="mcitebench_qa"),
        "elements": Input("parsed paper elements (mcitebench_elements)", many=True, table="mcitebench_elements"),
        "review": Input("edited pairing sheet (CSV: question_id, reference, elements)", optional=True, kind="file"),
    },
    outputs={
        "questions": Output("mcitebench_questions", "questions with their evidence modality and source type"),
        "evidence": Output("mcitebench_evidence", "one row per question and evidence element", counted=False),
        "pairing_sheet": Output(None, "CSV for human pairing review: one row per question and reference, elements column to fill"),
    },
    params={"max_evidence": Param(int, 4, "most evidence elements a question may have (the input holds evidence + distractors)", min=1)},
    run=run,
    rejects={
        "no_reference": "an explanation answer with no explicit reference",
        "appendix_reference": "a reference points into the appendix (the seed keeps main-body evidence only)",
        "unresolved_reference": "a reference resolves to no element of the parsed paper",
        "evidence_without_image": "a figure or table evidence element without an image crop",
        "too_much_evidence": "more than max_evidence evidence elements",
        "unsupported_evidence": "an evidence element that is not text, a figure or a table (an equation: a locating question or a review naming one)",
    },
)

if __name__ == "__main__":
    STAGE.main()
