"""Iterative Chain of Edits, ITERCOE (citeeval.txt §4.2; prompt Table 11; edit actions §3.1, Table 5).

One call per response lists its cited statements (every cited statement requires a citation,
§2.3; an uncited statement that requires one scores 0 in Full without a rating, citeeval_score),
each with its citations; the model reasons, edits and rates each in the seed's XML-tagged format:

    <editing sentence_id="i"> N/A | <DELETE citation="k"> DELETE REASON r </DELETE> <ADD citation="k"> ADD REASON r </ADD> ... </editing>
    <rating sentence_id="i"> 1-5 </rating>

Strict parsing (`rating`, `itercoe`, `edits`): every listed statement needs one editing tag whose
content is "N/A" or only well-formed edit tags (reason 1-3, the op inside matching the tag), and
one rating tag holding a single digit 1-5. Anything missing or malformed makes the answer invalid:
retried by the client; if the last answer is still invalid, its statements keep null strict
columns and the reason with the raw text (`invalid`). Tags for sentence ids that were not asked
are ignored. The 1-5 rating r becomes (r - 1) / 4 on [0, 1] (1 -> 0, 3 -> 0.5, 5 -> 1: linear,
both ends kept, as the seed's "normalize to [0, 1]").

Reference parsing (`reference_rating`, `reference_edits`), CiteEval's public parser
(citation_editor.py) on the same answer text, tag by tag: a tag is read only in its exact form
(`<rating sentence_id="i">` with double quotes, the case as shown) and one malformed tag loses
that tag alone. A rating is any run of digits (a 7 stays 7; citeeval_score applies (r - 1) / 4 as
the code does); the last rating tag of a sentence wins; edits of every editing tag of a sentence
are kept in order, citation ids as the strings written. An edit whose reason is not 1-3 stops the
public code with an assertion error; here that edit alone is dropped (`reference_edits_dropped`).

Inputs: responses (citeeval_prepared), statements (citeeval_statements).
Outputs: ratings (citeeval_itercoe, one row per cited statement whose answer came back).
Rejects: failed_call (the call failed or returned no text: neither mode has an answer to read).
Rows in are the cited statements; each is a row or a reject.
Params: judge, llm, max_tokens.
"""
from __future__ import annotations

import collections
import re

from stages.citeeval.citeeval import has_text, likert_to_unit
from stages.core.llm import LLMClient, LLMRequest
from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "2"
PROMPT = "citeeval_itercoe"
_EDITING = re.compile(r"<editing\s+sentence_id\s*=\s*\"?(\d+)\"?\s*>(.*?)</editing>", re.S | re.I)
_RATING = re.compile(r"<rating\s+sentence_id\s*=\s*\"?(\d+)\"?\s*>(.*?)</rating>", re.S | re.I)
_EDIT = re.compile(r"<(DELETE|ADD)\s+citation\s*=\s*\"?(\d+)\"?\s*>\s*(?:(DELETE|ADD)\s+)?REASON\s*([1-3])\.?\s*</(DELETE|ADD)>", re.I)
# The public parser's tag forms (exact quoting and case; `\s` where it writes `[\s\n]`).
_PUBLIC_EDITING = re.compile(r'<editing sentence_id="(\d+)">\s*(.*?)\s*</editing>', re.S)
_PUBLIC_EDIT = re.compile(r'<(DELETE|ADD) citation="(\d+)">\s*(?:DELETE|ADD)*\s*REASON\s*(\d+)\s*</(?:DELETE|ADD)>')
_PUBLIC_RATING = re.compile(r'<rating sentence_id="(\d+)">\s*(\d+)\s*</rating>')


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


def parse_reference(text: str) -> tuple[dict[str, list[dict]], dict[str, int], int]:
    """CiteEval's public reading of an answer, tag by tag: (sentence id -> edits with string
    citation ids, sentence id -> rating, edits dropped for a reason outside 1-3). Sentence ids
    stay strings, as the public code keys them ("01" is not sentence 1)."""
    edits: dict[str, list[dict]] = {}
    dropped = 0
    for sid, body in _PUBLIC_EDITING.findall(text):
        for op, citation, reason in _PUBLIC_EDIT.findall(body):
            if reason not in ("1", "2", "3"):
                dropped += 1
                continue
            edits.setdefault(sid, []).append({"op": op, "citation": citation, "reason": int(reason)})
    ratings = {sid: int(value) for sid, value in _PUBLIC_RATING.findall(text)}
    return edits, ratings, dropped


def run(ctx):
    params = ctx.params
    responses = {r["id"]: r for r in ctx.read_rows("responses")}
    by_response: dict[str, list[dict]] = collections.defaultdict(list)
    for s in ctx.read_rows("statements"):
        if s["citations"]:
            by_response[s["response_id"]].append(s)
    asked, requests = [], []
    for rid, statements in by_response.items():
        statements.sort(key=lambda s: s["sentence_id"])
        ids = [s["sentence_id"] for s in statements]
        response = responses.get(rid)
        if response is None:  # its statements are rejected below
            continue
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
        answer = answers.get(rid)
        if answer is None:
            for s in statements:
                with ctx.item(s["id"]):
                    raise Reject("no_response", f"response {rid} is not in the responses input")
            continue
        if has_text(answer):
            ref_edits, ref_ratings, dropped = parse_reference(answer.raw)
            ctx.stats["reference_edits_dropped"] += dropped
        for s in statements:
            with ctx.item(s["id"]):
                if not has_text(answer):
                    raise Reject("failed_call", answer.detail)
                strict = {"rating": None, "itercoe": None, "edits": None, "invalid": answer.detail[:2000]}
                if answer.ok:
                    got = answer.value[s["sentence_id"]]
                    strict = {"rating": got["rating"], "itercoe": likert_to_unit(got["rating"]), "edits": got["edits"], "invalid": None}
                    ctx.stats[f"rating_{got['rating']}"] += 1
                    ctx.stats["edits"] += len(got["edits"])
                else:
                    ctx.stats["strict_invalid"] += 1
                sid = str(s["sentence_id"])
                ctx.stats["reference_rating_missing"] += sid not in ref_ratings
                ctx.write("ratings", [{
                    "id": s["id"], "response_id": rid, "model": s["model"], "sentence_id": s["sentence_id"], **strict,
                    "reference_rating": ref_ratings.get(sid), "reference_edits": ref_edits.get(sid, []),
                    "judge": params["judge"],
                }])
    ctx.stats["responses_failed"] = sum(1 for a in answers.values() if not has_text(a))
    ctx.stats["responses_strict_invalid"] = sum(1 for a in answers.values() if has_text(a) and not a.ok)


STAGE = Stage(
    name="citeeval_itercoe",
    version=VERSION,
    doc=__doc__,
    inputs={
        "responses": Input("citeeval_prepared from citeeval_prepare", table="citeeval_prepared"),
        "statements": Input("citeeval_statements from citeeval_prepare", table="citeeval_statements"),
    },
    outputs={"ratings": Output("citeeval_itercoe", "one row per cited statement")},
    params={
        "judge": Param(str, help="the judge's name, recorded in every row", pattern=Param.PLAIN_NAME),
        "llm": Param(dict, {}, "llm settings of the judge model (the llm: section with the judge's overrides)", schema="llm"),
        "max_tokens": Param(int, 0, "answer length budget in tokens (0 = the prompt's default)", min=0),
    },
    run=run,
    prompts=("citeeval_itercoe",),
    rejects={"invalid_answer": "the response's edit-and-rate answer stayed invalid after retries (raw text in the detail)",
             "no_response": "the statement's response is not in the responses input",
             "failed_call": "the judge's call failed or returned no text"},
)

if __name__ == "__main__":
    STAGE.main()
