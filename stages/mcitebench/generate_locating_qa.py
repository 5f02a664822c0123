"""Locating QA pairs (MCiteBench §3.3, prompt of Table 6): multiple-choice questions with four
options generated from single elements of a paper; the element is the question's evidence.

Candidates are main-body elements that MCiteBench can present: text paragraphs of at least
`min_text_chars` characters that state something measurable (they contain a number), tables, and
figures with a caption; figures and tables need their image crop and a numbered label (the
release names them by number). Up to `per_paper` candidates per paper are chosen, modality by
modality in turn (as the seed balances text, figures and tables), in an order seeded by (`seed`,
paper id). The prompt gets the paragraph, the table's caption and text, or the figure's caption;
with `attach_images` the crop goes along for backends that see images (a text-only backend
counts it in `llm_images_not_seen`).

Rows in are the chosen candidates (the other elements are not QA material; `elements_read` and
`candidates` in the report say how many there were). Rejects: `invalid_answer`, `refused` (the
model set the Refusal field), `question_cites_evidence` (the question names a figure, table,
section or line), `duplicate_options` (the four options are not distinct).

Inputs:  elements (mcitebench_elements)
Outputs: qa (mcitebench_qa, question_type "locating", answer = the gold option's text)
Params:  llm, per_paper, min_text_chars, seed, attach_images, max_content_chars
"""
from __future__ import annotations

import collections
import re

from stages.core.ids import content_id, seeded_rng
from stages.core.llm import LLMClient, LLMRequest
from stages.core.refs import parse_refs
from stages.core.stage import Input, Output, Param, Reject, Stage
from stages.core.evidence import EVIDENCE_MODALITIES, label_key

VERSION = "1"
PROMPT = "mcitebench_locating_qa"
LETTERS = ("A", "B", "C", "D")
_NUMBER = re.compile(r"\d")


def eligible(e: dict, min_text_chars: int) -> bool:
    if e["is_appendix"] or e["modality"] not in EVIDENCE_MODALITIES:
        return False
    text = (e["text"] or "").strip()
    if e["modality"] == "text":
        return len(text) >= min_text_chars and bool(_NUMBER.search(text))
    key = label_key(e["label"])
    return bool(e["image_sha256"] and (e["caption"] or text) and key and key[0] == e["modality"] and not key[1][0].isalpha())


def choose(elements: list[dict], per_paper: int, seed: int, paper_id: str) -> list[dict]:
    """Up to per_paper candidates, taking text, figure and table in turn, seeded per paper."""
    rng = seeded_rng(seed, paper_id)
    pools = {m: sorted((e for e in elements if e["modality"] == m), key=lambda e: (e["reading_order"], e["id"])) for m in EVIDENCE_MODALITIES}
    for pool in pools.values():
        rng.shuffle(pool)
    chosen = []
    while len(chosen) < per_paper and any(pools.values()):
        for modality in EVIDENCE_MODALITIES:
            if pools[modality] and len(chosen) < per_paper:
                chosen.append(pools[modality].pop())
    return chosen


def content(e: dict, limit: int) -> str:
    if e["modality"] == "text":
        text = e["text"].strip()
    elif e["modality"] == "table":
        text = "\n".join(t for t in ((e["caption"] or "").strip(), (e["text"] or "").strip()) if t)
    else:
        text = (e["caption"] or e["text"]).strip()
    return text if len(text) <= limit else text[:limit].rstrip() + " [...]"


def run(ctx):
    p = ctx.params
    by_paper: dict[str, list[dict]] = collections.defaultdict(list)
    for e in ctx.read_rows("elements"):
        ctx.stats["elements_read"] += 1
        if eligible(e, p["min_text_chars"]):
            by_paper[e["paper_id"]].append(e)
    chosen = [e for paper in sorted(by_paper) for e in choose(by_paper[paper], p["per_paper"], p["seed"], paper)]
    ctx.stats["candidates"] = sum(len(v) for v in by_paper.values())
    requests = [
        LLMRequest(id=e["id"], prompt=PROMPT, variables={"modality": e["modality"], "content": content(e, p["max_content_chars"])},
                   images=[e["image_sha256"]] if p["attach_images"] and e["modality"] != "text" else [])
        for e in chosen
    ]
    with LLMClient.from_params(p["llm"], stats=ctx.stats) as client:
        answers = client.run(requests, desc="locating QA")
    for e, answer in zip(chosen, answers):
        qid = content_id("mcq", "locating", e["id"])
        with ctx.item(qid):
            if not answer.ok:
                raise Reject("invalid_answer", answer.detail)
            v = answer.value
            question, options = v["Question"].strip(), [v[letter].strip() for letter in LETTERS]
            if v["Refusal"]:
                raise Reject("refused", f"{e['id']}: the generator set Refusal (question: {question})")
            cited = parse_refs(question)
            if cited:
                raise Reject("question_cites_evidence", f"{', '.join(r.label for r in cited)} in: {question}")
            if len({o.casefold() for o in options}) < len(options):
                raise Reject("duplicate_options", f"options {options}")
            ctx.write("qa", [{
                "id": qid, "paper_id": e["paper_id"], "question_type": "locating", "question": question,
                "answer": options[LETTERS.index(v["Gold"])], "references": [], "evidence_element_ids": [e["id"]],
                "options": options, "gold": v["Gold"], "explanation": v["Explanation"].strip(), "source_id": e["id"],
            }])


STAGE = Stage(
    name="generate_locating_qa",
    version=VERSION,
    doc=__doc__,
    inputs={"elements": Input("parsed paper elements (mcitebench_elements)", many=True, table="mcitebench_elements")},
    outputs={"qa": Output("mcitebench_qa", "locating multiple-choice QA pairs, one per chosen element")},
    params={
        "llm": Param(dict, {}, "the config llm: section (backend, model, cache, ...)", schema="llm"),
        "per_paper": Param(int, 3, "most locating questions generated per paper", min=0),
        "min_text_chars": Param(int, 120, "shortest text paragraph to generate from", min=1),
        "seed": Param(int, 0, "selection seed (combined with each paper id)"),
        "attach_images": Param(bool, True, "send figure/table crops to backends that see images"),
        "max_content_chars": Param(int, 3000, "element content is cut to this length in the prompt", min=100),
    },
    run=run,
    prompts=("mcitebench_locating_qa",),
    rejects={
        "invalid_answer": "the answer stayed invalid after the client's retries (raw text kept)",
        "refused": "the generator set the Refusal field",
        "question_cites_evidence": "the question names a figure, table, section or line",
        "duplicate_options": "the four options are not distinct",
    },
)

if __name__ == "__main__":
    STAGE.main()
