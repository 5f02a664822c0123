"""Harvest throughput against the bare cost of reading the same dump.

    python benchmarks/bench_harvest_pushshift.py [--mb 200]

Generates a monthly pushshift pair (RS_/RC_) of at least --mb MB uncompressed with the demo
generator, then times, in the same run and on the same files, --repeat times each, interleaved (best kept):
  baseline  zstd stream decode + orjson parse of every line, nothing else (its own loop, not the
            stage's reader);
  harvest   the harvest_pushshift stage end to end (checks, rules, sharded Parquet writes, rejects),
            which judges the comments in a second process while it judges the posts.
Prints MB/s (uncompressed) for both and the harvest/baseline ratio of wall time, and the CPU
seconds of each (the harvest's counting its comment reader process and writer threads): the
harvest trades CPU for wall time on two cores. Shared machines are noisy: compare the ratio of
one run, not MB/s across runs; the load average is printed at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import orjson
import yaml
import zstandard

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from make_reddit_sample import build, write_zst  # noqa: E402
from stages.mavis.harvest_pushshift import MAX_WINDOW, STAGE  # noqa: E402


def bare_parse(dumps: list[str]) -> tuple[float, int]:
    """Seconds to stream-decode the dumps and orjson-parse every line, and the line count."""
    started = time.perf_counter()
    lines = 0
    dctx = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW)
    for dump in dumps:
        tail = b""
        with open(dump, "rb") as fh, dctx.stream_reader(fh, read_across_frames=True) as reader:
            while chunk := reader.read(1 << 24):
                parts = (tail + chunk).split(b"\n")
                tail = parts.pop()
                for line in parts:
                    if line:
                        orjson.loads(line)
                        lines += 1
        if tail:
            orjson.loads(tail)
            lines += 1
    return time.perf_counter() - started, lines


def _cpu_with_children() -> float:
    """CPU seconds of this process and of its ended child processes."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=200.0, help="minimum uncompressed size of the dump pair")
    parser.add_argument("--repeat", type=int, default=2, help="timed runs of each; the best is reported")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        posts = 1000
        while True:  # size the dump from a small probe
            p, c = build(posts)
            size = sum(len(orjson.dumps(r)) + 1 for r in p + c)
            if size >= args.mb * 1e6:
                break
            posts = int(posts * args.mb * 1e6 / size * 1.02) + 1
        started = time.perf_counter()
        write_zst(tmp / "RS_2023-01.zst", p, level=3)
        write_zst(tmp / "RC_2023-01.zst", c, level=3)
        del p, c
        dumps = [str(tmp / "RS_2023-01.zst"), str(tmp / "RC_2023-01.zst")]
        compressed = sum(Path(d).stat().st_size for d in dumps)
        print(f"dump: {posts} posts, {size / 1e6:.1f} MB uncompressed, {compressed / 1e6:.1f} MB zstd "
              f"(generated in {time.perf_counter() - started:.1f}s)")

        config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["mavis"]["harvest_pushshift"]
        params = {k: v for k, v in config.items() if k != "files"}
        baseline = harvest = baseline_cpu = harvest_cpu = float("inf")
        for attempt in range(args.repeat):  # interleaved, so both see the same machine load
            cpu = time.process_time()
            seconds, lines = bare_parse(dumps)
            baseline, baseline_cpu = min(baseline, seconds), min(baseline_cpu, time.process_time() - cpu)
            out = tmp / f"out{attempt}"
            argv = [f"--input=dumps={d}" for d in dumps]
            argv += [f"--output=posts={out}/posts.{i:05d}.parquet" for i in range(4)]
            argv += [f"--output=comments={out}/comments.{i:05d}.parquet" for i in range(4)]
            started, cpu = time.perf_counter(), _cpu_with_children()
            STAGE.main([*argv, "--params", json.dumps(params)])
            harvest, harvest_cpu = min(harvest, time.perf_counter() - started), min(harvest_cpu, _cpu_with_children() - cpu)
            report = json.loads((out / "posts.00000.parquet.report.json").read_text())

    mb = size / 1e6
    print(f"records: {lines} lines; harvest kept {sum(report['rows_out'].values())}, rejected {report['rejected']}")
    print(f"baseline zstd decode + orjson parse: {baseline:7.2f}s  {mb / baseline:8.1f} MB/s")
    print(f"harvest_pushshift end to end:        {harvest:7.2f}s  {mb / harvest:8.1f} MB/s")
    print(f"harvest / baseline throughput ratio: {baseline / harvest:.2f} (target >= 0.5)")
    print(f"CPU seconds: baseline {baseline_cpu:.2f}s, harvest {harvest_cpu:.2f}s (both processes), ratio {baseline_cpu / harvest_cpu:.2f} (target >= 0.5)")
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} (1, 5, 15 min) on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
