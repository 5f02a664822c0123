"""Near-duplicate search at scale: exact multi-index hashing against brute force.

    python benchmarks/bench_phash_dedup.py [--n 1000000] [--radius 6] [--subset 20000]

Synthesises --n 64-bit hashes: 90% uniformly random, 10% planted near-duplicates (a random earlier
hash with 0..radius random bits flipped). Then, in the same run:
  method       stages.images.phash_dedup.near_pairs (multi-index hashing) + union_find on all n hashes;
  brute force  all-pairs XOR/popcount (numpy, blocked) on a --subset of the hashes (a quarter of
               it planted pairs, the rest random), timed
               and SCALED to n by (n / subset)^2 (it is quadratic; running it on 1M would take
               over an hour), stated as such in the output;
  equality     the method and brute force on that subset must find exactly the same pairs.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stages.images.phash_dedup import brute_force_pairs, near_pairs, plan, union_find  # noqa: E402


def synthesize(n: int, radius: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The hashes, and for each planted one (the last n // 10) the index it was copied from."""
    rng = np.random.default_rng(seed)
    hashes = rng.integers(0, 2**64 - 1, size=n, dtype=np.uint64, endpoint=True)
    planted = n // 10
    sources = rng.integers(0, n - planted, size=planted)
    flips = np.zeros(planted, dtype=np.uint64)
    for _ in range(radius):  # each of `radius` draws flips a random bit with probability 0.6
        bit = rng.integers(0, 64, size=planted).astype(np.uint64)
        flips ^= np.where(rng.random(planted) < 0.6, np.uint64(1) << bit, np.uint64(0))
    hashes[n - planted :] = hashes[sources] ^ flips
    return hashes, sources


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--radius", type=int, default=6)
    parser.add_argument("--subset", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    hashes, sources = synthesize(args.n, args.radius)
    print(f"{args.n:,} hashes ({args.n // 10:,} planted near-duplicates), radius {args.radius}, "
          f"multi-index hashing with m={plan(args.n, args.radius)} chunks")

    started = time.perf_counter()
    pairs = near_pairs(hashes, args.radius, workers=args.workers)
    searched = time.perf_counter() - started
    labels = union_find(args.n, pairs)
    total = time.perf_counter() - started
    clusters = len(np.unique(labels))
    print(f"method       : {total:8.1f} s  ({searched:.1f} s pair search + {total - searched:.1f} s union-find); "
          f"{len(pairs):,} pairs, {args.n - clusters:,} rows would be dropped")

    # the subset: a quarter planted hashes with the hashes they were copied from, the rest random,
    # so the equality check sees many true pairs
    rng = np.random.default_rng(1)
    planted = rng.choice(len(sources), size=args.subset // 4, replace=False)
    chosen = set((args.n - len(sources) + planted).tolist()) | set(sources[planted].tolist())
    chosen |= set(rng.choice(args.n, size=args.subset - len(chosen), replace=False).tolist())
    subset = hashes[np.array(sorted(chosen))[: args.subset]]
    started = time.perf_counter()
    brute = brute_force_pairs(subset, args.radius)
    brute_s = time.perf_counter() - started
    scaled = brute_s * (args.n / args.subset) ** 2
    print(f"brute force  : {brute_s:8.1f} s on a {args.subset:,}-hash subset -> SCALED to {args.n:,} by (n/subset)^2: "
          f"~{scaled:,.0f} s ({scaled / 3600:.1f} h), not run at full size")
    print(f"speed-up     : ~{scaled / total:,.0f}x (scaled brute force / method)")
    same = np.array_equal(near_pairs(subset, args.radius, workers=args.workers), brute)
    forced = np.array_equal(near_pairs(subset, args.radius, method=args.radius + 2, workers=args.workers), brute)
    print(f"equality     : method == brute force on the subset: {same} (auto plan), {forced} (m={args.radius + 2}); "
          f"{len(brute):,} pairs")
    if not (same and forced):
        sys.exit("MISMATCH between the method and brute force")


if __name__ == "__main__":
    main()
