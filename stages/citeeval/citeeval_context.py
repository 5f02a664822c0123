"""Context attribution (citeeval.txt §2.3, §4.1; prompt Table 10): which context each statement comes
from: 1 query, 2 retrieval, 3 response, 4 model knowledge. Only retrieval statements are applicable
for citation evaluation (§2.3); the others are N/A.

One call per response shows every statement, citations removed (§4.1: no bias from the citations,
and co-references resolve across statements). The answer is XML-tagged as the seed asks: a
`<category sentence_id="i">` holding 1-4 for every statement i. A category that is missing, empty,
not 1-4, or given twice with different values makes the whole answer invalid: the client retries
it, then the statements the answer was needed for are rejected with its raw text; nothing is
defaulted (CiteEval's public code defaults a missing category to 2, see the score stage's
reference-compatible mode).

Rules before the model (`rule` column):
- `cited`: a statement that carries a citation is retrieval (2), whatever the model says (the
  public implementation does the same: cited statements are always evaluated);
- `unanswerable`: the single statement "No answer is found" is 3 (Response), Table 10's tie rule;
- `model`: the model's category. A response whose statements are all decided by the rules makes
  no call.

Inputs: responses (citeeval_prepared), statements (citeeval_statements).
Outputs: contexts (citeeval_contexts, one row per statement).
Rejects: invalid_answer (per statement that needed the failed answer; reason and raw text),
no_response (a statement whose response is not in the input).
Params: judge (name recorded), llm, max_tokens.
"""
from __future__ import annotations

import collections
import re

from stages.core.llm import LLMClient, LLMRequest
from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "1"
PROMPT = "citeeval_context"
CATEGORIES = {1: "query", 2: "retrieval", 3: "response", 4: "model"}
_TAG = re.compile(r"<category\s+sentence_id\s*=\s*\"?(\d+)\"?\s*>(.*?)</category>", re.S | re.I)
_VALUE = re.compile(r"([1-4])(?:\s*[.:)(-]*\s*(?:query|retrieval|response|model)\)?)?\.?", re.I)


def parse_categories(text: str, n: int) -> dict[int, int]:
    """sentence id -> category for ids 1..n from a Table 10 answer; ValueError names what is wrong."""
    found: dict[int, int] = {}
    for sid, body in _TAG.findall(text):
        value = _VALUE.fullmatch(body.strip())
        if value is None:
            raise ValueError(f"category of sentence {sid} is {body.strip()[:40]!r}, not 1-4")
        sid, category = int(sid), int(value.group(1))
        if found.get(sid, category) != category:
            raise ValueError(f"sentence {sid} has two categories ({found[sid]} and {category})")
        found[sid] = category
    missing = [i for i in range(1, n + 1) if i not in found]
    if missing:
        raise ValueError(f"no <category sentence_id=...> for sentence(s) {missing}")
    return {i: found[i] for i in range(1, n + 1)}


def rule_for(statement: dict) -> int | None:
    """The category a rule fixes, or None when the model decides."""
    if statement["citations"]:
        return 2
    if statement["unanswerable"]:
        return 3
    return None


def run(ctx):
    params = ctx.params
    responses = {r["id"]: r for r in ctx.read_rows("responses")}
    by_response: dict[str, list[dict]] = collections.defaultdict(list)
    for s in ctx.read_rows("statements"):
        by_response[s["response_id"]].append(s)
    asked, requests = [], []
    for rid, statements in by_response.items():
        statements.sort(key=lambda s: s["sentence_id"])
        if rid in responses and any(rule_for(s) is None for s in statements):
            n = len(statements)
            asked.append(rid)
            requests.append(LLMRequest(
                id=rid, prompt=PROMPT,
                variables={"query": responses[rid]["query"], "passages": responses[rid]["passages"], "sentences": statements},
                sampling={"max_tokens": params["max_tokens"]} if params["max_tokens"] else None,
            parse=lambda text, n=n: parse_categories(text, n),
            ))
    with LLMClient.from_params(params["llm"], stats=ctx.stats) as client:
        answers = dict(zip(asked, client.run(requests, desc="citeeval context")))
    for rid, statements in by_response.items():
        answer = answers.get(rid)
        for s in statements:
            with ctx.item(s["id"]):
                if rid not in responses:
                    raise Reject("no_response", f"response {rid} is not in the responses input")
                fixed = rule_for(s)
                model_category = answer.value[s["sentence_id"]] if answer is not None and answer.ok else None
                if fixed is None and model_category is None:
                    raise Reject("invalid_answer", answer.detail)
                context = fixed if fixed is not None else model_category
                rule = "model" if fixed is None else ("cited" if s["citations"] else "unanswerable")
                ctx.stats[f"context_{CATEGORIES[context]}"] += 1
                ctx.stats[f"rule_{rule}"] += 1
                ctx.write("contexts", [{
                    "id": s["id"], "response_id": rid, "model": s["model"], "sentence_id": s["sentence_id"],
                    "context": context, "model_context": model_category, "rule": rule,
                    "applicable": context == 2, "judge": params["judge"],
                }])
    ctx.stats["responses_failed"] = sum(1 for a in answers.values() if not a.ok)


STAGE = Stage(
    name="citeeval_context",
    version=VERSION,
    doc=__doc__,
    inputs={
        "responses": Input("citeeval_prepared from citeeval_prepare", table="citeeval_prepared"),
        "statements": Input("citeeval_statements from citeeval_prepare", table="citeeval_statements"),
    },
    outputs={"contexts": Output("citeeval_contexts", "one row per statement")},
    params={
        "judge": Param(str, help="the judge's name, recorded in every row", pattern=Param.PLAIN_NAME),
        "llm": Param(dict, {}, "llm settings of the judge model (the llm: section with the judge's overrides)", schema="llm"),
        "max_tokens": Param(int, 0, "answer length budget in tokens (0 = the prompt's default)", min=0),
    },
    run=run,
)

if __name__ == "__main__":
    STAGE.main()
