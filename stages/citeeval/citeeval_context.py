"""Context attribution (citeeval.txt §2.3, §4.1; prompt Table 10): which context each statement comes
from: 1 query, 2 retrieval, 3 response, 4 model knowledge. Only retrieval statements require a
citation (§2.3); the others are N/A.

One call per response shows every statement, citations removed (§4.1: no bias from the citations,
and co-references resolve across statements). The answer is XML-tagged as the seed asks: a
`<category sentence_id="i">` holding 1-4 for every statement i.

Strict (`context`, `applicable`): a category that is missing, empty, not 1-4, or given twice with
different values makes the whole answer invalid: the client retries it; if the last answer is
still invalid, the statements it was needed for keep a null context and the reason with the raw
text (`invalid`); nothing is defaulted.

Reference (`reference_context`), CiteEval's public parser (context_attributor.py) on the same
answer text, tag by tag: `<category sentence_id="i">` in its exact form holding digits; a value
that is not 1-4 is read by its first character, and if that is not 1-4 either, or the sentence
has no tag, it is 2 (its default category); the last tag of a sentence wins.

Rules before the model (`rule` column):
- `cited`: a statement that carries a citation. Strict: the model's category, as for any other
  (§4.1 attributes every statement with the citations removed "to avoid introducing the bias of
  the retrieval context for cited statements", and §4.2 masks the ratings of N/A ones), so a cited
  statement the judge gives to the query, the response or model knowledge is N/A. Reference:
  retrieval (2), whatever the model says (the public implementation always evaluates cited
  statements);
- `unanswerable`: the single statement "No answer is found" is 3 (Response) in both modes, Table
  10's tie rule (the public prompt states the same rule);
- `model`: the model's category. A response whose statements are all unanswerable makes no call;
  when a call fails, a cited statement keeps its reference context (strict: null, with the reason).

Inputs: responses (citeeval_prepared), statements (citeeval_statements).
Outputs: contexts (citeeval_contexts, one row per statement).
Rejects: failed_call (a statement that needed the model when its call failed or returned no text:
neither mode has an answer to read), no_response (a statement whose response is not in the input).
Params: judge (name recorded), llm, max_tokens.
"""
from __future__ import annotations

import collections
import re

from stages.citeeval.citeeval import has_text
from stages.core.llm import LLMClient, LLMRequest
from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "3"  # 3: a cited statement's strict context is the judge's (§4.1); the reference keeps 2
PROMPT = "citeeval_context"
CATEGORIES = {1: "query", 2: "retrieval", 3: "response", 4: "model"}
_TAG = re.compile(r"<category\s+sentence_id\s*=\s*\"?(\d+)\"?\s*>(.*?)</category>", re.S | re.I)
_VALUE = re.compile(r"([1-4])(?:\s*[.:)(-]*\s*(?:query|retrieval|response|model)\)?)?\.?", re.I)
_PUBLIC_TAG = re.compile(r'<category sentence_id="(\d+)">\s*(\d+)\s*</category>')  # the public parser's form
PUBLIC_DEFAULT = 2


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


def parse_reference(text: str) -> dict[str, int]:
    """CiteEval's public reading of an answer, tag by tag: sentence id (a string, as it keys them)
    -> category; a sentence without a tag is left to the caller's default (2)."""
    found = {}
    for sid, value in _PUBLIC_TAG.findall(text):
        value = value if value in ("1", "2", "3", "4") else value[0]
        found[sid] = int(value) if value in ("1", "2", "3", "4") else PUBLIC_DEFAULT
    return found


def rule_for(statement: dict, mode: str) -> int | None:
    """The category a rule fixes in `mode` (strict | reference), or None when the model decides."""
    if statement["citations"] and mode == "reference":
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
        if rid in responses and any(rule_for(s, "strict") is None for s in statements):
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
        answered = answer is not None and has_text(answer)
        reference = parse_reference(answer.raw) if answered else {}
        for s in statements:
            with ctx.item(s["id"]):
                if rid not in responses:
                    raise Reject("no_response", f"response {rid} is not in the responses input")
                fixed, reference_fixed = rule_for(s, "strict"), rule_for(s, "reference")
                if reference_fixed is None and not answered:
                    raise Reject("failed_call", answer.detail)
                model_category = answer.value[s["sentence_id"]] if answer is not None and answer.ok else None
                context = fixed if fixed is not None else model_category
                rule = "cited" if s["citations"] else "unanswerable" if s["unanswerable"] else "model"
                reference_context = reference_fixed if reference_fixed is not None else reference.get(str(s["sentence_id"]), PUBLIC_DEFAULT)
                ctx.stats[f"context_{CATEGORIES[context] if context else 'invalid'}"] += 1
                ctx.stats[f"rule_{rule}"] += 1
                ctx.stats["reference_differs"] += context is not None and context != reference_context
                ctx.write("contexts", [{
                    "id": s["id"], "response_id": rid, "model": s["model"], "sentence_id": s["sentence_id"],
                    "context": context, "model_context": model_category, "rule": rule,
                    "applicable": None if context is None else context == 2, "reference_context": reference_context,
                    "invalid": None if context is not None else answer.detail[:2000], "judge": params["judge"],
                }])
    ctx.stats["responses_failed"] = sum(1 for a in answers.values() if not has_text(a))
    ctx.stats["responses_strict_invalid"] = sum(1 for a in answers.values() if has_text(a) and not a.ok)


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
    prompts=("citeeval_context",),
    rejects={
        "invalid_answer": "the response's context answer stayed invalid after retries (reason and raw text in the detail)",
        "no_response": "the statement's response is not in the responses input",
                "failed_call": "the statement needed the judge, whose call failed or returned no text",
    },
)

if __name__ == "__main__":
    STAGE.main()
