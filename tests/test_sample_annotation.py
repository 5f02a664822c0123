"""sample_annotation (MAVIS §3.2 Step 3, App. A.4-A.5) and release_mavis with per-fact documents:
the domain-balanced sample of instances with supported facts, the annotators' sheet through the
review round trip, and a release that honours the filled sheet (test split, irrelevant facts out,
human grounding decisions), with images copied as images/<sha256>.jpg."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from conftest import run_stage
from stages.core.declarations import load_manifest
from stages.core.images import ImageStore
from stages.core.tables import REJECTS_SCHEMA, write_table


def _instance(post, comment, domain):
    return {"id": f"reddit:{post}/{comment}", "post_id": f"reddit:{post}", "subreddit": "s", "domain": domain, "question": f"Why {post}?",
            "body": "", "image_urls": ["https://i.redd.it/x.jpg"], "answer": "one two three four", "answer_id": f"reddit:{comment}",
            "answer_score": 1, "answer_sentences": 3, "answer_rank": 1, "permalink": "", "created_utc": 1, "score": 1}


def _question(post, domain):
    return {"id": f"reddit:{post}", "subreddit": "s", "domain": domain, "question": f"Why {post}?", "body": "",
            "image_urls": ["https://i.redd.it/x.jpg"], "answers": 1, "permalink": "", "created_utc": 1, "score": 1}


def _fact(fid, inst):
    return {"fact_id": fid, "instance_id": inst, "sentence": 0, "sentence_text": "s", "text": f"text of {fid}",
            "relevance": "relevant", "verifiable": "verifiable", "mode": "title"}


def _img(store, color, fmt):
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), color).save(buffer, fmt)
    return store.put(buffer.getvalue(), fmt.lower().replace("jpeg", "jpg"))


def _deduped(owner, url, sha, position=0):
    return {"id": f"img:{sha}", "ref_id": f"imgref:{owner}{url}", "owner_id": owner, "query_id": owner, "position": position, "url": url,
            "final_url": url, "sha256": sha, "format": "jpeg", "source_format": "jpeg", "width": 64, "height": 48, "bytes": 1,
            "clip_score": None, "phash": "0" * 16, "duplicates": 0}


def _world(tmp_path):
    store = ImageStore(tmp_path / "store")
    s1, s2, s3 = _img(store, (250, 0, 0), "JPEG"), _img(store, (0, 250, 0), "JPEG"), _img(store, (0, 0, 250), "PNG")
    i1, i2, i3 = "reddit:q1/c1", "reddit:q2/c3", "reddit:q3/c4"
    tables = {
        "instances": ([_instance("q1", "c1", "Science"), _instance("q2", "c3", "Business"), _instance("q3", "c4", "Science")], "reddit_instances"),
        "questions": ([_question("q1", "Science"), _question("q2", "Business"), _question("q3", "Science")], "reddit_questions"),
        "facts": ([_fact("f1", i1), _fact("f2", i1), _fact("f3", i1), _fact("f4", i2), _fact("f5", i3)], "mavis_facts"),
        "documents": ([
            {"doc_id": "c4:a", "modality": "text", "source": "c4", "url": None, "text": "passage a", "image_sha256": None},
            {"doc_id": "c4:b", "modality": "text", "source": "c4", "url": None, "text": "passage b", "image_sha256": None},
            {"doc_id": "webimg:1", "modality": "image", "source": "web_image", "url": "https://u/1", "text": "t1", "image_sha256": None},
            {"doc_id": "webimg:2", "modality": "image", "source": "web_image", "url": "https://u/2", "text": "t2", "image_sha256": None},
        ], "mavis_documents"),
        "judged": ([{"fact_id": f, "doc_id": d, "rank": 1, "query": f"text of {f}", "modality": m, "score": sc, "mode": m, "entailed": sc >= 0.5}
                    for f, d, m, sc in (("f1", "c4:a", "text", 0.9), ("f1", "webimg:1", "image", 0.8), ("f2", "c4:b", "text", 0.7),
                                        ("f2", "webimg:2", "image", 0.2), ("f3", "c4:a", "text", 0.1), ("f4", "c4:b", "text", 0.6),
                                        ("f4", "webimg:1", "image", 0.9))], "mavis_judged_documents"),
        "document_images": ([_deduped("f1", "https://u/1", s1), _deduped("f2", "https://u/2", s2), _deduped("f4", "https://u/1", s1)], "images_deduped"),
        "question_images": ([_deduped("reddit:q1", "https://i.redd.it/x.jpg", s3)], "images_deduped"),
    }
    paths = {}
    for name, (rows, schema) in tables.items():
        paths[name] = tmp_path / f"{name}.parquet"
        write_table(paths[name], rows, schema)
    return paths, store, (s1, s2, s3)


def _sample(tmp_path, paths, **params):
    out, sheet = tmp_path / "sample.parquet", tmp_path / "sheet.csv"
    run_stage("sample_annotation", *[f"--input={k}={paths[k]}" for k in ("instances", "facts", "judged", "documents")],
              f"--output=sample={out}", f"--output=sheet={sheet}", "--params", json.dumps(params))
    return pq.read_table(out).to_pylist(), list(csv.DictReader(open(sheet, newline="")))


def _release(tmp_path, paths, store, sheet=None, check=True):
    manifest = tmp_path / "release.json"
    inputs = [f"--input={k}={paths[k]}" for k in ("instances", "questions", "facts", "documents", "judged", "document_images", "question_images")]
    for folder in ("cache_images", "fact_cache_images"):  # one shared stage under two rules: counted apart
        rejects = tmp_path / folder / "images_cached.00000.parquet.rejects.parquet"
        rejects.parent.mkdir(exist_ok=True)
        pq.write_table(pa.Table.from_pylist([{"id": "imgref:x", "stage": "cache_images", "reason": "http_404", "detail": ""}],
                                            schema=REJECTS_SCHEMA), rejects)
        inputs.append(f"--input=rejects={rejects}")
    result = run_stage("release_mavis", *inputs, *([f"--input=annotations={sheet}"] if sheet else []), f"--output=manifest={manifest}",
                       "--params", json.dumps({"name": "rel", "releases_dir": str(tmp_path / "releases"), "image_store": str(store.root)}),
                       check=check)
    return result, (json.loads(manifest.read_text()) if result.returncode == 0 else None)


def test_sample_is_balanced_over_domains_of_supported_instances_and_seeded(tmp_path):
    paths, _, _ = _world(tmp_path)
    sample, sheet = _sample(tmp_path, paths, size=2, domains=["Science", "Business"], min_supported_facts=0, both_modalities=True)
    assert sorted((s["instance_id"], s["domain"], s["supported_facts"]) for s in sample) == [
        ("reddit:q1/c1", "Science", 1), ("reddit:q2/c3", "Business", 1)]  # q3's instance has no supported fact
    # one row per fact with an entailed document; the best of each modality shown first, at most 3
    rows = {r["fact_id"]: r for r in sheet}
    assert sorted(rows) == ["f1", "f2", "f4"]
    assert (rows["f1"]["doc_1"], rows["f1"]["doc_2"], rows["f1"]["doc_3"]) == ("c4:a", "webimg:1", "")
    assert rows["f1"]["doc_2_content"] == "https://u/1" and rows["f1"]["doc_1_content"] == "passage a"
    assert all(r["relevant"] == "" and r["grounded_1"] == "" for r in sheet)
    again, _ = _sample(tmp_path, paths, size=2, domains=["Science", "Business"], min_supported_facts=0, both_modalities=True)
    assert again == sample
    strict, _ = _sample(tmp_path, paths, size=2, min_supported_facts=2)  # the seed's "more than two": none here
    assert strict == []
    # the instances left behind are counted, none vanish (the funnel draws them): 3 read, none eligible
    report = json.loads((tmp_path / "sample.parquet.report.json").read_text())
    assert (report["rows_in"], report["rows_out"]["sample"], report["stats"]["not_eligible"], report["stats"]["not_sampled"]) == (3, 0, 3, 0)
    one, _ = _sample(tmp_path, paths, size=1, domains=["Science", "Business"], min_supported_facts=0, both_modalities=True)
    report = json.loads((tmp_path / "sample.parquet.report.json").read_text())  # 2 eligible, 1 drawn, q3's instance not eligible
    assert (report["rows_in"], len(one), report["stats"]["not_sampled"], report["stats"]["not_eligible"], report["rejected"]) == (3, 1, 1, 1, 0)


def test_release_honours_the_filled_sheet_and_copies_images(tmp_path):
    paths, store, (s1, s2, s3) = _world(tmp_path)
    _, sheet = _sample(tmp_path, paths, size=2, domains=["Science", "Business"], min_supported_facts=0, both_modalities=True)
    for row in sheet:
        if row["fact_id"] == "f1":
            row.update(relevant="yes", grounded_1="yes", grounded_2="no")
        if row["fact_id"] == "f2":
            row.update(relevant="no")  # f4 (the Business instance) stays unannotated
    filled = tmp_path / "filled.csv"
    with open(filled, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(sheet[0]))
        writer.writeheader()
        writer.writerows(sheet)
    _, manifest = _release(tmp_path, paths, store, filled)
    folder = Path(manifest["path"])
    con = duckdb.connect(str(folder / "benchmark.duckdb"), read_only=True)
    assert dict(con.execute("select id, split from instances").fetchall()) == {"reddit:q1/c1": "test", "reddit:q2/c3": "train", "reddit:q3/c4": "train"}
    assert [r[0] for r in con.execute("select fact_id from facts order by 1").fetchall()] == ["f1", "f3", "f4", "f5"]
    fd = {(f, d): (e, label) for f, d, e, label in con.execute("select fact_id, doc_id, entailed, label from fact_documents").fetchall()}
    assert fd == {("f1", "c4:a"): (True, "human"), ("f1", "webimg:1"): (False, "human"), ("f3", "c4:a"): (False, "model"),
                  ("f4", "c4:b"): (True, "model"), ("f4", "webimg:1"): (True, "model")}
    docs = dict(con.execute("select doc_id, image_sha256 from documents").fetchall())
    assert docs == {"c4:a": None, "c4:b": None, "webimg:1": s1}  # webimg:2 only served the dropped fact
    assert sorted(con.execute("select sha256, role, path from images").fetchall()) == sorted(
        [(s1, "document", f"images/{s1}.jpg"), (s3, "question", f"images/{s3}.jpg")])
    assert sorted(p.name for p in (folder / "images").iterdir()) == sorted([f"{s1}.jpg", f"{s3}.jpg"])
    assert sorted(con.execute("select * from reject_counts").fetchall()) == [
        ("annotation", "irrelevant", 1), ("cache_images", "http_404", 1), ("fact_cache_images", "http_404", 1)]
    records = {r["id"]: r for r in map(json.loads, (folder / "mavis.jsonl").read_text().splitlines())}
    assert records["reddit:q1/c1"]["split"] == "test" and records["reddit:q1/c1"]["images"] == [f"images/{s3}.jpg"]
    assert [(f["fact_id"], f["positive_doc_ids"]) for f in records["reddit:q1/c1"]["facts"]] == [("f1", ["c4:a"]), ("f3", [])]
    assert records["reddit:q2/c3"]["facts"][0]["positive_doc_ids"] == ["c4:b", "webimg:1"]
    card = (folder / "README.md").read_text()
    # D_T/Q and D_I/Q: distinct entailed documents per question; test: q1 has c4:a only
    assert "| all | 3 | 1 | 3 | 0.7 | 0.3 | 4.0 | 4 |" in card and "| test (human-annotated) | 1 | 1 | 1 | 1.0 | 0.0 | 4.0 | 2 |" in card
    # beside each count its declared meaning: the shared stage under its rule's name reads cache_images' (http_<status>)
    http = load_manifest()["cache_images"]["rejects"]["http_<status>"]
    assert f"| fact_cache_images | http_404 | 1 | {http} |" in card and f"| cache_images | http_404 | 1 | {http} |" in card
    assert "| annotation | irrelevant | 1 | annotators judged the fact irrelevant to the question |" in card

    with Image.open(folder / "images" / f"{s3}.jpg") as im:  # the stored PNG, re-encoded as JPEG under its sha256 name
        assert im.format == "JPEG" and store.find(s3).suffix == ".png"

    sheet[0]["grounded_1"] = "maybe"
    with open(filled, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(sheet[0]))
        writer.writeheader()
        writer.writerows(sheet)
    result, _ = _release(tmp_path, paths, store, filled, check=False)
    assert result.returncode != 0 and "line 2" in result.stderr and "grounded_1 must be yes, no or empty" in result.stderr
