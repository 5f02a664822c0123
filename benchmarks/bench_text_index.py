"""The BM25 passage index at scale: its build against bm25s and tantivy used directly, its queries
against brute-force BM25 scoring with the same tokenizer.

    python benchmarks/bench_text_index.py [--passages 100000] [--queries 1000] [--brute-queries 20]

Generates --passages synthetic 100-word passages (a Zipf-distributed vocabulary of 50,000
pronounceable pseudo-words, seeded; held in memory before any timing) and streams them into one
index shard exactly as build_text_index does (stages.core.text_index.build_shard, default
settings: BM25 k1 1.5, b 0.75, English stemming). Prints:
  build         seconds and CPU seconds, index size on disk (bm25 matrix + vocabulary, and the
                passage texts), peak resident memory of the process after the build;
  bm25s         the same passages through bm25s used directly (bm25s.tokenize with its English
                stop words and the same Snowball stemmer, then BM25(method="lucene").index), CPU
                seconds, and the build's CPU as a multiple of it (target <= 0.5);
  tantivy       the same passages into a tantivy-py index (en_stem tokenizer, one indexing
                thread, committed and merged), CPU seconds, and the build's CPU as a multiple of
                it (target <= 1.5). Both baselines index only; the build also writes the passage
                texts to Parquet;
  queries       queries/s at k=10 for --queries 3-word queries against the memory-mapped index, one
                thread (ShardIndex.search, as retrieve_text runs it);
  brute force   stages.core.text_index.bm25_exact (the Lucene formula over every passage, no index)
                with the same tokenizer, for the first --brute-queries queries: seconds per query,
                and whether the top-10 passages are the same (rank by rank; a differing id is
                accepted only where the two scores tie within float32 precision);
  speed-up      brute-force seconds per query / index seconds per query, wall-clock and CPU time
                (CPU time stays fair when other jobs share the machine; target >= 50x);
  load average  the machine's, at the end.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stages.core.text_index import IndexSettings, ShardIndex, bm25_exact, build_shard, folder_bytes, tokenize  # noqa: E402

SYLLABLES = ["ka", "lo", "mi", "ren", "tu", "sa", "vor", "ne", "pi", "dal", "gu", "shi", "bo", "tem", "fa", "ril", "zo", "qua", "ny", "ex"]


def vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES, size=rng.integers(2, 5))))
    return sorted(words)


def passages(count: int, words: list[str], seed: int):
    """(passage_id, doc_id, text), generated batch by batch (never all in memory)."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, len(words) + 1)
    p = 1 / ranks
    p /= p.sum()
    vocab = np.array(words, dtype=object)
    batch = 10_000
    for start in range(0, count, batch):
        n = min(batch, count - start)
        ids = rng.choice(len(words), size=(n, 100), p=p)
        for i, row in enumerate(vocab[ids]):
            yield f"p{start + i}", f"d{(start + i) // 3}", " ".join(row)


def bm25s_direct(texts: list[str], settings: IndexSettings) -> float:
    """CPU seconds of bm25s's own tokenizer (English stop words, the same stemmer) and index."""
    import bm25s
    import Stemmer

    cpu = time.process_time()
    tokens = bm25s.tokenize(texts, stopwords="en", stemmer=Stemmer.Stemmer(settings.stemmer), show_progress=False)
    bm25s.BM25(method="lucene", k1=settings.k1, b=settings.b).index(tokens, show_progress=False)
    return time.process_time() - cpu


def tantivy_direct(texts: list[str], folder: Path) -> float:
    """CPU seconds (all its threads) of a tantivy index of the texts, committed and merged."""
    import tantivy

    folder.mkdir(parents=True, exist_ok=True)
    cpu = time.process_time()
    schema = tantivy.SchemaBuilder().add_text_field("text", stored=False, tokenizer_name="en_stem").build()
    writer = tantivy.Index(schema, path=str(folder)).writer(heap_size=200_000_000, num_threads=1)
    for text in texts:
        writer.add_document(tantivy.Document(text=text))
    writer.commit()
    writer.wait_merging_threads()
    return time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--brute-queries", type=int, default=20)
    parser.add_argument("--workdir", default=None, help="where the index is built (default: a temp folder, removed)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    words = vocabulary(50_000, rng)
    settings = IndexSettings()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_text_index."))
    folder = work / "shard"
    shutil.rmtree(folder, ignore_errors=True)

    corpus = list(passages(args.passages, words, 1))
    texts = [text for _, _, text in corpus]

    started, cpu = time.perf_counter(), time.process_time()
    meta = build_shard(iter(corpus), settings, folder, lambda: ({"documents": args.passages // 3}, []))
    build_s, build_cpu = time.perf_counter() - started, time.process_time() - cpu
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    index_mb = folder_bytes(folder / "bm25") / 1e6
    texts_mb = (folder / "passages.parquet").stat().st_size / 1e6
    print(f"build        {meta['passages']:,} passages in {build_s:.1f} s, {build_cpu:.1f} CPU s ({meta['passages'] / build_s:,.0f} passages/s); "
          f"on disk: bm25 {index_mb:.0f} MB + passage texts {texts_mb:.0f} MB; peak memory {peak_gb:.2f} GB")
    bm25s_cpu = bm25s_direct(texts, settings)
    print(f"bm25s        {bm25s_cpu:.1f} CPU s used directly (tokenize + index): the build takes {build_cpu / bm25s_cpu:.2f}x its CPU")
    try:
        tantivy_cpu = tantivy_direct(texts, work / "tantivy")
        print(f"tantivy      {tantivy_cpu:.1f} CPU s used directly (one indexing thread): the build takes {build_cpu / tantivy_cpu:.2f}x its CPU")
    except ImportError:
        print("tantivy      not installed (pip install -e '.[bench]'): no tantivy baseline")

    index = ShardIndex(folder)
    qrng = np.random.default_rng(2)
    queries = [" ".join(qrng.choice(words[50:20_000], size=3, replace=False)) for _ in range(args.queries)]
    index.search(queries[:5], 10)  # page in the memory map
    started, cpu = time.perf_counter(), time.process_time()
    results = index.search(queries, 10)
    index_s = (time.perf_counter() - started) / len(queries)
    index_cpu = (time.process_time() - cpu) / len(queries)
    print(f"queries      {len(queries)} at k=10: {1 / index_s:,.0f} queries/s ({index_s * 1000:.2f} ms per query wall, {index_cpu * 1000:.2f} ms CPU, one thread)")

    # brute force: every passage tokenised with the same tokenizer, scored from the formula
    vocab: dict[str, int] = {}
    started = time.perf_counter()
    docs = [[vocab.setdefault(t, len(vocab)) for t in tokenize(text, settings.stemmer)] for _, _, text in passages(args.passages, words, 1)]
    tokenize_s = time.perf_counter() - started
    same, brute_total, brute_cpu = 0, 0.0, 0.0
    for query, got in zip(queries[: args.brute_queries], results):
        terms = [vocab[t] for t in dict.fromkeys(tokenize(query, settings.stemmer)) if t in vocab]
        started, cpu = time.perf_counter(), time.process_time()
        scores = bm25_exact(terms, docs, settings.k1, settings.b)
        top = np.argsort(-scores, kind="stable")[:10]
        brute_total += time.perf_counter() - started
        brute_cpu += time.process_time() - cpu
        want = [(float(scores[i]), int(i)) for i in top if scores[i] > 0]
        same += len(got) == len(want) and all(gi == wi or abs(gs - ws) <= 1e-4 * ws for (gs, gi), (ws, wi) in zip(got, want))
    brute_s, brute_cpu = brute_total / args.brute_queries, brute_cpu / args.brute_queries
    print(f"brute force  {args.brute_queries} queries: {brute_s:.2f} s per query wall, {brute_cpu:.2f} s CPU (after {tokenize_s:.0f} s tokenising "
          f"the corpus once); same top-10 for {same}/{args.brute_queries} queries")
    print(f"speed-up     {brute_s / index_s:,.0f}x per query (wall), {brute_cpu / index_cpu:,.0f}x (CPU time: fair on a shared machine)")
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} (1, 5, 15 min) on {os.cpu_count()} cores")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
