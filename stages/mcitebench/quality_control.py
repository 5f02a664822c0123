"""Quality control (MCiteBench §3.5): a model assigns quality labels to every (Q, A, E, D) sample,
shown whole (the question, the answer, the evidence and the distractors sampled beside it), on the
seed's criteria, relevance, clarity and evidence alignment (0 poor, 1 acceptable, 2 good;
prompts/mcitebench_quality_control.md), and samples scoring below `min_score` on any criterion are
rejected (`low_quality`, with the judge's reason). The scores are their own table, so changing the
threshold re-decides from cached calls. A sample without a schema-valid judgement is rejected
(`invalid_answer`), never kept by default; one whose evidence elements are not in the elements
table is rejected before the call (`unknown_evidence`), and so is one with a figure or table
evidence element that has no image crop to attach (`evidence_without_image`, as pair_evidence).

The seed then has annotators verify the kept samples; this stage exports the review sheet for
them: a CSV with one row per kept sample (question, answer, options, evidence keys and contents,
distractors, the judge's scores and reason) and an empty `decision` column to fill with `keep` or `reject`
(and an optional `note`). release_mcitebench imports the filled-in sheet and honours it.

Inputs:  questions (mcitebench_questions), evidence (mcitebench_evidence), distractors
         (mcitebench_distractors), elements (mcitebench_elements)
Outputs: questions (kept, counted), judgements (mcitebench_judgements, every judged question),
         review_sheet (CSV file)
Params:  llm, min_score, attach_images, max_evidence_chars
"""
from __future__ import annotations

import collections

from stages.core.llm import LLMClient, LLMRequest
from stages.core.review import write_sheet
from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "2"  # 2: the judge and the review sheet see the distractors too (§3.5 checks the whole sample)
PROMPT = "mcitebench_quality_control"
CRITERIA = ("relevance", "clarity", "evidence_alignment")
SHEET_COLUMNS = ["question_id", "question_type", "paper_id", "question", "answer", "options", "gold", "evidence", "distractors",
                 "relevance", "clarity", "evidence_alignment", "judge_reason", "decision", "note"]


def evidence_text(e: dict, limit: int) -> str:
    """What the judge reads for an element: a paragraph, a table's caption and text, a figure's caption."""
    if e["modality"] == "text":
        text = e["text"]
    elif e["modality"] == "table":
        text = "\n".join(t for t in (e["caption"], e["text"]) if t)
    else:
        text = e["caption"] or e["text"]
    text = (text or "").strip()
    return text if len(text) <= limit else text[:limit].rstrip() + " [...]"


def run(ctx):
    p = ctx.params
    elements = {e["id"]: e for e in ctx.read_rows("elements")}
    evidence: dict[str, list[dict]] = collections.defaultdict(list)
    for row in ctx.read_rows("evidence"):
        evidence[row["question_id"]].append(row)
    distractors: dict[str, list[dict]] = collections.defaultdict(list)
    for row in ctx.read_rows("distractors"):
        distractors[row["question_id"]].append(row)
    questions = ctx.read_rows("questions")
    items, requests = [], []
    for q in questions:
        with ctx.item(q["id"]):
            rows = sorted(evidence[q["id"]], key=lambda r: r["rank"])
            others = sorted(distractors[q["id"]], key=lambda r: r["rank"])
            missing = [r["element_id"] for r in rows + others if r["element_id"] not in elements]
            if missing or not rows:
                raise Reject("unknown_evidence", f"evidence elements not in the elements table: {missing or 'none recorded'}")
            shown = [{"key": r["key"], "modality": r["modality"], "content": evidence_text(elements[r["element_id"]], p["max_evidence_chars"])} for r in rows]
            shown_distractors = [{"key": elements[r["element_id"]]["label"] or f"D{r['rank']}", "modality": r["modality"],
                                  "content": evidence_text(elements[r["element_id"]], p["max_evidence_chars"])} for r in others]
            cropless = [r["element_id"] for r in rows if r["modality"] != "text" and not elements[r["element_id"]]["image_sha256"]]
            if p["attach_images"] and cropless:
                raise Reject("evidence_without_image", f"figure/table evidence without an image crop: {cropless}")
            images = [elements[r["element_id"]]["image_sha256"] for r in rows if p["attach_images"] and r["modality"] != "text"]
            answer = q["answer"] if q["question_type"] == "explanation" else f"{q['gold']}. {q['answer']}"
            items.append((q, shown, shown_distractors))
            requests.append(LLMRequest(id=q["id"], prompt=PROMPT, images=images, variables={
                "question_type": q["question_type"], "question": q["question"], "answer": answer, "evidence": shown,
                "distractors": shown_distractors}))
    with LLMClient.from_params(p["llm"], stats=ctx.stats) as client:
        answers = client.run(requests, desc="quality control")
    sheet = []
    for (q, shown, shown_distractors), answer in zip(items, answers):
        with ctx.item(q["id"], counted=False):  # counted when read
            if not answer.ok:
                ctx.write("judgements", [{"question_id": q["id"], **{c: None for c in CRITERIA}, "reason": answer.error, "decision": "reject"}])
                raise Reject("invalid_answer", answer.detail)
            scores = {c: answer.value[c] for c in CRITERIA}
            reason = answer.value["reason"].strip()
            low = [c for c in CRITERIA if scores[c] < p["min_score"]]
            ctx.write("judgements", [{"question_id": q["id"], **scores, "reason": reason, "decision": "reject" if low else "keep"}])
            if low:
                raise Reject("low_quality", f"{', '.join(f'{c}={scores[c]}' for c in low)} < {p['min_score']}: {reason}")
            ctx.write("questions", [q])
            sheet.append({
                "question_id": q["id"], "question_type": q["question_type"], "paper_id": q["paper_id"], "question": q["question"],
                "answer": q["answer"], "options": " | ".join(f"{letter}. {option}" for letter, option in zip("ABCD", q["options"])), "gold": q["gold"] or "",
                "evidence": "\n".join(f"[{s['key']}] ({s['modality']}) {s['content']}" for s in shown),
                "distractors": "\n".join(f"[{s['key']}] ({s['modality']}) {s['content']}" for s in shown_distractors),
                **scores, "judge_reason": reason, "decision": "", "note": "",
            })
    write_sheet(ctx.output_path("review_sheet"), SHEET_COLUMNS, sheet)
    ctx.stats["review_sheet_rows"] = len(sheet)


STAGE = Stage(
    name="quality_control",
    version=VERSION,
    doc=__doc__,
    inputs={
        "questions": Input("questions with evidence and distractors (mcitebench_questions)", many=True, table="mcitebench_questions"),
        "evidence": Input("evidence rows (mcitebench_evidence)", many=True, table="mcitebench_evidence"),
        "distractors": Input("distractor rows (mcitebench_distractors)", many=True, table="mcitebench_distractors"),
        "elements": Input("parsed paper elements (mcitebench_elements)", many=True, table="mcitebench_elements"),
    },
    outputs={
        "questions": Output("mcitebench_questions", "questions that pass the automatic quality check"),
        "judgements": Output("mcitebench_judgements", "the judge's scores and decision per question", counted=False, audit=True),
        "review_sheet": Output(None, "CSV for human verification: one row per kept sample, decision column to fill"),
    },
    params={
        "llm": Param(dict, {}, "the config llm: section (backend, model, cache, ...)", schema="llm"),
        "min_score": Param(int, 1, "every criterion must score at least this (0-2) for a sample to be kept", min=0, max=2),
        "attach_images": Param(bool, True, "send figure/table evidence crops to backends that see images"),
        "max_evidence_chars": Param(int, 1500, "each evidence item is cut to this length in the prompt", min=100),
    },
    run=run,
    prompts=("mcitebench_quality_control",),
    rejects={
        "unknown_evidence": "the sample's evidence elements are not in the elements table",
        "evidence_without_image": "a figure or table evidence element without an image crop to attach",
        "invalid_answer": "no schema-valid judgement after the client's retries",
        "low_quality": "a criterion scored below min_score (the judge's reason in the detail)",
    },
)

if __name__ == "__main__":
    STAGE.main()
