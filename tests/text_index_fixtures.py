"""Shared by the passage-index tests (test_text_index, test_build_text_index, test_retrieve_text): a
Zipf-like random corpus, a brute-force BM25 top-k to compare with, and a build_text_index run."""
from __future__ import annotations

import gzip
import json
import random

import numpy as np
import pyarrow.parquet as pq

from conftest import run_stage
from stages.core.text_index import IndexSettings, bm25_exact, tokenize

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
