"""Multimodal document retrieval over the release's own documents (mavis.txt §3.1 step 2, §5.1-5.2):
the top K documents per search query in three settings, Text-RAG (text passages only), Image-RAG
(images only) and Multi-RAG (both in one database).

The seed uses MM-Embed on a GPU over 2.5M documents; here the database is the release's
`documents` table and the retriever is pluggable (stages/eval_mavis/mavis_retrievers.py), one embedding
space per run so Multi-RAG ranks text and images in one list: `minilm` (the offline default,
images through their text stand-in, which every row's `retriever` records) or `clip` (images by
their pixels).
Ties break by document id. A setting whose database is empty in the release (no image documents)
yields no rows for it, counted in `empty_database[<setting>]`.

Inputs: queries (mavis_eval_queries), release.
Outputs: retrieved (mavis_eval_retrieved), one row per (instance, setting, query, rank).
Invariant: instances in (distinct instance ids of the queries) = instances with rows + rejected;
no reject reasons (a whole-release problem stops the stage).
Params: settings, top_k, retriever, clip_model, clip_weights, device, batch_size.
"""
from __future__ import annotations

import collections

import numpy as np

from stages.core.ids import content_id
from stages.eval_mavis.mavis_eval import SETTINGS, load_release, release_folder
from stages.eval_mavis.mavis_retrievers import RETRIEVERS, top_k
from stages.core.stage import Input, Output, Param, Stage

VERSION = "1"


def run(ctx):
    params = ctx.params
    folder = release_folder(ctx.input_path("release"))
    docs = sorted(load_release(folder)["documents"], key=lambda d: d["doc_id"])
    by_instance: dict[str, list[dict]] = collections.defaultdict(list)
    for row in ctx.read_rows("queries"):
        by_instance[row["instance_id"]].append(row)
    if not by_instance:
        return
    retriever = RETRIEVERS[params["retriever"]](params)
    doc_vectors = retriever.documents(folder, docs) if docs else np.zeros((0, 1), np.float32)
    modality = np.array([d["modality"] for d in docs])
    pool = {"text": np.flatnonzero(modality == "text"), "image": np.flatnonzero(modality == "image"), "multi": np.arange(len(docs))}
    for setting in params["settings"]:
        if not len(pool[setting]):
            ctx.stats[f"empty_database[{setting}]"] += 1
    ids = [d["doc_id"] for d in docs]
    for instance_id, queries in sorted(by_instance.items()):
        with ctx.item(instance_id):
            queries.sort(key=lambda q: q["query_index"])
            vectors = retriever.queries([q["query"] for q in queries])
            rows = []
            for q, vector in zip(queries, vectors):
                scores = doc_vectors @ vector if docs else np.zeros(0)
                for setting in params["settings"]:
                    for rank, j in enumerate(top_k(scores, pool[setting], params["top_k"]), 1):
                        rows.append({"id": content_id("mr", q["id"], setting, rank), "model": q["model"], "instance_id": instance_id,
                                     "setting": setting, "query_index": q["query_index"], "query": q["query"], "rank": rank,
                                     "doc_id": ids[j], "modality": docs[j]["modality"], "score": float(scores[j]),
                                     "retriever": retriever.label})
            ctx.stats["instances_retrieved"] += 1
            ctx.write("retrieved", rows)


def _invariant(ctx) -> str | None:
    done = ctx.stats["instances_retrieved"] + ctx.rejected
    return None if done == ctx.rows_in else f"instances in {ctx.rows_in} != retrieved {ctx.stats['instances_retrieved']} + rejected {ctx.rejected}"


STAGE = Stage(
    name="mavis_retrieve",
    version=VERSION,
    doc=__doc__,
    inputs={
        "queries": Input("mavis_eval_queries from mavis_generate_queries", table="mavis_eval_queries"),
        "release": Input("MAVIS release manifest JSON, release folder or its benchmark.duckdb", kind="file"),
    },
    outputs={"retrieved": Output("mavis_eval_retrieved", "top K documents per (instance, setting, query)")},
    params={
        "settings": Param(list, list(SETTINGS), "RAG settings (§5.2): text (Text-RAG), image (Image-RAG), multi (Multi-RAG)",
                          items=Param(str, choices=SETTINGS), min=1),
        "top_k": Param(int, 5, "K, documents per query (§5.3: K = 5)", min=1),
        "retriever": Param(str, "minilm", "the dense retriever: minilm (offline; images by their text stand-in) or clip "
                                          "(images by pixels; give clip_weights)", choices=tuple(RETRIEVERS)),
        "clip_model": Param(str, "ViT-B-32", "open_clip architecture (retriever clip)"),
        "clip_weights": Param(str, "", "open_clip checkpoint path or tag (retriever clip; empty = random weights, tests only)"),
        "device": Param(str, "auto", "torch device for the encoders", choices=("auto", "cpu", "cuda")),
        "batch_size": Param(int, 32, "encoder batch size", min=1),
    },
    run=run,
    invariant=_invariant,
    rejects={},  # a whole-release problem stops the stage
)

if __name__ == "__main__":
    STAGE.main()
