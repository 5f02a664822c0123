"""retrieve_fact_documents (MAVIS §3.2 Step 2): per fact, web images from the search client replayed
from a WARC written in the Programmable Search shape, and passages from a real BM25 index built by
build_text_index; the reject paths and the fan-out invariant."""
from __future__ import annotations

import gzip
import json

import pyarrow.parquet as pq

from conftest import run_stage
from stages.core.fetch import WarcRecorder
from stages.core.search.google import GoogleSearch
from stages.core.tables import write_table

GOOGLE = {"engine_id": "demo-engine", "key_env": "NO_KEY_NEEDED_IN_REPLAY"}
DOCS = [("d1", "Volcanic ash clouds ground aircraft because ash melts inside jet engines."),
        ("d2", "Sourdough bread rises because wild yeast releases carbon dioxide."),
        ("d3", "Jet engines ingest air, compress it and burn fuel to make thrust.")]


def _fact(fid, text):
    return {"fact_id": fid, "instance_id": fid.split("#")[0], "sentence": 0, "sentence_text": text, "text": text,
            "relevance": "relevant", "verifiable": "verifiable", "mode": "title"}


def _index(tmp_path):
    corpus = tmp_path / "corpus.jsonl.gz"
    with gzip.open(corpus, "wt") as fh:
        for doc_id, text in DOCS:
            fh.write(json.dumps({"id": doc_id, "text": text}) + "\n")
    out = tmp_path / "index.parquet"
    run_stage("build_text_index", "--input", f"data_files={corpus}", "--output", f"index={out}", "--params", json.dumps({
        "corpus": {"path": "json", "text_column": "text", "id_column": "id", "id_prefix": "c4t"}, "shard": 0, "shards": 1,
        "store": str(tmp_path / "store"), "passage_words": 40}))
    return out


def _archive(tmp_path, answers: dict[str, list[str]], top_k: int):
    provider = GoogleSearch(GOOGLE, need_key=False)
    warc = tmp_path / "facts.warc.gz"
    recorder = WarcRecorder(warc)
    for query, urls in answers.items():
        items = [{"link": u, "title": f"title {n}", "snippet": f"about {query[:20]}", "image": {"contextLink": "https://p.example/", "width": 200, "height": 150}}
                 for n, u in enumerate(urls)]
        recorder.response(provider.url(query, "image", 1, top_k), 200, "OK", [("Content-Type", "application/json")],
                          json.dumps({"items": items, "queries": {}}).encode())
    recorder.commit()
    return warc


def _run(tmp_path, facts, warc, index, check=True, **params):
    """warc None: live mode (a text-only run sends no request)."""
    path = tmp_path / "facts.parquet"
    write_table(path, facts, "mavis_facts")
    out = {t: tmp_path / f"{t}.parquet" for t in ("documents", "fact_documents", "fact_images")}
    prm = {"image_top_k": 2, "text_top_k": 2, "provider": "google", "provider_settings": GOOGLE, "cache_mode": "off",
           "fetch": {"mode": "replay" if warc else "live"}, **params}
    warcs = [f"--input=warcs={warc}"] if warc else []
    result = run_stage("retrieve_fact_documents", f"--input=facts={path}", f"--input=index={index}", *warcs,
                       *[f"--output={t}={p}" for t, p in out.items()], "--params", json.dumps(prm), check=check)
    return result, out


def test_both_sources_per_fact_rejects_and_fan_out(tmp_path):
    index = _index(tmp_path)
    jet, bread = "Volcanic ash melts inside jet engines.", "Sourdough bread rises with wild yeast."
    warc = _archive(tmp_path, {jet: ["https://img.example/ash.jpg", "https://img.example/engine.jpg"],
                               bread: ["https://img.example/ash.jpg"], "Qwxz plorf.": []}, top_k=2)
    facts = [_fact("i1#0.0", jet), _fact("i1#0.1", bread), _fact("i2#0.0", "Qwxz plorf."), _fact("i2#0.1", "Not recorded engines."),
             _fact("i3#0.0", "  ")]
    _, out = _run(tmp_path, facts, warc, index)
    docs = {d["doc_id"]: d for d in pq.read_table(out["documents"]).to_pylist()}
    pairs = pq.read_table(out["fact_documents"]).to_pylist()
    images = pq.read_table(out["fact_images"]).to_pylist()
    rejects = {r["id"]: r["reason"] for r in pq.read_table(f"{out['documents']}.rejects.parquet").to_pylist()}
    assert rejects == {"i2#0.0": "no_documents", "i2#0.1": "not_in_archive", "i3#0.0": "empty_fact"}
    by_fact = {}
    for p in pairs:
        by_fact.setdefault(p["fact_id"], []).append((docs[p["doc_id"]]["modality"], p["rank"]))
        assert p["query"] == next(f["text"] for f in facts if f["fact_id"] == p["fact_id"])
    assert sorted(by_fact["i1#0.0"]) == [("image", 1), ("image", 2), ("text", 1), ("text", 2)]
    assert sorted(by_fact["i1#0.1"]) == [("image", 1), ("text", 1)]  # one image answer; only one passage shares a term
    # the jet fact's best passage is the one about ash in engines; the shared image is one document
    top = next(p for p in pairs if p["fact_id"] == "i1#0.0" and p["rank"] == 1 and p["doc_id"].startswith("c4:"))
    assert "ash" in docs[top["doc_id"]]["text"]
    assert len([d for d in docs.values() if d["url"] == "https://img.example/ash.jpg"]) == 1
    image_docs = [d for d in docs.values() if d["modality"] == "image"]
    assert all(d["source"] == "web_image" and d["text"].startswith("title") and d["image_sha256"] is None for d in image_docs)
    assert all(d["source"] == "c4" and d["url"] is None for d in docs.values() if d["modality"] == "text")
    assert sorted((i["fact_id"], i["url"], i["text"]) for i in images) == sorted(
        (p["fact_id"], docs[p["doc_id"]]["url"], p["query"]) for p in pairs if docs[p["doc_id"]]["modality"] == "image")
    report = json.loads((tmp_path / "documents.parquet.report.json").read_text())
    assert report["rows_in"] == 5 and report["stats"]["facts_retrieved"] == 2 and report["stats"]["image_pairs"] == 3


def test_text_only_needs_no_archive_and_both_zero_fails(tmp_path):
    index = _index(tmp_path)
    _, out = _run(tmp_path, [_fact("i1#0.0", "Why do jet engines make thrust?")], None, index, image_top_k=0)
    assert {d["modality"] for d in pq.read_table(out["documents"]).to_pylist()} == {"text"}
    result, _ = _run(tmp_path, [_fact("i1#0.0", "x")], None, index, check=False, image_top_k=0, text_top_k=0)
    assert result.returncode != 0 and "image_top_k and text_top_k are both 0" in result.stderr
