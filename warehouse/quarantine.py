"""Which partitions of a table can be read, which are quarantined and why, and a cheap
fingerprint of the warehouse folder that says when the catalog's views are out of date.

A partition is quarantined (left out of its table's view, ``Warehouse.files`` and non-strict
reads) when its data file cannot be read as Parquet: truncated, not Parquet at all, unreadable
(permissions), its folder cannot be listed, or it resolves (symlinks followed) to a place outside
the warehouse folder, which confined queries may not read. Each :class:`QuarantinedPartition`
carries the reason and the fix. A table whose folder cannot be listed at all is quarantined as a
whole (partition ``*``).

The check per file is ``warehouse.files.check_data_file`` (magic bytes, footer length, footer;
remembered per file version). :func:`fingerprint_entries` only stats: it changes whenever a
data file is written, replaced, removed, has its permissions changed or its folder becomes
unreadable, and whenever a table folder appears or goes.

Not guaranteed: a file whose footer is whole but whose data pages are corrupt passes the check;
the queries that read its rows fail with DuckDB's error naming the file (remove it or
re-materialize its partition).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from warehouse.files import DATA_FILE, check_data_file, file_version
from warehouse.partitions import partition_from_dir

TABLE_RE = re.compile(r"^[a-z][a-z0-9_]*$")
DOCTOR = "python -m warehouse doctor"


@dataclass(frozen=True)
class QuarantinedPartition:
    """A partition left out of its table's reads and view, why, and how to fix it."""

    table: str
    partition: str
    path: Path
    reason: str
    fix: str = ""

    def __str__(self) -> str:
        return f"{self.table}/{self.path.parent.name} ({self.path}): {self.reason}"

    def describe(self) -> str:
        """The partition, the reason and the fix, in one line."""
        return f"{self}. Fix: {self.fix}" if self.fix else str(self)


class UnreadablePartitionError(RuntimeError):
    """A strict read met quarantined partitions: the result would lack their rows. The message
    names each file, why it cannot be read and how to fix it; ``partitions`` holds them."""

    def __init__(self, partitions: Iterable[QuarantinedPartition], what: str = "") -> None:
        self.partitions = list(partitions)
        tables = sorted({q.table for q in self.partitions})
        n = len(self.partitions)
        head = (f"{what or 'table ' + ', '.join(tables)}: {n} partition"
                f"{'s' if n != 1 else ''} cannot be read, so the result would lack "
                f"{'their' if n != 1 else 'its'} rows:")
        lines = [head]
        lines += [f"  {q.describe()}" for q in self.partitions]
        lines.append(f"{DOCTOR} lists every quarantined partition; a reader that may go on "
                     "without them passes strict=False.")
        super().__init__("\n".join(lines))


@dataclass
class TableScan:
    """The partitions of one table: readable data files, quarantined ones, and folders that
    hold no data file (leftovers of writers that stopped)."""

    files: list[Path] = field(default_factory=list)
    quarantined: list[QuarantinedPartition] = field(default_factory=list)
    empty_folders: list[Path] = field(default_factory=list)
    # the column signatures of ``files`` a view was built from (set by the catalog's builder)
    signatures: set[str | None] | None = None


def _fix_file(path: Path) -> str:
    return (f"re-materialize the partition (its asset writes the file anew) or remove the file "
            f"(rm '{path}')")


def _quarantine(table: str, path: Path, reason: str, fix: str) -> QuarantinedPartition:
    name = path.parent.name
    return QuarantinedPartition(table, "*" if name == "*" else partition_from_dir(name), path,
                                reason, fix)


def _entries(root: Path, table: str, only: str | None = None
             ) -> Iterator[tuple[str, str, os.stat_result | OSError | None, bool]]:
    """(folder name, data file path, its stat or the error, whether a symlink is on its way)
    for each entry of ``root/table`` (only the folder ``only`` when given); the folder name
    ``*`` with the error when the table's folder cannot be listed. Entries with no data file
    give ``None``. Paths are strings and a folder's symlink test comes from its directory
    entry: the catalog's fingerprint runs this over every partition before each query."""
    base = os.path.join(root, table)
    if only is not None:
        folders = [(only, None)]
    else:
        try:
            with os.scandir(base) as it:
                folders = sorted((e.name, e) for e in it)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as err:
            yield "*", os.path.join(base, "*", DATA_FILE), err, False
            return
    base_link = os.path.islink(base)
    for name, entry in folders:
        path = os.path.join(base, name, DATA_FILE)
        try:
            linked = base_link or (entry.is_symlink() if entry is not None
                                   else os.path.islink(os.path.join(base, name)))
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                linked = True
                st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            yield name, path, None, False
            continue
        except OSError as err:
            yield name, path, err, False
            continue
        yield name, path, st, linked


def scan_table(root: Path, table: str, *, validate: bool = True,
               only: str | None = None) -> TableScan:
    """The partitions of ``table`` under ``root`` (sorted by path; only the folder named
    ``only`` when given), each file checked with ``check_data_file`` unless ``validate`` is
    False (then only folders that cannot be read and symlinks out of the warehouse are
    quarantined)."""
    scan = TableScan()
    inside = os.path.realpath(root)
    for name, where, st, linked in _entries(root, table, only):
        path = Path(where)
        if st is None:
            folder = path.parent
            if folder.is_dir() and not folder.is_symlink():
                scan.empty_folders.append(folder)
            continue
        if isinstance(st, OSError):
            if st.errno == errno.ELOOP:  # a looping symlink matches no data file
                continue
            where = path.parent.parent if name == "*" else path.parent
            scan.quarantined.append(_quarantine(
                table, path, f"its folder {where} cannot be read: {st.strerror or st}",
                "make the folder readable by this user (chmod/chown) or remove it"))
            continue
        if linked:
            real = os.path.realpath(path)
            if os.path.commonpath([inside, real]) != inside:
                scan.quarantined.append(_quarantine(
                    table, path, f"resolves to {real}, outside the warehouse folder {inside} (a "
                    "symlink out of it), which queries may not read",
                    "copy the partition's files into the warehouse folder in place of the "
                    "symlink, or remove the symlink"))
                continue
        reason = check_data_file(path) if validate else None
        if reason is not None:
            scan.quarantined.append(_quarantine(table, path, f"the file {reason}",
                                                _fix_file(path)))
        else:
            scan.files.append(path)
    return scan


def table_names(root: Path) -> list[str]:
    """The folders of ``root`` named like tables (sorted)."""
    try:
        with os.scandir(root) as it:
            return sorted(e.name for e in it if TABLE_RE.match(e.name) and e.is_dir())
    except OSError:
        return []


def fingerprint_entries(root: Path) -> list[tuple]:
    """Every table folder and partition data file of ``root`` with its version (inode, size,
    mtime, ctime) or the error reaching it, and whether a symlink leads to it (then where it
    resolves). Stats only: no file is opened."""
    entries: list[tuple] = []
    for table in table_names(root):
        entries.append((table,))
        for name, path, st, linked in _entries(root, table):
            if st is None:
                continue
            if isinstance(st, OSError):
                entries.append((table, name, "error", st.errno))
                continue
            entries.append((table, name, *file_version(st),
                            os.path.realpath(path) if linked else ""))
    return entries
