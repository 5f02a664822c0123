"""filter_images: drop images too small or too large to be informative, and images unrelated to
their query (M2RAG §4.2.3 (2) "Filtering": "images that fall below a certain size threshold or
receive a low similarity score with CLIP are removed ... icons, banners, or other
non-representative visuals").

Input `images`: images_cached rows. Input `texts`: the rows the images serve (MAVIS
reddit_questions, M2RAG queries); `text_key` names the images column (owner_id or query_id)
that joins `text_id_column`, and `text_column` holds the text CLIP compares an image with.

Size (cheap, from the row): kept when min_pixels < width*height < max_pixels and the file has at
least min_bytes (M2RAG's 1e4 < w*h < 4e6 and >= 20 KB, here 20 * 1024 bytes, are the defaults).
Rejects: too_few_pixels, too_many_pixels, small_file.

CLIP (open-clip-torch; `clip_model` names the architecture, `clip_weights` a local checkpoint
file, never a download; no weights means random weights, which only tests and the offline demo
use): `clip_score` is the cosine similarity of the image and text embeddings, computed in batches
of `batch_size` on the GPU when there is one. The score is a column; `clip_threshold` is a
separate cheap param (docs/ARCHITECTURE.md, stage contract rule 7): scores are cached under `score_cache` keyed by the
model, the weights file's sha256, the image's sha256 and the text, so changing the threshold
and rerunning never calls the model again. Rejects: low_clip_score, no_text (no text row for the
image's key), image_missing (not in the store), broken_image. `clip_model: ""` turns CLIP off
(clip_score null, no threshold).

Params: min_pixels, max_pixels, min_bytes, clip_model, clip_weights, clip_threshold, batch_size,
device, store, score_cache, text_key, text_id_column, text_column.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from PIL import Image
from tqdm import tqdm

from stages.core.ids import sha256_hex
from stages.core.images import STORED_FORMATS, ImageStore
from stages.core.release import file_digest
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError
from stages.core.tables import TableWriter

VERSION = "1"
CACHE_SCHEMA = pa.schema([("image_sha256", pa.string()), ("text_sha256", pa.string()), ("score", pa.float64())])


class ScoreCache:
    """CLIP scores on disk, one folder per model: each run adds one Parquet file (atomic, unique
    name), so parallel shards never write the same file; reading unions them all, keeping the
    scores of `images` only (a job's; the folder holds every shard's, millions at real scale)."""

    def __init__(self, root: str, model_key: str, images: list[str]):
        self.folder = Path(root) / model_key if root else None
        self.scores: dict[tuple[str, str], float] = {}
        self.new: dict[tuple[str, str], float] = {}
        if self.folder is not None and self.folder.is_dir():
            wanted = pa.array(sorted(set(images)), pa.string())
            for path in sorted(self.folder.glob("*.parquet")):
                table = pq.read_table(path)
                for r in table.filter(pc.is_in(table["image_sha256"], wanted)).to_pylist():
                    self.scores[(r["image_sha256"], r["text_sha256"])] = r["score"]

    def add(self, key: tuple[str, str], score: float) -> None:
        self.scores[key] = self.new[key] = score

    def save(self) -> None:
        if self.folder is None or not self.new:
            return
        writer = TableWriter(self.folder / f"{uuid.uuid4().hex}.parquet", CACHE_SCHEMA, "clip_scores")
        writer.write_many([{"image_sha256": i, "text_sha256": t, "score": s} for (i, t), s in sorted(self.new.items())])
        writer.commit()


class ClipScorer:
    """open_clip image-text cosine similarity, batched; torch is imported only here."""

    def __init__(self, model_name: str, weights: str | None, device: str):
        import open_clip
        import torch

        self.torch = torch
        self.device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        torch.manual_seed(0)  # random weights (tests, offline demo) are at least the same every run
        try:
            model, _, self.preprocess = open_clip.create_model_and_transforms(model_name, pretrained=weights, device=self.device)
        except RuntimeError as err:
            raise StageError(f"cannot build CLIP model {model_name!r} with weights {weights!r}: {err}") from None
        self.model = model.eval()
        self.tokenizer = open_clip.get_tokenizer(model_name)

    def score(self, images: list[Image.Image], texts: list[str]) -> list[float]:
        torch = self.torch
        with torch.inference_mode():
            pixels = torch.stack([self.preprocess(im) for im in images]).to(self.device)
            unique = sorted(set(texts))
            image_emb = torch.nn.functional.normalize(self.model.encode_image(pixels).float(), dim=-1)
            text_emb = torch.nn.functional.normalize(self.model.encode_text(self.tokenizer(unique).to(self.device)).float(), dim=-1)
            rows = text_emb[[unique.index(t) for t in texts]]
            return (image_emb * rows).sum(dim=-1).cpu().tolist()


def _load_rgb(store: ImageStore, sha: str) -> Image.Image | Reject:
    """The stored image decoded, or the Reject every row showing it gets."""
    path = store.find(sha)
    if path is None:
        return Reject("image_missing", f"{sha} is not in the store at {store.root}")
    try:
        with Image.open(path, formats=STORED_FORMATS) as im:
            return im.convert("RGB")
    except (OSError, SyntaxError, ValueError) as err:
        return Reject("broken_image", f"{path}: {type(err).__name__}: {err}")


def run(ctx) -> None:
    p = ctx.params
    if p["text_key"] not in ("owner_id", "query_id"):
        raise StageError(f"param text_key must be owner_id or query_id, got {p['text_key']!r}")
    rows = ctx.read_rows("images")
    texts_table = ctx.read("texts")
    texts = dict(zip(texts_table.column(p["text_id_column"]).to_pylist(), texts_table.column(p["text_column"]).to_pylist()))

    sized = []
    for row in rows:
        pixels, where = row["width"] * row["height"], f"{row['id']} {row['width']}x{row['height']} {row['bytes']} bytes"
        with ctx.item(row["ref_id"]):
            if pixels <= p["min_pixels"]:
                raise Reject("too_few_pixels", f"{where}: {pixels} <= {p['min_pixels']} pixels")
            if pixels >= p["max_pixels"]:
                raise Reject("too_many_pixels", f"{where}: {pixels} >= {p['max_pixels']} pixels")
            if row["bytes"] < p["min_bytes"]:
                raise Reject("small_file", f"{where}: < {p['min_bytes']} bytes")
            if not isinstance(texts.get(row[p["text_key"]]), str):  # absent, null, or not text in the caller's table
                raise Reject("no_text", f"{row['id']}: no {p['text_column']} for {p['text_key']}={row[p['text_key']]}")
            sized.append(row)

    if not p["clip_model"]:
        kept = [{**row, "clip_score": None} for row in sized]
    else:
        kept = _clip_filter(ctx, sized, texts)
    columns = [f.name for f in ctx.writer("images").schema]
    ctx.write("images", [{c: row[c] for c in columns} for row in kept])


def _clip_filter(ctx, rows: list[dict], texts: dict) -> list[dict]:
    p = ctx.params
    weights = p["clip_weights"] or None
    if weights and not os.path.isfile(weights):
        raise StageError(f"param clip_weights: no such file {weights} (weights are never downloaded)")
    model_key = f"{p['clip_model']}-{file_digest(weights)[:16] if weights else 'random-seed0'}"
    cache = ScoreCache(p["score_cache"], model_key, [row["sha256"] for row in rows])
    store = ImageStore(p["store"])
    keys = [(row["sha256"], sha256_hex(texts[row[p["text_key"]]].encode("utf-8"))) for row in rows]
    todo = sorted({k for k in keys if k not in cache.scores})
    ctx.stats["clip_cache_hits"] = sum(1 for k in keys if k in cache.scores)
    failed: dict[str, Reject] = {}
    if todo:
        text_of = {sha256_hex(t.encode("utf-8")): t for t in texts.values() if t is not None}
        scorer = ClipScorer(p["clip_model"], weights, p["device"])
        ctx.stats["clip_device_" + scorer.device] = 1
        for start in tqdm(range(0, len(todo), p["batch_size"]), desc="clip", unit="batch"):
            batch, images = [], []
            for key in todo[start : start + p["batch_size"]]:
                image = _load_rgb(store, key[0])
                if isinstance(image, Reject):
                    failed[key[0]] = image
                else:
                    batch.append(key)
                    images.append(image)
            if batch:
                for key, score in zip(batch, scorer.score(images, [text_of[t] for _, t in batch])):
                    cache.add(key, score)
                ctx.stats["clip_batches"] += 1
                ctx.stats["clip_scored"] += len(batch)
        cache.save()
    kept = []
    for row, key in zip(rows, keys):
        with ctx.item(row["ref_id"], counted=False):  # counted by the size checks
            if key[0] in failed:
                raise failed[key[0]]
            score = cache.scores[key]
            if score < p["clip_threshold"]:
                raise Reject("low_clip_score", f"{row['id']}: clip_score {score:.4f} < {p['clip_threshold']}")
            kept.append({**row, "clip_score": score})
    return kept


STAGE = Stage(
    name="filter_images",
    version=VERSION,
    doc=__doc__,
    inputs={
        "images": Input("images_cached rows", many=True, table="images_cached"),
        "texts": Input("rows with the text each image is compared with (question, query)", many=True,
                       column_params=("text_id_column", "text_column")),
    },
    outputs={"images": Output("images_filtered", "images that pass the size and CLIP thresholds, with clip_score")},
    params={
        "min_pixels": Param(int, 10_000, "keep when width*height is above this (M2RAG: 1e4)", min=0),
        "max_pixels": Param(int, 4_000_000, "keep when width*height is below this (M2RAG: 4e6)", min=1),
        "min_bytes": Param(int, 20 * 1024, "keep files of at least this many bytes (M2RAG: 20 KB)", min=0),
        "clip_model": Param(str, "ViT-B-32", "open_clip architecture; empty turns CLIP off", max=200),
        "clip_weights": Param(str, "", "local checkpoint file for clip_model; empty = random weights (tests, demo only)"),
        "clip_threshold": Param(float, 0.2, "keep when clip_score >= this (cheap: scores are cached)", min=-1, max=1),
        "batch_size": Param(int, 32, "images per CLIP forward pass", min=1),
        "device": Param(str, "auto", "auto (cuda when available), cpu or cuda", choices=("auto", "cpu", "cuda")),
        "store": Param(str, "data/cache/images", "image store root", folder="reads"),
        "score_cache": Param(str, "data/cache/clip_scores", "folder of cached CLIP scores; empty disables the cache", folder="writes"),
        "text_key": Param(str, "query_id", "images column joined with the texts: owner_id or query_id", choices=("owner_id", "query_id")),
        "text_id_column": Param(str, "id", "texts column holding the key", min=1),
        "text_column": Param(str, "question", "texts column holding the text", min=1),
    },
    run=run,
    rejects={
        "too_few_pixels": "width x height is at most min_pixels",
        "too_many_pixels": "width x height is at least max_pixels",
        "small_file": "the file is smaller than min_bytes",
        "no_text": "no text row for the image's key (text_key) to score it against",
        "image_missing": "the image is not in the image store",
        "broken_image": "the stored image does not decode",
        "low_clip_score": "the CLIP score of image and text is below clip_threshold",
    },
)

if __name__ == "__main__":
    STAGE.main()
