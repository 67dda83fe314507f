"""A control group per jail: one CPU it cannot exceed and one memory cap for all its processes.

Per-process rlimits cannot stop one jail from hurting another: a candidate that starts sixty
busy processes, each in a session of its own (each a scheduler autogroup), takes the machine's
CPU from every other jail, so a correct program beside it runs out of wall-clock time; and
four processes under a 1 GiB address-space limit each hold 4 GiB together. With a control
group per jail, the kernel bounds the jail as a whole:

- **CPU**: a CFS quota of :data:`JAIL_CPUS` CPUs per jail, whatever number of processes or
  sessions it starts (autogroups apply only to tasks of the root group), at the default weight
  every other jail has. A correct program beside a starving one keeps a whole core of its own
  on a machine with at least as many cores as busy jails.
- **Memory**: ``memory_mb`` plus :data:`JAIL_OVERHEAD_MB` (the driver and the runner's
  template) for every process of the jail together, and the files of its tmpfs dirs and any
  SysV shared memory with them (they are RAM). Swap is capped to the same total where the host
  accounts it. Past the cap the kernel's OOM killer ends a process of that jail (a runner's
  candidates ask to be the first).

Hosts: cgroup v1 with the ``cpu`` and ``memory`` controllers mounted and writable (checked:
this project's Debian machines, as root), or a cgroup v2 group of this process whose
``cgroup.subtree_control`` already enables ``cpu`` and ``memory`` (a delegated group, e.g. from
``systemd-run --scope -p Delegate=yes``; weft does not move itself to enable them). Jails join
their groups through the root shell that makes their tmpfs mounts, so only a root host gets
them. Elsewhere (not root, no writable controllers) jails run without: :func:`available` says
why, and the sandbox documents the fallback (per-process rlimits only; a neighbour can then
slow a program past its wall-clock limit).

Groups are named ``weft-jail-<pid>.<host tag>-<n>`` under this process's own group of each
controller and removed when their jail ends; one left by a process killed with SIGKILL is
removed by the next process that makes groups (:func:`remove_stale`).

Not guaranteed: that a program gets a full core when more jails are busy than the machine has
cores (they then share it fairly, by weight); the kernel's choice of which process of the jail
the OOM killer ends.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import re
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

JAIL_CPUS = 1.0  # CPUs a jail may use at most (its CFS quota)
JAIL_OVERHEAD_MB = 48  # the driver and the runner's template, on top of Limits.memory_mb
PERIOD_US = 100_000
PREFIX = "weft-jail-"
_NAME_RE = re.compile(re.escape(PREFIX) + r"(?P<pid>\d+)\.(?P<tag>[0-9a-f]{8})-\d+")
_MB = 1024 * 1024
_COUNTER = itertools.count()


@dataclass(frozen=True)
class Hierarchy:
    """Where this process's groups live: ``v1`` (a folder per controller) or ``v2`` (one)."""

    version: str
    cpu: str
    memory: str


def _mountinfo() -> list[tuple[str, str, str, str]]:
    """(root, mount point, fs type, super options) of each cgroup mount."""
    found = []
    try:
        with open("/proc/self/mountinfo") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found.append((fields[3], fields[4], tail[0], tail[2]))
    return found


def _own_paths() -> dict[str, str]:
    """This process's group path per v1 controller (and ``''`` for v2), from /proc/self/cgroup."""
    paths: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return paths
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(","):
            paths[controller] = parts[2]
    return paths


def _join(mount_root: str, mount_point: str, path: str) -> str:
    """The folder of group ``path`` in a mount of the hierarchy's ``mount_root``."""
    rel = os.path.relpath(path, mount_root) if path.startswith(mount_root) else path.lstrip("/")
    return os.path.normpath(os.path.join(mount_point, "" if rel == "." else rel))


def _writable(folder: str) -> bool:
    probe = os.path.join(folder, f"{PREFIX}probe-{os.getpid()}")
    try:
        os.mkdir(probe)
    except OSError:
        return False
    try:
        os.rmdir(probe)
    except OSError:
        pass
    return True


@functools.lru_cache(maxsize=1)
def hierarchy() -> Hierarchy | str:
    """This process's usable hierarchy, or why there is none (a sentence)."""
    if os.geteuid() != 0:
        return "not running as root (jails join their groups from the root mount helper)"
    mounts, paths = _mountinfo(), _own_paths()
    v1 = {}
    for root, point, fstype, options in mounts:
        if fstype != "cgroup":
            continue
        for controller in ("cpu", "memory"):
            if controller in options.split(",") and controller in paths:
                v1[controller] = _join(root, point, paths[controller])
    if len(v1) == 2:
        if all(_writable(folder) for folder in v1.values()):
            return Hierarchy("v1", v1["cpu"], v1["memory"])
        return "the cgroup v1 cpu and memory groups of this process are not writable"
    for root, point, fstype, _options in mounts:
        if fstype != "cgroup2" or "" not in paths:
            continue
        folder = _join(root, point, paths[""])
        try:
            with open(os.path.join(folder, "cgroup.subtree_control")) as fh:
                enabled = fh.read().split()
        except OSError:
            continue
        if {"cpu", "memory"} <= set(enabled) and _writable(folder):
            return Hierarchy("v2", folder, folder)
        return (f"the cgroup v2 group {folder} does not delegate the cpu and memory "
                "controllers to its children (cgroup.subtree_control)")
    return "no cgroup cpu and memory controllers are mounted"


def available() -> bool:
    return isinstance(hierarchy(), Hierarchy)


def _write(folder: str, name: str, value: str) -> bool:
    try:
        with open(os.path.join(folder, name), "w") as fh:
            fh.write(value)
        return True
    except OSError:
        return False


def memory_cap_bytes(memory_mb: int) -> int:
    return (memory_mb + JAIL_OVERHEAD_MB) * _MB


def create(memory_mb: int, tag: str) -> tuple[str, ...]:
    """Make the groups of one jail (CPU quota and memory cap set); returns their folders, whose
    ``cgroup.procs`` the jail's first process joins; () where none can be made."""
    where = hierarchy()
    if not isinstance(where, Hierarchy):
        return ()
    _remove_stale_once(tag)
    name = f"{PREFIX}{os.getpid()}.{tag}-{next(_COUNTER)}"
    folders = tuple(dict.fromkeys(os.path.join(base, name) for base in (where.cpu, where.memory)))
    made: list[str] = []
    cap = str(memory_cap_bytes(memory_mb))
    quota = str(int(JAIL_CPUS * PERIOD_US))
    try:
        for folder in folders:
            os.mkdir(folder)
            made.append(folder)
        if where.version == "v1":
            ok = (_write(where.cpu + "/" + name, "cpu.cfs_period_us", str(PERIOD_US))
                  and _write(where.cpu + "/" + name, "cpu.cfs_quota_us", quota)
                  and _write(where.memory + "/" + name, "memory.limit_in_bytes", cap))
            swap = os.path.join(where.memory, name, "memory.memsw.limit_in_bytes")
            if ok and os.path.exists(swap):
                ok = _write(where.memory + "/" + name, "memory.memsw.limit_in_bytes", cap)
        else:
            folder = folders[0]
            ok = (_write(folder, "cpu.max", f"{quota} {PERIOD_US}")
                  and _write(folder, "memory.max", cap))
            if ok and os.path.exists(os.path.join(folder, "memory.swap.max")):
                ok = _write(folder, "memory.swap.max", "0")
        if not ok:
            raise OSError("a limit could not be written")
    except OSError as exc:
        log.warning("weft sandbox: could not make a jail's control group (%s); this jail runs "
                    "without a CPU quota or a memory cap of its own", exc)
        remove(tuple(made))
        return ()
    return folders


def remove(folders: tuple[str, ...], wait_s: float = 2.0) -> None:
    """Remove a jail's groups once its processes are gone (the kernel frees a group a moment
    after its last process is reaped: retried for up to ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    for folder in folders:
        while True:
            try:
                os.rmdir(folder)
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                if time.monotonic() >= deadline:
                    log.warning("weft sandbox: left control group %s: %s", folder, exc)
                    break
                time.sleep(0.01)


def remove_stale(tag: str) -> list[str]:
    """Remove the groups of this host's dead processes (``weft-jail-<pid>.<tag>-*``) that hold no
    process; returns them."""
    where = hierarchy()
    if not isinstance(where, Hierarchy):
        return []
    removed = []
    for base in dict.fromkeys((where.cpu, where.memory)):
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            match = _NAME_RE.fullmatch(name)
            if match is None or match["tag"] != tag or _alive(int(match["pid"])):
                continue
            try:
                os.rmdir(os.path.join(base, name))
                removed.append(os.path.join(base, name))
            except OSError:
                continue
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_STALE_DONE: list[str] = []


def _remove_stale_once(tag: str) -> None:
    if not _STALE_DONE:
        _STALE_DONE.append(tag)
        remove_stale(tag)


def oom_kills(folders: tuple[str, ...]) -> int | None:
    """How many processes the OOM killer has ended in this jail's memory group (None when the
    kernel does not say)."""
    for folder in folders:
        for name, key in (("memory.oom_control", "oom_kill"), ("memory.events", "oom_kill")):
            try:
                with open(os.path.join(folder, name)) as fh:
                    for line in fh:
                        parts = line.split()
                        if len(parts) == 2 and parts[0] == key:
                            return int(parts[1])
            except (OSError, ValueError):
                continue
    return None
