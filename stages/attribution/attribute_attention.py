"""Attention-guided attribution, Algorithm 1 "Sentence aggregation" (cite-while-you-generate.txt
§3.2-3.3, defaults Table 2): on the pooled attention that generate_attributed captured.

Per generated token: the majority vote over the sentence ids of its top-k attended text tokens.
Per summary sentence j with tokens T_j: every source sentence voted for by at least ceil(τ·|T_j|)
of them. img_raw: each token's attention summed over the image tokens, averaged over the sentence;
the image is cited by the sentence with the highest average (sum, not the algorithm's mean over
image tokens: the same sentence wins either way; stages/attribution/attribution.py says why and how ties
and empty sentences go). img_cap: a vote for the caption's unit is a citation of IMG.
Seed defaults: k=3, τ=0.16 (Qwen2.5-VL-7B); k=5, τ=0.12 (LLaVA-NeXT-7B).

Beside it, as a reported alternative, the "max" ablation of §5.2.1 (Table 4): each token goes to
the sentence of its single most attended text token, the same τ after (method `attention_max`;
stages/attribution/attribution.py). score_attribution scores it like any method.

Input: generations (attr_generations). Output: citations (attr_citations, methods attention and
attention_max), one row per summary sentence and method; the generations are the counted items.
Rejects: bad_capture (the stored vectors do not match the source labels, or a label names no unit). Invariant: each
generation is written (its sentences) or rejected.
"""
from __future__ import annotations

import numpy as np

from stages.attribution.attribution import attribute, every_generation
from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "2"
METHODS = {"attention": "majority", "attention_max": "max"}  # method name -> token-to-sentence rule


def citation_rows(gen: dict, method: str, cited: list[list[str]], scores: list[float | None]) -> list[dict]:
    return [{
        "id": f"cite:{method}:{gen['id']}:{j}", "generation_id": gen["id"], "item_id": gen["item_id"], "mode": gen["mode"],
        "method": method, "sentence_index": j, "sentence": sentence, "sources": cited[j], "image_score": scores[j],
    } for j, sentence in enumerate(gen["summary_sentences"])]


def run(ctx):
    k, tau = ctx.params["k"], ctx.params["tau"]
    for gen in ctx.read_rows("generations"):
        with ctx.item(gen["id"]):
            labels = np.asarray(gen["source_labels"], dtype=np.int64)
            if len({len(row) for row in gen["pooled"]}) > 1:
                raise Reject("bad_capture", f"pooled rows of different lengths {sorted({len(row) for row in gen['pooled']})}")
            pooled = np.asarray(gen["pooled"], dtype=np.float32).reshape(len(gen["pooled"]), len(gen["pooled"][0]) if gen["pooled"] else labels.size)
            if pooled.shape != (len(gen["token_sentence"]), labels.size):  # an empty row is a row too: it must match the labels
                raise Reject("bad_capture", f"pooled {pooled.shape} vs {len(gen['token_sentence'])} tokens x {labels.size} source tokens")
            if labels.size and not (-1 <= labels.min() and labels.max() < len(gen["units"])):
                raise Reject("bad_capture", f"source labels {labels.min()}..{labels.max()} name no unit of {len(gen['units'])}")
            for method, aggregation in METHODS.items():
                cited, scores = attribute(pooled, labels, gen["units"], gen["token_sentence"], len(gen["summary_sentences"]),
                                          k, tau, gen["mode"], aggregation)
                ctx.stats[f"sentences_uncited[{method}]"] += sum(1 for c in cited if not c)
                ctx.write("citations", citation_rows(gen, method, cited, scores))
            ctx.stats["generations_attributed"] += 1


STAGE = Stage(
    name="attribute_attention",
    version=VERSION,
    doc=__doc__,
    inputs={"generations": Input("attr_generations from generate_attributed", table="attr_generations")},
    outputs={"citations": Output("attr_citations", "one row per summary sentence and method", counted=False)},
    params={
        "k": Param(int, 3, "top-k attended source tokens per generated token", min=1),
        "tau": Param(float, 0.16, "sentence threshold τ: share of a sentence's tokens that must vote for a source", min=0, max=1),
    },
    run=run,
    invariant=every_generation,
    rejects={"bad_capture": "the stored attention vectors do not match the generation's tokens and source labels"},
)

if __name__ == "__main__":
    STAGE.main()
