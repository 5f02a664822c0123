"""A tiny MAVIS release with documents, in the layout the MAVIS evaluation reads (the contract with
release_mavis: parquet/ tables instances, facts, documents, fact_documents, images; benchmark.duckdb;
mavis.jsonl; images/<sha256>.jpg)."""
from __future__ import annotations

import hashlib
import io
import json

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from stages.core.tables import write_table

QUESTIONS = [
    ("p1", "c1", "Why are the leaves of my tomato plant turning yellow?",
     "Yellow lower leaves on tomatoes usually mean nitrogen deficiency. Older leaves yellow first because the plant moves "
     "nitrogen to new growth. Feed it a balanced fertiliser and water at the base.",
     ["Nitrogen deficiency makes the lower leaves of tomato plants turn yellow.", "Watering at the base helps tomato plants."]),
    ("p2", "c2", "What kind of bird is this on my feeder?",
     "That bird is a northern cardinal. Male cardinals are bright red and females are brownish with red tinges. "
     "They visit feeders for sunflower seeds.",
     ["The bird on the feeder is a northern cardinal.", "Male northern cardinals are bright red."]),
]
TEXTS = [
    ("d:t1", "Tomato plants with nitrogen deficiency show yellowing of older, lower leaves first, as nitrogen moves to new growth."),
    ("d:t2", "Water tomatoes at the base of the plant to keep leaves dry and prevent fungal disease."),
    ("d:t3", "The northern cardinal is a songbird; males are bright red, females are brown with reddish tinges."),
    ("d:t4", "Cardinals often visit backyard feeders and prefer sunflower and safflower seeds."),
]
IMAGE_DOCS = [("d:i1", "A tomato leaf turning yellow from the bottom up.", (200, 120, 40)),
              ("d:i2", "A red bird with a crest perched on a seed feeder.", (180, 20, 20))]


def _jpeg(color, size=(640, 480)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="JPEG")
    return buffer.getvalue()


def build_release(folder, n_instances: int = 2, splits: tuple[str, ...] = ("test", "test")):
    """Write the release under `folder`; returns the manifest path (release.json beside it). Every
    instance is in the human-annotated test split unless `splits` says otherwise (one per instance)."""
    (folder / "parquet").mkdir(parents=True)
    (folder / "images").mkdir()
    instances, facts, images = [], [], []
    for (post, comment, question, answer, fact_texts), split in zip(QUESTIONS[:n_instances], splits):
        data = _jpeg((40, 160, 40) if post == "p1" else (90, 90, 200))
        sha = hashlib.sha256(data).hexdigest()
        (folder / "images" / f"{sha}.jpg").write_bytes(data)
        url = f"https://i.redd.it/{post}.jpg"
        images.append({"sha256": sha, "path": f"images/{sha}.jpg", "width": 640, "height": 480, "url": url, "role": "question"})
        iid = f"reddit:{post}/{comment}"
        instances.append({"id": iid, "post_id": f"reddit:{post}", "subreddit": "gardening", "domain": "Art & Design",
                          "question": question, "body": "", "image_urls": [url], "answer": answer, "answer_id": f"reddit:{comment}",
                          "answer_score": 5, "answer_sentences": 3, "answer_rank": 1, "permalink": "", "created_utc": 1, "score": 1,
                          "split": split})
        for k, text in enumerate(fact_texts):
            facts.append({"fact_id": f"{iid}#0.{k}", "instance_id": iid, "sentence": 0, "sentence_text": answer.split(". ")[0],
                          "text": text, "relevance": "relevant", "verifiable": "verifiable", "mode": "title"})
    documents = [{"doc_id": d, "modality": "text", "source": "c4", "url": None, "text": t, "image_sha256": None} for d, t in TEXTS]
    for doc_id, stand_in, color in IMAGE_DOCS:
        data = _jpeg(color, (900, 300))
        sha = hashlib.sha256(data).hexdigest()
        (folder / "images" / f"{sha}.jpg").write_bytes(data)
        images.append({"sha256": sha, "path": f"images/{sha}.jpg", "width": 900, "height": 300, "url": f"https://x.test/{doc_id}.jpg", "role": "document"})
        documents.append({"doc_id": doc_id, "modality": "image", "source": "web", "url": f"https://x.test/{doc_id}.jpg", "text": stand_in, "image_sha256": sha})
    fact_documents = [{"fact_id": facts[0]["fact_id"], "doc_id": "d:t1", "rank": 1, "query": facts[0]["text"], "score": 0.9, "entailed": True}]
    split_column = pa.array([i.pop("split") for i in instances], pa.string())
    write_table(folder / "parquet" / "instances.parquet", instances, "reddit_instances")
    with_split = pq.read_table(folder / "parquet" / "instances.parquet").append_column("split", split_column)
    pq.write_table(with_split, folder / "parquet" / "instances.parquet")  # release_mavis adds the split column
    write_table(folder / "parquet" / "facts.parquet", facts, "mavis_facts")
    tables = {"documents": pa.Table.from_pylist(documents, schema=pa.schema([("doc_id", pa.string()), ("modality", pa.string()), ("source", pa.string()),
                                                                             ("url", pa.string()), ("text", pa.string()), ("image_sha256", pa.string())])),
              "fact_documents": pa.Table.from_pylist(fact_documents), "images": pa.Table.from_pylist(images)}
    for name, table in tables.items():
        pq.write_table(table, folder / "parquet" / f"{name}.parquet")
    with duckdb.connect(str(folder / "benchmark.duckdb")) as con:
        for name in ("instances", "facts", "documents", "fact_documents", "images"):
            con.execute(f"create table {name} as select * from read_parquet('{folder / 'parquet' / name}.parquet')")
    with open(folder / "mavis.jsonl", "w") as fh:
        for row in instances:
            fh.write(json.dumps({"id": row["id"], "question": row["question"], "answer": row["answer"]}) + "\n")
    manifest = folder.parent / "release.json"
    manifest.write_text(json.dumps({"name": "mavis-fixture", "version": "v1", "path": str(folder)}))
    return manifest
