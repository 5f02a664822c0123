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
C(m, q) choices of q chunks, the key made of those chunks. Each choice is a table: the pairs
sharing its key are checked by popcount, so no pair is missed (the pigeonhole bound is exact) and
no false pair is kept. A pair agreeing on more than q chunks would turn up in several tables; it
is kept only in the table of its q lowest agreeing chunks, so each pair is found once. The tables
run in a compiled kernel (numba, `_prefix_pairs`): the tables sharing their first q - 1 chunks
come from one radix grouping of the hashes by those chunks, and each group (a few hundred hashes,
in the cache) is counting-sorted by the last chunk and its runs checked; two threads share the
groupings, with work arrays reused from one grouping to the next. numpy sorting every key of
every table was 911 s at 10M hashes, most of it the sorts and the page faults of their
temporaries. m is picked by a cost model (groupings, placements and expected random candidates);
small sets use brute force. benchmarks/bench_phash_dedup.py measures both at 1M and 10M hashes;
tests check equality with brute force.

Params: radius (max Hamming distance), scope (owner | query | global: which rows compete),
store (image store root), score_column, workers.
"""
from __future__ import annotations

import concurrent.futures
import itertools
import math
import threading
from collections import defaultdict

import imagehash
import numba
import numpy as np
import pyarrow as pa
from PIL import Image
from tqdm import tqdm

from stages.core.images import STORED_FORMATS, ImageStore
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "1"
SCOPES = {"owner": "owner_id", "query": "query_id", "global": None}
# costs measured on the benchmark's hashes, for the method choice (nanoseconds)
_JOB_NS, _GROUP_NS, _PLACE_NS, _CHECK_NS, _BRUTE_NS = 50_000.0, 16.0, 10.0, 2.0, 1.0


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
    """The chunk count m for multi-index hashing, or None when brute force is cheaper: C(m - 1,
    q - 1) groupings of all n hashes, C(m, q) tables each placing every hash once, and the pairs
    sharing a key to check, n^2 / 2^(key bits + 1) per table for random hashes."""
    best, best_cost = None, n * n / 2 * _BRUTE_NS
    for m in range(radius + 1, min(64, radius + 12) + 1):
        q = m - radius
        tables, groupings = math.comb(m, q), math.comb(m - 1, q - 1)
        cost = groupings * (_JOB_NS + n * _GROUP_NS) + tables * n * (_PLACE_NS + n / 2 ** (64 * q / m + 1) * _CHECK_NS)
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
    chunks = np.array(_chunks(m), np.int64)
    offsets, widths = chunks[:, 0].copy(), chunks[:, 1].copy()
    q = m - radius
    # the tables sharing their first q - 1 chunks are built from one grouping of the hashes by those
    prefixes = [(prefix, np.arange(prefix[-1] + 1 if prefix else 0, m, dtype=np.int64)) for prefix in itertools.combinations(range(m - 1), q - 1)]
    prefixes = [(np.array(prefix, np.int64), lasts) for prefix, lasts in prefixes if len(lasts)]
    prefixes.sort(key=lambda p: -len(p[1]))  # the longest jobs first, for the two threads

    local = threading.local()  # each thread's work arrays, reused job after job (fresh ones page-fault)

    def pairs_for(job: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        if not hasattr(local, "work"):
            local.work = (np.empty(n, np.uint64), np.empty(n, np.uint64), np.empty((4, n), np.int64))
        out = np.empty((1 << 16, 2), np.int64)
        while True:  # the kernel counts past a full buffer; a second run fits exactly
            found = _prefix_pairs(hashes, offsets, widths, job[0], job[1], radius, out, *local.work)
            if found <= len(out):
                return out[:found]
            out = np.empty((found, 2), np.int64)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:  # the kernel releases the GIL
        found = list(pool.map(pairs_for, prefixes))
    return _sorted_pairs(np.concatenate(found))


_GROUP_BITS = 16  # the prefix's top bits the hashes are grouped by: groups small enough for the cache
_DIGIT = 8  # bits per pass of that radix sort: 256 output streams
_LOCAL_BITS = 12  # keys within a group up to this many bits are counting-sorted, longer ones sorted


@numba.njit(nogil=True, cache=True)
def _key(h, offsets, widths, chunks):  # pragma: no cover - compiled
    """The chunks `chunks` of hash h, side by side."""
    key = np.uint64(0)
    for c in chunks:
        key = (key << np.uint64(widths[c])) | ((h >> np.uint64(offsets[c])) & np.uint64((1 << widths[c]) - 1))
    return key


@numba.njit(nogil=True, cache=True)
def _prefix_pairs(hashes, offsets, widths, prefix, lasts, radius, out, grouped, spare_h, work):  # pragma: no cover - compiled
    """The tables of multi-index hashing whose q chunks are `prefix` plus one of `lasts`: every
    pair within `radius` agreeing on the q chunks of one of them, written to `out`; returns how
    many there are (more than `out` holds: call again, larger); `grouped`, `spare_h` (n) and
    `work` (4 x n) are its scratch arrays. A pair agreeing on several q-sets
    of chunks is kept only in the table of the first of them (its q lowest agreeing chunks), so
    each pair comes out of exactly one table.

    The hashes are grouped by the top bits of their prefix chunks (a radix sort moving the hash
    and its row); then, group by group (in the cache), for each last chunk, the group is
    sorted by its full key and every pair within a run of one key is checked by popcount."""
    n, m, q = len(hashes), len(offsets), len(prefix) + 1
    prefix_bits = 0
    for c in prefix:
        prefix_bits += widths[c]
    group_bits = min(prefix_bits, _GROUP_BITS)
    shift = np.uint64(prefix_bits - group_bits)
    # group ids, then a radix sort by them, _DIGIT bits a pass (few enough streams for the cache)
    rows, spare_r, ids, spare_i = work[0], work[1], work[2], work[3]
    for x in range(n):
        grouped[x], rows[x], ids[x] = hashes[x], x, np.int64(_key(hashes[x], offsets, widths, prefix) >> shift)
    fill = np.zeros((1 << _DIGIT) + 1, np.int64)
    for low in range(0, group_bits, _DIGIT):
        mask = (1 << min(_DIGIT, group_bits - low)) - 1
        fill[:] = 0
        for x in range(n):
            fill[((ids[x] >> low) & mask) + 1] += 1
        for d in range(1, mask + 2):
            fill[d] += fill[d - 1]
        for x in range(n):
            d = (ids[x] >> low) & mask
            spare_h[fill[d]], spare_r[fill[d]], spare_i[fill[d]] = grouped[x], rows[x], ids[x]
            fill[d] += 1
        grouped, spare_h = spare_h, grouped
        rows, spare_r = spare_r, rows
        ids, spare_i = spare_i, ids
    starts = np.zeros((1 << group_bits) + 1, np.int64)
    for x in range(n):
        starts[ids[x] + 1] += 1
    for g in range(1, len(starts)):
        starts[g] += starts[g - 1]
    largest = 0
    for g in range(len(starts) - 1):
        largest = max(largest, starts[g + 1] - starts[g])
    low_bits = prefix_bits - group_bits  # prefix bits below the group's: part of the key in a group
    low_mask = np.uint64((1 << low_bits) - 1)
    keys, order = np.empty(largest, np.uint64), np.empty(largest, np.int64)
    counts = np.zeros((1 << _LOCAL_BITS) + 1, np.int64)
    combo = np.empty(q, np.int64)
    combo[: q - 1] = prefix
    found = 0
    for g in range(len(starts) - 1):
        first_row, size = starts[g], starts[g + 1] - starts[g]
        if size < 2:
            continue
        for last in lasts:
            combo[q - 1] = last
            width, offset = np.uint64(widths[last]), np.uint64(offsets[last])
            chunk_mask = np.uint64((1 << widths[last]) - 1)
            local_bits = low_bits + widths[last]
            if local_bits <= _LOCAL_BITS:  # a counting sort of the group by its key
                counts[: (1 << local_bits) + 1] = 0
            for x in range(size):
                h = grouped[first_row + x]
                key = (h >> offset) & chunk_mask
                if low_bits:
                    key |= (_key(h, offsets, widths, prefix) & low_mask) << width
                keys[x] = key
                if local_bits <= _LOCAL_BITS:
                    counts[np.int64(key) + 1] += 1
            if local_bits <= _LOCAL_BITS:
                for k in range(1, (1 << local_bits) + 1):
                    counts[k] += counts[k - 1]
                for x in range(size):
                    k = np.int64(keys[x])
                    order[counts[k]] = x
                    counts[k] += 1
            else:
                order[:size] = np.argsort(keys[:size])
            run = 0
            while run < size - 1:
                end = run + 1
                key = keys[order[run]]
                while end < size and keys[order[end]] == key:
                    end += 1
                for a in range(run, end - 1):
                    ha = grouped[first_row + order[a]]
                    for b in range(a + 1, end):
                        diff = ha ^ grouped[first_row + order[b]]
                        if _popcount(diff) > radius or not _first_agreeing(diff, offsets, widths, combo):
                            continue
                        if found < len(out):
                            i, j = rows[first_row + order[a]], rows[first_row + order[b]]
                            out[found, 0], out[found, 1] = min(i, j), max(i, j)
                        found += 1
                run = end
    return found


@numba.njit(nogil=True, cache=True)
def _first_agreeing(diff, offsets, widths, combo):  # pragma: no cover - compiled
    """Whether `combo` (ascending) is the first len(combo) chunks on which the two hashes agree."""
    agreeing = 0
    for c in range(len(offsets)):
        if agreeing == len(combo):
            return True
        if (diff >> np.uint64(offsets[c])) & np.uint64((1 << widths[c]) - 1) == np.uint64(0):
            if combo[agreeing] != c:
                return False
            agreeing += 1
    return agreeing == len(combo)


@numba.njit(nogil=True, cache=True)
def _popcount(x):  # pragma: no cover - compiled
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


def _sorted_pairs(pairs: np.ndarray) -> np.ndarray:
    """Distinct pairs, sorted by i then j."""
    if len(pairs) == 0:
        return np.empty((0, 2), np.int64)
    pairs = pairs.astype(np.int64, copy=False)
    return pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]


def union_find(n: int, pairs: np.ndarray) -> np.ndarray:
    """Cluster label of each of n items (the smallest index in its cluster): the connected
    components of the pairs' graph."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    if n == 0:
        return np.empty(0, np.int64)
    pairs = np.asarray(pairs, np.int64).reshape(-1, 2)
    graph = coo_matrix((np.ones(len(pairs), np.int8), (pairs[:, 0], pairs[:, 1])), shape=(n, n))
    _, component = connected_components(graph, directed=False)
    smallest = np.full(component.max() + 1, n, np.int64)
    np.minimum.at(smallest, component, np.arange(n))
    return smallest[component]


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
        "store": Param(str, "data/cache/images", "image store root", folder="reads"),
        "score_column": Param(str, "clip_score", "higher keeps; null counts as lowest"),
        "workers": Param(int, 2, "threads hashing images and searching pairs", min=1),
    },
    run=run,
    rejects={
        "near_duplicate": "within radius bits (transitively) of the cluster's kept representative, named in the detail",
        "image_missing": "the image is not in the image store",
        "broken_image": "the stored image does not decode",
    },
)

if __name__ == "__main__":
    STAGE.main()
