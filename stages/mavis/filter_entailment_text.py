"""Score whether each retrieved C4 passage entails its atomic fact (MAVIS §3.2 Step 2 "Automatic
document filtering", App. A.3 "Textual Entailment Models", Table 2).

"we treat the document as the premise and the statement as the hypothesis. If an entailment model
outputs the label 'entailment,' we consider the statement to be grounded." The seed's best text
entailment model is Qwen3-8B (Table 2, F1 53.7), prompted "Premise: ... Hypothesis: ... Given the
premise, is the hypothesis correct? Respond in yes or no." (prompts/mavis_entail_text.md). The
answer is scored as P(yes) by the model layer (llamacpp: next-token logits; openai: top_logprobs;
without logprobs, 1 or 0 from the answer). Scores only: decide_entailment applies the threshold.

Inputs `facts` (mavis_facts), `documents` (mavis_documents), `fact_documents`
(mavis_fact_documents); the pairs whose document is text.
Output `scores` (mavis_entailment_scores): (fact_id, doc_id, modality text, score, mode text, model).
Rejects (per pair `<fact_id>|<doc_id>`): invalid_answer (not yes/no after retries, raw text in the
detail), unknown_fact, unknown_document.
Invariant: text pairs in = scores + rejected.
"""
from __future__ import annotations

from stages.mavis.entailment import ENTAILMENT_REJECTS, pairs_of, score
from stages.core.llm import LLMRequest
from stages.core.stage import Input, Output, Param, Stage

VERSION = "1"


def run(ctx) -> None:
    items = pairs_of(ctx, "text")
    requests = [LLMRequest(f"{pair['fact_id']}|{doc['doc_id']}", "mavis_entail_text",
                           {"premise": doc["text"][: ctx.params["max_premise_chars"]], "hypothesis": fact["text"]})
                for pair, fact, doc in items]
    score(ctx, ctx.params["llm"], requests, items, ["text"] * len(items), "text entailment")


STAGE = Stage(
    name="filter_entailment_text",
    version=VERSION,
    doc=__doc__,
    inputs={
        "facts": Input("mavis_facts shards: the hypotheses", many=True, table="mavis_facts"),
        "documents": Input("mavis_documents: the premises", many=True, table="mavis_documents"),
        "fact_documents": Input("mavis_fact_documents: the pairs to score", many=True, table="mavis_fact_documents"),
    },
    outputs={"scores": Output("mavis_entailment_scores", "P(yes) per (passage, fact) pair")},
    params={
        "llm": Param(dict, {}, "the config llm: section with this stage's overrides (Qwen3-8B in the real recipe)", schema="llm"),
        "max_premise_chars": Param(int, 4000, "passage characters shown (a C4 passage is ~100 words)", min=1),
    },
    run=run,
    prompts=("mavis_entail_text",),
    rejects=ENTAILMENT_REJECTS,
)

if __name__ == "__main__":
    STAGE.main()
