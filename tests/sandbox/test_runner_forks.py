"""How a warm runner starts each candidate, on the real jail.

By default the runner's template lives in a pid namespace of the runner's own; per candidate it
unshares a new pid namespace, clones a *holder* into it (pid 1, sharing the template's memory
and descriptors, asleep with every signal blocked) and clones the program straight into it
(pid 2, in mount and IPC namespaces of its own), both as the driver's children. Where that is
refused, the candidate starts with a Python init instead: cloned with the namespaces where the
kernel allows it, else through a middle process. Every path must give a candidate the same
isolation. What tells them apart: the program's parent (outside its namespace, pid 0, with a
holder; its init, pid 1, otherwise) and the template's ``cminflt`` (the page faults of the
children it has waited for: the middle path reaps one process per candidate, the others none).
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from pipelines.sandbox import Limits
from pipelines.sandbox import jail as jail_module

BASE = Limits(timeout_s=20, memory_mb=512)

# what a candidate sees of its own namespaces and work dir, and whether a process it leaves
# behind outlives it (it writes its pid to a file the next candidate cannot see: /tmp is fresh)
PROBE = r'''
import json, os
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines()
              if ":" in line)
print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(),
                  "nspid": status["NSpid"].split()[-1], "tmp": sorted(os.listdir("/tmp")),
                  "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}))
open("/tmp/left-behind", "w").close()
if os.fork() == 0:
    import time
    time.sleep(60)
'''

# what a candidate can do to pid 1 of its namespace (the holder, or its Python init)
PID_1 = r'''
import ctypes, json, os, signal
seen = {"state": open("/proc/1/stat").read().rsplit(")", 1)[1].split()[0]}
for path in ("mem", "fd/0", "environ", "root/tmp"):
    try:
        (os.listdir if path.startswith("root") else open)(f"/proc/1/{path}")
        seen[path] = "opened"
    except OSError as exc:
        seen[path] = type(exc).__name__
libc = ctypes.CDLL(None, use_errno=True)
seen["ptrace"] = "attached" if libc.ptrace(16, 1, 0, 0) == 0 else "refused"
for name in ("SIGKILL", "SIGTERM", "SIGSTOP", "SIGUSR1"):
    os.kill(1, getattr(signal, name))
seen["after"] = open("/proc/1/stat").read().rsplit(")", 1)[1].split()[0]
print(json.dumps(seen))
'''


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as fh:
        text = fh.read()
    return [text[:text.rindex(")") + 1], *text[text.rindex(")") + 2:].split()]


def _nspid(pid: int) -> list[int]:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("NSpid:"):
                return [int(x) for x in line.split()[1:]]
    raise AssertionError(f"no NSpid for {pid}")


def _children(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if int(_stat(int(name))[2]) == pid:  # fields: comm, state, ppid, ...
                    found.append(int(name))
            except (OSError, IndexError):
                continue
    return found


def _driver_pid(worker) -> int:
    """Below the jail's process, the driver is the first Python process."""
    front = [worker._kernel.child.proc.pid]
    while front:
        pid = front.pop()
        if "python" in _stat(pid)[0]:
            return pid
        front.extend(_children(pid))
    raise AssertionError("no driver process found below the jail")


def _template_pid(worker) -> int:
    """The runner's template: of the driver's children in the shallowest pid namespace (the
    driver's own, or the runner's where it made one, whose pid 1 is not the template), the
    oldest; the others are the next candidate's pre-forked processes, deeper down."""
    kids = [kid for kid in _children(_driver_pid(worker))]
    depth = min(len(_nspid(kid)) for kid in kids)
    shallow = [kid for kid in kids if len(_nspid(kid)) == depth and _nspid(kid)[-1] != 1]
    return min(shallow, key=lambda kid: int(_stat(kid)[20]))  # starttime


def _reaped_faults(pid: int) -> int:
    return int(_stat(pid)[9])  # cminflt (field 11 of /proc/<pid>/stat; [0] is the comm)


def _leftovers(worker) -> list[int]:
    """Processes in candidates' pid namespaces (deeper than the template's) other than pid 1
    and 2 (the next candidate's pre-forked processes are those)."""
    depth = len(_nspid(_template_pid(worker)))
    found, front = [], [_driver_pid(worker)]
    while front:
        for kid in _children(front.pop()):
            front.append(kid)
            if len(_nspid(kid)) > depth and _nspid(kid)[-1] > 2:
                found.append(kid)
    return found


def _run_probes(sandbox) -> tuple[list[dict], int, list[int]]:
    with sandbox.runner(BASE) as worker:
        if not worker._kernel.isolated:
            pytest.skip("this jail cannot give candidates namespaces of their own")
        seen = []
        for _ in range(4):
            result = worker.run(PROBE)
            assert result.ok and not result.restarted, result
            seen.append(json.loads(result.stdout))
        return seen, _reaped_faults(_template_pid(worker)), _leftovers(worker)


def _assert_isolated(seen: list[dict], parent: int) -> None:
    for probe in seen:
        # the program is pid 2 of a pid namespace of its own and sees nothing else: not the
        # driver, the template, the next candidate nor what the last one left
        assert (probe["pid"], probe["ppid"], probe["nspid"]) == (2, parent, "2"), probe
        assert probe["pids"] == [1, 2], probe
        assert probe["tmp"] == [], probe


def _patched(monkeypatch, *edits: tuple[str, str]) -> None:
    """Runners start from the driver's source with each (old, new) edit made once."""
    source = jail_module.driver_source()
    for old, new in edits:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    monkeypatch.setattr(jail_module, "driver_code_fd", lambda python: None)
    monkeypatch.setattr(jail_module, "driver_source", lambda: source)


def test_candidates_start_under_a_holder_with_no_python_init(jail):
    seen, reaped, left = _run_probes(jail)
    _assert_isolated(seen, parent=0)  # the driver, outside the candidate's namespace
    assert reaped == 0  # the template waited for no process
    assert left == []  # each candidate's sleeper died with its holder


def test_pid_1_of_a_candidate_cannot_be_reached_or_signalled(jail):
    with jail.runner(BASE) as worker:
        if not worker._kernel.isolated:
            pytest.skip("this jail cannot give candidates namespaces of their own")
        result = worker.run(PID_1)
        assert result.ok and not result.restarted, result
        seen = json.loads(result.stdout)
        assert seen["state"] == seen["after"] == "S", seen  # asleep before and after
        assert seen["ptrace"] == "refused", seen
        assert all(seen[path] == "PermissionError" for path in
                   ("mem", "fd/0", "environ", "root/tmp")), seen
        after = worker.run("print('next')")
        assert after.stdout == "next\n" and not after.restarted, after


def test_a_candidate_that_kills_its_process_group_ends_only_itself(jail):
    with jail.runner(BASE) as worker:
        if not worker._kernel.isolated:
            pytest.skip("this jail cannot give candidates namespaces of their own")
        # (under a holder its parent is pid 0 to it, and kill(0) is its own process group;
        # under a Python init it is pid 1, which ignores the signal)
        for kill in ("os.kill(os.getppid(), 9)", "os.killpg(os.getpgrp(), 9)"):
            code = f"import os\nprint(os.getppid(), flush=True)\n{kill}\nprint('alive')"
            result = worker.run(code)
            if result.stdout.startswith("1\n") and "getppid" in kill:
                assert result.ok and result.stdout.endswith("alive\n"), result
            else:
                assert result.exit_code == -signal.SIGKILL, result
                assert "alive" not in result.stdout, result
            assert not result.restarted, result
            after = worker.run("print('next')")
            assert after.stdout == "next\n" and not after.restarted, after


def test_without_holders_a_cloned_python_init_gives_the_same_isolation(jail, monkeypatch):
    _patched(monkeypatch, ("        clone, pause = libc.clone, libc.pause\n",
                           "        raise AttributeError('no holders here')\n"))
    seen, reaped, left = _run_probes(jail)
    _assert_isolated(seen, parent=1)  # its init
    assert reaped == 0  # the init was the driver's child at once: no middle process
    assert left == []


def test_a_template_that_cannot_make_holders_falls_back_to_python_inits(jail, monkeypatch):
    # the template already lives in the runner's own pid namespace when it finds this out (a
    # preload that started a thread): its inits' pids must still reach the driver as its own
    _patched(monkeypatch, ('    if not _HOLDER["single"]():\n', "    if True:\n"))
    seen, reaped, left = _run_probes(jail)
    _assert_isolated(seen, parent=1)
    assert reaped == 0
    assert left == []


def test_a_template_that_dies_beside_a_holder_is_noticed(jail, monkeypatch):
    # the holder shares the template's descriptors, the template's end of the control socket
    # among them: the driver must tell the template's death from its pidfd, not wait for EOF
    start = "        holder = _start_holder(ctypes, signal, libc)\n"
    _patched(monkeypatch, (start, start + "        os._exit(9)\n"))
    with jail.runner(BASE) as worker:
        if not worker._kernel.isolated:
            pytest.skip("this jail cannot give candidates namespaces of their own")
        result = worker.run("print('never')")
    assert result.error is not None and result.error.name == "SandboxDied", result
    assert "template is gone" in result.stderr, result


def test_a_handler_a_holder_could_not_block_means_python_inits(jail, monkeypatch):
    # (glibc's internal signals cannot be handled from Python: a SIGUSR2 handler the driver
    # installs stands for them here)
    _patched(monkeypatch, ("caught >> 31 & 0b11", "caught >> 11 & 1"),
             ("    _prepare_holders()\n", ("    signal.signal(signal.SIGUSR2, print)\n"
                                           "    _prepare_holders()\n")))
    seen, reaped, left = _run_probes(jail)
    _assert_isolated(seen, parent=1)
    assert reaped == 0
    assert left == []


def test_where_the_clone_is_refused_a_middle_process_gives_the_same_isolation(jail,
                                                                                monkeypatch):
    _patched(monkeypatch,
             ("_CLONE_USABLE = [True] if os.uname().machine in _CLONE_NUMBER else []",
              "_CLONE_USABLE = []"))
    seen, reaped, left = _run_probes(jail)
    _assert_isolated(seen, parent=1)
    assert reaped > 0  # the middle processes were forked and reaped by the template
    assert left == []


# what a candidate finds loaded before it imports anything, and whether its exit functions run
AT_EXIT = r'''
import sys
print("atexit" in sys.modules)
import atexit
atexit.register(print, "exit functions ran")
'''


def test_candidates_find_atexit_loaded_and_their_exit_functions_run(jail):
    """The template imports ``atexit`` once (made in a candidate, the module cost it about 70
    copied pages): a candidate finds it loaded, and the functions it registers still run when
    its program ends."""
    with jail.runner(BASE) as worker:
        for _ in range(2):
            result = worker.run(AT_EXIT)
            assert result.ok, result
            assert result.stdout.split("\n")[:2] == ["True", "exit functions ran"], result
