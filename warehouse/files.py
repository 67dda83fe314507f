"""Partition data files: the one name each partition's rows live under, the atomic write that
replaces it, and the temp files a writer leaves while it writes.

A partition's rows are ``<table>/<partition>/data.parquet``. :func:`write_data_file` writes a
temp file of the same folder (``.data.parquet.<pid>.<host tag>.<random>.tmp``), syncs it and
moves it into place, so readers see the old file or the new one. :func:`temp_file_is_stale`
says when a temp file can be removed: its writer's PID no longer runs on this host and PID
namespace, or it is older than :data:`STALE_TEMP_AGE_S`."""

from __future__ import annotations

import hashlib
import os
import socket
import time
import uuid
from functools import lru_cache
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

DATA_FILE = "data.parquet"
TEMP_PREFIX = f".{DATA_FILE}."
TEMP_SUFFIX = ".tmp"
# A partition write takes seconds to minutes; a temp file this old belongs to no live write.
STALE_TEMP_AGE_S = 6 * 3600.0


def write_data_file(arrow: pa.Table, final: Path) -> None:
    """Write ``arrow`` to ``final`` (a partition's data file) atomically: into a temp file of
    the same folder, synced, then moved into place, so readers see the old file or the new
    one, and a writer killed half-way leaves only a temp file (removed later as stale)."""
    tmp = final.with_name(
        f"{TEMP_PREFIX}{os.getpid()}.{host_tag()}.{uuid.uuid4().hex}{TEMP_SUFFIX}")
    try:
        pq.write_table(arrow, tmp, compression="zstd")
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


@lru_cache(maxsize=1)
def host_tag() -> str:
    """Names this host and PID namespace in temp file names, so PIDs are checked only where
    they mean the same process."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return hashlib.sha256(f"{socket.gethostname()}|{namespace}".encode()).hexdigest()[:8]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def temp_file_is_stale(path: Path, *, now: float | None = None,
                       max_age_s: float = STALE_TEMP_AGE_S) -> bool:
    """True when ``path`` (a writer's temp file) is older than ``max_age_s`` or names a writer
    PID on this host that no longer runs. Unknown name formats are judged by age alone."""
    try:
        age = (time.time() if now is None else now) - path.stat().st_mtime
    except FileNotFoundError:
        return False
    if age > max_age_s:
        return True
    name = path.name
    if not (name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX)):
        return False
    parts = name[len(TEMP_PREFIX): -len(TEMP_SUFFIX)].split(".")
    if len(parts) != 3 or not parts[0].isdigit() or parts[1] != host_tag():
        return False
    pid = int(parts[0])
    return pid > 0 and not _pid_alive(pid)
