"""A tiny M2RAG release folder in the released layout (parquet/ tables, images/<sha256>.png) for the
eval_m2rag tests: one or two queries, two pages, scored text pieces, page images (one without a
released file) and, optionally, auxiliary images and caption columns (the release contract the
image helper adds)."""
from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image


def png(color: tuple[int, int, int], size: int = 40) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (size, size), color).save(buf, format="PNG")
    return buf.getvalue()


def make_m2rag_release(folder: Path, aux: bool = True, captions: bool = True, queries: int = 1, pages: int = 2, manifest: bool = True) -> Path:
    (folder / "parquet").mkdir(parents=True, exist_ok=True)
    (folder / "images").mkdir(exist_ok=True)
    qrows, prows, erows, irows, arows = [], [], [], [], []
    for q in range(queries):
        qid = f"eli5:q{q}"
        qrows.append({"id": qid, "question": "Why is the sky blue?" if q == 0 else "How do bees make honey?",
                      "categories": [2], "category_names": ["Science & Mathematics"], "sample_category": 2})
        for rank in range(1, pages + 1):
            pid = f"page:{q}.{rank}"
            prows.append({"id": pid, "query_id": qid, "rank": rank, "url": f"https://example.org/{q}/{rank}", "final_url": f"https://example.org/{q}/{rank}",
                          "title": f"Page {rank} about the sky", "chars": 300, "images": 1})
            pieces = [("Sunlight is scattered by air molecules; blue light scatters most.", 9.0),
                      ("Rayleigh scattering grows with the inverse fourth power of wavelength.", 7.0),
                      ("Buy our telescope today.", 1.0)]
            for order, (text, score) in enumerate(pieces):
                erows.append({"element_id": f"{pid}#t{order}", "page_id": pid, "query_id": qid, "order": order * 2, "kind": "text", "text": text,
                              "image_url": None, "placeholder": None, "score": score, "analysis": "", "mode": "text", "image_sha256": None})
            data = png((30 * rank, 90, 200))
            sha = hashlib.sha256(data).hexdigest()
            if rank == 1:  # page 2's image has no released file: shown by its caption
                (folder / "images" / f"{sha}.png").write_bytes(data)
            image = {"element_id": f"{pid}#i", "page_id": pid, "query_id": qid, "order": 1, "url": f"https://example.org/{q}/{rank}.png",
                     "alt": f"diagram {rank} of light scattering", "score": 9.0 if rank == 1 else 5.0, "mode": "text_stand_in", "sha256": sha}
            if captions:
                image.update(caption=f"A diagram showing blue light scattered by air, panel {rank}", caption_mode="model")
            irows.append(image)
            erows.append({"element_id": f"{pid}#i", "page_id": pid, "query_id": qid, "order": 1, "kind": "image", "text": image["alt"],
                          "image_url": image["url"], "placeholder": "<image_1>", "score": image["score"], "analysis": "", "mode": "text_stand_in",
                          "image_sha256": sha})
        if aux:
            data = png((250, 200, 40))
            sha = hashlib.sha256(data).hexdigest()
            (folder / "images" / f"{sha}.png").write_bytes(data)
            arows.append({"query_id": qid, "url": f"https://img.example.org/{q}.png", "sha256": sha, "score": 8.0,
                          "caption": "A photo of a clear blue sky at noon", "caption_mode": "model"})
            arows.append({"query_id": qid, "url": f"https://img.example.org/{q}-ad.png", "sha256": "", "score": 2.0,
                          "caption": "An advertisement", "caption_mode": "model"})
    for name, rows in (("queries", qrows), ("pages", prows), ("elements", erows), ("images", irows)):
        pq.write_table(pa.Table.from_pylist(rows), folder / "parquet" / f"{name}.parquet")
    if aux:
        pq.write_table(pa.Table.from_pylist(arows), folder / "parquet" / "aux_images.parquet")
    if not manifest:
        return folder
    path = folder.parent / f"{folder.name}.release.json"
    path.write_text(json.dumps({"name": "m2rag-test", "version": "v-test", "path": str(folder)}))
    return path
