"""Judge the citations of every cited sentence (mcitebench.txt §4 "Citation F1", Figure 3; prompts
Tables 7 and 8).

For each sentence that carries citations:
- support (Table 7): one call showing all its cited items together, rating 0 / 1 / 2;
- relevance (Table 8): one call per distinct cited item alone, rating 0 / 1.
Cited items that are not in the question's input are not shown to the judge: a relevance
judgement of such an item is 0, and a sentence none of whose citations is in the input has
support 0, both without a call (status `not_in_input`).

Figures and tables go to the judge as images when it can see them (`vision`; by default the
openai and vllm backends can, the embedded llamacpp model cannot). A text-only judge sees each
image's caption instead, or only its label when the release has no caption; every row records how
it was shown (`mode`: vision | caption | label | text when the items are all text paragraphs |
none when nothing was shown).

A failed judge call (invalid answer after the client's retries, backend error) writes no
judgement: it is a reject (`invalid_answer`, raw answer and reason) and score_mcitebench counts it
as missing, never as 0. A sentence whose response is not in the responses input is a reject
(`no_response`).

Inputs: responses (eval_responses: the items each question showed), sentences (eval_sentences).
Outputs: judgements (eval_citation_judgements).
Invariant (fan-out): each cited sentence plans 1 + (number of its citations) judgements; every
planned judgement is a row or a reject.
Params: judge (name recorded in rows), llm (judge's settings), vision.
"""
from __future__ import annotations

from stages.core.ids import content_id
from stages.core.evidence import shown
from stages.core.llm import LLMClient, LLMRequest, sees_images
from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "1"
PROMPTS = {"support": "mcitebench_judge_support", "relevance": "mcitebench_judge_relevance"}


def display_mode(items: list[dict], vision: bool) -> str:
    images = [i for i in items if i["modality"] != "text"]
    if not images:
        return "text"
    if vision:
        return "vision"
    return "caption" if all(i["caption"] for i in images) else "label"


def plan(sentence: dict, response: dict, vision: bool) -> list[dict]:
    """The judgements of one cited sentence: rows with a request to make, or already scored 0."""
    by_label = {item["label"]: item for item in response["items"]}
    cited = list(dict.fromkeys(sentence["citations"]))
    known = [by_label[c] for c in cited if c in by_label]
    base = {"response_id": sentence["response_id"], "sentence_id": sentence["id"], "model": sentence["model"]}
    planned = []
    for kind, item, parts in [("support", None, known)] + [("relevance", c, [by_label[c]] if c in by_label else []) for c in cited]:
        row = {**base, "id": content_id("judge", sentence["id"], kind, item), "kind": kind, "item": item,
               "shown": [p["label"] for p in parts], "mode": display_mode(parts, vision) if parts else "none", "request": None}
        if not parts:
            row.update(score=0, status="not_in_input")
        else:
            views, images = shown(parts, vision, with_captions=False)
            variables = {"sentence": sentence["sentence"], **({"parts": views} if kind == "support" else {"part": views[0]})}
            row.update(score=None, status="judged", request=LLMRequest(id=row["id"], prompt=PROMPTS[kind], variables=variables, images=images))
        planned.append(row)
    return planned


def run(ctx):
    params = ctx.params
    vision = sees_images(params)
    responses = {r["id"]: r for r in ctx.read_rows("responses")}
    planned = []
    for sentence in ctx.read_rows("sentences"):
        with ctx.item(sentence["id"]):
            if not sentence["citations"]:
                continue
            response = responses.get(sentence["response_id"])
            if response is None:
                ctx.stats["planned_judgements"] += 1
                raise Reject("no_response", f"response {sentence['response_id']} is not in the responses input")
            planned += plan(sentence, response, vision)
    ctx.stats["planned_judgements"] += len(planned)
    asked = [row for row in planned if row["request"] is not None]
    with LLMClient.from_params(params["llm"], stats=ctx.stats) as client:
        answers = client.run([row["request"] for row in asked], desc="citation judge")
    for row, answer in zip(asked, answers):
        with ctx.item(row["id"], counted=False):  # a planned judgement, not an input row
            if not answer.ok:
                row["status"] = "failed"
                raise Reject("invalid_answer", f"{row['kind']} of {row['sentence_id']}: {answer.detail}")
            row["score"] = answer.value["rating"]
    for row in planned:
        if row["status"] == "failed":
            continue
        ctx.stats[f"judgements_{row['status']}"] += 1
        ctx.stats[f"mode_{row['mode']}"] += 1
        row.pop("request")
        ctx.write("judgements", [{**row, "judge": params["judge"]}])


def _every_planned_judgement_accounted(ctx):
    out, planned = ctx.rows_out("judgements"), ctx.stats["planned_judgements"]
    if out + ctx.rejected != planned:
        return f"{planned} judgements planned but {out} written + {ctx.rejected} rejected"
    return None


STAGE = Stage(
    name="judge_citations",
    version=VERSION,
    doc=__doc__,
    inputs={
        "responses": Input("eval_responses: the items each question showed", table="eval_responses"),
        "sentences": Input("eval_sentences from split_citations", table="eval_sentences"),
    },
    outputs={"judgements": Output("eval_citation_judgements", "support and relevance judgements")},
    params={
        "judge": Param(str, help="the judge's name, recorded in every row"),
        "llm": Param(dict, {}, "llm settings of the judge model", schema="llm"),
        "vision": Param(bool, None, "show figures/tables as images; null = what the backend takes (llamacpp: no)"),
    },
    run=run,
    invariant=_every_planned_judgement_accounted,
    prompts=("mcitebench_judge_support", "mcitebench_judge_relevance"),
    rejects={
        "no_response": "the sentence's response is not in the responses input",
        "invalid_answer": "a judge call failed after the client's retries: counted as missing, never 0",
    },
)

if __name__ == "__main__":
    STAGE.main()
