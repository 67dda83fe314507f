"""Sandbox hygiene: no zombie processes after runs that end normally, time out or are killed,
and no mount folder left behind by a host process killed with SIGKILL.

The zombie check runs the sandbox in a child Python that makes itself a child subreaper and never
reaps anything it did not start, like a container whose pid 1 does not reap: every orphan of a
jail is re-parented to it, so a process weft failed to reap shows up as its zombie child instead
of being collected by the host's init at some unknown time.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pipelines.sandbox.jail import resolve_spec

REPO = Path(__file__).resolve().parents[2]

_SCENARIO = r"""
import ctypes, json, os, sys, time
PR_SET_CHILD_SUBREAPER = 36
if sys.argv[2] == "subreaper":
    assert ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
from pipelines.sandbox import Limits, LocalSandbox, SandboxPool

def zombie_children():
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                text = fh.read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            found.append(text[:text.rindex(")") + 1])
    return found

sandbox = LocalSandbox(Limits(timeout_s=10), isolation=sys.argv[1])
short = Limits(timeout_s=1, cpu_s=5)
outcomes = []
outcomes.append(sandbox.run("print('ok')").stdout)
outcomes.append(sandbox.run("while True: pass", limits=short).timed_out)
outcomes.append(sandbox.run("import os, time\nif os.fork() == 0:\n    time.sleep(60)\n"
                            "print('parent done')").stdout)
outcomes.append(sandbox.run("import os, time\nos.fork()\ntime.sleep(60)", limits=short).timed_out)
with sandbox.session() as session:
    outcomes.append(session.execute("x = 41\nx + 1").value)
    outcomes.append(session.execute("import threading, time\n"
                                    "threading.Thread(target=time.sleep, args=(60,)).start()\n"
                                    "while True: pass", limits=short).restarted)
    outcomes.append(session.execute("import os; os._exit(3)").restarted)
with sandbox.runner() as runner:
    outcomes.append(runner.run("print('fast')").stdout)
    outcomes.append(runner.run("while True: pass", limits=short).timed_out)
with SandboxPool(sandbox, workers=2) as pool:
    outcomes.append([r.stdout for r in pool.run_many(["print(1)", "print(2)", "print(3)"])])
session = sandbox.session()
session.close()
time.sleep(0.5)  # let anything orphaned arrive
print(json.dumps({"outcomes": outcomes, "zombies": zombie_children()}))
"""


@pytest.mark.parametrize("isolation, reaper", [
    ("bwrap", "subreaper"),
    # The fallback has no pid namespace: processes the program leaves behind are orphaned to
    # the host's init (weft is no subreaper), so only weft's own children are checked there.
    ("subprocess", "plain"),
])
def test_no_zombies_after_normal_timed_out_and_killed_runs(jail, isolation, reaper):
    proc = subprocess.run([sys.executable, "-c", _SCENARIO, isolation, reaper], cwd=REPO,
                          capture_output=True, text=True, timeout=240, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["outcomes"] == ["ok\n", True, "parent done\n", True, "42", True, True,
                                  "fast\n", True, ["1\n", "2\n", "3\n"]]
    assert report["zombies"] == []


_HOLDER = r"""
import sys, time
from pipelines.sandbox import Limits, LocalSandbox
from pipelines.sandbox.jail import _mount_points
session = LocalSandbox(Limits(timeout_s=10), isolation="bwrap").session()
assert session.execute("1 + 1").value == "2"
print(_mount_points()[0].rsplit("/", 1)[0], flush=True)
time.sleep(600)
"""

_STARTER = r"""
from pipelines.sandbox import Limits, LocalSandbox
print(LocalSandbox(Limits(timeout_s=10), isolation="bwrap").run("print('started')").stdout,
      end="")
"""


def _start_holder(tmpdir: str) -> tuple[subprocess.Popen, str]:
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER], cwd=REPO, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": tmpdir})
    folder = holder.stdout.readline().strip()
    assert folder, "the holder process did not start a jail"
    return holder, folder


def _start_jail_elsewhere(tmpdir: str) -> None:
    done = subprocess.run([sys.executable, "-c", _STARTER], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": tmpdir})
    assert done.stdout == "started\n", done.stderr[-3000:]


@pytest.fixture
def own_tmpdir():
    """A temp dir of this test's own for the processes it starts (world-traversable, as the
    jail's user reaches its mount points through it): a process of another test starting jails
    meanwhile cleans up the shared temp dir and would take the killed holder's folder first."""
    folder = tempfile.mkdtemp(prefix="weft-hygiene-")
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_mount_folder_of_a_sigkilled_process_is_removed_by_the_next_start(jail, own_tmpdir):
    if resolve_spec("bwrap").inode_mounts is None:
        pytest.skip("jails use mount folders only when the host runs as root and can mount")
    killed, killed_folder = _start_holder(own_tmpdir)
    alive, alive_folder = _start_holder(own_tmpdir)
    try:
        assert os.path.isdir(killed_folder) and os.path.isdir(alive_folder)
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
        time.sleep(0.2)
        assert os.path.isdir(killed_folder)  # no exit handler ran
        _start_jail_elsewhere(own_tmpdir)
        assert not os.path.exists(killed_folder)
        assert re.search(rf"weft-jail-mnt-{killed.pid}\.", killed_folder)
        assert os.path.isdir(alive_folder)  # a live process's folder is never touched
        assert alive.poll() is None
    finally:
        for proc in (killed, alive):
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
    # and once that process is killed too, the next start removes its folder as well
    from pipelines.sandbox.jail import remove_stale_mount_dirs

    assert alive_folder in remove_stale_mount_dirs(own_tmpdir)


def test_only_empty_unmounted_folders_of_dead_owners_are_removed(tmp_path):
    from pipelines.sandbox.jail import _host_tag, remove_stale_mount_dirs

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    tag = _host_tag()

    def make(name, extra=None):
        top = tmp_path / name
        for sub in ("tmp", "shm"):
            (top / sub).mkdir(parents=True)
        if extra:
            (top / "tmp" / extra).write_text("x")
        return top

    stale = make(f"weft-jail-mnt-{dead.pid}.{tag}-abc")
    not_empty = make(f"weft-jail-mnt-{dead.pid}.{tag}-def", extra="file")
    live = make(f"weft-jail-mnt-{os.getppid()}.{tag}-ghi")
    other_host = make(f"weft-jail-mnt-{dead.pid}.00000000-jkl")
    legacy = make("weft-jail-mnt-k2j3h4")
    unrelated = make(f"something-{dead.pid}.{tag}-mno")
    assert remove_stale_mount_dirs(str(tmp_path)) == [str(stale)]
    assert not stale.exists()
    for kept in (not_empty, live, other_host, legacy, unrelated):
        assert kept.is_dir(), kept
    assert (not_empty / "tmp" / "file").read_text() == "x"
