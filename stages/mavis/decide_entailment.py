"""Decide which retrieved documents ground their atomic fact (MAVIS §3.2 Step 2 "Automatic document
filtering", App. A.3): a pair is entailed when its entailment score reaches the threshold of its
modality. "Using these models, we retain 930K text documents and 500K image documents."

The scores come from filter_entailment_text and filter_entailment_image (P(yes)); this stage only
applies `text_threshold` and `image_threshold` (the seed's argmax of yes/no is 0.5), so changing
a threshold reruns this stage and its descendants, never a model. Pairs that are not entailed stay
as rows with `entailed` false (the seed's "irrelevant documents" are removed from the ground truth,
not from the record).

Inputs `fact_documents` (mavis_fact_documents), `scores` (mavis_entailment_scores, both modalities).
Output `judged` (mavis_judged_documents): one row per scored pair, ordered by fact, modality, rank.
Pairs without a score were rejected by the entailment stages (their rejects say why) and are not
inputs here. The tables' contracts reject, before this stage reads them, a score that is null,
NaN or outside [0, 1], a modality other than text and image, and a pair scored twice
(`null_column`, `bad_value`, `duplicate_id`). Rejects (per score row): unknown_pair (a score of a
pair retrieve_fact_documents did not list).
Invariant: scores in = judged rows + rejected.
"""
from __future__ import annotations

from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "1"


def run(ctx) -> None:
    p = ctx.params
    pairs = {(r["fact_id"], r["doc_id"]): r for r in ctx.read_rows("fact_documents")}
    thresholds = {"text": p["text_threshold"], "image": p["image_threshold"]}
    rows = []
    for s in ctx.read_rows("scores"):
        key = (s["fact_id"], s["doc_id"])
        with ctx.item(f"{s['fact_id']}|{s['doc_id']}"):
            if key not in pairs:
                raise Reject("unknown_pair", "no fact_documents row for this score")
            pair = pairs[key]
            rows.append({**pair, "modality": s["modality"], "score": s["score"], "mode": s["mode"],
                         "entailed": s["score"] >= thresholds[s["modality"]]})
            ctx.stats[f"entailed_{s['modality']}"] += int(rows[-1]["entailed"])
    ctx.write("judged", sorted(rows, key=lambda r: (r["fact_id"], r["modality"], r["rank"], r["doc_id"])))


STAGE = Stage(
    name="decide_entailment",
    version=VERSION,
    doc=__doc__,
    inputs={
        "fact_documents": Input("mavis_fact_documents: the retrieved pairs", many=True, table="mavis_fact_documents"),
        "scores": Input("mavis_entailment_scores of both modalities", many=True, table="mavis_entailment_scores"),
    },
    outputs={"judged": Output("mavis_judged_documents", "scored pairs with the entailed decision")},
    params={
        "text_threshold": Param(float, 0.5, "a passage entails its fact when P(yes) >= this (seed: the argmax, 0.5)", min=0, max=1),
        "image_threshold": Param(float, 0.5, "an image entails its fact when P(yes) >= this (seed: the higher reward, 0.5)", min=0, max=1),
    },
    run=run,
    rejects={
        "unknown_pair": "a score of a pair retrieve_fact_documents did not list",
        "duplicate_score": "the pair was scored twice",
    },
)

if __name__ == "__main__":
    STAGE.main()
