"""Retrieval quality of each retriever against the release's gold documents (mavis.txt §5.1, Table 3):
NDCG@10 and Recall@100 of the ranking a retriever gives each instance over the whole document
database (text and images in one list, as Multi-RAG).

- Queries: each model's search queries (mavis_generate_queries); an instance's query is the mean of
  its queries' normalised embeddings, normalised (Table 3's best MM-Embed row, "averaged query
  embedding"; with one query per instance it is that query).
- Gold: the instance's documents that `fact_documents` marks entailed for one of its facts (the
  release's ground truth; on the annotated test split the humans' decisions).
- Ranking: every document of the release by cosine similarity, ties by document id
  (stages.eval_mavis.mavis_retrievers.top_k), as each retriever in `retrievers` embeds them.
- Metrics as MARVEL's retrieval.py computes them with pytrec_eval (the seed's retrieval script):
  binary gains, NDCG@k = sum over the top k of rel_r / log2(r + 1) divided by the same sum for the
  gold documents ranked first; Recall@k = gold documents in the top k / gold documents; each averaged
  over the instances that have gold documents.
- Splits: every instance ("all") and, when the release marks some, the annotated test split
  ("test": Table 3 is on the human-annotated test set).

Inputs: queries (mavis_eval_queries, one file per model), release.
Outputs: quality (mavis_eval_retrieval_quality: one row per model, instance and retriever),
summary (mavis_eval_retrieval_summary: per model, retriever and split, the means).
Rejects (per model and instance): no_positives (the release has no entailed document for it:
nothing to recall, pytrec_eval leaves such a query out).
Invariant: (model, instance) pairs in = rows / retrievers + rejected.
Params: retrievers, ndcg_k, recall_k, clip_model, clip_weights, device, batch_size.
"""
from __future__ import annotations

import collections
import math

import numpy as np

from stages.eval_mavis.mavis_eval import load_release, positives, release_folder
from stages.eval_mavis.mavis_retrievers import RETRIEVERS, top_k
from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "1"


def ndcg_at(ranked: list[str], gold: set[str], k: int) -> float:
    """Binary-gain NDCG@k (trec_eval's ndcg_cut): DCG of the top k over the ideal DCG of the gold documents."""
    dcg = sum(1 / math.log2(r + 2) for r, doc in enumerate(ranked[:k]) if doc in gold)
    ideal = sum(1 / math.log2(r + 2) for r in range(min(k, len(gold))))
    return dcg / ideal


def recall_at(ranked: list[str], gold: set[str], k: int) -> float:
    return len(gold & set(ranked[:k])) / len(gold)


def run(ctx):
    params = ctx.params
    folder = release_folder(ctx.input_path("release"))
    release = load_release(folder)
    docs = sorted(release["documents"], key=lambda d: d["doc_id"])
    ids = [d["doc_id"] for d in docs]
    gold = positives(release)
    split = {r["id"]: r.get("split") for r in release["instances"]}
    queries: dict[tuple[str, str], list[dict]] = collections.defaultdict(list)
    for row in ctx.read_rows("queries"):
        queries[(row["model"], row["instance_id"])].append(row)
    kept = []
    for (model, instance_id), rows in sorted(queries.items()):
        with ctx.item(f"{model}/{instance_id}"):
            if not gold.get(instance_id):
                raise Reject("no_positives", f"instance {instance_id} has no entailed document in fact_documents")
            kept.append((model, instance_id, [q["query"] for q in sorted(rows, key=lambda q: q["query_index"])]))
    depth = max(params["ndcg_k"], params["recall_k"])
    out = []
    for name in params["retrievers"]:
        if not kept or not docs:
            break
        retriever = RETRIEVERS[name](params)
        doc_vectors = retriever.documents(folder, docs)
        everything = np.arange(len(docs))
        for model, instance_id, texts in kept:
            vector = retriever.queries(texts).mean(axis=0)
            ranked = [ids[j] for j in top_k(doc_vectors @ (vector / (np.linalg.norm(vector) or 1.0)), everything, depth)]
            positive = gold[instance_id]
            out.append({"model": model, "instance_id": instance_id, "split": split.get(instance_id), "retriever": retriever.label,
                        "queries": len(texts), "positives": len(positive), "retrieved_positives": len(positive & set(ranked)),
                        "ndcg": ndcg_at(ranked, positive, params["ndcg_k"]), "recall": recall_at(ranked, positive, params["recall_k"])})
    ctx.write("quality", out)
    groups: dict[tuple[str, str, str], list[dict]] = collections.defaultdict(list)
    for row in out:
        for name in ("all", "test") if row["split"] == "test" else ("all",):
            groups[(row["model"], row["retriever"], name)].append(row)
    ctx.write("summary", [{"model": m, "retriever": r, "split": s, "instances": len(rows), "ndcg_k": params["ndcg_k"],
                           "ndcg": sum(x["ndcg"] for x in rows) / len(rows), "recall_k": params["recall_k"],
                           "recall": sum(x["recall"] for x in rows) / len(rows)} for (m, r, s), rows in sorted(groups.items())])


def _invariant(ctx) -> str | None:
    scored = ctx.rows_in - ctx.rejected
    expected = scored * len(ctx.params["retrievers"]) if ctx.rows_in else 0
    got = ctx.rows_out("quality")
    return None if got == expected else f"(model, instance) pairs {ctx.rows_in} - rejected {ctx.rejected} = {scored}: {got} rows, not {expected}"


STAGE = Stage(
    name="mavis_retrieval_quality",
    version=VERSION,
    doc=__doc__,
    inputs={
        "queries": Input("mavis_eval_queries, one file per model", many=True, table="mavis_eval_queries"),
        "release": Input("MAVIS release manifest JSON, release folder or its benchmark.duckdb", kind="file"),
    },
    outputs={
        "quality": Output("mavis_eval_retrieval_quality", "NDCG@k and Recall@k per model, instance and retriever"),
        "summary": Output("mavis_eval_retrieval_summary", "the means per model, retriever and split (Table 3)", counted=False),
    },
    params={
        "retrievers": Param(list, ["minilm"], "retrievers to compare (stages/eval_mavis/mavis_retrievers.py): minilm (offline; images by "
                                              "their text stand-in), clip (images by pixels; give clip_weights)",
                            items=Param(str, choices=tuple(RETRIEVERS)), min=1),
        "ndcg_k": Param(int, 10, "cut-off of NDCG (Table 3: 10)", min=1, max=100_000),
        "recall_k": Param(int, 100, "cut-off of recall (Table 3: 100)", min=1, max=100_000),
        "clip_model": Param(str, "ViT-B-32", "open_clip architecture (retriever clip)"),
        "clip_weights": Param(str, "", "open_clip checkpoint path or tag (retriever clip; empty = random weights, tests only)"),
        "device": Param(str, "auto", "torch device for the encoders", choices=("auto", "cpu", "cuda")),
        "batch_size": Param(int, 32, "encoder batch size", min=1),
    },
    rejects={
        "no_positives": "the instance has no entailed document to retrieve",
    },
    run=run,
    invariant=_invariant,
)

if __name__ == "__main__":
    STAGE.main()
