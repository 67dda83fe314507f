"""A real Slurm cluster on this machine for the tests that submit jobs, started once per session.

The cluster lives in a temp folder: its own munge key and ``munged`` socket, a ``slurm.conf``
with free ports (``NodeName=<this host> NodeAddr=127.0.0.1``, the machine's CPUs, memory below
the machine's), ``slurmctld -D`` and ``slurmd -D`` as child processes. A second node,
``<this host>-2``, is a second ``slurmd -D -N`` on its own port (Debian's slurmd is built to allow
several per host), so the two-node job script runs as generated: two nodes, one machine. It is
ready when ``sinfo`` shows both nodes idle; at the end its jobs are cancelled and the daemons
stopped by PID. ``SLURM_CONF`` points the client commands (and the jobs) at it for the session.
The job completion log is on (``jobcomp/filetxt``) and ``MinJobAge`` is short, so a finished
job leaves ``scontrol`` within seconds and the state readers' fallback to ``sacct
--completion`` is exercised too.

Skipped, with the reason, when Slurm's or munge's programs are missing (``make setup`` installs
them as root) or the tests do not run as root (``slurmd`` must start jobs as root here).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

PROGRAMS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "sacct",
            "scancel", "srun", "squeue")
SBIN = ("/usr/sbin", "/sbin")
START_TIMEOUT_S = 60.0
MIN_JOB_AGE_S = 10  # how long scontrol remembers a finished job (Slurm's default: 300)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slurm: submits jobs to the Slurm cluster the test session starts on this "
                   "machine (needs root and Debian's slurmctld, slurmd, slurm-client and munge)")


def _program(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(Path(d) / name) for d in SBIN if (Path(d) / name).is_file()), None)


def missing_programs() -> list[str]:
    return [p for p in PROGRAMS if _program(p) is None]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 4096


@dataclass
class LocalCluster:
    root: Path
    conf: Path
    nodes: tuple[str, ...]
    cpus: int
    memory_mb: int
    processes: list[subprocess.Popen]

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def log(self, name: str, lines: int = 30) -> str:
        path = self.root / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) \
            if path.is_file() else ""


def slurm_conf(root: Path, nodes: tuple[str, ...], cpus: int, memory_mb: int) -> str:
    host = nodes[0]
    return "\n".join([
        "ClusterName=weft-test",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={_free_port()}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={root / 'munge.socket'}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}/%n",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={root / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'slurmd-%n.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={root / 'jobcomp.txt'}",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "SchedulerType=sched/backfill",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        "KillWait=2",
        f"MinJobAge={MIN_JOB_AGE_S}",
        "SchedulerParameters=sched_interval=1",
        f"DefMemPerCPU={memory_mb // cpus}",
        *(f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 Port={_free_port()} "
          f"CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN" for node in nodes),
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


def _stop(processes: list[subprocess.Popen]) -> None:
    for proc in reversed(processes):  # slurmd, slurmctld, then munged
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def start_cluster(root: Path) -> LocalCluster:
    host = socket.gethostname().split(".")[0]
    nodes = (host, f"{host}-2")
    for sub in ("state", *(f"spool/{n}" for n in nodes)):
        (root / sub).mkdir(parents=True)
    cpus = os.cpu_count() or 1
    memory_mb = max(256, int(_memory_mb() * 0.3))  # per node: both nodes are this machine
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, nodes, cpus, memory_mb))
    key = root / "munge.key"
    subprocess.run([_program("mungekey"), "--create", f"--keyfile={key}"], check=True,
                   capture_output=True)
    key.chmod(0o600)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    processes: list[subprocess.Popen] = []
    try:
        processes.append(subprocess.Popen(
            [_program("munged"), "-F", "--force", f"--socket={root / 'munge.socket'}",
             f"--key-file={key}", f"--log-file={root / 'munged.log'}",
             f"--pid-file={root / 'munged.pid'}", f"--seed-file={root / 'munged.seed'}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        _wait_for(lambda: (root / "munge.socket").exists(), "munged's socket", processes, root)
        daemons = [("slurmctld", [_program("slurmctld"), "-D", "-f", str(conf)])] + [
            (f"slurmd-{n}", [_program("slurmd"), "-D", "-N", n, "-f", str(conf)]) for n in nodes]
        for name, argv in daemons:
            with open(root / f"{name}.out", "wb") as out:
                processes.append(subprocess.Popen(argv, env=env, stdout=out,
                                                  stderr=subprocess.STDOUT))
        sinfo = _program("sinfo")

        def idle() -> bool:
            done = subprocess.run([sinfo, "-h", "-N", "-o", "%T"], env=env, check=False,
                                  capture_output=True, text=True, timeout=10)
            return done.returncode == 0 and done.stdout.split() == ["idle"] * len(nodes)

        _wait_for(idle, "both nodes to be idle in sinfo", processes, root)
    except BaseException:
        _stop(processes)
        raise
    return LocalCluster(root, conf, nodes, cpus, memory_mb, processes)


def _wait_for(ready, what: str, processes: list[subprocess.Popen], root: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        dead = [p.args[0] for p in processes if p.poll() is not None]
        if dead:
            break
        if ready():
            return
        time.sleep(0.3)
    logs = "\n".join(f"--- {path.name}:\n" + "\n".join(
        path.read_text(errors="replace").splitlines()[-15:])
        for path in sorted([*root.glob("*.log"), *root.glob("*.out")]))
    raise RuntimeError(f"the test Slurm cluster did not come up (waiting for {what}; exited: "
                       f"{[p.args[0] for p in processes if p.poll() is not None]})\n{logs}")


def _cancel_all(cluster: LocalCluster, wait_s: float = 20.0) -> None:
    """Cancel every job left on the cluster and wait until its queue is empty, so no job step
    outlives the daemons."""
    env = {**os.environ, **cluster.env}
    subprocess.run([_program("scancel"), "--full", f"--nodelist={','.join(cluster.nodes)}"],
                   env=env, check=False, capture_output=True, timeout=30)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        done = subprocess.run([_program("squeue"), "-h"], env=env, check=False,
                              capture_output=True, text=True, timeout=30)
        if done.returncode != 0 or not done.stdout.strip():
            return
        time.sleep(0.5)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """The running cluster (two nodes on this machine); ``SLURM_CONF`` points at it for the
    whole session."""
    missing = missing_programs()
    if missing:
        pytest.skip(f"Slurm tests need Slurm and munge ({', '.join(missing)} not found): as "
                    "root, `make setup` installs slurmctld, slurmd, slurm-client and munge")
    if os.geteuid() != 0:
        pytest.skip("Slurm tests need root: the test cluster runs slurmd, which starts "
                    "jobs as root (SlurmUser=root)")
    root = Path(tmp_path_factory.mktemp("slurm"))
    cluster = start_cluster(root)
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        yield cluster
    finally:
        _cancel_all(cluster)
        _stop(cluster.processes)
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old
