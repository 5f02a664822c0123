"""profiles/slurm on a real SLURM: a one-node cluster from Debian's packages (munged, slurmctld,
slurmd on 127.0.0.1, private config, key and ports) runs a slice of the demo DAG (the MAVIS
harvest, then filter_questions as one SLURM job per shard) through the profile, and its outputs
equal a local run's. Skipped, naming what is missing, without the packages, the plugin or root."""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from conftest import _free_port, run_snakemake, demo_config

pytestmark = pytest.mark.slow
TOOLS = ["munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel", "unshare"]
_missing = [t for t in TOOLS if not shutil.which(t)]
if _missing:
    pytestmark = [pytestmark, pytest.mark.skip(reason=f"needs SLURM and munge ({', '.join(_missing)} missing): "
                                                       "apt-get install slurm-wlm munge (scripts/install_system_packages.sh)")]
elif importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
    pytestmark = [pytestmark, pytest.mark.skip(reason="needs the SLURM executor plugin: pip install -e '.[slurm]'")]
elif os.geteuid() != 0:
    pytestmark = [pytestmark, pytest.mark.skip(reason="starting slurmd needs root")]
elif subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0:
    pytestmark = [pytestmark, pytest.mark.skip(reason="needs mount namespaces (unshare --mount) to give slurmd its slurm.conf")]

SHARDS = ["00000", "00001"]


def _conf(root: Path) -> str:
    host = socket.gethostname().split(".")[0]
    return f"""ClusterName=citeforge-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge.socket
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# the node offers what the profile asks of big rules, whatever this machine has
SlurmdParameters=config_overrides
MinJobAge=600
ReturnToService=2
NodeName={host} NodeAddr=127.0.0.1 CPUs=16 RealMemory=64000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def _stop(pid_file: Path) -> None:
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text().split()[0])
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def slurm(tmp_path):
    """The cluster's environment (SLURM_CONF); every daemon it started is stopped afterwards."""
    root = tmp_path / "slurm"
    for sub in ("state", "spool", "log"):
        (root / sub).mkdir(parents=True)
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    (root / "slurm.conf").write_text(_conf(root))
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    try:
        subprocess.run(["munged", "--force", f"--socket={root}/munge.socket", f"--key-file={key}", f"--log-file={root}/log/munged.log",
                        f"--pid-file={root}/munged.pid", f"--seed-file={root}/munged.seed"], check=True)
        subprocess.run(["slurmctld"], env=env, check=True)
        # Job steps run `srun` with the SLURM_* variables cleared (the plugin's job step does), so
        # they read /etc/slurm/slurm.conf: slurmd, and the jobs it starts, see this cluster's file
        # there through a bind mount in a mount namespace of their own; the machine's /etc is untouched.
        (root / "etc").mkdir()
        shutil.copy(root / "slurm.conf", root / "etc" / "slurm.conf")
        subprocess.run(["unshare", "--mount", "sh", "-c", f"mount --bind {root}/etc /etc/slurm && exec slurmd"], env=env, check=True)
        deadline = time.monotonic() + 60
        while subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout.strip() != "idle":
            if time.monotonic() > deadline:
                raise AssertionError("the SLURM node did not come up:\n" + (root / "log/slurmctld.log").read_text()[-2000:])
            time.sleep(0.5)
        yield env
    finally:
        subprocess.run(["scancel", "--full", "--partition=debug"], env=env, capture_output=True)  # jobs left by a failure
        for daemon in ("slurmd", "slurmctld", "munged"):
            _stop(root / f"{daemon}.pid")


def _slice(workdir: Path) -> tuple[Path, list[str]]:
    config = demo_config()
    for section in ("m2rag", "mcitebench", "images", "retrieval", "evaluate", "citeeval"):
        if isinstance(config.get(section), dict):
            config[section]["enabled"] = False
    (workdir / "slice.yaml").write_text(yaml.safe_dump(config))
    targets = [f"data/runs/demo/mavis/filter_questions/{table}.{s}.parquet" for s in SHARDS for table in ("questions", "instances")]
    return workdir / "slice.yaml", targets


def test_profile_runs_shards_as_slurm_jobs_with_local_outputs(slurm, workflow_copy, tmp_path):
    local = tmp_path / "local"
    shutil.copytree(workflow_copy, local)
    config, targets = _slice(workflow_copy)
    run_snakemake(local, *targets, "--configfile", str(_slice(local)[0]))

    result = subprocess.run(
        [sys.executable, "-m", "snakemake", *targets, "--profile", "profiles/slurm", "--jobs", "4", "--configfile", str(config),
         "--slurm-no-account", "--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "1",
         "--default-resources", "slurm_partition=debug", "mem_mb=1000", "runtime=10"],
        cwd=workflow_copy, env=slurm, capture_output=True, text=True, timeout=540)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    # one SLURM job per Snakemake job: the harvest and each shard's filter
    submitted = [line for line in result.stderr.splitlines() if "has been submitted with SLURM jobid" in line]
    assert len(submitted) == 1 + len(SHARDS), result.stderr[-3000:]
    jobs = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%j %T"], env=slurm, capture_output=True, text=True).stdout.split("\n")
    assert sum(1 for line in jobs if line.endswith("COMPLETED")) == 1 + len(SHARDS), jobs

    for target in targets:
        a, b = pq.read_table(local / target), pq.read_table(workflow_copy / target)
        assert a.num_rows > 0 and a.equals(b), target
        rejects = f"{target}.rejects.parquet"
        if (local / rejects).exists():
            assert pq.read_table(local / rejects).equals(pq.read_table(workflow_copy / rejects)), rejects
