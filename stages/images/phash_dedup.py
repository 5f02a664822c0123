"""phash_dedup: remove duplicated or near-duplicated images (M2RAG §4.2.3 (3) "Deduplication":
pHash, Zauner 2010).

Input `images`: images_filtered rows (images_cached rows work too; their clip_score is null).
Each stored image gets a 64-bit perceptual hash (imagehash.phash, 8x8 DCT). Two rows in the same
scope are near-duplicates when their hashes differ in at most `radius` bits; near-duplicate links
are closed transitively by union-find into clusters, and each cluster keeps one representative:
the highest clip_score, then the most pixels, then the largest file, then the smallest id (then
ref_id). Output `images` (images_deduped) holds the representatives with their phash and the
number of rows they stand for; every other row is rejected as `near_duplicate`, naming the kept
representative and the Hamming distance to it (which can exceed `radius` when the link is
transitive). An image missing from the store, or unreadable, is rejected `image_missing` /
`broken_image`.

Finding the pairs exactly, sub-quadratically (multi-index hashing by the pigeonhole principle):
split the 64 bits into m chunks. Two hashes at distance <= r differ in at most r chunks, so they
agree exactly on at least q = m - r chunks; every near pair therefore shares, for one of the
C(m, q) choices of q chunks, the key made of those chunks. For each choice we sort the keys,
pair up rows with equal keys and keep the pairs whose full distance is <= r. No pair is missed
(the pigeonhole bound is exact) and no false pair is kept (every candidate is verified). m is
picked by a cost model (sorts vs expected random candidates); small sets use brute force.
benchmarks/bench_phash_dedup.py measures both on 1,000,000 hashes; tests check equality with
brute force.

Params: radius (max Hamming distance), scope (owner | query | global: which rows compete),
store (image store root), score_column, workers.
"""
from __future__ import annotations

import concurrent.futures
import itertools
import math
from collections import defaultdict

import imagehash
import numpy as np
import pyarrow as pa
from PIL import Image
from tqdm import tqdm

from stages.core.images import STORED_FORMATS, ImageStore
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "1"
SCOPES = {"owner": "owner_id", "query": "query_id", "global": None}
_SORT_NS, _CHECK_NS, _BRUTE_NS, _COMBO_NS = 100.0, 60.0, 2.0, 300_000.0  # rough costs for the method choice


# -- exact near-pair search ------------------------------------------------------------------------
def brute_force_pairs(hashes: np.ndarray, radius: int, block: int = 2048) -> np.ndarray:
    """Every (i, j), i < j, with popcount(h_i ^ h_j) <= radius, by comparing all pairs."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    found = []
    for start in range(0, len(hashes), block):
        rows = hashes[start : start + block]
        dist = np.bitwise_count(rows[:, None] ^ hashes[None, start:])  # only j >= start
        i, j = np.nonzero(dist <= radius)
        j = j + start
        i = i + start
        keep = i < j
        found.append(np.stack([i[keep], j[keep]], axis=1))
    return _sorted_pairs(np.concatenate(found) if found else np.empty((0, 2), np.int64))


def _chunks(m: int) -> list[tuple[int, int]]:
    """(bit offset, width) of m chunks covering 64 bits as evenly as possible."""
    widths = [64 // m + (1 if i < 64 % m else 0) for i in range(m)]
    return [(sum(widths[:i]), w) for i, w in enumerate(widths)]


def plan(n: int, radius: int) -> int | None:
    """The chunk count m for multi-index hashing, or None when brute force is cheaper."""
    best, best_cost = None, n * n / 2 * _BRUTE_NS
    for m in range(radius + 1, min(64, radius + 12) + 1):
        q = m - radius
        key_bits = 64 * q / m
        combos = math.comb(m, q)
        cost = combos * (_COMBO_NS + n * max(math.log2(max(n, 2)), 1) / 20 * _SORT_NS + n * n / 2 ** (key_bits + 1) * _CHECK_NS)
        if cost < best_cost:
            best, best_cost = m, cost
    return best


def near_pairs(hashes: np.ndarray, radius: int, method: str | int = "auto", workers: int = 2) -> np.ndarray:
    """All index pairs (i < j) whose hashes are within `radius` bits, sorted; exact.
    method: "auto" (the cost model decides), "brute", or m, a chunk count in radius+1..64."""
    hashes = np.ascontiguousarray(hashes, dtype=np.uint64)
    n = len(hashes)
    if n < 2:
        return np.empty((0, 2), np.int64)
    m = plan(n, radius) if method == "auto" else method
    if m == "brute" or m is None:
        return brute_force_pairs(hashes, radius)
    if not isinstance(m, int) or not radius < m <= 64:
        raise ValueError(f"method must be 'auto', 'brute' or a chunk count in {radius + 1}..64, got {method!r}")
    chunks = _chunks(m)
    idx_bits = max(1, (n - 1).bit_length())

    def pairs_for(combo: tuple[int, ...]) -> np.ndarray:
        key = np.zeros(n, np.uint64)
        shift = 0
        for c in combo:  # the chosen chunks, packed side by side
            offset, width = chunks[c]
            key |= ((hashes >> np.uint64(offset)) & np.uint64((1 << width) - 1)) << np.uint64(shift)
            shift += width
        if shift + idx_bits <= 64:  # sort key and row index packed in one uint64: a plain sort
            packed = np.sort((key << np.uint64(idx_bits)) | np.arange(n, dtype=np.uint64))
            skey, order = packed >> np.uint64(idx_bits), (packed & np.uint64((1 << idx_bits) - 1)).astype(np.int64)
        else:
            order = np.argsort(key, kind="stable")
            skey = key[order]
        a, b = _pairs_in_runs(skey, order)
        close = np.bitwise_count(hashes[a] ^ hashes[b]) <= radius
        a, b = a[close], b[close]
        return np.stack([np.minimum(a, b), np.maximum(a, b)], axis=1)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:  # numpy sorts release the GIL
        found = list(pool.map(pairs_for, itertools.combinations(range(m), m - radius)))
    return _sorted_pairs(np.concatenate(found))


def _pairs_in_runs(sorted_keys: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All pairs of rows sharing a key, from keys in sorted order: offset d pairs each element
    with the one d places later in its run; runs shorter than d + 1 drop out."""
    n = len(sorted_keys)
    starts = np.flatnonzero(np.concatenate([[True], sorted_keys[1:] != sorted_keys[:-1]]))
    lengths = np.diff(np.append(starts, n))
    starts, lengths = starts[lengths > 1], lengths[lengths > 1]
    firsts, seconds, d = [], [], 1
    while len(lengths):
        count = lengths - d
        run = np.repeat(np.arange(len(starts)), count)
        within = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
        base = starts[run] + within
        firsts.append(order[base])
        seconds.append(order[base + d])
        d += 1
        starts, lengths = starts[lengths > d], lengths[lengths > d]
    if not firsts:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(firsts), np.concatenate(seconds)


def _sorted_pairs(pairs: np.ndarray) -> np.ndarray:
    if len(pairs) == 0:
        return np.empty((0, 2), np.int64)
    return np.unique(pairs.astype(np.int64), axis=0)


def union_find(n: int, pairs: np.ndarray) -> np.ndarray:
    """Cluster label of each of n items (the smallest index in its cluster)."""
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]  # path halving
            x = parent[x]
        return x

    for a, b in pairs.tolist():
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return np.array([find(i) for i in range(n)], dtype=np.int64)


# -- the stage -------------------------------------------------------------------------------------
def phash_of(store: ImageStore, sha256: str) -> int | Reject:
    """The 64-bit pHash of a stored image, or the Reject every row showing it gets."""
    path = store.find(sha256)
    if path is None:
        return Reject("image_missing", f"{sha256} is not in the store at {store.root}")
    try:
        with Image.open(path, formats=STORED_FORMATS) as im:
            return int(str(imagehash.phash(im)), 16)
    except (OSError, SyntaxError, ValueError) as err:
        return Reject("broken_image", f"{path}: {type(err).__name__}: {err}")


def _rank_key(row: dict, score_column: str) -> tuple:
    score = row.get(score_column)
    return (-(score if score is not None else -math.inf), -(row["width"] * row["height"]), -row["bytes"], row["id"], row["ref_id"])


def run(ctx) -> None:
    p = ctx.params
    if p["scope"] not in SCOPES:
        raise StageError(f"param scope must be one of {sorted(SCOPES)}, got {p['scope']!r}")
    if not 0 <= p["radius"] <= 64:
        raise StageError(f"param radius must be within 0..64, got {p['radius']}")
    table = ctx.read("images")
    if p["score_column"] not in table.column_names:
        table = table.append_column(p["score_column"], pa.nulls(table.num_rows, pa.float64()))
    rows = table.to_pylist()

    store = ImageStore(p["store"])
    shas = sorted({r["sha256"] for r in rows})
    with concurrent.futures.ThreadPoolExecutor(max_workers=p["workers"]) as pool:
        hashed = dict(zip(shas, tqdm(pool.map(lambda s: phash_of(store, s), shas), total=len(shas), desc="phash", unit="img")))
    ctx.stats["images_hashed"] = sum(1 for h in hashed.values() if not isinstance(h, Reject))

    live = []
    for row in rows:
        value = hashed[row["sha256"]]
        with ctx.item(row["ref_id"]):
            if isinstance(value, Reject):
                raise Reject(value.reason, f"{row['id']}: {value.detail}")
            row["phash"] = f"{value:016x}"
            live.append(row)
    hashes = np.array([int(r["phash"], 16) for r in live], dtype=np.uint64)

    groups: dict[object, list[int]] = defaultdict(list)
    column = SCOPES[p["scope"]]
    for i, row in enumerate(live):
        groups[row[column] if column else None].append(i)
    links = []
    for members in tqdm(groups.values(), desc="near pairs", unit="group", disable=len(groups) < 100):
        if len(members) > 1:
            local = near_pairs(hashes[members], p["radius"], workers=p["workers"])
            links.append(np.asarray(members, np.int64)[local])
    pairs = np.concatenate(links) if links else np.empty((0, 2), np.int64)
    ctx.stats["near_pairs"] = len(pairs)
    labels = union_find(len(live), pairs)

    clusters: dict[int, list[int]] = defaultdict(list)
    for i, label in enumerate(labels.tolist()):
        clusters[label].append(i)
    keep: dict[int, int] = {}  # row index -> rows it stands for
    for members in clusters.values():
        best = min(members, key=lambda i: _rank_key(live[i], p["score_column"]))
        keep[best] = len(members) - 1
        for i in members:
            if i != best:
                distance = int(np.bitwise_count(hashes[i] ^ hashes[best]))
                with ctx.item(live[i]["ref_id"], counted=False):  # counted when hashed
                    raise Reject("near_duplicate", f"{live[i]['id']} ~ kept {live[best]['ref_id']} ({live[best]['id']}), hamming {distance}")
    ctx.stats["clusters_with_duplicates"] = sum(1 for c in clusters.values() if len(c) > 1)

    columns = [f.name for f in ctx.writer("images").schema]
    out = []
    for i, row in enumerate(live):
        if i in keep:
            row["duplicates"] = keep[i]
            out.append({c: row.get(c) for c in columns})
    ctx.write("images", out)


STAGE = Stage(
    name="phash_dedup",
    version=VERSION,
    doc=__doc__,
    inputs={"images": Input("images_filtered (or images_cached) rows", many=True, table="images_cached")},
    outputs={"images": Output("images_deduped", "one representative per near-duplicate cluster")},
    params={
        "radius": Param(int, 6, "near-duplicates differ in at most this many of the 64 pHash bits", min=0, max=64),
        "scope": Param(str, "owner", "which rows compete: owner (per post/page), query, or global", choices=("owner", "query", "global")),
        "store": Param(str, "data/cache/images", "image store root"),
        "score_column": Param(str, "clip_score", "higher keeps; null counts as lowest"),
        "workers": Param(int, 2, "threads hashing images and searching pairs", min=1),
    },
    run=run,
)

if __name__ == "__main__":
    STAGE.main()
