"""Distractor construction (MCiteBench §3.4): every question's input holds its evidence plus
distractors sampled from the same paper, so that evidence + distractors = `info_count` items (5 in
the seed) with a balanced mix of text, figures and tables.

Candidates are the paper's main-body elements that are not evidence: text paragraphs of at least
`min_text_chars` characters (distinct texts), and figures/tables that have an image crop and a
label not used by the evidence (MCiteBench indexes figures and tables by their number, so a number
appears once per input). Each draw takes the modality that is rarest so far in the whole input
(evidence included) among those with candidates left, so the mix is as even as the paper allows.
Ties between modalities and the choice within a modality come from a random generator seeded by
(`seed`, question id): the same question always gets the same distractors, whatever the order of
the rows. A question whose paper cannot supply enough distractors is rejected
(`too_few_elements`); one whose evidence leaves fewer than `min_distractors` slots is rejected
(`too_much_evidence`); one whose evidence elements are not in the elements table, or that has
none, is rejected (`unknown_evidence`).

Inputs:  questions (mcitebench_questions), evidence (mcitebench_evidence), elements (mcitebench_elements)
Outputs: questions (mcitebench_questions with distractor_count, counted), distractors (mcitebench_distractors)
Params:  info_count, min_distractors, min_text_chars, seed
"""
from __future__ import annotations

import collections

from stages.core.ids import content_id, seeded_rng
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError
from stages.core.evidence import EVIDENCE_MODALITIES, label_key

VERSION = "1"


def candidates(elements: list[dict], min_text_chars: int) -> list[dict]:
    """A paper's possible distractors (before excluding a question's evidence), in reading order."""
    out, texts, labels = [], set(), set()
    for e in sorted(elements, key=lambda e: (e["reading_order"], e["id"])):
        if e["is_appendix"] or e["modality"] not in EVIDENCE_MODALITIES:
            continue
        if e["modality"] == "text":
            text = (e["text"] or "").strip()
            if len(text) >= min_text_chars and text not in texts:
                texts.add(text)
                out.append(e)
            continue
        key = label_key(e["label"])
        if e["image_sha256"] and key and key[0] == e["modality"] and not key[1][0].isalpha() and key not in labels:
            labels.add(key)
            out.append(e)
    return out


def sample(question_id: str, evidence: list[dict], pool: list[dict], k: int, seed: int) -> list[dict]:
    """Up to k distractors for one question: modality-balanced over the whole input, seeded per question."""
    rng = seeded_rng(seed, question_id)
    taken_ids = {e["id"] for e in evidence}
    taken_labels = {label_key(e["label"]) for e in evidence if e["modality"] != "text"}
    taken_texts = {(e["text"] or "").strip() for e in evidence if e["modality"] == "text"}
    pools = {m: [] for m in EVIDENCE_MODALITIES}
    for e in pool:
        if e["id"] in taken_ids or (e["modality"] == "text" and e["text"].strip() in taken_texts):
            continue
        if e["modality"] != "text" and label_key(e["label"]) in taken_labels:
            continue
        pools[e["modality"]].append(e)
    for items in pools.values():
        rng.shuffle(items)
    order = list(EVIDENCE_MODALITIES)
    rng.shuffle(order)  # tie-break between equally represented modalities
    counts = collections.Counter(e["modality"] for e in evidence)
    picked = []
    while len(picked) < k:
        open_modalities = [m for m in order if pools[m]]
        if not open_modalities:
            break
        modality = min(open_modalities, key=lambda m: counts[m])  # min keeps the first of equals
        picked.append(pools[modality].pop())
        counts[modality] += 1
    return picked


def run(ctx):
    p = ctx.params
    if p["min_distractors"] >= p["info_count"]:  # every question has an evidence item: it would reject them all
        raise StageError(f"min_distractors ({p['min_distractors']}) must be below info_count ({p['info_count']}): "
                         "a question's evidence takes at least one of its info_count items")
    elements_by_paper: dict[str, list[dict]] = collections.defaultdict(list)
    for e in ctx.read_rows("elements"):
        elements_by_paper[e["paper_id"]].append(e)
    by_id = {e["id"]: e for rows in elements_by_paper.values() for e in rows}
    pools = {paper: candidates(rows, p["min_text_chars"]) for paper, rows in elements_by_paper.items()}
    evidence: dict[str, list[dict]] = collections.defaultdict(list)
    for row in ctx.read_rows("evidence"):
        evidence[row["question_id"]].append(row)
    for q in ctx.read_rows("questions"):
        with ctx.item(q["id"]):
            missing = [row["element_id"] for row in evidence[q["id"]] if row["element_id"] not in by_id]
            if missing or not evidence[q["id"]]:
                raise Reject("unknown_evidence", f"evidence elements not in the elements table: {missing or 'none recorded'}")
            ev = [by_id[row["element_id"]] for row in evidence[q["id"]]]
            need = p["info_count"] - len(ev)
            if need < p["min_distractors"]:
                raise Reject("too_much_evidence", f"{len(ev)} evidence items leave {need} of {p['info_count']} for distractors (min {p['min_distractors']})")
            picked = sample(q["id"], ev, pools.get(q["paper_id"], []), need, p["seed"])
            if len(picked) < need:
                raise Reject("too_few_elements", f"{q['paper_id']} offers {len(picked)} distractors, {need} needed")
            ctx.write("distractors", [
                {"id": content_id("dis", q["id"], e["id"]), "question_id": q["id"], "paper_id": q["paper_id"],
                 "element_id": e["id"], "rank": rank, "modality": e["modality"]}
                for rank, e in enumerate(picked)
            ])
            ctx.write("questions", [{**q, "distractor_count": len(picked)}])
            for e in picked:
                ctx.stats[f"distractors_{e['modality']}"] += 1


STAGE = Stage(
    name="sample_distractors",
    version=VERSION,
    doc=__doc__,
    inputs={
        "questions": Input("questions with paired evidence (mcitebench_questions)", many=True, table="mcitebench_questions"),
        "evidence": Input("evidence rows (mcitebench_evidence)", many=True, table="mcitebench_evidence"),
        "elements": Input("parsed paper elements (mcitebench_elements)", many=True, table="mcitebench_elements"),
    },
    outputs={
        "questions": Output("mcitebench_questions", "questions that got their distractors"),
        "distractors": Output("mcitebench_distractors", "one row per question and distractor", counted=False),
    },
    params={
        "info_count": Param(int, 5, "evidence + distractors per question (MCiteBench: 5)", min=1),
        "min_distractors": Param(int, 1, "fewest distractors a question may have", min=0),
        "min_text_chars": Param(int, 80, "shortest text paragraph usable as a distractor", min=1),
        "seed": Param(int, 0, "sampling seed (combined with each question id)"),
    },
    run=run,
    rejects={
        "unknown_evidence": "the question's evidence elements are not in the elements table",
        "too_much_evidence": "the evidence leaves fewer than min_distractors slots of info_count",
        "too_few_elements": "the paper cannot supply enough distractors",
    },
)

if __name__ == "__main__":
    STAGE.main()
