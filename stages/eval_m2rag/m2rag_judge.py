"""Judge M2RAG responses with the eight metrics of m2rag.txt §6 and App. D.

Per response:
- fluency (Figure 17) and relevance (Figure 18): one call each on the answer with its image
  placeholders removed, a 0-10 score;
- context precision and faithfulness as RAGAS defines them (App. D: the seed used RAGAS with
  GPT-4o-mini). The `ragas` package (0.4.3) is not used: it needs LangChain, langchain-openai,
  instructor and the openai SDK and calls models through its own wrappers, not this project's
  client (cache, schema checks, the offline embedded model), so its two definitions are
  implemented here on the model layer (stages.eval_m2rag.m2rag_eval holds the arithmetic, checked
  against ragas 0.4.3's `_calculate_average_precision` and faithfulness `_compute_score`). Contexts are
  the pages' selected text (one context per page, rank order) and then the captions of the
  answer's images. Context precision: one verdict call per context; faithfulness: one call
  breaking the answer into statements, then one call giving a verdict per statement against all
  contexts;
- image coherence, helpfulness and reference (Figures 19-21): per output image, with the answer
  text above and below it (other placeholders removed, `context_chars` each side), a 0-10 score;
- image recall (Figure 22): per input image the answer did not use, whether it should be inserted
  into the answer (0/1), the answer's images standing as "<image>: caption" lines.
A judge that sees images (`vision`) gets the image (its thumbnail) in place; otherwise its caption
(row `mode`). Scores are JSON fields checked by the prompt's schema: an integer off the 0-10 (or
0/1) scale is an invalid answer, retried by the client, then a failed judgement.

Every planned judgement is a row; a failed call (invalid after the retries, or a backend error)
is a row with status `failed`, no score, the raw text and the client's `error` ("backend: ..." when
no answer came, "schema: ..." when the judge's JSON was off its scale), and also a reject
(`invalid_answer`, reason and raw text): strict counts it as missing, never as 0; the reference
mode reads a score from whatever the judge replied, as the public code does, and never from a backend
error (stages.eval_m2rag.m2rag_eval.reference_score).

Rejects: invalid_answer (above), bad_response (an output image names no input image, or two input
images share a number: the row is not what m2rag_generate writes).
Inputs: responses (m2rag_responses).
Outputs: judgements (m2rag_judgements).
Invariant (fan-out): rows written = judgements planned; rejects = the failed ones + bad responses.
Params: judge (name recorded in rows), llm, vision, max_tokens, context_chars.
"""
from __future__ import annotations

from stages.core.ids import content_id
from stages.core.llm import LLMClient, LLMRequest, sees_images
from stages.core.llm.openai import IMAGE_SLOT
from stages.eval_m2rag.m2rag_eval import document_with_captions, image_contexts, strip_placeholders
from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "3"  # 3: context precision + 1e-10 (ragas); equal captions of two images kept
SCORE_PROMPTS = {"fluency": "m2rag_judge_fluency", "relevance": "m2rag_judge_relevance", "image_coherence": "m2rag_judge_image_coherence",
                 "image_helpfulness": "m2rag_judge_image_helpfulness", "image_reference": "m2rag_judge_image_reference"}


class Planner:
    """Judgement rows of one response, each with the request that scores it."""

    def __init__(self, response: dict, params: dict, vision: bool):
        self.response, self.params, self.vision = response, params, vision
        self.rows: list[dict] = []

    def add(self, metric: str, position: int, unit: str, prompt: str, variables: dict, image: dict | None = None) -> dict:
        r = self.response
        row = {"id": content_id("m2rag-judge", r["id"], metric, position), "response_id": r["id"], "model": r["model"],
               "approach": r["approach"], "query_id": r["query_id"], "judge": self.params["judge"], "metric": metric,
               "position": position, "unit": unit, "score": None, "status": "planned", "mode": "text", "raw": "", "error": None}
        images = []
        if image is not None:
            shown = self.vision and image["shown"] == "image" and image["thumb_sha256"]
            row["mode"] = "vision" if shown else "caption"
            variables = {**variables, "slot": IMAGE_SLOT if shown else "", "caption": image["caption"] or "(no caption)"}
            images = [image["thumb_sha256"]] if shown else []
        sampling = {"max_tokens": self.params["max_tokens"]} if self.params["max_tokens"] else None
        row["request"] = LLMRequest(id=row["id"], prompt=prompt, variables=variables, images=images, sampling=sampling)
        self.rows.append(row)
        return row


def contexts_of(response: dict) -> list[str]:
    """RAGAS's retrieved contexts as few_shot_evaluator.py lists them: the pages, then the caption of
    each output image (each image once: a repeat was never placed), two images' equal captions
    twice; a page without text or an image without caption has nothing for the judge and is left out."""
    by_n = {i["n"]: i for i in response["inputs"]}
    pages = [f"{c['title']}\n{c['text']}".strip() for c in response["contexts"] if c["text"]]
    return pages + [f"Image: {by_n[o['n']]['caption']}" for o in response["output_images"] if by_n[o["n"]]["caption"]]


def plan_first(response: dict, params: dict, vision: bool) -> Planner:
    """Every judgement whose request needs no earlier answer (all but faithfulness' verdicts)."""
    plan = Planner(response, params, vision)
    text = strip_placeholders(response["response"])
    for metric in ("fluency", "relevance"):
        plan.add(metric, 0, "answer text", SCORE_PROMPTS[metric], {"text": text, "query": response["query"]})
    for k, context in enumerate(contexts_of(response)):
        plan.add("context_precision", k, f"context {k + 1}", "m2rag_ragas_context", {"query": response["query"], "context": context, "answer": text})
    plan.add("faithfulness", 0, "statements of the answer", "m2rag_ragas_statements", {"query": response["query"], "answer": text})
    by_n = {i["n"]: i for i in response["inputs"]}
    for k, ((above, below), out) in enumerate(zip(image_contexts(response["response"], response["output_images"], params["context_chars"]),
                                                   response["output_images"])):
        for metric in ("image_coherence", "image_helpfulness", "image_reference"):
            plan.add(metric, k, f"output image {k + 1} (image_{out['n']})", SCORE_PROMPTS[metric], {"above": above, "below": below}, by_n[out["n"]])
    used = {o["n"] for o in response["output_images"]}
    document = document_with_captions(response["response"], response["output_images"], {n: i["caption"] for n, i in by_n.items()})
    for image in response["inputs"]:
        if image["n"] not in used:
            plan.add("image_recall", image["n"], f"unused input image_{image['n']}", "m2rag_judge_image_recall", {"document": document}, image)
    return plan


def settle(ctx, rows: list[dict], answers) -> None:
    for row, answer in zip(rows, answers):
        row["raw"] = answer.raw
        with ctx.item(row["id"], counted=False):  # a planned judgement, not an input row
            if not answer.ok:
                row["status"], row["error"] = "failed", answer.error
                raise Reject("invalid_answer", f"{row['metric']} of {row['response_id']} ({row['unit']}): {answer.detail}")
            row["status"] = "judged"
            if "statements" in answer.value:  # faithfulness step 1: kept for step 2, not a score
                row["statements"] = [s.strip() for s in answer.value["statements"] if s.strip()]
            else:
                row["score"] = float(answer.value["score"] if "score" in answer.value else answer.value["verdict"])


def run(ctx):
    params = ctx.params
    vision = sees_images(params)
    plans = []
    for response in ctx.read_rows("responses"):
        with ctx.item(response["id"]):
            inputs = [i["n"] for i in response["inputs"]]
            unknown = sorted({o["n"] for o in response["output_images"]} - set(inputs))
            if unknown or len(set(inputs)) < len(inputs):
                raise Reject("bad_response", f"output images {unknown} name no input image" if unknown else f"input images numbered twice: {inputs}")
            plans.append(plan_first(response, params, vision))
    rows = [row for plan in plans for row in plan.rows]
    with LLMClient.from_params(params["llm"], stats=ctx.stats) as client:
        settle(ctx, rows, client.run([row["request"] for row in rows], desc="m2rag judge"))
        # faithfulness, step 2: the statements' verdicts against all contexts, one call per response
        verdict_rows, verdict_requests = [], []
        for plan in plans:
            statements_row = next(r for r in plan.rows if r["metric"] == "faithfulness")
            if statements_row["status"] != "judged":
                continue
            plan.rows.remove(statements_row)  # the statements are not a score: their verdicts are
            statements = statements_row["statements"]
            if not statements:
                ctx.stats["answers_without_statements"] += 1  # RAGAS NaN: faithfulness is missing
                continue
            context = "\n\n".join(contexts_of(plan.response))
            check = _same_length(len(statements))
            base = {k: statements_row[k] for k in ("response_id", "model", "approach", "query_id", "judge")}
            group = [{**base, "id": content_id("m2rag-judge", plan.response["id"], "faithfulness", i), "metric": "faithfulness",
                      "position": i, "unit": s, "score": None, "status": "planned", "mode": "text", "raw": "", "error": None}
                     for i, s in enumerate(statements)]
            plan.rows.extend(group)
            verdict_rows.append(group)
            sampling = {"max_tokens": params["max_tokens"]} if params["max_tokens"] else None
            verdict_requests.append(LLMRequest(id=f"{plan.response['id']}/nli", prompt="m2rag_ragas_nli",
                                               variables={"context": context, "statements": statements}, sampling=sampling, parse=check))
        answers = client.run(verdict_requests, desc="m2rag faithfulness") if verdict_requests else []
    for group, answer in zip(verdict_rows, answers):
        for i, row in enumerate(group):
            row["raw"] = answer.raw
            with ctx.item(row["id"], counted=False):
                if not answer.ok:
                    row["status"], row["error"] = "failed", answer.error
                    raise Reject("invalid_answer", f"faithfulness of {row['response_id']} (statement {i + 1}): {answer.detail}")
                row["status"], row["score"] = "judged", float(answer.value[i])
    for plan in plans:
        for row in plan.rows:
            row.pop("request", None)
            row.pop("statements", None)
            ctx.stats["judgements_planned"] += 1
            ctx.stats[f"judgements_{row['status']}"] += 1
            ctx.stats[f"{row['metric']}_{row['status']}"] += 1
            ctx.write("judgements", [row])


def _same_length(n: int):
    def parse(value: dict) -> list[int]:
        if len(value["verdicts"]) != n:
            raise ValueError(f"{len(value['verdicts'])} verdicts for {n} statements")
        return [v["verdict"] for v in value["verdicts"]]
    return parse


def _planned_rows_written(ctx):
    failed = ctx.stats["judgements_failed"]
    if ctx.rows_out("judgements") != ctx.stats["judgements_planned"] or ctx.rejected != failed + ctx.rejected_by_reason["bad_response"]:
        return (f"{ctx.stats['judgements_planned']} judgements planned, {ctx.rows_out('judgements')} written; "
                f"{failed} failed, {ctx.rejected} rejected")
    return None


STAGE = Stage(
    name="m2rag_judge",
    version=VERSION,
    doc=__doc__,
    inputs={"responses": Input("m2rag_responses from m2rag_generate", table="m2rag_responses")},
    outputs={"judgements": Output("m2rag_judgements", "every planned judgement, failed ones included without a score")},
    params={
        "judge": Param(str, help="the judge's name, recorded in every row", pattern=Param.PLAIN_NAME),
        "llm": Param(dict, {}, "llm settings of the judge model", schema="llm"),
        "vision": Param(bool, None, "show images to the judge; null = what the backend takes (llamacpp: no)"),
        "max_tokens": Param(int, 0, "token budget of each judge call (0 = the prompts' defaults)", min=0),
        "context_chars": Param(int, 2000, "text above and below an output image shown to the judge, characters each side (0 = all)", min=0),
    },
    run=run,
    invariant=_planned_rows_written,
    prompts=("m2rag_judge_fluency", "m2rag_judge_relevance", "m2rag_judge_image_coherence", "m2rag_judge_image_helpfulness",
             "m2rag_judge_image_reference", "m2rag_judge_image_recall", "m2rag_ragas_context", "m2rag_ragas_statements",
             "m2rag_ragas_nli"),
    rejects={"invalid_answer": "a judge call failed after the client's retries (also a row with status failed; reason and raw text)", "bad_response": "the response's output images name no input image"},
)

if __name__ == "__main__":
    STAGE.main()
