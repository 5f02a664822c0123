"""Kill -9 in the middle of a model stage, then recover with the README's "After a crash" command:
in a first run, and in a rerun forced with --forcerun (the second test).

The M2RAG slice of the demo DAG (harvest_hub_dataset -> filter_queries -> classify_queries ->
release_m2rag -> catalog, other families disabled) runs in a private workflow copy with the
embedded model. While filter_queries is calling the model (its calls are landing in the call
cache, none of its outputs exists yet) the whole process group (Snakemake and its jobs) gets
SIGKILL. The README's crash command then has to finish the run; afterwards no temp or partial file
is left under data/, the killed jobs answer the calls they had finished from the cache, and the
release version equals that of an uninterrupted run in a second copy."""
from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml


from conftest import REPO, WORKFLOW_PARTS, demo_config, make_up_to_date, run_snakemake

pytestmark = pytest.mark.slow
RUN = "data/runs/demo/m2rag"
SHARDS = ("00000", "00001")
LIMIT = 4  # queries: 8 filter calls, 4 classify calls


def crash_command() -> str:
    match = re.search(r"<!-- crash-command -->\s*```bash\n(.+?)\n```", (REPO / "README.md").read_text(), re.S)
    assert match, "README.md has no crash-command block"
    return match.group(1).strip()


def m2rag_copy(dest: Path, limit: int) -> Path:
    """A workflow copy whose demo overlay (config/demo.yaml) is the M2RAG slice, so the README's commands run as written."""
    import shutil

    for part in WORKFLOW_PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            (dest / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / part)
    config = demo_config()
    for name, section in config.items():
        if isinstance(section, dict) and "enabled" in section and name != "m2rag":
            section["enabled"] = False
    config["m2rag"]["harvest_hub_dataset"]["limit"] = limit
    (dest / "config/demo.yaml").write_text(yaml.safe_dump(config))  # the overlay a plain `snakemake release` reads
    return dest


def shell(command: str, cwd: Path, **kw) -> subprocess.Popen:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # this python's snakemake
    return subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, **kw)  # its own process group, to kill whole


def calls_done(workdir: Path) -> int:
    """Model calls the running filter_queries jobs have finished, read from their progress bars in
    their logs (tqdm counts a call once the loop body, which caches it, is done). The test never
    opens the cache while jobs write it."""
    done = 0
    for log in (workdir / "data/runs/demo/logs/m2rag").glob("filter_queries.*.log"):
        counts = re.findall(r"(\d+)/\d+ \[", log.read_text(errors="replace"))
        done += int(counts[-1]) if counts else 0
    return done


def cached_calls(workdir: Path) -> int:
    con = sqlite3.connect(workdir / "data/cache/llm.sqlite")
    try:
        return con.execute("select count(*) from calls").fetchone()[0]
    finally:
        con.close()


def release_version(workdir: Path) -> str:
    return json.loads((workdir / RUN / "release_m2rag/release.json").read_text())["version"]


def finish(proc: subprocess.Popen, timeout: float) -> str:
    try:
        return proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise


def test_kill_mid_model_stage_then_the_readme_crash_command(tmp_path):
    started = time.monotonic()
    killed, clean = m2rag_copy(tmp_path / "killed", LIMIT), m2rag_copy(tmp_path / "clean", LIMIT)
    procs = [shell("snakemake --cores 1 release", clean)]  # the uninterrupted run, alongside, with its own cache
    baseline = procs[0]
    try:
        run = shell("snakemake --cores 2 release", killed)
        procs.append(run)
        filtered = [killed / RUN / "filter_queries" / f"filtered_queries.{s}.parquet" for s in SHARDS]
        deadline = time.monotonic() + 600
        while not (calls_done(killed) >= 1 and not any(p.exists() for p in filtered)):
            assert run.poll() is None, f"the run ended before it could be killed:\n{run.communicate()[0][-3000:]}"
            assert not any(p.exists() for p in filtered), "filter_queries finished before a call was seen in the cache"
            assert time.monotonic() < deadline, "no model call reached the cache in time"
            time.sleep(0.05)
        os.killpg(run.pid, signal.SIGKILL)  # Snakemake and every job it started
        run.wait()
        calls_before_kill = cached_calls(killed)  # (everyone that wrote it is dead now)
        killed_at = time.monotonic() - started
        assert calls_before_kill >= 1 and not any(p.exists() for p in filtered)

        plain = shell("snakemake --cores 2 release", killed)
        procs.append(plain)
        out = finish(plain, 300)
        assert plain.returncode != 0 and "lock" in out.lower()  # why the README says what to run

        recover = shell(crash_command(), killed)
        procs.append(recover)
        out = finish(recover, 900)
        assert recover.returncode == 0, out[-4000:]
        recovered_at = time.monotonic() - started

        leftovers = [p for p in (killed / "data").rglob("*")
                     if p.name.startswith(".") or p.name.endswith((".tmp", "-wal", "-shm", "-journal"))]
        assert leftovers == []
        for table in (killed / "data/runs").rglob("*.parquet"):
            pq.read_metadata(table)  # every table complete
        hits = [json.loads(Path(f"{p}.report.json").read_text())["stats"].get("llm_cache_hits", 0) for p in filtered]
        assert sum(hits) > 0, hits  # the calls finished before the kill, answered from the cache

        out = finish(baseline, 900)
        assert baseline.returncode == 0, out[-4000:]
        assert release_version(killed) == release_version(clean)
        print(f"killed after {killed_at:.0f}s with {calls_before_kill} calls cached; recovered at {recovered_at:.0f}s; "
              f"cache hits of the killed filter jobs {hits}; total {time.monotonic() - started:.0f}s")
    finally:
        for proc in procs:  # nothing of this test outlives it
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_kill_under_forcerun_then_the_readme_crash_command(tmp_path):
    """A complete run, then `--forcerun filter_queries` killed while the rule runs: Snakemake has
    deleted the rule's outputs (Parquet and both sidecars) before starting it, the stage had committed
    nothing, only the older downstream outputs are left. The crash command
    must rerun the killed rule and everything downstream of it, not say "Nothing to be done"."""
    work = m2rag_copy(tmp_path / "wf", LIMIT)
    procs = []
    try:
        first = shell("snakemake --cores 2 release", work)
        procs.append(first)
        out = finish(first, 900)
        assert first.returncode == 0, out[-4000:]
        version = release_version(work)
        filtered = [work / RUN / "filter_queries" / f"filtered_queries.{s}.parquet" for s in SHARDS]
        classified = [work / RUN / "classify_queries" / f"classified_queries.{s}.parquet" for s in SHARDS]
        built_at = max(p.stat().st_mtime for p in classified)
        (work / "data/cache/llm.sqlite").unlink()  # the forced rule asks the model again, so it runs long enough to be killed
        for log in (work / "data/runs/demo/logs/m2rag").glob("filter_queries.*.log"):
            log.unlink()

        forced = shell("snakemake --cores 2 release --forcerun filter_queries", work)
        procs.append(forced)
        deadline = time.monotonic() + 600
        while not (calls_done(work) >= 1 and not any(p.exists() for p in filtered)):
            assert forced.poll() is None, f"the forced run ended before it could be killed:\n{forced.communicate()[0][-3000:]}"
            assert time.monotonic() < deadline, "no model call of the forced rule in time"
            time.sleep(0.05)
        os.killpg(forced.pid, signal.SIGKILL)
        forced.wait()
        # what the kill left: no output and no sidecars (all declared outputs, deleted before the forced job), older downstream tables
        assert not any(p.exists() or Path(f"{p}.rejects.parquet").exists() or Path(f"{p}.report.json").exists() for p in filtered)
        assert all(p.exists() for p in classified)

        recover = shell(crash_command(), work)
        procs.append(recover)
        out = finish(recover, 900)
        assert recover.returncode == 0, out[-4000:]
        assert "Nothing to be done" not in out, out[-3000:]
        assert all(p.exists() and Path(f"{p}.rejects.parquet").exists() for p in filtered)
        assert all(Path(f"{p}.report.json").stat().st_mtime > built_at for p in filtered)
        assert all(p.stat().st_mtime > built_at for p in classified), "the tables downstream of the killed rule were not rebuilt"
        assert all(c.stat().st_mtime >= f.stat().st_mtime for c, f in zip(classified, filtered))  # each shard from its new input
        assert (work / RUN / "release_m2rag/release.json").stat().st_mtime > built_at
        assert release_version(work) == version  # the same model answers: the same release
        leftovers = [p for p in (work / "data").rglob("*") if p.name.startswith(".") or p.name.endswith(".tmp")]
        assert leftovers == []
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_the_crash_command_plans_the_rule_whose_outputs_a_killed_rerun_deleted(tmp_path):
    """The state a kill under --forcerun leaves, made directly: every output up to date, then the
    Parquet outputs and rejects of filter_queries gone (Snakemake deleted them before the killed
    job; the stage committed nothing). The crash command's run plans filter_queries and everything
    downstream of it (a dry run: the DAG alone, in seconds)."""
    work = m2rag_copy(tmp_path / "wf", LIMIT)
    make_up_to_date(work, "release")
    for shard in SHARDS:
        table = work / RUN / "filter_queries" / f"filtered_queries.{shard}.parquet"
        table.unlink()
        Path(f"{table}.rejects.parquet").unlink()
    planned = run_snakemake(work, "-n", "release", "--rerun-incomplete").stdout
    rules = {line.split()[-1].rstrip(":") for line in planned.splitlines() if line.startswith(("rule ", "localrule "))}
    assert {"filter_queries", "classify_queries", "sample_queries", "release_m2rag", "build_catalog"} <= rules, planned[-3000:]
    assert "harvest_hub_dataset" not in rules  # upstream of the killed rule: up to date
