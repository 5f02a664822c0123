"""filter_images: size thresholds and CLIP plumbing with a real open_clip model (random weights:
this checks batching, caching and columns, not semantics)."""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from conftest import run_stage
from stages.core.images import ImageStore
from stages.core.tables import write_table

torch = pytest.importorskip("torch")
pytest.importorskip("open_clip")

from stages.images.filter_images import STAGE, ClipScorer  # noqa: E402  (imports torch lazily, but the test needs it)

MODEL = "ViT-S-32"  # the smallest ViT config open_clip ships; random weights


def noisy_png(store: ImageStore, seed: int, size: tuple[int, int]) -> tuple[str, int]:
    rng = np.random.default_rng(seed)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)).save(buffer, "PNG")
    data = buffer.getvalue()
    return store.put(data, "png"), len(data)


def cached_row(owner: str, n: int, sha: str, size: int, wh: tuple[int, int]) -> dict:
    return {
        "id": f"img:{sha}", "ref_id": f"imgref:{owner}-{n}", "owner_id": owner, "query_id": owner, "position": n,
        "url": f"https://i.example/{owner}/{n}.png", "final_url": f"https://i.example/{owner}/{n}.png", "sha256": sha,
        "format": "png", "source_format": "png", "width": wh[0], "height": wh[1], "bytes": size,
    }


@pytest.fixture()
def inputs(tmp_path) -> dict:
    store = ImageStore(tmp_path / "store")
    rows = []
    for n, (owner, wh) in enumerate([("reddit:a", (160, 120)), ("reddit:a", (200, 150)), ("reddit:b", (120, 120)),
                                     ("reddit:b", (150, 100)), ("reddit:c", (140, 140))]):
        sha, size = noisy_png(store, n, wh)
        rows.append(cached_row(owner, n, sha, size, wh))
    tiny_sha, tiny_size = noisy_png(store, 10, (90, 100))  # 9,000 pixels: too few
    rows.append(cached_row("reddit:a", 9, tiny_sha, tiny_size, (90, 100)))
    huge = cached_row("reddit:b", 8, "f" * 64, 10**7, (2500, 1600))  # 4e6 pixels: too many (bound excluded)
    flat_png = _png_bytes(Image.new("RGB", (200, 200), "white"))  # compresses to a few hundred bytes
    flat = cached_row("reddit:c", 7, store.put(flat_png, "png"), len(flat_png), (200, 200))
    orphan_sha, orphan_size = noisy_png(store, 11, (150, 150))
    orphan = cached_row("reddit:zz", 0, orphan_sha, orphan_size, (150, 150))
    rows += [huge, flat, orphan]
    images = tmp_path / "images.parquet"
    write_table(images, rows, "images_cached")
    texts = tmp_path / "questions.parquet"
    pq.write_table(pa.Table.from_pylist([
        {"id": "reddit:a", "question": "What bird is this on my feeder?"},
        {"id": "reddit:b", "question": "Why does my sourdough look like this?"},
        {"id": "reddit:c", "question": "Is this crack in the wall a structural problem?"},
    ]), texts)
    return {"images": images, "texts": texts, "store": tmp_path / "store", "tmp": tmp_path}


def _png_bytes(im: Image.Image) -> bytes:
    buffer = io.BytesIO()
    im.save(buffer, "PNG")
    return buffer.getvalue()


def run_filter(inputs: dict, name: str, **params) -> tuple[list[dict], list[dict], dict]:
    out = inputs["tmp"] / f"{name}.parquet"
    base = {"store": str(inputs["store"]), "clip_model": MODEL, "score_cache": str(inputs["tmp"] / "scores"), "device": "cpu"}
    STAGE.main(["--input", f"images={inputs['images']}", "--input", f"texts={inputs['texts']}", "--output", f"images={out}",
                "--params", json.dumps({**base, **params})])
    report = json.loads(Path(f"{out}.report.json").read_text())
    return pq.read_table(out).to_pylist(), pq.read_table(f"{out}.rejects.parquet").to_pylist(), report


def test_sizes_batches_scores_and_cheap_threshold(inputs):
    kept, rejects, report = run_filter(inputs, "first", batch_size=2, clip_threshold=-1.0)
    assert report["rows_in"] == 9 == len(kept) + len(rejects)
    assert {r["id"]: r["reason"] for r in rejects} == {
        "imgref:reddit:a-9": "too_few_pixels", "imgref:reddit:b-8": "too_many_pixels",
        "imgref:reddit:c-7": "small_file", "imgref:reddit:zz-0": "no_text",
    }
    assert len(kept) == 5 and all(-1.0 <= r["clip_score"] <= 1.0 for r in kept)
    assert report["stats"]["clip_batches"] == 3 and report["stats"]["clip_scored"] == 5  # 5 images in batches of 2

    # batching does not change a score: one forward pass of all five, straight from the scorer
    scorer = ClipScorer(MODEL, None, "cpu")
    store = ImageStore(inputs["store"])
    texts = {r["id"]: r["question"] for r in pq.read_table(inputs["texts"]).to_pylist()}
    images = [Image.open(store.find(r["sha256"])).convert("RGB") for r in kept]
    direct = scorer.score(images, [texts[r["owner_id"]] for r in kept])
    assert np.allclose(direct, [r["clip_score"] for r in kept], atol=1e-4)

    # a new threshold reruns from the cache: no model call, and the low scores are rejected
    threshold = float(np.median([r["clip_score"] for r in kept]))
    kept2, rejects2, report2 = run_filter(inputs, "second", batch_size=2, clip_threshold=threshold)
    assert report2["stats"]["clip_cache_hits"] == 5 and "clip_scored" not in report2["stats"]
    assert sorted(r["ref_id"] for r in kept2) == sorted(r["ref_id"] for r in kept if r["clip_score"] >= threshold)
    assert sum(r["reason"] == "low_clip_score" for r in rejects2) == 5 - len(kept2) > 0


def test_clip_off_and_missing_weights(inputs):
    kept, _, report = run_filter(inputs, "off", clip_model="")
    assert len(kept) == 5 and all(r["clip_score"] is None for r in kept)
    with pytest.raises(SystemExit, match="clip_weights"):
        run_filter(inputs, "bad", clip_weights=str(inputs["tmp"] / "nope.pt"))


@pytest.mark.parametrize("param, value, words", [
    ("text_column", "", "param 'text_column' must have at least 1 characters"),
    ("text_id_column", "", "param 'text_id_column' must have at least 1 characters"),
    ("clip_model", "x" * 5000, "param 'clip_model' must have at most 200 characters"),
], ids=["empty_text_column", "empty_text_id_column", "long_clip_model"])
def test_a_column_or_model_name_that_cannot_be_one_is_refused(tmp_path, param, value, words):
    result = run_stage("filter_images", "--input", f"images={tmp_path / 'none.parquet'}", "--output", f"images={tmp_path / 'out.parquet'}",
                       "--params", json.dumps({param: value}), check=False)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0 and "Traceback" not in result.stderr and last.startswith(f"filter_images: error: {words}"), last
