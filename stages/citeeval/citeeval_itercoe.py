"""Iterative Chain of Edits, ITERCOE (citeeval.txt §4.2; prompt Table 11; edit actions §3.1, Table 5).

One call per response lists its applicable statements (context 2, retrieval), each with its
citations ("none" for an uncited one); the model reasons, edits and rates each in the seed's
XML-tagged format:

    <editing sentence_id="i"> N/A | <DELETE citation="k"> DELETE REASON r </DELETE> <ADD citation="k"> ADD REASON r </ADD> ... </editing>
    <rating sentence_id="i"> 1-5 </rating>

Parsing: every listed statement needs one editing tag whose content is "N/A" or only well-formed
edit tags (reason 1-3, the op inside matching the tag), and one rating tag holding a single digit
1-5. Anything missing or malformed makes the answer invalid: retried by the client, then the
response's statements are rejected with the raw text (CiteEval's public code turns a missing
rating into 1.0; ours never defaults). Tags for sentence ids that were not asked are ignored.

Normalisation: the 1-5 Likert rating r becomes (r - 1) / 4 on [0, 1] (1 -> 0, 2 -> 0.25, 3 -> 0.5,
4 -> 0.75, 5 -> 1): linear, both ends kept, as the seed's "normalize to [0, 1]" and the public
implementation do. The edits are kept as written, in order, for EDITDIST.

Inputs: responses (citeeval_prepared), statements (citeeval_statements), contexts (citeeval_contexts).
Outputs: ratings (citeeval_itercoe, one row per applicable statement).
Rejects: invalid_answer (per applicable statement of a failed answer).
Rows in are the applicable statements (context 2); each is a row or a reject.
Params: judge, llm, max_tokens.
"""
from __future__ import annotations

import collections
import re

from stages.core.citeeval import likert_to_unit
from stages.core.llm import LLMClient, LLMRequest
from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "1"
PROMPT = "citeeval_itercoe"
_EDITING = re.compile(r"<editing\s+sentence_id\s*=\s*\"?(\d+)\"?\s*>(.*?)</editing>", re.S | re.I)
_RATING = re.compile(r"<rating\s+sentence_id\s*=\s*\"?(\d+)\"?\s*>(.*?)</rating>", re.S | re.I)
_EDIT = re.compile(r"<(DELETE|ADD)\s+citation\s*=\s*\"?(\d+)\"?\s*>\s*(?:(DELETE|ADD)\s+)?REASON\s*([1-3])\.?\s*</(DELETE|ADD)>", re.I)


def _edits(sid: int, body: str) -> list[dict]:
    text = body.strip()
    if re.fullmatch(r"N/?A\.?", text, re.I):
        return []
    edits = []
    for op, citation, inner, reason, closing in _EDIT.findall(text):
        if closing.upper() != op.upper() or (inner and inner.upper() != op.upper()):
            raise ValueError(f"sentence {sid}: edit <{op} citation={citation}> has mismatched op words")
        edits.append({"op": op.upper(), "citation": int(citation), "reason": int(reason)})
    leftover = _EDIT.sub("", text).strip()
    if leftover or not edits:
        raise ValueError(f"sentence {sid}: editing is neither N/A nor edit tags: {(leftover or text)[:60]!r}")
    return edits


def parse_edits_and_ratings(text: str, ids: list[int]) -> dict[int, dict]:
    """sentence id -> {rating, edits} for the asked ids from a Table 11 answer; ValueError names
    what is missing or malformed."""
    editing: dict[int, list[dict]] = {}
    for sid, body in _EDITING.findall(text):
        sid = int(sid)
        if sid in ids:
            if sid in editing:
                raise ValueError(f"sentence {sid} has two editing tags")
            editing[sid] = _edits(sid, body)
    ratings: dict[int, int] = {}
    for sid, body in _RATING.findall(text):
        sid = int(sid)
        if sid in ids:
            if not re.fullmatch(r"[1-5]", body.strip()):
                raise ValueError(f"sentence {sid}: rating {body.strip()[:40]!r} is not one of 1-5")
            if ratings.get(sid, int(body)) != int(body):
                raise ValueError(f"sentence {sid} has two ratings")
            ratings[sid] = int(body)
    missing = [f"editing {i}" for i in ids if i not in editing] + [f"rating {i}" for i in ids if i not in ratings]
    if missing:
        raise ValueError(f"missing tags: {', '.join(missing)}")
    return {i: {"rating": ratings[i], "edits": editing[i]} for i in ids}


def run(ctx):
    params = ctx.params
    responses = {r["id"]: r for r in ctx.read_rows("responses")}
    applicable = {c["id"] for c in ctx.read_rows("contexts") if c["applicable"]}
    by_response: dict[str, list[dict]] = collections.defaultdict(list)
    for s in ctx.read_rows("statements"):
        if s["id"] in applicable:
            by_response[s["response_id"]].append(s)
    asked, requests = [], []
    for rid, statements in by_response.items():
        statements.sort(key=lambda s: s["sentence_id"])
        ids = [s["sentence_id"] for s in statements]
        response = responses[rid]
        asked.append(rid)
        requests.append(LLMRequest(
            id=rid, prompt=PROMPT,
            variables={"query": response["query"], "passages": response["passages"], "response": response["prediction"],
                       "sentences": statements},
            sampling={"max_tokens": params["max_tokens"]} if params["max_tokens"] else None,
            parse=lambda text, ids=ids: parse_edits_and_ratings(text, ids),
        ))
    with LLMClient.from_params(params["llm"], stats=ctx.stats) as client:
        answers = dict(zip(asked, client.run(requests, desc="citeeval itercoe")))
    for rid, statements in by_response.items():
        answer = answers[rid]
        for s in statements:
            with ctx.item(s["id"]):
                if not answer.ok:
                    raise Reject("invalid_answer", answer.detail)
                got = answer.value[s["sentence_id"]]
                ctx.stats[f"rating_{got['rating']}"] += 1
                ctx.stats["edits"] += len(got["edits"])
                ctx.write("ratings", [{
                    "id": s["id"], "response_id": rid, "model": s["model"], "sentence_id": s["sentence_id"],
                    "rating": got["rating"], "itercoe": likert_to_unit(got["rating"]), "edits": got["edits"],
                    "judge": params["judge"],
                }])
    ctx.stats["responses_failed"] = sum(1 for a in answers.values() if not a.ok)


STAGE = Stage(
    name="citeeval_itercoe",
    version=VERSION,
    doc=__doc__,
    inputs={
        "responses": Input("citeeval_prepared from citeeval_prepare", table="citeeval_prepared"),
        "statements": Input("citeeval_statements from citeeval_prepare", table="citeeval_statements"),
        "contexts": Input("citeeval_contexts from citeeval_context", table="citeeval_contexts"),
    },
    outputs={"ratings": Output("citeeval_itercoe", "one row per applicable statement")},
    params={
        "judge": Param(str, help="the judge's name, recorded in every row", pattern=Param.PLAIN_NAME),
        "llm": Param(dict, {}, "llm settings of the judge model (the llm: section with the judge's overrides)", schema="llm"),
        "max_tokens": Param(int, 0, "answer length budget in tokens (0 = the prompt's default)", min=0),
    },
    run=run,
)

if __name__ == "__main__":
    STAGE.main()
