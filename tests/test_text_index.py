"""The passage index module (stages/core/text_index.py): bm25s top-k against a brute-force BM25
scorer, and stemming. The stages: tests/test_build_text_index.py, tests/test_retrieve_text.py."""
from __future__ import annotations

import random

from stages.core.text_index import IndexSettings, ShardIndex, build_shard, iter_passages, tokenize
from text_index_fixtures import WORDS, assert_same_ranking, brute_top, corpus


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
