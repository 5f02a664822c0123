"""Filter user queries with a model (M2RAG App. A "Query Filtering", figures 5 and 6).

Two steps, in the seed's order: first the model judges whether the query is a clear question that
needs rich references (prompt `m2rag_query_clear`, figure 5: 0 = invalid, 1 = valid); the queries
judged 1 then go to the second step, which judges whether images in the answer would make it more
comprehensive (prompt `m2rag_query_images`, figure 6: 0 / 1). Each judgement keeps the model's
brief analysis.

With `apply: true` (the seed) a query judged 0 in step 1 is rejected `not_clear` and one judged 0
in step 2 `no_images_needed`, the analysis as detail. With `apply: false` both steps judge every
query and every answered query is kept with its judgements as columns (the decision is left to
whoever reads them; the embedded demo model judges almost everything 0). An answer that stays
invalid after the client's retries is rejected `invalid_answer` with its raw text.

Input: `queries` (m2rag_queries). Output: `filtered_queries` (m2rag_filtered_queries).
Invariant: rows in = rows out + rejected. Params: llm (the config `llm:` section), apply.
"""
from __future__ import annotations

from stages.core.llm import LLMClient, LLMRequest
from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "1"
CLEAR_PROMPT = "m2rag_query_clear"
IMAGES_PROMPT = "m2rag_query_images"


def run(ctx):
    queries = ctx.read_rows("queries")
    apply = ctx.params["apply"]
    with LLMClient.from_params(ctx.params["llm"], stats=ctx.stats) as client:
        clear = client.run([LLMRequest(q["id"], CLEAR_PROMPT, {"text": q["question"]}) for q in queries], desc="clear question")
        step2 = []
        for query, answer in zip(queries, clear):
            with ctx.item(query["id"]):
                if not answer.ok:
                    raise Reject("invalid_answer", f"{CLEAR_PROMPT}: {answer.detail}")
                if apply and answer.value["label"] == 0:
                    raise Reject("not_clear", answer.value["analysis"])
                step2.append({**query, "clear": answer.value["label"], "clear_analysis": answer.value["analysis"]})
        images = client.run([LLMRequest(q["id"], IMAGES_PROMPT, {"question": q["question"]}) for q in step2], desc="needs images")
    for query, answer in zip(step2, images):
        with ctx.item(query["id"], counted=False):  # counted in step 1
            if not answer.ok:
                raise Reject("invalid_answer", f"{IMAGES_PROMPT}: {answer.detail}")
            if apply and answer.value["label"] == 0:
                raise Reject("no_images_needed", answer.value["analysis"])
            ctx.writer("filtered_queries").write(
                {**query, "needs_images": answer.value["label"], "images_analysis": answer.value["analysis"]}
            )


STAGE = Stage(
    name="filter_queries",
    version=VERSION,
    doc=__doc__,
    inputs={"queries": Input("m2rag_queries (one shard)", table="m2rag_queries")},
    outputs={"filtered_queries": Output("m2rag_filtered_queries", "queries kept, with both judgements and analyses")},
    params={
        "llm": Param(dict, {}, "the config llm: section (backend, model, cache, ...), per-stage overrides merged in", schema="llm"),
        "apply": Param(bool, True, "drop queries judged 0 (the seed); false = judge every query with both prompts and keep all"),
    },
    run=run,
    prompts=("m2rag_query_clear", "m2rag_query_images"),
    rejects={
        "not_clear": "judged 0 in step 1 (figure 5): not a clear question needing rich references (apply: true)",
        "no_images_needed": "judged 0 in step 2 (figure 6): the answer gains nothing from images (apply: true)",
        "invalid_answer": "a judgement stayed invalid after the client's retries (raw text in the detail)",
    },
)

if __name__ == "__main__":
    STAGE.main()
