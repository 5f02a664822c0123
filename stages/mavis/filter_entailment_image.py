"""Score whether each retrieved web image entails its atomic fact (MAVIS §3.2 Step 2 "Automatic
document filtering", App. A.3 "Visual Entailment Models", Table 2).

The seed's best visual entailment model is SkyworkVLReward-8B (Table 2, F1 50.1), prompted
"Determine whether the image entails the statement "{statement}". A. Yes. B. No." and deciding by
the higher reward of the two completions. Here a vision-language model gets the same question
(prompts/mavis_entail_image.md) with the image, and its answer is scored as P(yes) by the model
layer, the probability of the first option against the second. A backend that takes images gets
the stored image of the fact's document, `mode` `image`; a text-only backend (the embedded model) reads the image's text stand-in (the search
result's title and snippet), `mode` `text_stand_in`. Scores only: decide_entailment applies the
threshold.

Which images: MAVIS filters the documents by entailment only (§3.2 Step 2, App. A.3), so `images`
is the fact images as cached (cache_images: downloaded, decoded, stored; owner = fact, url = the
document's url). M2RAG's image filters (size, CLIP, pHash: filter_images -> phash_dedup) may run in
between as an option (config `mavis.fact_image_filters`, off by default): then `images` is their
output, and an image they dropped is rejected here `image_not_kept`.

Inputs `facts`, `documents`, `fact_documents` (the pairs whose document is an image) and `images`
(images_cached, or images_filtered / images_deduped of the optional filters: every such table holds
images_cached's columns).
Output `scores` (mavis_entailment_scores).
Rejects (per pair `<fact_id>|<doc_id>`): image_not_kept (the image stages dropped the image:
not cached, or filtered when the filters are on; see their rejects), invalid_answer, unknown_fact, unknown_document.
Invariant: image pairs in = scores + rejected.
"""
from __future__ import annotations

from stages.mavis.entailment import ENTAILMENT_REJECTS, pair_id, pairs_of, score
from stages.core.llm import LLMRequest, sees_images
from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "1"


def run(ctx) -> None:
    kept = {(row["owner_id"], row["url"]): row["sha256"] for row in ctx.read_rows("images")}
    vision = sees_images(ctx.params)
    items, requests, modes = [], [], []
    for pair, fact, doc in pairs_of(ctx, "image"):
        with ctx.item(pair_id(pair), counted=False):
            sha = kept.get((pair["fact_id"], doc["url"]))
            if sha is None:
                raise Reject("image_not_kept", f"{doc['url']} is not among the fact's kept images (cache_images, and the "
                                                 "image filters when they are on)")
            items.append((pair, fact, doc))
            modes.append("image" if vision else "text_stand_in")
            requests.append(LLMRequest(pair_id(pair), "mavis_entail_image",
                                       {"statement": fact["text"], "image_text": "" if vision else doc["text"]},
                                       images=[sha] if vision else []))
    score(ctx, ctx.params["llm"], requests, items, modes, "image entailment")


STAGE = Stage(
    name="filter_entailment_image",
    version=VERSION,
    doc=__doc__,
    inputs={
        "facts": Input("mavis_facts shards: the hypotheses", many=True, table="mavis_facts"),
        "documents": Input("mavis_documents: the image documents", many=True, table="mavis_documents"),
        "fact_documents": Input("mavis_fact_documents: the pairs to score", many=True, table="mavis_fact_documents"),
        "images": Input("the fact images as cached (owner = fact), or after the optional image filters", many=True,
                        table="images_cached"),
    },
    outputs={"scores": Output("mavis_entailment_scores", "P(yes) per (image, fact) pair")},
    params={
        "llm": Param(dict, {}, "the config llm: section with this stage's overrides (a VLM in the real recipe)", schema="llm"),
        "vision": Param(bool, None, "show the image; null = what the backend takes (llamacpp: no, the text stand-in)"),
    },
    run=run,
    prompts=("mavis_entail_image",),
    rejects={**ENTAILMENT_REJECTS, "image_not_kept": "the image stages dropped the document's image for this fact (see their rejects)"},
)

if __name__ == "__main__":
    STAGE.main()
