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


TRICKY = ["ΟΔΟΣ σοφίας ΣΑΣ.", "İstanbul café\nnaïve résumé", "", "the and of", "x_y 3rd 1,000 ½ ² ٣ 一二",
          "Straße STRASSE ﬁne", "tab\there\u00a0nbsp\u2028line\x1cgroup", "Volcanoes ERUPTED, volcano's eruption!"]


def test_column_wise_build_writes_the_files_bm25s_writes(tmp_path):
    """The build's matrix and vocabulary are bm25s's own index of `tokenize`'s tokens, byte for byte
    (two batches, so the vocabulary carries across them)."""
    import bm25s
    from bm25s.tokenization import Tokenized

    rng = random.Random(5)
    texts = [text for _, text in corpus(10_000, 4)] + [rng.choice(TRICKY) + " " + rng.choice(WORDS) for _ in range(300)]
    triples = [(f"p{i}", "d", text) for i, text in enumerate(texts)]
    for stemmer in ("english", ""):
        settings = IndexSettings(k1=1.2, b=0.7, stemmer=stemmer)
        build_shard(iter(triples), settings, tmp_path / stemmer / "shard", lambda: ({"documents": 1}, []))
        vocab: dict[str, int] = {}
        ids = [[vocab.setdefault(t, len(vocab)) for t in tokenize(text, stemmer)] for text in texts]
        reference = bm25s.BM25(method="lucene", k1=settings.k1, b=settings.b)
        reference.index(Tokenized(ids=ids, vocab=vocab), show_progress=False)
        reference.save(tmp_path / stemmer / "reference", show_progress=False)
        for name in ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy", "vocab.index.json", "params.index.json"):
            assert (tmp_path / stemmer / "shard" / "bm25" / name).read_bytes() == (tmp_path / stemmer / "reference" / name).read_bytes(), (stemmer, name)


def test_equal_scores_rank_by_row(tmp_path):
    texts = [f"filler {i} words here" for i in range(40)]
    for row in (31, 7, 22, 3, 15, 38, 11, 26, 19, 34, 0, 29):  # twelve passages score alike
        texts[row] = "volcano ash"
    build_shard(iter((f"p{i}", "d", t) for i, t in enumerate(texts)), IndexSettings(), tmp_path / "shard", lambda: ({"documents": 40}, []))
    got = ShardIndex(tmp_path / "shard").search(["volcano"], 10)[0]
    assert [row for _, row in got] == [0, 3, 7, 11, 15, 19, 22, 26, 29, 31] and len({score for score, _ in got}) == 1
