"""Control groups per jail: made with their limits, joined by the jail, removed with it, and
those of dead processes removed by the next one (on this host's real cgroup controllers)."""

from __future__ import annotations

import os
import subprocess

import pytest

from pipelines.sandbox import Limits, cgroups
from pipelines.sandbox.jail import _host_tag

pytestmark = pytest.mark.skipif(not cgroups.available(),
                                reason=f"no control groups here: {cgroups.hierarchy()}")


def read(folder: str, name: str) -> str:
    with open(os.path.join(folder, name)) as fh:
        return fh.read().strip()


def test_a_jails_groups_hold_its_limits_and_its_processes_and_go_with_it(jail):
    runner = jail.runner(Limits(timeout_s=10, memory_mb=300))
    groups = runner._kernel.child.groups
    assert groups
    where = cgroups.hierarchy()
    cap = str((300 + cgroups.JAIL_OVERHEAD_MB) << 20)
    if where.version == "v1":
        cpu, memory = groups
        assert read(cpu, "cpu.cfs_quota_us") == str(int(cgroups.JAIL_CPUS * cgroups.PERIOD_US))
        assert read(memory, "memory.limit_in_bytes") == cap
    else:
        assert read(groups[0], "memory.max") == cap
    members = {int(p) for p in read(groups[-1], "cgroup.procs").split()}
    assert runner._kernel.child.proc.pid in members
    runner.close()
    assert not any(os.path.exists(g) for g in groups)


def test_groups_of_dead_processes_are_removed_and_live_ones_kept():
    dead = subprocess.Popen(["true"])
    dead.wait()
    where = cgroups.hierarchy()
    tag = _host_tag()
    made = []
    for pid in (dead.pid, os.getpid()):
        folder = os.path.join(where.memory, f"{cgroups.PREFIX}{pid}.{tag}-999")
        os.mkdir(folder)
        made.append(folder)
    try:
        removed = cgroups.remove_stale(tag)
        assert made[0] in removed and not os.path.exists(made[0])
        assert os.path.exists(made[1])
    finally:
        cgroups.remove(tuple(f for f in made if os.path.exists(f)))
