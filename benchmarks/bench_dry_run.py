"""Planning time: `snakemake -n release` on an up-to-date demo run, against the 5 s target.

    python benchmarks/bench_dry_run.py [--workdir DIR] [--build] [--repeat 3] [--profile]

The dry run needs a demo run that is up to date. By default the repository's tracked files are
copied to a temporary folder and every output of `release` is marked up to date there without
running anything (the workflow tests' `make_up_to_date`: empty outputs, then
`snakemake --touch`), which takes a minute, not the ~8 CPU minutes of a real demo build; Snakemake
plans from file times and its metadata records, so the planning work is the same. --build builds
the demo release for real in the copy instead (`snakemake --cores 2 release`); --workdir uses an
existing checkout (built only if something is left to do). Then times `python -m snakemake -n
release` --repeat times (wall best and median, and the CPU time the dry run used, which a busy
shared machine inflates far less) and checks that the dry run plans nothing. --profile runs one
more dry run under cProfile inside Snakemake's own process and prints where DAG parsing spends
its time (config validation, rules/*.smk, the import-closure scan of stages/core/layout.py,
Snakemake itself).
"""
from __future__ import annotations

import argparse
import io
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
TARGET_S = 5.0

from conftest import make_up_to_date  # noqa: E402  (the workflow tests' helper: outputs marked up to date)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=workdir, capture_output=True, text=True)


def copy_repo(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, files):
        source = REPO / name.decode()
        if source.is_file():
            target = dest / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def nothing_to_do(result: subprocess.CompletedProcess) -> bool:
    return "Nothing to be done" in result.stdout + result.stderr


def profile(workdir: Path, stats_file: Path) -> str:
    """Where one dry run spends its time: cProfile around Snakemake's own process."""
    subprocess.run([sys.executable, "-m", "cProfile", "-o", str(stats_file), "-m", "snakemake", "-n", "release"],
                   cwd=workdir, capture_output=True, check=True)
    out = io.StringIO()
    stats = pstats.Stats(str(stats_file), stream=out).sort_stats("cumulative")
    stats.print_stats(r"stages/core|rules/|Snakefile|snakemake/(dag|workflow|parser|api)\.py", 30)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, help="an existing checkout (built if needed); default: a temporary copy")
    parser.add_argument("--build", action="store_true", help="build the temporary copy's demo for real instead of marking it up to date")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="citeforge-dry-run-") as tmp:
        workdir = args.workdir or Path(tmp)
        if args.workdir is None:
            copy_repo(workdir)
            if not args.build:
                started = time.perf_counter()
                make_up_to_date(workdir, "release")
                print(f"marked every output of the demo release up to date (--touch) in {time.perf_counter() - started:.0f}s")
        if not nothing_to_do(snakemake(workdir, "-n", "release")):
            started = time.perf_counter()
            built = snakemake(workdir, "--cores", "2", "release")
            if built.returncode != 0:
                raise SystemExit(f"demo build failed:\n{built.stderr[-3000:]}")
            print(f"built the demo release in {time.perf_counter() - started:.0f}s")
        times, cpu = [], []
        for _ in range(args.repeat):
            started, used = time.perf_counter(), children_cpu()
            result = snakemake(workdir, "-n", "release")
            times.append(time.perf_counter() - started)
            cpu.append(children_cpu() - used)
            if result.returncode != 0 or not nothing_to_do(result):
                raise SystemExit(f"the dry run is not a no-op on an up-to-date run:\n{(result.stdout + result.stderr)[-3000:]}")
        best, median = min(times), statistics.median(times)
        print(f"snakemake -n release (up to date, nothing to do): wall best {best:.2f}s, median {median:.2f}s over {len(times)} runs; "
              f"CPU (user+sys) median {statistics.median(cpu):.2f}s; target {TARGET_S:.0f}s: {'met' if median <= TARGET_S else 'MISSED'}")
        if statistics.median(cpu) < 0.5 * median:
            print("wall time is well above CPU time: the machine is busy, so the wall figure is mostly waiting for a core")
        if args.profile:
            print(profile(workdir, Path(tmp) / "dry_run.prof"))


if __name__ == "__main__":
    main()
