"""Near-duplicate search at scale: exact multi-index hashing at 1M and 10M hashes, against brute force.

    python benchmarks/bench_phash_dedup.py [--sizes 1000000,10000000] [--radius 6] [--subset 20000]

For each of --sizes, synthesises that many 64-bit hashes: 90% uniformly random, 10% planted
near-duplicates (a random earlier hash with 0..radius random bits flipped). Then, in the same run:
  method       stages.images.phash_dedup.near_pairs (multi-index hashing, the cost model's chunk
               count, 2 threads; its compiled kernel loaded before the timings) + union_find on all n hashes: wall and CPU seconds, and the
               process's peak resident memory so far; the largest size's time as a multiple of
               the smallest's (targets at 10M: 120 s, 4 GB, 15x the 1M time);
  brute force  all-pairs XOR/popcount (numpy, blocked) on a --subset of the largest size's hashes
               (a quarter of it planted pairs, the rest random), timed and SCALED to n by
               (n / subset)^2 (it is quadratic), stated as such in the output;
  equality     the method and brute force on that subset must find exactly the same pairs;
  load average the machine's, at the end.
"""
from __future__ import annotations

import argparse
import os
import resource
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
    parser.add_argument("--sizes", default="1000000,10000000", help="comma-separated hash counts, smallest first")
    parser.add_argument("--radius", type=int, default=6)
    parser.add_argument("--subset", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    near_pairs(synthesize(5_000, args.radius)[0], args.radius, method=args.radius + 2)  # load the compiled kernel first
    times = []
    for n in sizes:
        hashes, sources = synthesize(n, args.radius)
        started, cpu = time.perf_counter(), time.process_time()
        pairs = near_pairs(hashes, args.radius, workers=args.workers)
        searched = time.perf_counter() - started
        labels = union_find(n, pairs)
        total, total_cpu = time.perf_counter() - started, time.process_time() - cpu
        peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
        times.append((total, total_cpu))
        print(f"method       : {n:>11,} hashes ({n // 10:,} planted), radius {args.radius}, m={plan(n, args.radius)} chunks: {total:7.1f} s wall, "
              f"{total_cpu:6.1f} s CPU ({searched:.1f} s pair search + {total - searched:.1f} s union-find); {len(pairs):,} pairs, "
              f"{n - len(np.unique(labels)):,} rows would be dropped; peak memory {peak_gb:.2f} GB", flush=True)
    if len(sizes) > 1:
        print(f"scaling      : {sizes[-1]:,} hashes take {times[-1][0] / times[0][0]:.1f}x the wall time and {times[-1][1] / times[0][1]:.1f}x the CPU time "
              f"of {sizes[0]:,} ({sizes[-1] / sizes[0]:.0f}x the hashes)")

    # the subset: a quarter planted hashes with the hashes they were copied from, the rest random,
    # so the equality check sees many true pairs
    n = sizes[-1]
    rng = np.random.default_rng(1)
    planted = rng.choice(len(sources), size=args.subset // 4, replace=False)
    chosen = set((n - len(sources) + planted).tolist()) | set(sources[planted].tolist())
    chosen |= set(rng.choice(n, size=args.subset - len(chosen), replace=False).tolist())
    subset = hashes[np.array(sorted(chosen))[: args.subset]]
    started = time.perf_counter()
    brute = brute_force_pairs(subset, args.radius)
    brute_s = time.perf_counter() - started
    scaled = brute_s * (n / args.subset) ** 2
    print(f"brute force  : {brute_s:8.1f} s on a {args.subset:,}-hash subset -> SCALED to {n:,} by (n/subset)^2: "
          f"~{scaled:,.0f} s ({scaled / 3600:.1f} h), not run at full size")
    print(f"speed-up     : ~{scaled / times[-1][0]:,.0f}x (scaled brute force / method, wall)")
    same = np.array_equal(near_pairs(subset, args.radius, workers=args.workers), brute)
    forced = np.array_equal(near_pairs(subset, args.radius, method=args.radius + 3, workers=args.workers), brute)
    print(f"equality     : method == brute force on the subset: {same} (auto plan), {forced} (m={args.radius + 3}); "
          f"{len(brute):,} pairs")
    print(f"load average : {' '.join(f'{x:.1f}' for x in os.getloadavg())} (1, 5, 15 min) on {os.cpu_count()} cores")
    if not (same and forced):
        sys.exit("MISMATCH between the method and brute force")


if __name__ == "__main__":
    main()
