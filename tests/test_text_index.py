"""The passage index: bm25s top-k against a brute-force BM25 scorer, shards built by separate jobs and
merged, the index reused across runs, and the dense (all-MiniLM-L6-v2 + FAISS) option."""
from __future__ import annotations

import gzip
import json
import random

import numpy as np
import pyarrow.parquet as pq

from stages.core.text_index import IndexSettings, ShardIndex, bm25_exact, build_shard, iter_passages, merge_topk, tokenize
from tests.conftest import run_stage

WORDS = [f"w{i}" for i in range(300)] + ["volcano", "volcanoes", "erupt", "eruption", "magma", "sky", "blue", "scattering"]


def corpus(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    weights = [1 / (i + 1) for i in range(len(WORDS))]  # Zipf-like: some words everywhere, most rare
    return [(f"d{seed}-{i}", " ".join(rng.choices(WORDS, weights, k=rng.randint(20, 260)))) for i in range(n)]


def brute_top(query: str, passages: list[str], k: int, settings: IndexSettings) -> list[tuple[float, int]]:
    scores = bm25_exact(list(dict.fromkeys(tokenize(query, settings.stemmer))), [tokenize(p, settings.stemmer) for p in passages], settings.k1, settings.b)
    order = sorted(range(len(passages)), key=lambda i: (-scores[i], i))
    return [(float(scores[i]), i) for i in order[:k] if scores[i] > 0]


def assert_same_ranking(got: list[tuple[float, int]], want: list[tuple[float, int]]) -> None:
    """Same scores rank by rank (float32 index vs float64 formula); same ids except among ties."""
    assert len(got) == len(want)
    np.testing.assert_allclose([s for s, _ in got], [s for s, _ in want], rtol=1e-4)
    for (gs, gi), (ws, wi) in zip(got, want):
        assert gi == wi or abs(gs - ws) <= 1e-4 * ws, (got, want)


def test_bm25_top_k_matches_a_brute_force_scorer(tmp_path):
    settings = IndexSettings(passage_words=50, k1=1.2, b=0.75)
    passages = list(iter_passages(iter(corpus(300, 1)), settings.passage_words))
    build_shard(iter(passages), settings, tmp_path / "shard", lambda: ({"documents": 300}, []))
    index = ShardIndex(tmp_path / "shard")
    texts = [p[2] for p in passages]
    rng = random.Random(7)
    queries = [" ".join(rng.sample(WORDS[:120], 3)) for _ in range(25)] + ["how do volcanoes erupt", "why is the sky blue"]
    results = index.search(queries, 10)
    for query, got in zip(queries, results):
        assert_same_ranking(got, brute_top(query, texts, 10, settings))
    # stemming: "volcanoes erupt" meets "volcano" and "eruption"
    assert tokenize("volcanoes erupted", "english") == tokenize("volcano erupt", "english")
    assert index.passages([got[0][1] for got in results[-2:]])[0]["passage_id"].startswith("d1-")
    assert index.search(["zzzz qqqq"], 10) == [[]]


def write_corpus(path, docs):
    with gzip.open(path, "wt") as fh:
        for doc_id, text in docs:
            fh.write(json.dumps({"id": doc_id, "text": text, "url": f"https://c.example/{doc_id}"}) + "\n")


def build(files, out, shard, shards, store, **extra):
    prm = {"corpus": {"path": "json", "text_column": "text", "id_column": "id", "id_prefix": "t"}, "shard": shard, "shards": shards,
           "store": str(store), "passage_words": 40, **extra}
    args = [a for f in files for a in ("--input", f"data_files={f}")]
    run_stage("build_text_index", *args, "--output", f"index={out}", "--params", json.dumps(prm))
    return pq.read_table(out).to_pylist()[0]


def test_shards_are_built_by_separate_jobs_merged_by_score_and_reused(tmp_path):
    docs_a, docs_b = corpus(120, 2), corpus(120, 3)
    docs_a[5] = ("d2-5", "   ")  # an empty document: rejected, and rejected again on reuse
    files = [tmp_path / "part-0.jsonl.gz", tmp_path / "part-1.jsonl.gz"]
    write_corpus(files[0], docs_a)
    write_corpus(files[1], docs_b)
    store = tmp_path / "store"
    manifests = [build(files, tmp_path / f"index.{s}.parquet", s, 2, store) for s in range(2)]
    assert [m["documents"] for m in manifests] == [120, 120] and not any(m["reused"] for m in manifests)
    rejected = pq.read_table(tmp_path / "index.0.parquet.rejects.parquet").to_pylist() + pq.read_table(tmp_path / "index.1.parquet.rejects.parquet").to_pylist()
    assert [(r["id"], r["reason"]) for r in rejected] == [("t:d2-5", "empty_text")]

    queries = [{"id": f"q{i}", "text": t} for i, t in enumerate(["volcano eruption magma", "blue sky scattering", "w3 w17 w40", "w250 w260 w270", "nothing"])]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    out = tmp_path / "passages.parquet"
    run_stage("retrieve_text", "--input", f"queries={tmp_path / 'q.jsonl'}", "--input", f"index={tmp_path / 'index.0.parquet'}",
              "--input", f"index={tmp_path / 'index.1.parquet'}", "--output", f"passages={out}", "--params", '{"top_k": 7}')
    got = pq.read_table(out).to_pylist()
    settings = IndexSettings(passage_words=40)
    shard_texts = [pq.read_table(f"{m['path']}/passages.parquet").to_pylist() for m in manifests]
    for query in queries[:4]:
        per_shard = [brute_top(query["text"], [p["text"] for p in texts], 7, settings) for texts in shard_texts]
        want = merge_topk(per_shard, 7)
        rows = sorted((r for r in got if r["query_id"] == query["id"]), key=lambda r: r["rank"])
        assert [r["rank"] for r in rows] == list(range(1, 8))
        assert_same_ranking([(r["score"], (r["shard"], r["passage_id"])) for r in rows],
                            [(s, (sh, shard_texts[sh][i]["passage_id"])) for s, sh, i in want])
        assert {r["shard"] for r in rows} == {0, 1} or query["text"].startswith("w2")  # both shards contribute
        assert all(r["text"] == next(p["text"] for t in shard_texts for p in t if p["passage_id"] == r["passage_id"]) for r in rows)
    assert [(r["id"], r["reason"]) for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()] == [("q4", "no_match")]

    again = [build(files, tmp_path / f"again.{s}.parquet", s, 2, store) for s in range(2)]
    assert all(m["reused"] for m in again) and [m["key"] for m in again] == [m["key"] for m in manifests]
    assert [r["id"] for r in pq.read_table(tmp_path / "again.0.parquet.rejects.parquet").to_pylist()] == ["t:d2-5"]
    changed = build(files, tmp_path / "other.0.parquet", 0, 2, store, k1=0.9)
    assert not changed["reused"] and changed["key"] != manifests[0]["key"]


def test_dense_option_finds_the_passage_about_the_query(tmp_path):
    docs = [("sky", "The sky looks blue because air scatters short blue wavelengths of sunlight more than red ones."),
            ("bread", "Sourdough bread rises because wild yeast ferments the flour and releases carbon dioxide gas."),
            ("battery", "A lithium-ion battery stores energy by moving lithium ions into the graphite anode when charging."),
            ("volcano", "A volcano erupts when gas dissolved in magma expands and the pressure breaks the rock above.")]
    files = [tmp_path / "dense.jsonl.gz"]
    write_corpus(files[0], docs)
    manifest = build(files, tmp_path / "dense.parquet", 0, 1, tmp_path / "store", method="dense")
    assert manifest["method"] == "dense" and manifest["passages"] == 4
    index = ShardIndex(manifest["path"])
    hits = index.search(["What makes a loaf of bread get bigger?", "Why does a mountain explode with lava?"], 2)
    assert [index.passages([h[0][1]])[0]["doc_id"] for h in hits] == ["t:bread", "t:volcano"]
    assert all(0 < h[0][0] <= 1.0001 and h[0][0] > h[1][0] for h in hits)  # cosine similarity, best first
