"""How a warm runner starts each candidate, on the real jail.

The template starts a candidate's init with one ``clone(CLONE_PARENT | namespaces)``, so the
init is the driver's child at once and no middle process is forked, run and reaped per
candidate. Where the kernel refuses that call (a seccomp filter, an architecture the driver
has no number for), a middle process does it; both paths must give a candidate the same
isolation. The observable that tells them apart is the template's ``cminflt`` (the page faults
of the children it has waited for): the middle path reaps one process per candidate, the clone
path none.
"""

from __future__ import annotations

import json
import os

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


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as fh:
        text = fh.read()
    return [text[:text.rindex(")") + 1], *text[text.rindex(")") + 2:].split()]


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


def _template_pid(worker) -> int:
    """The runner's template on the host: below the jail's process, the driver is the first
    Python process, and the template is its oldest child (the others are the next candidate's
    pre-forked init, or none yet)."""
    front = [worker._kernel.child.proc.pid]
    while front:
        pid = front.pop()
        if "python" in _stat(pid)[0]:
            return min(_children(pid), key=lambda kid: int(_stat(kid)[20]))  # starttime
        front.extend(_children(pid))
    raise AssertionError("no driver process found below the jail")


def _reaped_faults(pid: int) -> int:
    return int(_stat(pid)[9])  # cminflt (field 11 of /proc/<pid>/stat; [0] is the comm)


def _run_probes(sandbox) -> tuple[list[dict], int]:
    with sandbox.runner(BASE) as worker:
        if not worker._kernel.isolated:
            pytest.skip("this jail cannot give candidates namespaces of their own")
        seen = []
        for _ in range(4):
            result = worker.run(PROBE)
            assert result.ok, result
            seen.append(json.loads(result.stdout))
        return seen, _reaped_faults(_template_pid(worker))


def _assert_isolated(seen: list[dict]) -> None:
    for probe in seen:
        # the program is pid 2 of a pid namespace of its own under its init, and sees nothing
        # else: not the driver, the template, the next candidate nor what the last one left
        assert (probe["pid"], probe["ppid"], probe["nspid"]) == (2, 1, "2"), probe
        assert probe["pids"] == [1, 2], probe
        assert probe["tmp"] == [], probe


def test_candidates_start_with_one_clone_and_no_middle_process(jail):
    seen, reaped = _run_probes(jail)
    _assert_isolated(seen)
    assert reaped == 0  # the template waited for no process: no middle one was forked


def test_where_the_clone_is_refused_a_middle_process_gives_the_same_isolation(jail,
                                                                                monkeypatch):
    source = jail_module.driver_source()
    usable = "_CLONE_USABLE = [True] if os.uname().machine in _CLONE_NUMBER else []"
    assert usable in source
    monkeypatch.setattr(jail_module, "driver_code_fd", lambda python: None)
    monkeypatch.setattr(jail_module, "driver_source",
                        lambda: source.replace(usable, "_CLONE_USABLE = []"))
    seen, reaped = _run_probes(jail)
    _assert_isolated(seen)
    assert reaped > 0  # the middle processes were forked and reaped by the template
