"""A warm runner forgets each candidate: nothing of one reaches the next.

Adversarial tests on the real jail, each with more than one shape of the attack: a later
candidate scans its own memory for an earlier one's program text, stdin, output and relay
results; leaves SysV shared memory, message queues, semaphores and a POSIX message queue
behind; leaves a 600-deep directory chain, notes, unwritable folders and a full disk in /tmp
and /dev/shm. Each later candidate must find nothing and a full-capacity, empty work dir.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time

import pytest

from pipelines.sandbox import Limits, SandboxPool, cgroups
from pipelines.sandbox.harness import encode_call

BASE = Limits(timeout_s=20, memory_mb=512)

# Scans every anonymous and heap/stack mapping of its own process for PREFIX followed by 32 hex
# digits whose sha256 is DIGEST; prints how many it found. It holds only the digest, never the
# token, so a hit is a byte of another program's.
SCANNER = r'''
import ctypes, hashlib
prefix, digest = PREFIX, DIGEST
hits = 0
for line in open("/proc/self/maps").read().splitlines():
    parts = line.split()
    if "r" not in parts[1] or (len(parts) > 5 and parts[5] not in ("[heap]", "[stack]")):
        continue
    lo, hi = (int(x, 16) for x in parts[0].split("-"))
    try:
        data = ctypes.string_at(lo, hi - lo)
    except Exception:
        continue
    at = data.find(prefix)
    while at >= 0:
        tail = data[at + len(prefix):at + len(prefix) + 32]
        if hashlib.sha256(tail).hexdigest() == digest:
            hits += 1
        at = data.find(prefix, at + 1)
print("hits", hits)
'''
PREFIX = b"WEFTLEAK"


def scanner_for(token: str) -> str:
    return (SCANNER.replace("PREFIX", repr(PREFIX))
            .replace("DIGEST", repr(hashlib.sha256(token.encode()).hexdigest())))


def hits(result) -> int:
    assert result.ok, result
    return int(result.stdout.split()[-1])


@pytest.fixture()
def runner(jail):
    with jail.runner(BASE) as worker:
        yield worker


@pytest.mark.parametrize("place", ["program", "stdin", "stdout", "all"])
def test_a_later_program_finds_no_byte_of_an_earlier_one_in_memory(runner, place):
    token = secrets.token_hex(16)
    secret = PREFIX.decode() + token
    code = {"program": f"s = {secret!r}\n",
            "stdin": "import sys\ns = sys.stdin.read()\n",
            "stdout": f"print({PREFIX.decode()!r} + {token[:16]!r} + {token[16:]!r})\n",
            "all": f"s = {secret!r}\nimport sys\nprint(s * 50, sys.stdin.read())\n"}[place]
    first = runner.run(code, stdin=secret if place in ("stdin", "all") else None)
    assert first.ok, first
    # the scanner finds a token it holds itself (so it does look): a control
    own = runner.run(f"s = {secret!r}\n" + scanner_for(token))
    assert hits(own) >= 1
    runner.run(code, stdin=secret if place in ("stdin", "all") else None)
    assert hits(runner.run(scanner_for(token))) == 0


def test_a_later_candidate_finds_no_byte_of_a_siblings_relay_results(jail):
    """The grading setting: candidates of one group on one warm worker, the first returning
    values (its results and payload pass through the fork server), the next scanning."""
    token = secrets.token_hex(16)
    with SandboxPool(jail, workers=1, limits=BASE) as pool:
        source = f"def f(x):\n    return [{PREFIX.decode()!r} + x] * 20\n"
        calls = [encode_call((token,))] * 3
        result = pool.run_relay(source, ("function", "f"), calls, nonce="ab" * 16,
                                results_cap=1 << 20, limits=BASE)
        assert token in result.stdout  # the payload did carry it
        scan = pool.run(scanner_for(token), limits=BASE)
        assert hits(scan) == 0


IPC_LEAVE = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
IPC_CREAT = 0o1000
shm = libc.shmget(0x5eed, 128 << 20, IPC_CREAT | 0o600)
assert shm >= 0, ctypes.get_errno()
at = libc.shmat(shm, None, 0)
ctypes.memset(at, 7, 128 << 20)  # 128 MiB really used
msq = libc.msgget(0x5eed, IPC_CREAT | 0o600)
note = (ctypes.c_long * 9)(1, *range(8))
assert libc.msgsnd(msq, note, 64, 0) == 0
assert libc.semget(0x5eed, 4, IPC_CREAT | 0o600) >= 0
mq = libc.mq_open(b"/weft-note", os.O_CREAT | os.O_RDWR, 0o600, None)
print("left", shm, msq, mq)
'''

IPC_FIND = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
found = {
    "shm": libc.shmget(0x5eed, 0, 0) >= 0,
    "msg": libc.msgget(0x5eed, 0) >= 0,
    "sem": libc.semget(0x5eed, 0, 0) >= 0,
    "mq": libc.mq_open(b"/weft-note", os.O_RDWR) >= 0,
}
for kind in ("shm", "msg", "sem"):
    try:
        found["listed " + kind] = len(open("/proc/sysvipc/" + kind).read().splitlines()) > 1
    except OSError:
        pass
print(found)
'''


def test_ipc_objects_end_with_the_candidate_that_made_them(runner):
    left = runner.run(IPC_LEAVE)
    assert left.ok and left.stdout.startswith("left"), left
    found = runner.run(IPC_FIND)
    assert found.ok, found
    assert "True" not in found.stdout, found.stdout


@pytest.mark.skipif(not cgroups.available(), reason=f"no control groups here: "
                    f"{cgroups.hierarchy()}")
def test_shared_memory_left_behind_is_freed_with_its_candidate(runner):
    """Host memory does not grow run after run: the jail's memory group (every page of it,
    SysV segments included) is back to where it was after each hostile run."""
    memory = [g for g in runner._kernel.child.groups if "/memory/" in g or "memory" in g]
    assert memory

    def usage() -> int:
        with open(f"{memory[-1]}/memory.usage_in_bytes") as fh:
            return int(fh.read())

    def settled(limit: int) -> int:  # the kernel frees a dead IPC namespace a moment later
        deadline = time.monotonic() + 10
        while usage() >= limit and time.monotonic() < deadline:
            time.sleep(0.05)
        return usage()

    runner.run("pass")
    before = usage()
    for _ in range(3):
        assert runner.run(IPC_LEAVE).ok
        assert settled(before + (32 << 20)) < before + (32 << 20)


LEAVE_FILES = r'''
import os
os.chdir("/tmp")
path = "/tmp"
fd = os.open("/tmp", os.O_RDONLY)
for i in range(600):  # a chain deeper than a descriptor-based removal can follow
    os.mkdir("d", dir_fd=fd)
    new = os.open("d", os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = new
with open(os.open("note", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "w") as fh:
    fh.write("from the last one")
os.close(fd)
open("/tmp/note", "w").write("hello")
open("/dev/shm/note", "w").write("hello")
os.mkdir("/tmp/locked")
open("/tmp/locked/x", "w").write("x")
os.chmod("/tmp/locked", 0)
n = 0
try:  # fill the disk, then the file count
    with open("/tmp/fill", "wb") as fh:
        while True:
            fh.write(b"x" * (1 << 20))
except OSError:
    pass
try:
    while True:
        open(f"/tmp/f{n}", "w").close()
        n += 1
except OSError:
    pass
print("left", n)
'''

FIND_FILES = r'''
import os
print(sorted(os.listdir("/tmp")), sorted(os.listdir("/dev/shm")), os.getcwd())
with open("/tmp/big", "wb") as fh:  # nearly the whole disk
    for _ in range(DISK_MB - 2):
        fh.write(b"y" * (1 << 20))
os.remove("/tmp/big")
for i in range(FILES - 16):
    open(f"/tmp/g{i}", "w").close()
print("ok")
'''


def test_the_next_candidate_gets_an_empty_full_capacity_work_dir(jail):
    limits = BASE.with_(disk_mb=16, disk_files=800)
    find = FIND_FILES.replace("DISK_MB", "16").replace("FILES", "800")
    with jail.runner(limits) as worker:
        for _ in range(2):
            left = worker.run(LEAVE_FILES, limits=limits)
            assert left.ok and left.stdout.startswith("left"), left
            found = worker.run(find, limits=limits)
            assert found.ok, found
            assert found.stdout.splitlines() == ["[] [] /tmp", "ok"], found.stdout


def test_a_candidate_holds_no_capability_and_cannot_mount(runner):
    code = r'''
import ctypes
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines()
              if ":" in line)
caps = {k: int(status[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapAmb")}
libc = ctypes.CDLL(None, use_errno=True)
mounted = libc.mount(b"x", b"/tmp", b"tmpfs", 0, None) == 0
unshared = libc.unshare(0x00020000) == 0
print(json.dumps({"caps": caps, "mounted": mounted, "unshared": unshared,
                  "nnp": status["NoNewPrivs"].strip()}))
'''
    result = runner.run("import json\n" + code)
    assert result.ok, result
    seen = json.loads(result.stdout)
    assert seen == {"caps": {"CapInh": 0, "CapPrm": 0, "CapEff": 0, "CapAmb": 0},
                    "mounted": False, "unshared": False, "nnp": "1"}
