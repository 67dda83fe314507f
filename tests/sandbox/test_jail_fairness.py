"""One candidate cannot change another's verdict: a CPU quota and a memory cap per jail.

Adversarial tests on the real jail: a candidate that starts dozens of busy processes, each in
a session of its own, runs beside correct programs on other workers, whose verdicts must not
change; processes of one jail together stay under the jail's memory cap, in every shape
(forked children, threads, SysV shared memory, files in /tmp). Where the host gives no control
groups (not root, no writable controllers) these are skipped with the reason: the sandbox then
documents that a neighbour can slow a program past its wall-clock limit.
"""

from __future__ import annotations

import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from pipelines.sandbox import Limits, SandboxPool, cgroups
from pipelines.sandbox.cgroups import JAIL_OVERHEAD_MB

pytestmark = pytest.mark.skipif(not cgroups.available(),
                                reason=f"no control groups here: {cgroups.hierarchy()}")

# Sixty busy processes, each in a session (a scheduler autogroup) of its own; the parent waits
# for its own wall-clock limit.
STARVER = r'''
import os, time
for _ in range(STARVERS):
    if os.fork() == 0:
        os.setsid()
        while True:
            pass
time.sleep(60)
'''
# A correct program that needs a fixed amount of CPU (under a second alone).
CORRECT = "print(sum(i * i for i in range(10_000_000)) % 97)"


def test_a_starving_candidate_does_not_change_its_neighbours_verdicts(jail):
    limits = Limits(timeout_s=12, processes=100, memory_mb=512)
    starver = STARVER.replace("STARVERS", "60")
    with SandboxPool(jail, workers=3, limits=limits) as pool:
        alone = pool.run(CORRECT, limits=limits)
        assert alone.ok, alone
        with ThreadPoolExecutor(3) as ex:
            hogs = [ex.submit(pool.run, starver, None, limits) for _ in range(2)]
            time.sleep(1)  # the hogs' processes are up
            # the correct ones run while both hogs are at full tilt, on the third worker
            results = [pool.run(CORRECT, limits=limits.with_(timeout_s=6)) for _ in range(4)]
            hog_results = [h.result() for h in hogs]
    assert all(r.ok and r.stdout == alone.stdout for r in results), results
    assert all(h.timed_out for h in hog_results), hog_results


MEMORY_SHAPES = {
    # four processes of 300 MiB each: each is under the address-space limit, the four are not
    "forked children": r'''
import json, os, time
pids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        block = bytearray(300 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(3)
        os._exit(0)
    pids.append(pid)
print(json.dumps([os.waitpid(p, 0)[1] for p in pids]))
''',
    # SysV shared memory counts too: two 400 MiB segments plus 300 MiB in the process
    "shared memory": r'''
import ctypes, json, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
pids = []
for key in (1, 2, 3):
    pid = os.fork()
    if pid == 0:
        shm = libc.shmget(key, 400 << 20, 0o1000 | 0o600)
        at = libc.shmat(shm, None, 0)
        ctypes.memset(at, 1, 400 << 20)
        time.sleep(3)
        os._exit(0)
    pids.append(pid)
print(json.dumps([os.waitpid(p, 0)[1] for p in pids]))
''',
    # files in the jail's tmpfs are RAM: 3 x 300 MiB of files and a 300 MiB process
    "tmpfs files": r'''
import json, os, time
pids = []
for n in range(4):
    pid = os.fork()
    if pid == 0:
        if n == 3:
            block = bytearray(300 << 20)
            for i in range(0, len(block), 4096):
                block[i] = 1
        else:
            with open(f"/tmp/f{n}", "wb") as fh:
                for _ in range(300):
                    fh.write(b"z" * (1 << 20))
        time.sleep(3)
        os._exit(0)
    pids.append(pid)
print(json.dumps([os.waitpid(p, 0)[1] for p in pids]))
''',
}


@pytest.mark.parametrize("shape", sorted(MEMORY_SHAPES))
def test_processes_of_one_jail_share_one_memory_cap(jail, shape):
    limits = Limits(timeout_s=20, memory_mb=1024, disk_mb=1024, file_size_mb=512)
    with jail.runner(limits) as worker:
        result = worker.run(MEMORY_SHAPES[shape], limits=limits)
        assert result.ok, result
        statuses = json.loads(result.stdout)
        # the jail as a whole may not hold 1.2 GiB: the kernel ended at least one process
        assert any(status & 0x7F == signal.SIGKILL for status in statuses), (shape, statuses)
        after = worker.run("print('next')", limits=limits)
        assert after.ok and after.stdout == "next\n"


def test_one_process_under_the_cap_is_not_disturbed(jail):
    limits = Limits(timeout_s=20, memory_mb=1024)
    with jail.runner(limits) as worker:
        code = ("block = bytearray(700 << 20)\nfor i in range(0, len(block), 4096):\n"
                "    block[i] = 1\nprint(len(block) >> 20)")
        result = worker.run(code, limits=limits)
        assert result.ok and result.stdout == "700\n", result


def test_cap_is_the_memory_limit_plus_a_small_overhead():
    assert cgroups.memory_cap_bytes(1024) == (1024 + JAIL_OVERHEAD_MB) << 20
    assert JAIL_OVERHEAD_MB <= 64
