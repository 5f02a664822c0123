"""Judge answer accuracy (mcitebench.txt §4 "Accuracy"; prompts Tables 9 and 10).

Explanation questions are rated against the authors' response with the Table 9 rubric, locating
questions against the reference answer with Table 10 (plus the record's `meta_data.explanation`
when it has one); both give `answer_rating` 0 / 1 / 2, which score_mcitebench normalises to 0-100.
A response that is blank is rated 0 without a call (status `empty_response`). A failed judge call
writes no row: it is a reject (`invalid_answer`, raw answer and reason) and the response's
accuracy is missing, never 0. A locating response whose meta_json is not a JSON object is a reject
(`bad_meta_json`); an unknown question type is the runner's (`bad_value`, eval_responses' contract).

Inputs: responses (eval_responses).
Outputs: judgements (eval_answer_judgements, one row per response).
Params: judge (name recorded in rows), llm (judge's settings).
"""
from __future__ import annotations


from stages.core.llm import LLMClient, LLMRequest
from stages.core.stage import Input, Output, Param, Reject, Stage
from stages.core.schema_check import read_json

VERSION = "1"
PROMPTS = {"explanation": "mcitebench_judge_explanation", "locating": "mcitebench_judge_locating"}


def request_for(response: dict) -> LLMRequest:
    variables = {"question": response["question"], "reference": response["answer"], "response": response["response"]}
    if response["question_type"] == "locating":
        try:
            meta = read_json(response["meta_json"] or "{}")
        except ValueError as err:
            raise Reject("bad_meta_json", f"meta_json is not JSON: {err}") from None
        if not isinstance(meta, dict):
            raise Reject("bad_meta_json", f"meta_json is a {type(meta).__name__}, not an object")
        variables["explanation"] = str(meta.get("explanation") or "")
    return LLMRequest(id=response["id"], prompt=PROMPTS[response["question_type"]], variables=variables)


def run(ctx):
    rows, asked = [], []
    for response in ctx.read_rows("responses"):
        with ctx.item(response["id"]):  # question_type is explanation or locating (the table's contract)
            row = {"id": response["id"], "model": response["model"], "judge": ctx.params["judge"],
                   "question_type": response["question_type"], "rating": None, "status": "judged"}
            if not (response["response"] or "").strip():
                row.update(rating=0, status="empty_response")
            else:
                asked.append((row, request_for(response)))
            rows.append(row)
    with LLMClient.from_params(ctx.params["llm"], stats=ctx.stats) as client:
        answers = client.run([request for _, request in asked], desc="answer judge")
    for (row, _), answer in zip(asked, answers):
        with ctx.item(row["id"], counted=False):  # counted when read
            if not answer.ok:
                row["status"] = "failed"
                raise Reject("invalid_answer", answer.detail)
            row["rating"] = answer.value["answer_rating"]
    for row in rows:
        if row["status"] != "failed":
            ctx.stats[f"ratings_{row['status']}"] += 1
            ctx.write("judgements", [row])


STAGE = Stage(
    name="judge_answers",
    version=VERSION,
    doc=__doc__,
    inputs={"responses": Input("eval_responses from generate_answers", table="eval_responses")},
    outputs={"judgements": Output("eval_answer_judgements", "one rating per response")},
    params={
        "judge": Param(str, help="the judge's name, recorded in every row"),
        "llm": Param(dict, {}, "llm settings of the judge model", schema="llm"),
    },
    run=run,
    prompts=("mcitebench_judge_explanation", "mcitebench_judge_locating"),
    rejects={
        "bad_question_type": "the response's question type is neither explanation nor locating",
        "invalid_answer": "the judge call failed after the client's retries: the accuracy is missing, never 0",
                "bad_meta_json": "a locating response whose meta_json is no JSON object",
    },
)

if __name__ == "__main__":
    STAGE.main()
