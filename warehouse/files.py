"""Partition data files: the one name each partition's rows live under, the atomic write that
replaces it, and the temp files a writer leaves while it writes.

A partition's rows are ``<table>/<partition>/data.parquet``. :func:`write_data_file` writes a
temp file of the same folder (``.data.parquet.<pid>.<host tag>.<random>.tmp``), syncs it and
moves it into place, so readers see the old file or the new one. :func:`temp_file_is_stale`
says when a temp file can be removed: its writer's PID no longer runs on this host and PID
namespace, or it is older than :data:`STALE_TEMP_AGE_S`.

:func:`check_data_file` says cheaply whether a data file can be read as Parquet at all (its
magic bytes, footer length and footer), so a truncated, foreign or unreadable file is left out of
reads instead of failing them (``warehouse.quarantine``). :func:`remove_empty_folder` removes
the empty partition folders that writers killed (or stopped by a full disk) between creating
a folder and moving their file into it leave behind."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

# pyarrow is imported where a file is written or its footer read, not by a query on a current
# catalog (see warehouse.store).

DATA_FILE = "data.parquet"
TEMP_PREFIX = f".{DATA_FILE}."
TEMP_SUFFIX = ".tmp"
# A partition write takes seconds to minutes; a temp file this old belongs to no live write.
STALE_TEMP_AGE_S = 6 * 3600.0


def write_data_file(arrow: pa.Table, final: Path) -> None:
    """Write ``arrow`` to ``final`` (a partition's data file) atomically: into a temp file of
    the same folder, synced, then moved into place, so readers see the old file or the new
    one, and a writer killed half-way leaves only a temp file (removed later as stale). A
    folder removed as empty (:func:`remove_empty_folder`) between its creation and this write
    is created again."""
    import uuid

    import pyarrow.parquet as pq

    tmp = final.with_name(
        f"{TEMP_PREFIX}{os.getpid()}.{host_tag()}.{uuid.uuid4().hex}{TEMP_SUFFIX}")
    try:
        try:
            pq.write_table(arrow, tmp, compression="zstd")
        except FileNotFoundError:
            final.parent.mkdir(parents=True, exist_ok=True)
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
    # the host name as gethostname(2) gives it (socket.gethostname), without importing socket
    return hashlib.sha256(f"{os.uname().nodename}|{namespace}".encode()).hexdigest()[:8]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def temp_file_is_stale(path: Path, *, now: float | None = None,
                       max_age_s: float = STALE_TEMP_AGE_S, prefix: str = TEMP_PREFIX) -> bool:
    """True when ``path`` (a writer's temp file, ``<prefix><pid>.<host tag>.<random>.tmp``) is
    older than ``max_age_s`` or names a writer PID on this host that no longer runs. Unknown
    name formats are judged by age alone."""
    try:
        age = (time.time() if now is None else now) - path.stat().st_mtime
    except FileNotFoundError:
        return False
    if age > max_age_s:
        return True
    name = path.name
    if not (name.startswith(prefix) and name.endswith(TEMP_SUFFIX)):
        return False
    parts = name[len(prefix): -len(TEMP_SUFFIX)].split(".")
    if len(parts) != 3 or not parts[0].isdigit() or parts[1] != host_tag():
        return False
    pid = int(parts[0])
    return pid > 0 and not _pid_alive(pid)


# ---- checking data files ----------------------------------------------------------------------
# A Parquet file starts and ends with these 4 bytes; the 4 bytes before the end give the length
# of the footer (the file's metadata) that precedes them.
PARQUET_MAGIC = b"PAR1"
_MIN_PARQUET_BYTES = 12
# Verdicts of check_data_file by file version, so a file is opened once per version and process.
_CHECKED: dict[tuple, str | None] = {}
# The column names and types of each readable file version, in file order (its footer's schema,
# read by the same check): the catalog uses plain reads over files that all agree.
_SIGNATURES: dict[tuple, str] = {}
_CHECKED_MAX = 200_000
_CHECK_LOCK = threading.Lock()


def file_version(st: os.stat_result) -> tuple[int, int, int, int]:
    """What changes whenever a file is replaced, rewritten or has its permissions changed."""
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def check_data_file(path: Path) -> str | None:
    """Why ``path`` (a partition's data file) cannot be read as Parquet, or None when it can.

    Cheap: the first 4 and last 8 bytes (the magic and the footer length) and the footer itself
    (the schema and row-group metadata; pyarrow reads the last 64 KB for it), never the data
    pages; the verdict
    is remembered per file version (inode, size, mtime, ctime), so a file is opened once per
    version and process. A file that passes can still hold a corrupt data page; that fails the
    query that reads it, never the others."""
    try:
        st = os.stat(path)
    except OSError as err:
        return f"cannot be read: {err.strerror or err}"
    key = (str(path), *file_version(st))
    with _CHECK_LOCK:
        if key in _CHECKED:
            return _CHECKED[key]
    verdict, signature = _check_parquet(path, st)
    with _CHECK_LOCK:
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.clear()
            _SIGNATURES.clear()
        _CHECKED[key] = verdict
        if signature is not None:
            _SIGNATURES[key] = signature
    return verdict


def data_file_signature(path: Path) -> str | None:
    """``path``'s column names and types in file order (no metadata), read from its footer once
    per file version (with :func:`check_data_file`); None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (str(path), *file_version(st))
    with _CHECK_LOCK:
        if key in _SIGNATURES or key in _CHECKED:  # checked: unreadable files have none
            return _SIGNATURES.get(key)
    check_data_file(path)
    with _CHECK_LOCK:
        return _SIGNATURES.get(key)


def remember_unreadable(path: Path, reason: str) -> None:
    """Record that ``path``, in its current version, failed to read (``check_data_file``
    returns ``reason`` for it until the file changes)."""
    try:
        st = os.stat(path)
    except OSError:
        return
    with _CHECK_LOCK:
        _CHECKED[(str(path), *file_version(st))] = reason


def _check_parquet(path: Path, st: os.stat_result) -> tuple[str | None, str | None]:
    """(why the file cannot be read, or None; its schema signature when it can)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file", None
    if st.st_size < _MIN_PARQUET_BYTES:
        return (f"is not a Parquet file: {st.st_size} bytes, too short (an empty or truncated "
                "file)"), None
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
            fh.seek(-8, os.SEEK_END)
            tail = fh.read(8)
            if head != PARQUET_MAGIC:
                return ("is not a Parquet file: it does not start with the Parquet magic bytes "
                        "(written by something else, or overwritten)"), None
            if tail[4:] != PARQUET_MAGIC:
                return ("is not a whole Parquet file: no magic bytes at its end (truncated, e.g. "
                        "by a full disk or a copy that stopped)"), None
            footer = int.from_bytes(tail[:4], "little")
            if footer <= 0 or footer > st.st_size - _MIN_PARQUET_BYTES:
                return (f"is not a whole Parquet file: its footer length ({footer} bytes) does "
                        f"not fit in the file ({st.st_size} bytes)"), None
            fh.seek(0)
            schema = pq.read_schema(fh)
    except PermissionError as err:
        return f"cannot be read: {err.strerror or err}", None
    except OSError as err:
        return f"cannot be read: {err.strerror or err}", None
    except (pa.ArrowException, ValueError) as err:
        return f"has an unreadable Parquet footer: {err}", None
    return None, schema.remove_metadata().to_string(show_field_metadata=False,
                                                      show_schema_metadata=False)


# ---- empty partition folders -----------------------------------------------------------------
# A partition folder stays empty only for the moment between a writer creating it and creating
# its temp file; one empty for longer was left by a writer that was killed or hit a full disk.
EMPTY_FOLDER_AGE_S = 60.0


def remove_empty_folder(folder: Path, *, now: float | None = None,
                        min_age_s: float = EMPTY_FOLDER_AGE_S) -> bool:
    """Remove ``folder`` if it is empty and has not changed for ``min_age_s`` (0: at once);
    True when removed. A writer that loses its just-created folder this way creates it again
    (``write_data_file``)."""
    try:
        if min_age_s > 0:
            age = (time.time() if now is None else now) - folder.stat().st_mtime
            if age < min_age_s:
                return False
        folder.rmdir()  # only an empty folder goes; anything else raises
    except OSError:
        return False
    return True
