"""phash_dedup: the exact near-pair search equals brute force (property test), and the stage CLI
keeps one representative per cluster on real images in a real store."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from stages.core.images import ImageStore
from stages.core.tables import write_table
from stages.images.phash_dedup import brute_force_pairs, near_pairs, union_find


def planted(seed: int, n_base: int, n_dups: int, radius: int) -> np.ndarray:
    """Random 64-bit hashes plus copies with up to radius + 1 bits flipped (some in, some out)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 2**64 - 1, size=n_base, dtype=np.uint64, endpoint=True)
    dups = []
    for _ in range(n_dups):
        value = int(base[rng.integers(0, n_base)]) if not dups or rng.random() < 0.7 else dups[-1]  # chains too
        for bit in rng.choice(64, size=rng.integers(0, radius + 2), replace=False):
            value ^= 1 << int(bit)
        dups.append(value)
    return np.concatenate([base, np.array(dups, dtype=np.uint64)])


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_base=st.integers(1, 300), n_dups=st.integers(0, 200), radius=st.integers(0, 12), extra=st.integers(0, 3))
def test_multi_index_hashing_equals_brute_force(seed, n_base, n_dups, radius, extra):
    hashes = planted(seed, n_base, n_dups, radius)
    expected = brute_force_pairs(hashes, radius)
    m = min(64, radius + 1 + extra)  # q = m - radius chunks must agree: 1..4
    assert np.array_equal(near_pairs(hashes, radius, method=m), expected)
    assert np.array_equal(near_pairs(hashes, radius), expected)  # whatever the cost model picks


def test_large_set_uses_the_index_and_stays_exact():
    hashes = planted(7, 20_000, 3_000, 6)
    pairs = near_pairs(hashes, 6, workers=2)
    assert np.array_equal(pairs, brute_force_pairs(hashes, 6))
    assert len(pairs) > 1_000


def test_many_copies_of_one_image_overflow_the_kernel_buffer_and_stay_exact():
    """600 copies of one hash (179,700 pairs in one table, past the kernel's first buffer) among
    near and far hashes."""
    hashes = planted(11, 3_000, 400, 6)
    hashes = np.concatenate([hashes, np.full(600, hashes[5], np.uint64)])
    pairs = near_pairs(hashes, 6, method=9, workers=2)
    assert np.array_equal(pairs, brute_force_pairs(hashes, 6)) and len(pairs) > 179_700


def test_union_find_matches_connected_components():
    hashes = planted(3, 200, 150, 5)
    pairs = brute_force_pairs(hashes, 5)
    labels = union_find(len(hashes), pairs)
    # reference: repeated label propagation to a fixed point
    ref = np.arange(len(hashes))
    changed = True
    while changed:
        changed = False
        for a, b in pairs:
            low = min(ref[a], ref[b])
            if ref[a] != low or ref[b] != low:
                ref[a] = ref[b] = low
                changed = True
    assert np.array_equal(labels, ref)


# -- the stage ------------------------------------------------------------------------------------
def pattern(seed: int, size=(256, 192)) -> Image.Image:
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)  # coarse blocks: a stable pHash
    return Image.fromarray(small).resize(size, Image.NEAREST)


def put(store: ImageStore, im: Image.Image, fmt: str = "PNG", **kw) -> tuple[str, int]:
    buffer = io.BytesIO()
    im.save(buffer, fmt, **kw)
    data = buffer.getvalue()
    return store.put(data, "png" if fmt == "PNG" else "jpg"), len(data)


def row(owner: str, n: int, sha: str, size: int, wh: tuple[int, int], score: float | None) -> dict:
    return {
        "id": f"img:{sha}", "ref_id": f"imgref:{owner}-{n}", "owner_id": owner, "query_id": "q1", "position": n,
        "url": f"https://example.org/{owner}/{n}", "final_url": f"https://example.org/{owner}/{n}", "sha256": sha,
        "format": "png", "source_format": "png", "width": wh[0], "height": wh[1], "bytes": size, "clip_score": score,
    }


@pytest.fixture()
def images(tmp_path) -> tuple[Path, Path]:
    store = ImageStore(tmp_path / "store")
    base, base_size = put(store, pattern(1))
    small, small_size = put(store, pattern(1, (128, 96)))  # resized: a near-duplicate
    jpeg, jpeg_size = put(store, pattern(1), "JPEG", quality=70)  # recompressed: a near-duplicate
    other, other_size = put(store, pattern(2))
    rows = [
        row("reddit:a", 0, base, base_size, (256, 192), 0.30),
        row("reddit:a", 1, small, small_size, (128, 96), 0.30),  # same score, fewer pixels: dropped
        row("reddit:a", 2, other, other_size, (256, 192), 0.10),
        row("reddit:b", 0, jpeg, jpeg_size, (256, 192), 0.50),  # best score of the global cluster
        row("reddit:b", 1, "0" * 64, 10, (10, 10), 0.9),  # not in the store
    ]
    path = tmp_path / "filtered.parquet"
    write_table(path, rows, "images_filtered")
    return path, tmp_path / "store"


def dedup(tmp_path: Path, images: Path, store: Path, **params) -> tuple[list[dict], list[dict], dict]:
    out = tmp_path / f"dedup_{params.get('scope', 'owner')}.parquet"
    cmd = [sys.executable, "-m", "stages.images.phash_dedup", "--input", f"images={images}", "--output", f"images={out}",
           "--params", json.dumps({"store": str(store), **params})]
    subprocess.run(cmd, check=True, capture_output=True)
    report = json.loads(Path(f"{out}.report.json").read_text())
    return pq.read_table(out).to_pylist(), pq.read_table(f"{out}.rejects.parquet").to_pylist(), report


def test_stage_scope_owner_and_global(tmp_path, images):
    path, store = images
    kept, rejects, report = dedup(tmp_path, path, store, scope="owner", radius=6)
    assert report["rows_in"] == 5 == len(kept) + len(rejects)
    assert sorted(r["ref_id"] for r in kept) == ["imgref:reddit:a-0", "imgref:reddit:a-2", "imgref:reddit:b-0"]
    assert {r["ref_id"]: r["duplicates"] for r in kept}["imgref:reddit:a-0"] == 1
    reasons = {r["id"]: (r["reason"], r["detail"]) for r in rejects}
    assert reasons["imgref:reddit:a-1"][0] == "near_duplicate" and "kept imgref:reddit:a-0" in reasons["imgref:reddit:a-1"][1]
    assert reasons["imgref:reddit:b-1"][0] == "image_missing"
    assert all(len(r["phash"]) == 16 for r in kept)

    kept, rejects, _ = dedup(tmp_path, path, store, scope="global", radius=6)
    assert sorted(r["ref_id"] for r in kept) == ["imgref:reddit:a-2", "imgref:reddit:b-0"]  # highest clip_score wins
    assert {r["ref_id"]: r["duplicates"] for r in kept}["imgref:reddit:b-0"] == 2
    assert all("kept imgref:reddit:b-0" in r["detail"] for r in rejects if r["reason"] == "near_duplicate")

    kept, _, _ = dedup(tmp_path, path, store, scope="global", radius=0)  # only identical hashes merge
    assert len(kept) >= 3


def test_stage_rejects_bad_params(tmp_path, images):
    path, store = images
    out = tmp_path / "x.parquet"
    bad = subprocess.run([sys.executable, "-m", "stages.images.phash_dedup", "--input", f"images={path}", "--output", f"images={out}",
                          "--params", '{"scope": "everything"}'], capture_output=True, text=True)
    assert bad.returncode != 0 and "scope" in bad.stderr and not out.exists()
