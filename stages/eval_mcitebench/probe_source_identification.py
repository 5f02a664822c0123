"""Source-identification probe (mcitebench.txt §5.3 RQ1, prompt Table 11, results as Table 3).

Built on the single-source explanation questions: the model sees the question and the question's
5 items as options A-E (1 correct source + 4 distractors, in the order generate_answers showed
them) and must begin its answer with the letter of the most helpful source. Text options are shown
as their paragraph; figure/table options as images when the model sees images, else by caption
(or label only when the release has no caption), as in generate_answers.

The choice is the letter the answer begins with (after optional markup such as "**", "(", or
"Answer:"); an answer that begins with no option letter has no choice and counts as wrong (the
model answered, but chose nothing). A failed model call is a reject (`invalid_answer`) and is not
scored. Questions that are not single-source explanation questions are outside the probe: they
are not read as input rows and are counted in the report (`not_probed`).

Inputs: responses (eval_responses of the same model: the items and the question).
Outputs: probe (eval_probe).
Rejects: bad_options (fewer than 2 or more than 5 items, or not exactly one evidence item),
invalid_answer.
Params: model, llm, vision.
"""
from __future__ import annotations

import re
import string

from stages.core.ids import content_id
from stages.core.evidence import shown
from stages.core.llm import LLMClient, LLMRequest, sees_images
from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "1"
PROMPT = "mcitebench_probe_source"
_CHOICE = re.compile(r"^[\s*_#>\"'(\[]*(?:(?i:answer|option|source)\s*[:\-]?\s*[*(\[]*)?([A-E])(?![A-Za-z])")


def parse_choice(text: str, letters: str) -> str | None:
    """The upper-case option letter an answer begins with, or None."""
    match = _CHOICE.match(text or "")
    return match.group(1) if match and match.group(1) in letters else None


def run(ctx):
    params = ctx.params
    vision = sees_images(params)
    rows, requests = [], []
    for response in ctx.read_rows("responses"):
        if response["question_type"] != "explanation" or response["source"] != "single":
            ctx.stats["not_probed"] += 1
            continue
        items = response["items"]
        with ctx.item(response["id"]):
            if not 2 <= len(items) <= 5:
                raise Reject("bad_options", f"{len(items)} items; the probe takes 2-5 options")
            evidence_items = sum(1 for item in items if item["is_evidence"])
            if evidence_items != 1:
                raise Reject("bad_options", f"{evidence_items} evidence items; a single-source question shows exactly one")
            letters = string.ascii_uppercase[: len(items)]
            views, images = shown(items, vision, with_captions=False)
            options = [{**view, "letter": letter} for view, letter in zip(views, letters)]
            gold = next(letter for letter, item in zip(letters, items) if item["is_evidence"])
            evidence = next(item for item in items if item["is_evidence"])
            rows.append({
                "id": content_id("probe", params["model"], response["question_id"]),
                "model": params["model"], "question_id": response["question_id"], "modality": evidence["modality"],
                "options": [item["label"] for item in items], "gold_letter": gold, "vision": vision,
            })
            requests.append(LLMRequest(id=rows[-1]["id"], prompt=PROMPT, variables={"question": response["question"], "options": options}, images=images))
    with LLMClient.from_params(params["llm"], stats=ctx.stats) as client:
        answers = client.run(requests, desc=f"probe {params['model']}")
    for row, answer in zip(rows, answers):
        with ctx.item(row["id"], counted=False):  # counted when read
            if not answer.ok:
                raise Reject("invalid_answer", answer.detail)
            choice = parse_choice(answer.value, string.ascii_uppercase[: len(row["options"])])
            ctx.stats["no_choice"] += choice is None
            ctx.write("probe", [{**row, "choice": choice, "correct": choice == row["gold_letter"], "raw": answer.raw}])


STAGE = Stage(
    name="probe_source_identification",
    version=VERSION,
    doc=__doc__,
    inputs={"responses": Input("eval_responses of the same model", table="eval_responses")},
    outputs={"probe": Output("eval_probe", "one row per single-source explanation question")},
    params={
        "model": Param(str, help="the candidate's name"),
        "llm": Param(dict, {}, "llm settings of the candidate", schema="llm"),
        "vision": Param(bool, None, "show figures/tables as images; null = what the backend takes (llamacpp: no)"),
    },
    run=run,
    prompts=("mcitebench_probe_source",),
    rejects={
        "bad_options": "the response shows fewer than 2 or more than 5 items, or not exactly one evidence item",
        "invalid_answer": "the model call failed after the client's retries (not scored)",
    },
)

if __name__ == "__main__":
    STAGE.main()
