"""build_text_index: one shard of the passage index over a text corpus (MAVIS §3.2 Step 2: C4, "a
collection of hundreds of gigabytes of English text scraped from the web", searched with every
atomic fact for the top five passages).

The corpus is read with `datasets.load_dataset(path, name, split, data_files, streaming=True)`:
on real runs `path` is a Hub dataset (C4: path allenai/c4, name en) read as a stream, with
`limit` documents in all; offline any `json`/`parquet` files with a text column (the demo's
C4-like sample). Shard `shard` of `shards` is `datasets.distributed.split_dataset_by_node`: whole
files per shard when the file count divides evenly (C4 en has 1024 train files), else every
shards-th document; each shard reads at most ceil(limit / shards) documents. Snakemake runs one
job per shard; retrieve_text merges their top-k.

Documents are cut into `passage_words`-word passages and indexed (stages.core.text_index: BM25 with
bm25s by default; `method: dense` embeds with the packaged all-MiniLM-L6-v2 into FAISS). The index
is built once per corpus + settings + shard under `store/<key>/` (key: a hash of the corpus
spec, its local files' sizes and times, the settings and the stage version) and reused by every
later run.

A document's id is `<id_prefix>:<id_column value>`, the value's surrounding whitespace stripped;
a document without one (no id_column, or a null or blank value) is `<id_prefix>:<shard>-<row>`.

Output `index` (retrieval_text_index): one row naming the shard's folder. Rejects, kept in the
folder and reported again on reuse: `wrong_type` (an id that is not a string or number, e.g. an
object or list; a text that is not a string), `duplicate_id` (an id an indexed document of the
shard already has; the first is kept), `empty_text` (a document with no text). A missing text
column stops the job naming the columns there are; a data file that does not parse stops it naming
the file, and so do data files with no rows at all (empty files). Invariant: documents in =
documents indexed + rejected.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterator

import pyarrow.parquet as pq

from stages.core.stage import Input, Output, Param, Stage, StageError
from stages.core.text_index import IndexSettings, build_shard, folder_bytes, index_key, iter_passages

VERSION = "2"
CORPUS_KEYS = {"path", "name", "split", "revision", "text_column", "id_column", "limit", "id_prefix"}


def corpus_spec(ctx) -> dict:
    corpus = dict(ctx.params["corpus"])
    unknown = sorted(set(corpus) - CORPUS_KEYS)
    if unknown or not corpus.get("path"):
        raise StageError(f"param corpus needs path; allowed keys {sorted(CORPUS_KEYS)}, unknown {unknown}")
    corpus.setdefault("split", "train")
    corpus.setdefault("text_column", "text")
    files = [Path(f) for f in ctx.input_paths("data_files")]
    corpus["files"] = [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files]
    corpus["stage_version"] = VERSION  # its reading rules (ids, rejects) shape the index too
    return corpus


def documents(ctx, corpus: dict) -> Iterator[tuple[int, object, object]]:
    """(row number, id column value or None, text column value) of this shard's documents."""
    import datasets
    from datasets.distributed import split_dataset_by_node

    p = ctx.params
    try:
        stream = datasets.load_dataset(
            corpus["path"], corpus.get("name"), split=corpus["split"], data_files=ctx.input_paths("data_files") or None,
            revision=corpus.get("revision"), streaming=True,
        )
    except (OSError, ValueError, datasets.exceptions.DatasetNotFoundError) as err:  # OSError: a file, or the Hub not reached
        raise StageError(f"cannot open corpus {corpus['path']!r} (split {corpus['split']!r}): {err}") from None
    except StopIteration:  # datasets' json builder found no row to infer the columns from
        raise StageError(f"cannot open corpus {corpus['path']!r} (split {corpus['split']!r}): no rows in data files "
                         f"{ctx.input_paths('data_files')} (empty files?)") from None
    if p["shards"] > 1:
        stream = split_dataset_by_node(stream, rank=p["shard"], world_size=p["shards"])
    if corpus.get("limit"):
        stream = stream.take(math.ceil(corpus["limit"] / p["shards"]))
    id_column = corpus.get("id_column")
    try:
        for number, row in enumerate(stream):
            if corpus["text_column"] not in row:
                raise StageError(f"corpus {corpus['path']!r} has no text column {corpus['text_column']!r}; columns: {sorted(row)}")
            yield number, row.get(id_column) if id_column else None, row[corpus["text_column"]]
    except (ValueError, OSError) as err:  # pyarrow's parse errors are ValueErrors; they do not name the file
        raise StageError(f"corpus {corpus['path']!r}: {unreadable_file(corpus, ctx.input_paths('data_files'))}{err}") from None


def document_id(raw_id: object, fallback: str) -> tuple[str, str | None]:
    """The id column's value as id text (`fallback` for a null or blank one), and why it is unusable
    (None when it is usable)."""
    key = raw_id.strip() if isinstance(raw_id, str) else raw_id
    if key is None or key == "":
        return fallback, None
    if isinstance(key, bool) or not isinstance(key, (str, int, float)):
        return fallback, f"is of type {type(key).__name__}, not a string or number: {str(key)[:80]!r}"
    return str(key), None


def unreadable_file(corpus: dict, files: list[str]) -> str:
    """'data file <path>: ' for the first local file that fails to read on its own (read again, by
    the same loader, only once reading has failed); '' when none does, or the corpus is on the Hub."""
    import datasets

    for path in files:
        try:
            for _ in datasets.load_dataset(corpus["path"], corpus.get("name"), split=corpus["split"], data_files=[path], streaming=True):
                pass
        except (ValueError, OSError):
            return f"data file {path}: "
        except StopIteration:  # an empty file, not the one that failed
            pass
    return ""


def run(ctx) -> None:
    p = ctx.params
    if not 0 <= p["shard"] < p["shards"]:
        raise StageError(f"param shard {p['shard']} is not in 0..{p['shards'] - 1}")
    settings = IndexSettings(p["method"], p["passage_words"], p["k1"], p["b"], p["stemmer"], p["batch_size"])
    try:
        settings.check()
    except ValueError as err:
        raise StageError(str(err)) from None
    corpus = corpus_spec(ctx)
    key = index_key(corpus, settings, p["shard"], p["shards"])
    folder = Path(p["store"]) / key
    reused = (folder / "meta.json").exists()
    if reused:
        meta = json.loads((folder / "meta.json").read_text())
        for reject in pq.read_table(folder / "rejects.parquet").to_pylist():
            ctx.reject(reject["id"], reject["reason"], reject["detail"])
    else:
        rejects: list[dict] = []
        counts = {"documents": 0}
        prefix, text_column = corpus.get("id_prefix") or "doc", corpus["text_column"]

        def kept() -> Iterator[tuple[str, str]]:
            seen: set[str] = set()
            for number, raw_id, text in documents(ctx, corpus):
                counts["documents"] += 1
                key, wrong_id = document_id(raw_id, f"{p['shard']:05d}-{number}")
                doc_id = f"{prefix}:{key}"
                if wrong_id:
                    reason, detail = "wrong_type", f"id column {corpus['id_column']!r} {wrong_id}"
                elif doc_id in seen:
                    reason, detail = "duplicate_id", f"document {doc_id} repeats an indexed document's id; the first was kept"
                elif text is not None and not isinstance(text, str):
                    reason = "wrong_type"
                    detail = f"text column {text_column!r} is of type {type(text).__name__}, not a string: {str(text)[:80]!r}"
                elif not text or not text.strip():
                    reason, detail = "empty_text", f"document {doc_id} has no text in {text_column!r}"
                else:
                    seen.add(doc_id)
                    yield doc_id, text
                    continue
                rejects.append({"id": doc_id, "reason": reason, "detail": detail})

        try:
            meta = build_shard(
                iter_passages(kept(), settings.passage_words), settings, folder,
                lambda: ({"documents": counts["documents"], "documents_rejected": len(rejects), "corpus": corpus}, rejects),
            )
        except ValueError as err:
            raise StageError(f"shard {p['shard']} of corpus {corpus['path']!r}: {err}") from None
        for reject in rejects:
            ctx.reject(reject["id"], reject["reason"], reject["detail"])
    ctx.add_input(meta["documents"])
    ctx.stats["documents_indexed"] = meta["documents"] - meta["documents_rejected"]
    ctx.stats["passages"] = meta["passages"]
    ctx.stats["reused"] = int(reused)
    ctx.write("index", [{
        "shard": p["shard"], "shards": p["shards"], "key": key, "path": str(folder), "method": settings.method,
        "documents": meta["documents"], "passages": meta["passages"], "bytes": folder_bytes(folder), "reused": reused,
    }])


def invariant(ctx) -> str | None:
    indexed = ctx.stats["documents_indexed"]
    if ctx.rows_in != indexed + ctx.rejected:
        return f"documents in {ctx.rows_in} != indexed {indexed} + rejected {ctx.rejected}"
    return None


STAGE = Stage(
    name="build_text_index",
    version=VERSION,
    doc=__doc__,
    inputs={"data_files": Input("local corpus files (json lines / parquet); none for a Hub corpus", many=True, optional=True, kind="file")},
    outputs={"index": Output("retrieval_text_index", "the shard's index folder", counted=False)},
    params={
        "corpus": Param(dict, {"path": "json", "split": "train", "text_column": "text"}, "datasets.load_dataset spec: path, name, split, revision, text_column, id_column, limit (documents in all; 0 = all), id_prefix"),
        "shard": Param(int, 0, "this job's shard", min=0),
        "shards": Param(int, 1, "corpus shards (one index and one job each)", min=1, max=100_000),
        "method": Param(str, "bm25", "bm25 (bm25s) or dense (all-MiniLM-L6-v2 + FAISS)", choices=("bm25", "dense")),
        "passage_words": Param(int, 100, "words per passage", min=1),
        "k1": Param(float, 1.5, "BM25 k1", min=0),
        "b": Param(float, 0.75, "BM25 b", min=0, max=1),
        "stemmer": Param(str, "english", "BM25 tokens: Snowball stemmer language (PyStemmer); empty = none"),
        "batch_size": Param(int, 64, "dense: passages per encoder batch", min=1),
        "store": Param(str, "data/cache/text_index", "where shard indexes are built once and reused", folder="writes"),
    },
    run=run,
    invariant=invariant,
    rejects={
        "wrong_type": "an id that is not a string or number (an object, a list), or a text that is not a string",
        "duplicate_id": "an id an indexed document of the shard already has (the first is kept)",
        "empty_text": "a document with no text",
    },
)

if __name__ == "__main__":
    STAGE.main()
