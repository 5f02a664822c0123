"""Explanation QA triples (MCiteBench §3.3-3.4, prompt of Table 5): every valid question-answer-
evidence triple of a rebuttal thread.

A thread is one reviewer note (a review or a reviewer's comment) with the authors' responses under
it. A review usually raises several points and the rebuttal answers them one by one; Table 5 asks
for the valid triples, so the model (prompts/mcitebench_explanation_qa.md) returns a list: per
reviewer point, a neutral self-contained question, the span of the authors' response that answers
that point as the numbers of its first and last sentence (the prompt shows the response one
numbered sentence per line: numbers fit a short answer schema however long the answer, and a model
cannot paraphrase the authors' words), the evidence the span cites, validity and a reason.

A small model judges poorly, so deterministic checks decide what can be checked:
- the span's sentence numbers must exist in the part shown, first <= last
  (`answer_not_in_response` otherwise); the stored answer is the response's own text from the
  first sentence to the end of the last, and it must hold at least `min_answer_words` words besides
  its references (`answer_too_short`: a bare "Section 4.1" answers nothing);
- the evidence is what the reference parser (stages/core/refs.py, also used by pair_evidence)
  finds in that span and nowhere else, so a triple never inherits references that answer another
  point; the model's own evidence list is only compared (stat `model_evidence_differs`); a span
  that cites nothing is `no_explicit_reference`;
- the question must not name a section, line, figure or table (`question_cites_evidence`);
- a (question, span) proposed twice, e.g. from two overlapping parts, is kept once
  (`duplicate_triple`); a triple the model itself judges invalid is `not_qualified`.

Long threads: the reviewer note and the response are split at paragraph, then sentence,
boundaries into parts of at most `max_prompt_chars` characters, and every (reviewer part, response
part) pair is one call, so no text past a limit goes unseen (stat `parts_split` counts splits). A
call returns at most `max_triples` triples (the answer schema's list limit and the prompt say so): a
small model pads its list to the limit, so the limit bounds each call's length.

Inputs:  threads (mcitebench_threads)
Outputs: qa (mcitebench_qa, question_type "explanation", references = canonical labels)
Counting (a fan-out stage): the items are whole threads rejected before or after the model
(`empty_thread`, `no_explicit_reference` when the whole response cites nothing: no call is made;
`no_triple` when the model proposes none), failed calls (`invalid_answer`, raw text kept, id
`<thread>#<pair>`) and candidate triples (each written or rejected as above). rows in = rows out +
rejected over those items.
"""
from __future__ import annotations

import re

import blingfire

from stages.core.ids import content_id
from stages.core.llm import LLMClient, LLMRequest
from stages.core.prompts import load_answer_schema
from stages.core.refs import parse_refs, unique_refs
from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "4"  # 2: every triple of a thread, answer = the span that answers it, long threads split; 3: spans by sentence number; 4: max_triples
PROMPT = "mcitebench_explanation_qa"


def split_parts(text: str, limit: int) -> list[str]:
    """Paragraphs packed into parts of at most `limit` characters; a longer paragraph is split by
    sentences, and a longer sentence by characters. Nothing is dropped."""
    pieces: list[str] = []
    for paragraph in (p.strip() for p in re.split(r"\n\s*\n", text)):
        if not paragraph:
            continue
        if len(paragraph) <= limit:
            pieces.append(paragraph)
            continue
        for sentence in blingfire.text_to_sentences(paragraph).split("\n"):
            pieces += [sentence[i:i + limit] for i in range(0, len(sentence), limit)] if sentence else []
    parts: list[str] = []
    for piece in pieces:
        if parts and len(parts[-1]) + 2 + len(piece) <= limit:
            parts[-1] += "\n\n" + piece
        else:
            parts.append(piece)
    return parts


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences of `text` (blingfire, offline), in order."""
    if not text.strip():
        return []
    return [span for span in blingfire.text_to_sentences_and_offsets(text)[1] if span[1] > span[0]]


def numbered(text: str, spans: list[tuple[int, int]]) -> str:
    """The text as the prompt shows it: one sentence per line, numbered from 1."""
    return "\n".join(f"[{n}] {' '.join(text[a:b].split())}" for n, (a, b) in enumerate(spans, 1))


def _normal(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def answer_schema(max_triples: int) -> dict:
    """The answer schema with its list capped at `max_triples`: a small model pads its list up to the
    cap (repeating one triple), so the cap is what bounds a call's tokens."""
    schema = load_answer_schema(f"{PROMPT}.schema.json")
    schema["properties"]["triples"]["maxItems"] = max_triples
    return schema


def run(ctx):
    limit, max_triples = ctx.params["max_prompt_chars"], ctx.params["max_triples"]
    schema = answer_schema(max_triples)
    todo, requests = [], []  # todo: (thread, request ids)
    spans = {}  # request id -> (the response part shown, its sentence spans)
    for thread in ctx.read_rows("threads"):
        question, response = (thread["question_text"] or "").strip(), (thread["response_text"] or "").strip()
        if not question or not response:
            with ctx.item(thread["id"]):
                raise Reject("empty_thread", "no reviewer question or no authors' response")
            continue
        if not parse_refs(response):
            with ctx.item(thread["id"]):
                raise Reject("no_explicit_reference", f"the response cites no section, line, figure or table: {response[:300]}")
            continue
        review_parts, response_parts = split_parts(question, limit), split_parts(response, limit)
        ctx.stats["parts_split"] += len(review_parts) * len(response_parts) - 1
        ids = []
        for i, review_part in enumerate(review_parts):
            for j, response_part in enumerate(response_parts):
                ids.append(f"{thread['id']}#{i}.{j}")
                spans[ids[-1]] = (response_part, sentence_spans(response_part))
                requests.append(LLMRequest(id=ids[-1], prompt=PROMPT, schema=schema, variables={
                    "question": review_part, "response": numbered(response_part, spans[ids[-1]][1]),
                    "max_triples": max_triples}))
        todo.append((thread, ids))

    with LLMClient.from_params(ctx.params["llm"], stats=ctx.stats) as client:
        answers = dict(zip((r.id for r in requests), client.run(requests, desc="explanation QA")))

    for thread, ids in todo:
        seen: set[tuple[str, str]] = set()
        candidates = 0
        for call_id in ids:
            answer = answers[call_id]
            if not answer.ok:
                with ctx.item(call_id):
                    raise Reject("invalid_answer", answer.detail)
                continue
            for k, triple in enumerate(answer.value["triples"]):
                candidates += 1
                with ctx.item(f"{call_id}/{k}"):
                    ctx.write("qa", [_checked(thread, triple, *spans[call_id], seen, ctx.params["min_answer_words"], ctx.stats)])
        if candidates == 0 and all(answers[i].ok for i in ids):
            with ctx.item(thread["id"]):
                raise Reject("no_triple", "the model proposed no question-answer-evidence triple")


def _checked(thread: dict, triple: dict, part: str, sentences: list, seen: set, min_words: int, stats) -> dict:
    """One candidate triple as a qa row, or a Reject saying which check it fails."""
    question, reason = triple["question"].strip(), triple["reason"].strip()
    if not triple["valid"]:
        raise Reject("not_qualified", f"judge: {reason} | question: {question}")
    first, last = triple["answer_from"], triple["answer_to"]
    if not 1 <= first <= last <= len(sentences):
        raise Reject("answer_not_in_response", f"sentences {first} to {last} of a response part with {len(sentences)}")
    answer = part[sentences[first - 1][0]:sentences[last - 1][1]]
    refs = parse_refs(answer)
    labels = [r.label for r in unique_refs(refs)]
    if not labels:
        raise Reject("no_explicit_reference", f"the answer span cites nothing: {answer[:300]}")
    prose = answer
    for start, end in sorted({r.span for r in refs}, reverse=True):  # a list's items share one span
        prose = prose[:start] + " " + prose[end:]
    if len(re.findall(r"\w+", prose)) < min_words:
        raise Reject("answer_too_short", f"{answer[:300]!r} has fewer than {min_words} words besides its references")
    cited = parse_refs(question)
    if cited:
        raise Reject("question_cites_evidence", f"{', '.join(r.label for r in cited)} in: {question}")
    key = (_normal(question), _normal(answer))
    if key in seen:
        raise Reject("duplicate_triple", f"proposed twice: {question}")
    seen.add(key)
    if sorted(r.label for r in unique_refs(parse_refs(triple["evidence"]))) != sorted(labels):
        stats["model_evidence_differs"] += 1
    return {
        "id": content_id("mcq", "explanation", thread["id"], key[1]), "paper_id": thread["paper_id"],
        "question_type": "explanation", "question": question, "answer": answer,
        "references": labels, "evidence_element_ids": [], "options": [], "gold": None,
        "explanation": reason, "source_id": thread["id"],
    }


STAGE = Stage(
    name="extract_explanation_qa",
    version=VERSION,
    doc=__doc__,
    inputs={"threads": Input("reviewer question / authors' response threads", many=True, table="mcitebench_threads")},
    outputs={"qa": Output("mcitebench_qa", "explanation QA triples, each with the references of its own answer span")},
    params={
        "llm": Param(dict, {}, "the config llm: section (backend, model, cache, ...)", schema="llm"),
        "max_prompt_chars": Param(int, 4000, "reviewer note and response are split into parts of at most this length; "
                                             "every pair of parts is one call", min=200),
        "max_triples": Param(int, 10, "at most this many triples per call (one reviewer part against one response "
                                     "part); the answer schema's list limit", min=1),
        "min_answer_words": Param(int, 5, "an answer span needs this many words besides its references", min=0),
    },
    run=run,
    prompts=("mcitebench_explanation_qa",),
    rejects={
        "empty_thread": "a thread without a reviewer question or without an authors' response",
        "no_explicit_reference": "the response, or a triple's answer span, cites no section, line, figure or table",
        "invalid_answer": "a call's answer stayed invalid after the client's retries (raw text kept)",
        "no_triple": "the model proposed no question-answer-evidence triple for the thread",
        "not_qualified": "the model itself judged the triple invalid",
        "answer_not_in_response": "the answer span's sentence numbers are not in the response part shown",
        "answer_too_short": "the answer span has fewer than min_answer_words words besides its references",
        "question_cites_evidence": "the question names a section, line, figure or table",
        "duplicate_triple": "the same (question, answer span) proposed again",
    },
)

if __name__ == "__main__":
    STAGE.main()
