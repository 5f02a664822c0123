"""mavis_retrieve through its CLI (mavis.txt §3.1 step 2, §5.1-5.2) over the tiny fixture release's
documents with the packaged all-MiniLM-L6-v2: per query and setting the top K documents, ranked by
score, Text-RAG only passages, Image-RAG only images (by their text stand-in), Multi-RAG both; the
closest document by meaning first; instances in = instances retrieved + rejected."""
from __future__ import annotations

import json

import pyarrow.parquet as pq

from conftest import run_stage
from mavis_eval_fixtures import build_release
from stages.core.tables import write_table

TOMATO, BIRD = "reddit:p1/c1", "reddit:p2/c2"
QUERIES = [(TOMATO, 0, "tomato leaves turning yellow from nitrogen deficiency"), (TOMATO, 1, "how to water tomato plants"),
           (BIRD, 0, "red bird perched on a seed feeder")]


def test_top_k_per_query_and_setting(tmp_path):
    manifest = build_release(tmp_path / "rel" / "v1")
    queries = tmp_path / "queries.parquet"
    write_table(queries, [{"id": f"mq:{i}:{k}", "model": "cand", "instance_id": i, "split": "test", "query_index": k, "query": q, "raw": q, "vision": False}
                          for i, k, q in QUERIES], "mavis_eval_queries")
    out = tmp_path / "retrieved.parquet"
    run_stage("mavis_retrieve", f"--input=queries={queries}", f"--input=release={manifest}", f"--output=retrieved={out}",
              "--params", json.dumps({"settings": ["text", "image", "multi"], "top_k": 2, "device": "cpu"}))
    rows = pq.read_table(out).to_pylist()
    report = json.loads(open(f"{out}.report.json").read())
    assert report["rows_in"] == 2 == report["stats"]["instances_retrieved"] + report["rejected"]
    assert len(rows) == len(QUERIES) * 3 * 2  # queries x settings x K
    lists = {}
    for row in rows:
        lists.setdefault((row["instance_id"], row["query_index"], row["setting"]), []).append(row)
    for (_, _, setting), ranked in lists.items():
        assert [r["rank"] for r in ranked] == [1, 2]
        assert ranked[0]["score"] >= ranked[1]["score"]
        assert {r["modality"] for r in ranked} <= ({"text", "image"} if setting == "multi" else {setting})
    top = {key: ranked[0]["doc_id"] for key, ranked in lists.items()}
    assert top[(TOMATO, 0, "text")] == "d:t1" and top[(TOMATO, 1, "text")] == "d:t2"
    assert top[(TOMATO, 0, "image")] == "d:i1" and top[(BIRD, 0, "image")] == "d:i2"
    # Multi-RAG ranks passages and images in one list: its best is the better of the two settings' best
    for (instance, k, setting), ranked in lists.items():
        if setting == "multi":
            best = max((lists[(instance, k, s)][0] for s in ("text", "image")), key=lambda r: r["score"])
            assert ranked[0]["doc_id"] == best["doc_id"]
    assert {r["retriever"] for r in rows} == {"minilm:all-MiniLM-L6-v2 (images by their text stand-in)"}


def test_top_k_is_the_full_sorts_first_k_ties_by_id_nan_last():
    """top_k sorts only the candidates scoring at least the k-th best; on draws with many ties and
    NaN scores (a zero vector) its answer is the first k of the full sort by score, then by id."""
    import numpy as np

    from stages.eval_mavis.mavis_retrievers import top_k

    rng = np.random.default_rng(7)
    for draw in range(3000):
        scores = rng.integers(0, 5, size=60).astype(np.float32)
        if draw % 5 == 0:
            scores[rng.integers(0, 60, size=rng.integers(1, 30))] = np.nan
        candidates = np.sort(rng.choice(60, size=rng.integers(0, 40), replace=False))
        k = int(rng.integers(0, 12))
        full = np.lexsort((candidates, -scores[candidates]))[:k]
        assert top_k(scores, candidates, k) == [int(j) for j in candidates[full]], draw


def test_the_clip_retriever_embeds_in_batches_as_one_by_one(tmp_path):
    """The clip retriever (random weights: no checkpoint here) embeds image documents by their
    pixels and text ones by the text tower, a batch at a time, each row as a batch of one gives it;
    the stage ranks with it end to end."""
    import numpy as np

    from stages.eval_mavis.mavis_eval import load_release, release_folder
    from stages.eval_mavis.mavis_retrievers import Clip

    manifest = build_release(tmp_path / "rel" / "v1")
    folder = release_folder(str(manifest))
    docs = sorted(load_release(folder)["documents"], key=lambda d: d["doc_id"])
    assert {d["modality"] for d in docs} == {"text", "image"}
    params = {"clip_model": "ViT-B-32", "clip_weights": "", "device": "cpu", "batch_size": 3}
    batched = Clip(params).documents(folder, docs)
    single = Clip(params | {"batch_size": 1}).documents(folder, docs)
    assert batched.shape == (len(docs), 512) and np.allclose(batched, single, atol=1e-4)
    assert np.allclose(np.linalg.norm(batched, axis=1), 1, atol=1e-5)

    queries = tmp_path / "queries.parquet"
    write_table(queries, [{"id": f"mq:{i}:{k}", "model": "cand", "instance_id": i, "split": "test", "query_index": k, "query": q, "raw": q, "vision": False}
                          for i, k, q in QUERIES], "mavis_eval_queries")
    out = tmp_path / "retrieved.parquet"
    run_stage("mavis_retrieve", f"--input=queries={queries}", f"--input=release={manifest}", f"--output=retrieved={out}",
              "--params", json.dumps({"settings": ["multi"], "top_k": 2, "device": "cpu", "retriever": "clip", "batch_size": 2}))
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == len(QUERIES) * 2 and {r["retriever"] for r in rows} == {"clip:ViT-B-32:random-weights"}
