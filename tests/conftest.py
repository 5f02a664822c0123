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


def run_stage(module: str, *args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run a stage through its real CLI, as Snakemake does."""
    result = subprocess.run(
        [sys.executable, "-m", f"stages.{module}", *args], cwd=cwd or REPO, capture_output=True, text=True
    )
    if check and result.returncode != 0:
        raise AssertionError(f"stage {module} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result


def run_snakemake(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", *args], cwd=workdir, capture_output=True, text=True
    )
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result
