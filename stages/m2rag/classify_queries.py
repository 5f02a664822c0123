"""Classify the filtered queries by topic (M2RAG App. A "Query Classification", figure 7; the
eleven categories of Table 1, from Yahoo Answers Topics).

The model reads the category list (ids, names and descriptions from the `categories` param) and
the question, briefly analyses it, and assigns one or more of categories 1-10, or category 11
("Others") alone. The answer schema enforces both rules; an answer that stays invalid after the
client's retries, or names a category missing from `categories`, is rejected `invalid_answer`
with its raw text.

Input: `filtered_queries` (m2rag_filtered_queries). Output: `classified_queries`
(m2rag_classified_queries): the input columns plus categories, category_names, category_analysis.
Invariant: rows in = rows out + rejected. Params: llm (the config `llm:` section), categories.
"""
from __future__ import annotations

from stages.core.llm import LLMClient, LLMRequest
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError
from stages.m2rag.categories import CATEGORIES

VERSION = "1"
PROMPT = "m2rag_query_classify"


def check_categories(categories: list) -> dict[int, str]:
    names = {}
    for item in categories:
        if not isinstance(item, dict) or not isinstance(item.get("id"), int) or not item.get("name"):
            raise StageError(f"param categories: each item needs an integer id and a name, got {item!r}")
        names[item["id"]] = item["name"]
    return names


def run(ctx):
    names = check_categories(ctx.params["categories"])
    categories = [{"description": "", "example": "", **c} for c in ctx.params["categories"]]
    queries = ctx.read_rows("filtered_queries")
    with LLMClient.from_params(ctx.params["llm"], stats=ctx.stats) as client:
        requests = [LLMRequest(q["id"], PROMPT, {"question": q["question"], "categories": categories}) for q in queries]
        answers = client.run(requests, desc="classify")
    for query, answer in zip(queries, answers):
        with ctx.item(query["id"]):
            if not answer.ok:
                raise Reject("invalid_answer", f"{PROMPT}: {answer.detail}")
            unknown = [c for c in answer.value["categories"] if c not in names]
            if unknown:
                raise Reject("invalid_answer", f"{PROMPT}: categories {unknown} are not in the category list | raw: {answer.raw}")
            ids = sorted(answer.value["categories"])
            ctx.writer("classified_queries").write(
                {**query, "categories": ids, "category_names": [names[c] for c in ids], "category_analysis": answer.value["analysis"]}
            )


STAGE = Stage(
    name="classify_queries",
    version=VERSION,
    doc=__doc__,
    inputs={"filtered_queries": Input("m2rag_filtered_queries (one shard)", table="m2rag_filtered_queries")},
    outputs={"classified_queries": Output("m2rag_classified_queries", "queries with their topic categories")},
    params={
        "llm": Param(dict, {}, "the config llm: section (backend, model, cache, ...), per-stage overrides merged in", schema="llm"),
        "categories": CATEGORIES,
    },
    run=run,
    prompts=("m2rag_query_classify",),
    rejects={"invalid_answer": "the answer stayed invalid after the client's retries, or names a category not in categories (raw text kept)"},
)

if __name__ == "__main__":
    STAGE.main()
