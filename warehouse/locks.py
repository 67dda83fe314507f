"""One writer per partition: an exclusive lock a run holds while it writes a partition.

Two runs of the same evaluation partition must not interleave (one would score or record the
other's samples). :func:`partition_lock` takes an exclusive ``flock`` on
``WEFT_HOME/locks/<table>/<partition folder>.lock`` without waiting; a second writer gets
:class:`PartitionBusy` at once, naming the run that holds the lock. The lock belongs to the
open file, so the kernel releases it when the holder exits, however it exits (``kill -9``
included): a crashed run never leaves a stale lock.

Not guaranteed: exclusion between machines whose shared file system does not honour ``flock``
(local disks and NFSv4 do; some FUSE mounts do not).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipelines.settings import weft_home
from warehouse.partitions import partition_dir_name


class PartitionBusy(RuntimeError):
    """Another run holds the partition's lock; the message names it and says what to do."""


def lock_path(table: str, partition: str) -> Path:
    return weft_home() / "locks" / table / f"{partition_dir_name(partition)}.lock"


@contextmanager
def partition_lock(table: str, partition: str, holder: str) -> Iterator[Path]:
    """Hold the exclusive lock of ``table``'s ``partition`` for the block; ``holder`` (a run
    id) is written into the lock file for the next writer's message."""
    path = lock_path(table, partition)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PartitionBusy(
                f"{table} partition {partition!r} is being written by another run "
                f"({_holder(fd)}); wait for that run to finish or cancel it, then materialize "
                "this partition again") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"run_id": holder, "pid": os.getpid(),
                                 "host": socket.gethostname(),
                                 "since": dt.datetime.now(dt.UTC).isoformat()}).encode())
        try:
            yield path
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return "holder unknown"
    return (f"run {info.get('run_id', '?')}, pid {info.get('pid', '?')} on "
            f"{info.get('host', '?')} since {info.get('since', '?')}")
