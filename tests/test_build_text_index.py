"""build_text_index: shards built by separate jobs, empty documents rejected, an index reused across
runs (and rebuilt when a setting changes), and the dense (all-MiniLM-L6-v2 + FAISS) option."""
from __future__ import annotations

import json

import pyarrow.parquet as pq

from conftest import run_stage
from stages.core.text_index import ShardIndex
from text_index_fixtures import build, corpus, write_corpus


def test_shards_are_built_by_separate_jobs_and_reused(tmp_path):
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


def test_a_data_file_that_does_not_parse_is_named(tmp_path):
    good, bad = tmp_path / "part-0.jsonl.gz", tmp_path / "part-1.jsonl"
    write_corpus(good, corpus(20, 2))
    bad.write_bytes(b'{"id": "a", "text": "fine"}\n{"id": "b", "text": "cut off\n{"id": "c", "text": "fine"}\n')
    params = {"corpus": {"path": "json", "text_column": "text", "id_column": "id"}, "store": str(tmp_path / "store")}
    result = run_stage("build_text_index", "--input", f"data_files={good}", "--input", f"data_files={bad}",
                       "--output", f"index={tmp_path / 'index.parquet'}", "--params", json.dumps(params), check=False)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0 and last.startswith(f"build_text_index: error: corpus 'json': data file {bad}: JSON parse error"), last



def test_a_corpus_that_cannot_be_reached_is_one_line(tmp_path, monkeypatch):
    """A mistyped Hub id, or no network (here: offline mode): the datasets library's
    ConnectionError, told in one line naming the corpus."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = run_stage("build_text_index", "--output", f"index={tmp_path / 'index.parquet'}",
                       "--params", json.dumps({"corpus": {"path": "no-such-org/no-such-corpus"}}), check=False)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert last.startswith("build_text_index: error: cannot open corpus 'no-such-org/no-such-corpus' (split 'train'): Couldn't reach"), last


def test_a_stemmer_pystemmer_lacks_is_refused_before_the_build(tmp_path):
    result = run_stage("build_text_index", "--output", f"index={tmp_path / 'index.parquet'}",
                       "--params", json.dumps({"corpus": {"path": "json"}, "stemmer": "klingon"}), check=False)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert last.startswith("build_text_index: error: stemmer 'klingon' is no Snowball language of PyStemmer; it has arabic,"), last


def test_bad_ids_repeated_ids_and_non_string_texts_are_rejected(tmp_path):
    rows = [{"id": "a", "text": "the sky is blue"}, {"id": "a ", "text": "a second document under the same id"},
            {"id": {"k": 1}, "text": "an object id"}, {"id": [1], "text": "a list id"}, {"id": "b", "text": 5},
            {"id": "c", "text": ["x"]}, {"id": "d", "text": "  "}, {"id": "d", "text": "the first d with text"}]
    data = tmp_path / "c.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = build([data], tmp_path / "index.parquet", 0, 1, tmp_path / "store")
    assert manifest["documents"] == 8
    assert pq.read_table(f"{manifest['path']}/passages.parquet").column("doc_id").to_pylist() == ["t:a", "t:d"]
    rejects = pq.read_table(tmp_path / "index.parquet.rejects.parquet").to_pylist()
    assert [(r["id"], r["reason"]) for r in rejects] == [
        ("t:a", "duplicate_id"), ("t:00000-2", "wrong_type"), ("t:00000-3", "wrong_type"), ("t:b", "wrong_type"),
        ("t:c", "wrong_type"), ("t:d", "empty_text")]
    assert rejects[1]["detail"] == "id column 'id' is of type dict, not a string or number: \"{'k': 1}\""
    assert rejects[3]["detail"] == "text column 'text' is of type int, not a string: '5'"


def test_empty_data_files_are_one_line(tmp_path):
    empty = tmp_path / "c.jsonl"
    empty.write_bytes(b"")
    params = {"corpus": {"path": "json", "text_column": "text", "id_column": "id"}, "store": str(tmp_path / "store")}
    result = run_stage("build_text_index", "--input", f"data_files={empty}", "--output", f"index={tmp_path / 'index.parquet'}",
                       "--params", json.dumps(params), check=False)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert last == f"build_text_index: error: cannot open corpus 'json' (split 'train'): no rows in data files ['{empty}'] (empty files?)", last
