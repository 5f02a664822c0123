"""Explanation QA pairs (MCiteBench §3.3, prompt of Table 5): from each reviewer question and the
authors' response under it, extract (question, answer, evidence references).

The answer is the authors' response as written. Its explicit references ("Table 3", "Section 4.2,
Line 39", "Figure 2, Figure 3") are found by the deterministic parser in stages/core/refs.py, the
same one pair_evidence resolves them with; a thread whose response cites nothing is rejected
before any model call (`no_explicit_reference`). The model (prompts/mcitebench_explanation_qa.md)
rewrites the reviewer's question as a neutral, self-contained question and judges whether the
thread yields a valid triple. Rejects: `invalid_answer` (no schema-valid answer after retries),
`not_qualified` (the model judged the thread invalid; its reason is kept), and
`question_cites_evidence` (the question still names a section, line, figure or table).

Inputs:  threads (mcitebench_threads)
Outputs: qa (mcitebench_qa, question_type "explanation", references = canonical labels)
Params:  llm (the config `llm:` section), max_prompt_chars (question and response are cut to this
         many characters in the prompt only; the answer keeps the full response)
"""
from __future__ import annotations

from stages.core.ids import content_id
from stages.core.llm import LLMClient, LLMRequest
from stages.core.refs import parse_refs, unique_refs
from stages.core.stage import Input, Output, Param, Stage

VERSION = "1"
PROMPT = "mcitebench_explanation_qa"


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + " [...]"


def run(ctx):
    limit = ctx.params["max_prompt_chars"]
    todo = []  # (thread, references)
    for thread in ctx.read_rows("threads"):
        ctx.add_input()
        response = (thread["response_text"] or "").strip()
        if not (thread["question_text"] or "").strip() or not response:
            ctx.reject(thread["id"], "empty_thread", "no reviewer question or no authors' response")
            continue
        refs = unique_refs(parse_refs(response))
        if not refs:
            ctx.reject(thread["id"], "no_explicit_reference", f"the response cites no section, line, figure or table: {clip(response, 300)}")
            continue
        todo.append((thread, [r.label for r in refs]))
    requests = [
        LLMRequest(id=thread["id"], prompt=PROMPT, variables={
            "question": clip(thread["question_text"].strip(), limit),
            "response": clip(thread["response_text"].strip(), limit),
            "evidence": ", ".join(labels),
        })
        for thread, labels in todo
    ]
    with LLMClient.from_params(ctx.params["llm"], stats=ctx.stats) as client:
        answers = client.run(requests, desc="explanation QA")
    for (thread, labels), answer in zip(todo, answers):
        if not answer.ok:
            ctx.reject(thread["id"], "invalid_answer", answer.detail)
            continue
        question, reason = answer.value["question"].strip(), answer.value["reason"].strip()
        if not answer.value["valid"]:
            ctx.reject(thread["id"], "not_qualified", f"judge: {reason} | question: {question}")
            continue
        cited = parse_refs(question)
        if cited:
            ctx.reject(thread["id"], "question_cites_evidence", f"{', '.join(r.label for r in cited)} in: {question}")
            continue
        ctx.write("qa", [{
            "id": content_id("mcq", "explanation", thread["id"]), "paper_id": thread["paper_id"],
            "question_type": "explanation", "question": question, "answer": thread["response_text"].strip(),
            "references": labels, "evidence_element_ids": [], "options": [], "gold": None,
            "explanation": reason, "source_id": thread["id"],
        }])


STAGE = Stage(
    name="extract_explanation_qa",
    version=VERSION,
    doc=__doc__,
    inputs={"threads": Input("reviewer question / authors' response threads (mcitebench_threads)", many=True)},
    outputs={"qa": Output("mcitebench_qa", "explanation QA pairs with their explicit references")},
    params={
        "llm": Param(dict, {}, "the config llm: section (backend, model, cache, ...)"),
        "max_prompt_chars": Param(int, 4000, "question and response are cut to this length in the prompt"),
    },
    run=run,
)

if __name__ == "__main__":
    STAGE.main()
