"""Parquet store with atomic partition replacement, and the DuckDB catalog over it.

Layout: ``<root>/<table>/<partition dir>/data.parquet`` (zstd), the folder named after the
partition key (``warehouse.partitions``: Dagster's spelling, ``gsm8k|smollm2-135m-instruct``;
reads and writes of old warehouses first apply the data migration that respells them). A partition is written to a
temporary file in the same folder and moved into place with ``os.replace``, so a concurrent
reader sees either the previous file or the new one, never a partial file, and writing a
partition again replaces its rows instead of adding to them.

The DuckDB catalog (``<root>/catalog.duckdb``) holds only views, the record of applied data
migrations (``warehouse.catalog``), the fingerprint of the folder it was built from and the
partitions its views leave out, in a storage format DuckDB clients from 1.1 on open
(``warehouse.catalog.STORAGE_VERSION``). A rebuild creates, in one transaction in a new file,
one view per stored or declared table over its Parquet files (typed and empty from
``warehouse/schema.py`` while it has none), applies pending data migrations, then creates the
derived views of ``warehouse/views/*.sql`` in dependency order; the new file is moved over the
old one (``os.replace``). So the catalog file is never open for writing: a query attaches it
read-only, and DuckDB clients of other processes open it read-only at any time, also while weft
queries or rebuilds it (a client that had the old file open keeps reading it). Writers of
Parquet never touch it.

Each query computes the folder's fingerprint (``warehouse.quarantine.fingerprint_entries``:
stats of every data file, no file opened) and uses the catalog file as it is when it was built
from the same fingerprint. Otherwise it computes the views key (``Warehouse._views_key``: per
table, the distinct column signatures of its files, read from each new file's footer, and its
quarantined files) and still uses the file when the key is the one it was built with: a
partition written with columns its table's files already have changes no view (each reads its
table's files by glob). The first query that finds so records it in ``catalog.equivalent``
(the fingerprint and the key; best effort), so later queries of that folder state skip the
footers. Only when the views would change (a new table, new columns, a file that cannot be read,
a table's last partition removed, a view file edited, the folder moved) is the file rebuilt,
under ``catalog.lock``, waiting up to ``REFRESH_WAIT_S`` for another process that is
rebuilding it. A query needs no write when nothing changed. When the
file cannot be rebuilt (a full disk, a read-only folder, a DuckDB client of another process
holding it open for writing) the query builds the same views in memory (without applying
migrations) and says why in a warning. A catalog file DuckDB cannot read (not a DuckDB file,
truncated, a checksum mismatch: ``warehouse.catalog.is_corrupt``, as opposed to a lock held
elsewhere) is moved aside as ``catalog.duckdb.corrupt-<time>`` and rebuilt from the Parquet
files; its record of applied data migrations starts afresh (they are idempotent).

The catalog goes with its folder: copied or moved (``cp -a``), a warehouse reads its own Parquet
files, never those of the folder it came from. Each table's view reads a glob relative to the
warehouse folder (``eval_samples/*/data.parquet``; with a partition quarantined, one pattern per
readable file, written as a glob too, e.g. ``eval_samples/b|m/[d]ata.parquet``). DuckDB resolves
a relative glob against the folders of its ``file_search_path`` setting, or, when that is
empty, against the working directory; never against the catalog file's folder. So:

- weft sets ``file_search_path`` to the warehouse folder on every connection it builds or
  queries views with, whatever the working directory;
- a plain DuckDB client either starts in the warehouse folder, or runs
  ``SET file_search_path = '<warehouse folder>'`` before querying (the DuckDB CLI:
  ``duckdb -readonly -cmd "SET file_search_path = '<folder>'" <folder>/catalog.duckdb``).
  Opened from elsewhere without it, a table's view fails with "No files found that match the
  pattern" (it never reads another folder's files); views of tables without rows still
  answer, empty.

Only values a view file computes from ``{warehouse}`` (the ``models`` view's path of the
embedded model) name the folder of the last catalog refresh: a copy shows its own folder there
after weft's first query on it.

Temp files of killed writers (``.data.parquet.<pid>.<host tag>.<uuid>.tmp``) are removed by the
next write to the same table: a temp file is stale when its writer process is gone (same host
and PID namespace, checked with ``kill(pid, 0)``) or when it is older than
``STALE_TEMP_AGE_S`` (the fallback for other hosts, recycled PIDs and temp names without a
PID). A live writer's temp file is never removed while it is younger than that age.

User SQL (``Warehouse.sql``, ``Warehouse.stream``, ``Warehouse.connect``, hence ``python -m
warehouse``) is read-only and confined: exactly one statement, of the SELECT family
(SELECT/WITH/FROM/VALUES/DESCRIBE/SHOW/SUMMARIZE, or EXPLAIN of one of those), checked with
DuckDB's own parser (``warehouse.confine``); on a connection of its own that attaches the
catalog read-only (or the in-memory fallback) with DuckDB's external access disabled except
for the warehouse folder
(``allowed_directories``; DuckDB canonicalises paths, so ``..`` and symlinks out of it are
refused) and the views' relative globs, allowed one by one as exact strings (``allowed_paths``;
a relative path that is not one of them is refused, since DuckDB would look for it in the
working directory first; the files a glob matches are checked against the warehouse folder too),
extension install/autoload off, and the configuration locked so the query cannot undo any of it.
Refusals raise ``UnsafeQueryError`` saying why. It is also bounded (``warehouse.limits``):
memory, threads, disk spill (to a folder under ``WEFT_HOME``, not the warehouse folder) and
wall-clock time, each with a default and configurable; a query stopped by a limit raises
``QueryLimitError`` naming the limit and how to raise it. ``sql`` returns the whole result as
one Arrow table; ``stream`` hands it over in record batches read as they are consumed, its time
limit covering the consumer's work too.

Attaching the catalog and confining a connection cost 30-60 ms, as much as an aggregation over
a million rows, so ``sql`` keeps its connection for the next ``sql`` call of the same thread on
the same ``Warehouse`` while the folder's fingerprint, the catalog file and the limits' settings
stay the same (at most ``MAX_IDLE_CONNECTIONS`` per object). The statement check, the quarantine check and
the wall-clock limit apply to every query as before; nothing a read-only query runs outlives
it. An idle connection keeps the memory DuckDB held for the last query (about 200 MB after an
aggregation over 10M rows) and the catalog file open read-only (a DuckDB client that opens
it for writing waits for it; read-only clients do not) until ``Warehouse.close()``, the end of
a ``with Warehouse(...)`` block, or the object's collection. Views built in memory (a catalog
that could not be rebuilt) are not kept: the next query tries the rebuild again.

Quarantined partitions (``warehouse.quarantine``): a partition whose data file cannot be read
(truncated, not Parquet, empty, unreadable, its folder cannot be listed; checked cheaply by
``warehouse.files.check_data_file``, once per file version) or resolves (symlinks followed) to a
place outside the warehouse folder would fail every query on its table, or every catalog
rebuild. Such a partition is left out of the table's view and ``files`` (``partitions`` still
lists it: it exists); each query that reads the table logs a warning naming the file, the
reason and the fix; ``Warehouse.quarantined()`` and ``python -m warehouse doctor`` list them.
Other tables and partitions are not affected. ``read`` is strict by default (pipeline code):
it raises ``UnreadablePartitionError`` naming the files rather than return part of a table;
``read(..., strict=False)`` and ``sql``/``stream`` (interactive SQL; ``strict=True`` for
pipeline code) return the readable rest with the warning. Symlinks that stay inside the
warehouse folder are read like any partition; dangling or looping ones match no data file and
are ignored. While a table has a quarantined partition its view lists the readable files
instead of a glob.

Empty partition folders (left by a writer killed, or stopped by a full disk, before its file
was in place) are removed: by the write that created the folder when it fails, by the next
write to the table once empty for ``EMPTY_FOLDER_AGE_S`` (at once when a stale temp file was
the last thing in it), and at catalog rebuilds; ``delete_partition`` removes its folder.

Not guaranteed: cross-partition transactions (each partition is replaced on its own); a temp
file of a live writer that takes longer than ``STALE_TEMP_AGE_S`` for one partition may be
removed (that write then fails and can be re-run); files placed inside the warehouse folder by
someone else are readable by queries; a partition symlinked out or damaged after the catalog
was built is noticed at the next query's start, not during a query already running; a file
whose footer is whole but whose data pages are corrupt is not quarantined (the queries that
read its rows fail, naming it); a reader outside weft that opens a data file while a writer
replaces it may fail and must retry (weft's own queries retry).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.settings import weft_home
from warehouse.catalog import (
    BASE_VIEW_NAMES,
    MIGRATIONS_DIR,
    STORAGE_VERSION,
    VIEWS_DIR,
    CatalogDefinitionError,
    apply_migrations,
    create_views,
    drop_views,
    is_corrupt,
    load_migrations,
    load_views,
    migration_record,
    open_catalog_file,
    relations_read,
    restore_migration_record,
    store_state,
    stored_state,
)
from warehouse.confine import (
    UnsafeQueryError,
    check_read_only,
    confine,
    search_warehouse,
    sql_string,
)
from warehouse.engine import duckdb, with_relations
from warehouse.files import (
    DATA_FILE,
    EMPTY_FOLDER_AGE_S,
    STALE_TEMP_AGE_S,
    TEMP_PREFIX,
    TEMP_SUFFIX,
    data_file_signature,
    host_tag,
    remember_unreadable,
    remove_empty_folder,
    temp_file_is_stale,
    write_data_file,
)
from warehouse.limits import Deadline, QueryLimits, enforce
from warehouse.migrations import DATA_MIGRATIONS
from warehouse.partitions import partition_dir_name, partition_from_dir
from warehouse.quarantine import (
    TABLE_RE,
    QuarantinedPartition,
    TableScan,
    UnreadablePartitionError,
    fingerprint_entries,
    scan_table,
    table_names,
)
from warehouse.results import STREAM_BATCH_ROWS, ResultStream, RowStream, next_batch

if TYPE_CHECKING:
    import pyarrow as pa
    from duckdb import DuckDBPyRelation  # the package's (the engine module has no relations)

# pyarrow and the declared schemas (warehouse.schema, which builds them with pyarrow) are
# imported where they are used: a query on a current catalog (``python -m warehouse sql``)
# needs neither, and importing pyarrow (and numpy with it) is most of the command's start.

log = logging.getLogger(__name__)

_TABLE_RE = TABLE_RE
# Creating DuckDB databases (a catalog file being built, attachments) is one step at a time per
# process: DuckDB refuses to attach a file that another database of the process has open for
# writing, and two threads racing for one path would see that.
_OPEN_LOCK = threading.Lock()
# How the views are built; a catalog built another way (older weft) is rebuilt.
CATALOG_FORMAT = 4
# Records that a folder state (its fingerprint) has a views key (Warehouse._fits).
EQUIVALENT_FILE = "catalog.equivalent"
# The name a query's connection gives the catalog file it attaches (its tables' schema).
CATALOG_ALIAS = "catalog"
# Temp files of a catalog being built: .catalog.duckdb.<pid>.<host tag>.<random>.tmp
CATALOG_TEMP_PREFIX = ".catalog.duckdb."
# How long a query waits for another process that is rebuilding the catalog.
REFRESH_WAIT_S = 5.0
# Warehouse folders whose pending data migrations this process has applied (Warehouse.upgrade).
_UPGRADED: set[str] = set()
_UPGRADE_LOCK = threading.Lock()
# A query that failed because a writer replaced one of its files runs again this many times.
RETRY_ATTEMPTS = 8
# Query connections a Warehouse keeps between ``sql`` calls (one per thread that queries).
MAX_IDLE_CONNECTIONS = 4


@dataclass
class _Idle:
    """A confined query connection kept for the next ``sql`` call of its thread, valid while
    the folder's fingerprint, the catalog file's version and the limits' instance settings are
    the ones it was opened with."""

    con: duckdb.DuckDBPyConnection
    fingerprint: tuple | str  # (the folder's fingerprint, the catalog file's version)
    settings: tuple
    quarantined: list[QuarantinedPartition]


def _attached(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether ``con`` reads the catalog file (not views built in memory)."""
    return con.execute("SELECT current_database()").fetchall() == [(CATALOG_ALIAS,)]


def _close_idle(idle: dict[tuple[int, int], _Idle], lock: threading.Lock) -> None:
    """Close every kept connection of this process (a forked child drops its parent's)."""
    with lock:
        kept = list(idle.items())
        idle.clear()
    for (pid, _thread), entry in kept:
        if pid == os.getpid():
            entry.con.close()


@dataclass
class _Look:
    """What opening the catalog file found: ``current`` (built from the folder as it is now),
    ``stale``, ``missing``, ``corrupt`` or ``busy`` (locked or held by another connection), the
    detail, its migration record and the partitions its views leave out."""

    status: str
    detail: str = ""
    record: list[tuple] = field(default_factory=list)
    quarantined: list[QuarantinedPartition] = field(default_factory=list)


@dataclass(frozen=True)
class Lineage:
    """Who wrote a set of rows: stamped onto every row as the lineage columns."""

    run_id: str = "manual"
    asset: str = "manual"
    partition: str = "all"
    config_hash: str = ""

    def as_columns(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "asset": self.asset,
            "partition": self.partition,
            "config_hash": self.config_hash,
        }


@dataclass(frozen=True)
class WriteResult:
    table: str
    partition: str
    path: Path
    rows: int


def config_hash(config: Mapping[str, Any] | Any) -> str:
    """Stable short hash of a JSON-serialisable configuration."""
    blob = json.dumps(config, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _check_table(table: str) -> None:
    if not _TABLE_RE.match(table):
        raise ValueError(
            f"invalid table name {table!r}: use lower-case letters, digits and underscores"
        )


def _to_arrow(table: str, data: pa.Table | Iterable[Mapping[str, Any]]) -> pa.Table:
    import pyarrow as pa

    from warehouse.schema import LINEAGE_COLUMNS, TABLES

    declared = TABLES.get(table)
    if isinstance(data, pa.Table):
        if declared is not None:
            for field in declared:
                if field.name not in data.column_names and field.name not in LINEAGE_COLUMNS:
                    data = data.append_column(field, pa.nulls(data.num_rows, field.type))
        return data
    rows = list(data)
    if not rows:
        if declared is None:
            return pa.table({})
        return declared.empty_table()
    if declared is None:
        return pa.Table.from_pylist(rows)
    # Declared columns keep their types and are always written (NULL when absent), so views
    # over the table can name them; extra columns are inferred.
    always = [n for n in declared.names if n not in LINEAGE_COLUMNS]
    names = list(dict.fromkeys([*always, *(k for row in rows for k in row)]))
    fields = []
    for name in names:
        if name in declared.names:
            fields.append(declared.field(name))
        else:
            inferred = pa.array([row.get(name) for row in rows]).type
            fields.append(pa.field(name, pa.string() if pa.types.is_null(inferred) else inferred))
    try:
        return pa.Table.from_pylist(rows, schema=pa.schema(fields))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise ValueError(_type_mismatch(table, declared, rows, err)) from err


def _type_mismatch(table: str, declared: pa.Schema, rows: list[Mapping[str, Any]],
                   err: Exception) -> str:
    """Which declared column of ``table`` a row's value does not fit, and what to do."""
    import pyarrow as pa

    for name in declared.names:
        field = declared.field(name)
        for number, row in enumerate(rows, start=1):
            value = row.get(name)
            if value is None:
                continue
            try:
                pa.array([value], type=field.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                return (f"table {table!r}: row {number} has {name}={value!r:.80} "
                        f"({type(value).__name__}), but warehouse/schema.py declares {name} as "
                        f"{field.type}; write that type, or change the declaration together "
                        "with every writer of the table")
    return f"table {table!r}: rows do not fit the declared schema: {err}"


class Warehouse:
    """Parquet files under ``root`` plus the DuckDB catalog that makes them queryable."""

    def __init__(self, root: str | Path | None = None, *, limits: QueryLimits | None = None,
                 views_dir: str | Path | None = None, migrations_dir: str | Path | None = None,
                 strict_sql: bool = False):
        """``views_dir`` and ``migrations_dir`` (default ``warehouse/views`` and
        ``warehouse/migrations``) hold the derived views and data migrations the catalog is
        built from (``warehouse.catalog``); the Python data migrations of
        ``warehouse.migrations`` apply with the default migrations folder only.
        ``strict_sql`` is the default of ``sql``'s and ``stream``'s ``strict`` (True for
        pipeline code, whose results must not miss the rows of an unreadable partition)."""
        # absolute, so the views' file paths and the allowed directory agree whatever the cwd
        self.root = Path(os.path.abspath(root)) if root else weft_home() / "warehouse"
        self.catalog_path = self.root / "catalog.duckdb"
        self.limits = limits  # None: QueryLimits.from_env() at each query
        self.views_dir = Path(views_dir) if views_dir is not None else VIEWS_DIR
        self.migrations_dir = Path(migrations_dir) if migrations_dir is not None else MIGRATIONS_DIR
        self.data_migrations = DATA_MIGRATIONS if migrations_dir is None else ()
        self.strict_sql = strict_sql
        self._init_idle()

    def _init_idle(self) -> None:
        self._idle: dict[tuple[int, int], _Idle] = {}
        self._keys: dict[str, str] = {}  # views keys by folder fingerprint (_fits)
        self._idle_lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _close_idle, self._idle, self._idle_lock)

    def close(self) -> None:
        """Close the query connections kept between ``sql`` calls (and free the memory DuckDB
        holds for them); the warehouse stays usable, the next query opens a new one."""
        _close_idle(self._idle, self._idle_lock)

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()
                if k not in ("_idle", "_idle_lock", "_finalizer")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_idle()

    def query_limits(self, limits: QueryLimits | None = None) -> QueryLimits:
        """``limits``, else the warehouse's, else ``QueryLimits.from_env()``; resolved."""
        return (limits or self.limits or QueryLimits.from_env()).resolved()

    # ---- writing -------------------------------------------------------------------------
    def write(
        self,
        table: str,
        data: pa.Table | Iterable[Mapping[str, Any]],
        *,
        lineage: Lineage | None = None,
        partition: str | None = None,
        folder: str | None = None,
    ) -> WriteResult:
        """Replace one partition of ``table`` with ``data`` atomically; stamp lineage columns.

        ``partition`` (default: the lineage's) is the key the rows' ``partition`` column holds
        (``warehouse.partitions``). The rows replace the folder of key ``folder``, which is
        ``partition`` unless given: tables that keep one folder per run (`runs`,
        ``llm_calls``: ``warehouse.runs.run_partition``) store under a key of their own
        while their rows still name the partition they belong to."""
        import pyarrow as pa

        _check_table(table)
        lineage = lineage or Lineage()
        partition = lineage.partition if partition is None else partition
        folder_key = partition if folder is None else folder
        arrow = _to_arrow(table, data)
        n = arrow.num_rows
        stamp = dict(lineage.as_columns(), partition=partition)
        for name, value in stamp.items():
            if name not in arrow.column_names:
                arrow = arrow.append_column(name, pa.array([value] * n, pa.string()))
        if "created_at" not in arrow.column_names:
            import datetime as dt

            now = dt.datetime.now(dt.UTC)
            arrow = arrow.append_column(
                "created_at", pa.array([now] * n, pa.timestamp("us", tz="UTC"))
            )
        folder_path = self.root / table / partition_dir_name(folder_key)
        created = not folder_path.is_dir()
        folder_path.mkdir(parents=True, exist_ok=True)
        self.remove_stale_temp_files(table, keep=folder_path)
        final = folder_path / DATA_FILE
        try:
            write_data_file(arrow, final)
        except BaseException:
            # a write that failed (full disk, interrupt) leaves no empty folder behind
            if created:
                remove_empty_folder(folder_path, min_age_s=0)
            raise
        return WriteResult(table=table, partition=partition, path=final, rows=n)

    def remove_stale_temp_files(
        self, table: str, max_age_s: float = STALE_TEMP_AGE_S, *, keep: Path | None = None
    ) -> list[Path]:
        """Delete temp files left in ``table``'s partitions by writers that died (see the module
        docstring for when a temp file counts as stale), then the partition folders they leave
        empty, and folders empty for ``EMPTY_FOLDER_AGE_S`` (left by writers killed, or stopped
        by a full disk, before their first file); ``keep`` is spared. Returns the removed temp
        files."""
        _check_table(table)
        removed = []
        now = time.time()
        for path in (self.root / table).glob(f"*/{TEMP_PREFIX}*{TEMP_SUFFIX}"):
            if temp_file_is_stale(path, now=now, max_age_s=max_age_s):
                try:
                    path.unlink()
                except FileNotFoundError:  # another writer cleaned it first
                    continue
                removed.append(path)
        emptied = {p.parent for p in removed}
        for folder in scan_table(self.root, table, validate=False).empty_folders:
            if folder != keep and remove_empty_folder(
                    folder, now=now, min_age_s=0 if folder in emptied else EMPTY_FOLDER_AGE_S):
                log.info("removed the empty partition folder %s", folder)
        if removed:
            log.info("removed %d stale temp file(s) of %s: %s", len(removed), table,
                     [str(p) for p in removed])
        return removed

    def delete_partition(self, table: str, partition: str) -> bool:
        """Remove ``partition``'s data file (and its folder, once empty); False when it had
        none."""
        _check_table(table)
        self.upgrade()  # an old-spelled folder would otherwise come back under the key later
        final = self.root / table / partition_dir_name(partition) / DATA_FILE
        if final.exists():
            final.unlink()
            remove_empty_folder(final.parent, min_age_s=0)
            return True
        return False

    # ---- reading without the catalog ----------------------------------------------------
    def tables(self) -> list[str]:
        """Tables with at least one readable partition."""
        return [t for t in table_names(self.root) if self._scan(t).files]

    def upgrade(self) -> None:
        """Apply the pending data migrations (once per warehouse folder and process, through a
        catalog refresh), so that partitions are read under their current keys. ``read``,
        ``partitions`` and ``delete_partition`` call it first; queries refresh the catalog
        anyway. When another process holds the catalog, that process applies them; a view file
        or migration that fails is logged once here (queries raise it), and so is a catalog
        that cannot be written (full disk, read-only folder): reading Parquet needs no catalog."""
        key = str(self.root)
        with _UPGRADE_LOCK:
            if key in _UPGRADED:
                return
            _UPGRADED.add(key)
        if not self.root.is_dir():
            return
        try:
            self._refresh(force=False)
        except CatalogDefinitionError as err:
            # the files are readable anyway; the next query raises the same error
            log.warning("warehouse %s not upgraded: %s", self.root, err)
        except BaseException:
            with _UPGRADE_LOCK:
                _UPGRADED.discard(key)
            raise

    def partitions(self, table: str) -> list[str]:
        """Every partition of ``table`` with a data file, quarantined ones included (they exist;
        ``files``, ``read`` and the view leave them out)."""
        _check_table(table)
        self.upgrade()
        base = self.root / table
        if not base.is_dir():
            return []
        return sorted(partition_from_dir(p.parent.name) for p in base.glob(f"*/{DATA_FILE}"))

    def files(self, table: str) -> list[Path]:
        """Data files of ``table``'s readable partitions (quarantined ones are left out)."""
        return self._scan(table).files

    def quarantined(self, table: str | None = None) -> list[QuarantinedPartition]:
        """Partitions left out of reads and views, with the reason and the fix (module
        docstring); every table's when ``table`` is None."""
        tables = [table] if table is not None else table_names(self.root)
        return [q for t in tables for q in self._scan(t).quarantined]

    def _scan(self, table: str) -> TableScan:
        _check_table(table)
        return scan_table(self.root, table)

    def read(self, table: str, partition: str | None = None, *, strict: bool = True) -> pa.Table:
        """All rows of a table (or one partition) as Arrow; empty declared schema if none.
        ``partition`` is a key as ``warehouse.partitions`` builds it (for `runs` and
        ``llm_calls``, the run's folder key ``warehouse.runs.run_partition``).

        Strict by default, for pipeline code: when a partition it would read is quarantined
        (its file cannot be read, ``warehouse.quarantine``), it raises
        ``UnreadablePartitionError`` naming each file, the reason and the fix, instead of
        returning less than the table holds (an asset that went on would replace good data with
        less). ``strict=False`` returns the readable partitions' rows and logs a warning naming
        the ones left out."""
        _check_table(table)
        self.upgrade()
        scan = scan_table(self.root, table, only=None if partition is None
                          else partition_dir_name(partition))
        if scan.quarantined:
            what = f"table {table}" + (f", partition {partition!r}" if partition else "")
            if strict:
                raise UnreadablePartitionError(scan.quarantined, what)
            for bad in scan.quarantined:
                log.warning("read of %s leaves out a quarantined partition: %s", table,
                            bad.describe())
        files = scan.files
        if not files:
            import pyarrow as pa

            from warehouse.schema import TABLES

            schema = TABLES.get(table)
            return schema.empty_table() if schema is not None else pa.table({})
        glob = [str(f) for f in files]
        with_relations()

        def query(_entries: list[tuple]) -> pa.Table:
            con = duckdb.connect()
            try:
                return con.sql(
                    "SELECT * FROM read_parquet($files, union_by_name=true, hive_partitioning=false)",
                    params={"files": glob},
                ).to_arrow_table()
            finally:
                con.close()

        return _retry_replaced_files(query, self.root)

    def glob(self, table: str) -> str:
        """Absolute glob of ``table``'s data files (for readers outside the catalog)."""
        return str(self.root / table / "*" / DATA_FILE)

    def relative_glob(self, table: str) -> str:
        """Glob of ``table``'s data files relative to the warehouse folder, as its view reads
        them (resolved through ``file_search_path``; module docstring)."""
        _check_table(table)
        return f"{table}/*/{DATA_FILE}"

    def _relative_file(self, path: Path) -> str:
        """A data file under the warehouse folder as a relative glob that matches only it: a
        plain relative path would be looked up in the working directory first."""
        rel = path.relative_to(self.root).as_posix()
        escaped = "".join(f"[{c}]" if c in "*?[]" else c for c in rel[:-len(DATA_FILE)])
        return f"{escaped}[{DATA_FILE[0]}]{DATA_FILE[1:]}"

    def view_patterns(self) -> list[str]:
        """Every relative glob a table's view may read: one per stored table and one per
        partition file (the allow-list of the confined connection). A declared table without a
        folder reads no file: its view is an empty row set of its declared columns."""
        names = sorted({p.name for p in self.root.iterdir()
                        if p.is_dir() and _TABLE_RE.match(p.name)} if self.root.is_dir() else ())
        patterns = [self.relative_glob(t) for t in names]
        patterns += [self._relative_file(f) for f in sorted(self.root.glob(f"*/*/{DATA_FILE}"))
                     if _TABLE_RE.match(f.parent.parent.name)]
        return patterns

    # ---- the catalog ----------------------------------------------------------------------
    def _view_sql(self, table: str, con: duckdb.DuckDBPyConnection, scan: TableScan) -> str | None:
        """The statement creating ``table``'s view over the readable files of ``scan``. A file
        DuckDB cannot describe is moved to ``scan.quarantined``; files that fail only together
        (columns of clashing types) quarantine the table's rows as a whole."""
        from warehouse.schema import TABLES

        schema = TABLES.get(table)
        view = BASE_VIEW_NAMES.get(table, table)
        present = None
        retried = False
        while scan.files:
            # the glob keeps a catalog current as partitions are added; with a partition
            # quarantined, the view lists the readable files instead
            paths = ([self.relative_glob(table)] if not scan.quarantined
                     else [self._relative_file(f) for f in scan.files])
            listed = ", ".join(sql_string(p) for p in paths)
            source = f"read_parquet([{listed}], union_by_name=true, hive_partitioning=false)"
            try:
                present = {row[0] for row in con.execute(
                    f"DESCRIBE SELECT * FROM {source}").fetchall()}
                break
            except duckdb.Error as err:
                if self._quarantine_failing(table, con, scan) or not retried:
                    retried = True  # (a file replaced meanwhile reads fine the second time)
                    continue
                scan.quarantined.append(QuarantinedPartition(
                    table, "*", self.root / table / "*" / DATA_FILE,
                    f"its {len(scan.files)} files cannot be read together: {err}",
                    "re-materialize the partitions whose columns have other types than the "
                    "rest, or remove them"))
                scan.files = []
        if present is not None:
            # Files that all have the same columns in the same order are read without
            # union_by_name, which costs 3-11% of a scan (bench/warehouse_sql.py); a file that
            # differs changes the views key, and the next query rebuilds the view unioned.
            signatures = {data_file_signature(f) for f in scan.files}
            scan.signatures = signatures
            if len(signatures) == 1 and None not in signatures:
                source = f"read_parquet([{listed}], hive_partitioning=false)"
            # Files written before a column was declared lack it: the view still has every
            # declared column (NULL there), so views built on top of it keep working.
            missing = [f for f in (schema or []) if f.name not in present]
            extra = "".join(f", CAST(NULL AS {_duck_type(f.type)}) AS {f.name}" for f in missing)
            return f"CREATE OR REPLACE VIEW {view} AS SELECT *{extra} FROM {source}"
        if schema is None:
            return None
        cols = ", ".join(
            f"CAST(NULL AS {_duck_type(field.type)}) AS {field.name}" for field in schema
        )
        return f"CREATE OR REPLACE VIEW {view} AS SELECT {cols} WHERE false"

    def _quarantine_failing(self, table: str, con: duckdb.DuckDBPyConnection,
                            scan: TableScan) -> bool:
        """Move the files of ``scan`` that DuckDB cannot describe on their own to its
        quarantined ones (remembered until the file changes); True when there were any."""
        failing = []
        for path in scan.files:
            try:
                con.execute("DESCRIBE SELECT * FROM read_parquet("
                            f"{sql_string(self._relative_file(path))})").fetchall()
            except duckdb.Error as err:
                failing.append((path, f"the file cannot be read by DuckDB: {err}"))
        for path, reason in failing:
            remember_unreadable(path, reason)
            scan.files.remove(path)
            scan.quarantined.append(QuarantinedPartition(
                table, partition_from_dir(path.parent.name), path, reason,
                f"re-materialize the partition (its asset writes the file anew) or remove the "
                f"file (rm '{path}')"))
        return bool(failing)

    def _install_tables(self, con: duckdb.DuckDBPyConnection, skip: set[str],
                        inputs: list[tuple] | None = None) -> list[QuarantinedPartition]:
        """Create every table's view; returns the partitions they leave out. ``inputs``, when
        given, receives what each table folder's view was built from (``_table_inputs``)."""
        from warehouse.schema import TABLES

        quarantined = []
        folders = set(table_names(self.root))
        for table in sorted(set(TABLES) | folders):
            scan = self._scan(table)
            view = BASE_VIEW_NAMES.get(table, table)
            if view in skip:
                log.warning("table %s has no view in the catalog: the view file %s.sql defines "
                            "a view of that name; read the table with Warehouse.read", table, view)
            else:
                sql = self._view_sql(table, con, scan)
                quarantined += scan.quarantined
                if sql:
                    con.execute(sql)
            if inputs is not None and table in folders:
                inputs.append(_table_inputs(self.root, table, scan))
        return quarantined

    def _install_views(self, con: duckdb.DuckDBPyConnection, *, migrate: bool,
                       record: bool = False) -> list[QuarantinedPartition]:
        """Drop every view, then create the tables' views, apply pending data migrations
        (``migrate``: on a catalog file only) and create the derived views, all in one
        transaction: a failure leaves the database as it was. ``record`` stores the folder's
        fingerprint (taken before the views are built, so a write meanwhile makes the catalog
        stale, never wrongly current) and the quarantined partitions in it. Sets ``con``'s
        ``file_search_path`` to the warehouse folder (the views' globs are relative to it).
        Returns the partitions the views leave out."""
        search_warehouse(con, self.root)
        views = load_views(self.views_dir)
        migrations = (load_migrations(self.migrations_dir, self.data_migrations)
                      if migrate else [])
        names = {v.name for v in views}
        fingerprint = self._fingerprint() if record else ""
        inputs: list[tuple] = []
        con.execute("BEGIN TRANSACTION")
        try:
            drop_views(con)
            quarantined = self._install_tables(con, names, inputs)
            applied = apply_migrations(con, self.root, migrations) if migrate else []
            if applied:  # stored data changed: the tables' views may have new columns
                log.info("warehouse migrations applied: %s", applied)
                fingerprint = self._fingerprint() if record else ""
                inputs = []
                quarantined = self._install_tables(con, names, inputs)
            create_views(con, views, self.root)
            if record:
                store_state(con, fingerprint, [
                    (q.table, q.partition, q.path.relative_to(self.root).as_posix(), q.reason,
                     q.fix) for q in quarantined], self._views_key(inputs))
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
        return quarantined

    def _fingerprint(self, entries: list[tuple] | None = None) -> str:
        """Changes whenever the catalog's views could come out differently: a data file
        written, replaced, removed or made unreadable, a table folder added, a view file,
        migration or declared schema changed, the warehouse folder moved (stats only, no file
        is opened). A catalog built from another fingerprint is still current when its views
        key is the folder's (``_views_key``). ``entries``: the folder's
        ``fingerprint_entries``, when the caller has just taken them."""
        if entries is None:
            entries = fingerprint_entries(self.root)
        return hashlib.sha256(repr((*self._definitions(), entries)).encode()).hexdigest()

    def _definitions(self) -> tuple:
        """What every view depends on besides the data files: the catalog's format, the
        folder, the view files, the migrations and the declared schemas."""
        views = []
        for path in sorted(self.views_dir.glob("*.sql")):
            st = path.stat()
            views.append((path.name, st.st_size, st.st_mtime_ns))
        migrations = ([p.name for p in sorted(self.migrations_dir.glob("*.sql"))]
                      + [(m.version, m.name) for m in self.data_migrations])
        return (CATALOG_FORMAT, STORAGE_VERSION, str(self.root), str(self.views_dir), views,
                migrations, _schema_signature())

    def _views_key(self, inputs: list[tuple] | None = None) -> str:
        """What the catalog's views are built from, finer than the fingerprint: the
        definitions, and per table folder the distinct column signatures of its readable files
        and its quarantined ones (``_table_inputs``), from ``inputs`` (the builder's) or a scan
        of the folder now (file stats, and each new file version's footer read once). A
        partition added, replaced or removed with columns the table's files already have
        leaves it unchanged: the view reads the table's files by glob and comes out the same,
        so the catalog is not rebuilt for it."""
        if inputs is None:
            inputs = [_table_inputs(self.root, table, self._scan(table))
                      for table in table_names(self.root)]
        return hashlib.sha256(repr((*self._definitions(), sorted(inputs))).encode()).hexdigest()

    def _fits(self, fingerprint: str, views_key: str) -> bool:
        """Whether the folder as of ``fingerprint`` has the views key ``views_key`` (a catalog
        built with that key is then current): remembered in this process per fingerprint,
        read from ``catalog.equivalent`` when another process found it, else computed
        (``_views_key``) and, when it matches, recorded there."""
        with self._idle_lock:
            key = self._keys.get(fingerprint)
        if key is None and self._equivalent_file() == (fingerprint, views_key):
            key = views_key
        if key is None:
            key = self._views_key()
            if key == views_key:
                self._record_equivalent(fingerprint, views_key)
        with self._idle_lock:
            self._keys[fingerprint] = key
            while len(self._keys) > 8:
                self._keys.pop(next(iter(self._keys)))
        return key == views_key

    def _equivalent_file(self) -> tuple[str, str] | None:
        """(fingerprint, views key) from ``catalog.equivalent``; None when there is none or it
        cannot be read."""
        try:
            data = json.loads((self.root / EQUIVALENT_FILE).read_text(encoding="utf-8"))
            return str(data["fingerprint"]), str(data["views_key"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _catalog_temp(self) -> Path:
        """A new temp file name for a catalog file or record being written (a dead writer's
        is removed by ``_remove_stale_catalog_temps``)."""
        import uuid

        return self.root / (f"{CATALOG_TEMP_PREFIX}{os.getpid()}.{host_tag()}."
                            f"{uuid.uuid4().hex}{TEMP_SUFFIX}")

    def _record_equivalent(self, fingerprint: str, views_key: str) -> None:
        """Write ``catalog.equivalent`` (temp file, then moved over it); skipped when the
        folder cannot be written: the next query computes the key again."""
        path = self.root / EQUIVALENT_FILE
        tmp = self._catalog_temp()
        try:
            tmp.write_text(json.dumps({"fingerprint": fingerprint, "views_key": views_key}),
                           encoding="utf-8")
            os.replace(tmp, path)
        except OSError as err:
            log.debug("could not record %s: %s", path, err)
            with contextlib.suppress(OSError):
                tmp.unlink()

    @contextmanager
    def _catalog_lock(self, wait_s: float = 0.0) -> Iterator[bool]:
        """Held by whoever rebuilds the catalog file; False when another process holds it for
        ``wait_s`` or the lock file cannot be opened (a read-only folder)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fh = open(self.root / "catalog.lock", "a")  # noqa: SIM115 - closed below
        except OSError as err:
            log.warning("cannot lock the catalog of %s to rebuild it: %s", self.root, err)
            yield False
            return
        with fh:
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        yield False
                        return
                    time.sleep(0.05)
            try:
                yield True
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def catalog_status(self) -> tuple[str, str]:
        """Whether the catalog file is ``current`` (built from the folder as it is),
        ``stale`` or ``missing`` (rebuilt at the next query), ``corrupt`` (damaged: set aside
        and rebuilt at the next query) or ``busy`` (another connection holds it), and the
        detail. Reads only."""
        look = self._look(self._fingerprint())
        return look.status, look.detail

    def refresh_catalog(self) -> bool:
        """Rebuild the catalog file now (every view; pending data migrations applied), whether
        or not the folder changed. False when another process is rebuilding it, another
        connection holds it locked, or it cannot be written (a full disk, a read-only folder:
        queries then build their views in memory). A damaged catalog file is moved aside
        (``catalog.duckdb.corrupt-<time>``) and rebuilt. Raises ``CatalogDefinitionError`` for
        a view file or migration that cannot be used (the catalog is then left as it was)."""
        return self._refresh(force=True)

    def _refresh(self, *, force: bool, wait_s: float = 0.0) -> bool:
        """Rebuild the catalog file if it is stale, missing or damaged (or ``force``); True when
        the file on disk is now current."""
        with self._catalog_lock(wait_s) as locked:
            if not locked:
                return False
            look = self._look(self._fingerprint())
            if look.status == "current" and not force:
                return True
            if look.status == "busy":
                log.warning("the catalog %s is held by another connection (%s); it is rebuilt "
                            "at a later query", self.catalog_path, look.detail)
                return False
            record = look.record
            if look.status == "corrupt":
                self._set_aside(look.detail)
                record = []
            try:
                self._build_catalog(record)
            except CatalogDefinitionError:
                raise
            except (duckdb.Error, OSError) as err:
                log.warning("could not write the catalog %s: %s. Queries build their views in "
                            "memory until it can be written (free disk space, or make the "
                            "folder writable)", self.catalog_path, err)
                return False
            return True

    def _look(self, fingerprint: str) -> _Look:
        """Open the catalog file read-only and say whether it was built from ``fingerprint``
        (with its record of applied migrations)."""
        con, look = self._attach(fingerprint, record=True)
        if con is not None:
            con.close()
        return look

    def _attach(self, fingerprint: str, *, record: bool = False
                ) -> tuple[duckdb.DuckDBPyConnection | None, _Look]:
        """A fresh in-memory connection with the catalog file attached read-only (as
        ``CATALOG_ALIAS``, the default database) when the file was built from
        ``fingerprint``; else None and what was found (with the record of applied migrations
        when it is stale, or when ``record``). Read-only: other processes' read-only clients
        open the file at the same time."""
        if not self.catalog_path.exists():
            return None, _Look("missing")
        con = duckdb.connect()
        try:
            with _OPEN_LOCK:
                con.execute(f"ATTACH {sql_string(str(self.catalog_path))} AS {CATALOG_ALIAS} "
                            "(READ_ONLY)")
            con.execute(f"USE {CATALOG_ALIAS}")
            stored, rows, views_key = stored_state(con)
            current = stored == fingerprint or (
                views_key is not None and self._fits(fingerprint, views_key))
            # the record of applied migrations goes into a rebuilt file
            applied = migration_record(con) if record or not current else []
        except duckdb.Error as err:
            con.close()
            return None, _Look("corrupt" if is_corrupt(err) else "busy", str(err))
        except BaseException:
            con.close()
            raise
        look = _Look("current" if current else "stale", record=applied,
                     quarantined=[QuarantinedPartition(t, p, self.root / rel, reason, fix or "")
                                  for t, p, rel, reason, fix in rows])
        if look.status != "current":
            con.close()
            return None, look
        return con, look

    def _set_aside(self, why: str) -> None:
        """Move a damaged catalog file (and its WAL) out of the way, kept for inspection."""
        import datetime as dt

        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
        aside = self.catalog_path.with_name(f"{self.catalog_path.name}.corrupt-{stamp}")
        try:
            os.replace(self.catalog_path, aside)
        except OSError as err:  # the rebuilt file replaces it anyway
            aside = f"nowhere ({err})"
        wal = self.catalog_path.with_name(self.catalog_path.name + ".wal")
        if wal.exists():
            with contextlib.suppress(OSError):
                os.replace(wal, f"{aside}.wal")
        log.warning("the catalog %s is damaged (%s): moved to %s and rebuilt from the Parquet "
                    "files; its record of applied data migrations starts afresh (they are "
                    "idempotent and run again)", self.catalog_path, why, aside)

    def _build_catalog(self, record: list[tuple]) -> None:
        """Write a new catalog file (in ``STORAGE_VERSION``'s format) holding ``record`` as its
        applied migrations, every view and the fingerprint it was built from, then move it over
        the old one, so the catalog file is never open for writing: readers of the old file
        keep reading it, later ones open the new one. The caller holds the catalog lock."""
        self._remove_stale_catalog_temps()
        tmp = self._catalog_temp()
        try:
            with _OPEN_LOCK:
                con = open_catalog_file(tmp)
            try:
                restore_migration_record(con, record)
                self._install_views(con, migrate=True, record=True)
                con.execute("CHECKPOINT")
            finally:
                con.close()
            # a WAL left by a writer of the old file would be replayed into the new one
            self.catalog_path.with_name(self.catalog_path.name + ".wal").unlink(missing_ok=True)
            os.replace(tmp, self.catalog_path)
        finally:
            for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
                leftover.unlink(missing_ok=True)
        for table in table_names(self.root):
            for folder in scan_table(self.root, table, validate=False).empty_folders:
                if remove_empty_folder(folder):
                    log.info("removed the empty partition folder %s", folder)

    def _remove_stale_catalog_temps(self) -> None:
        for path in self.root.glob(f"{CATALOG_TEMP_PREFIX}*"):
            judged = path.with_name(path.name.removesuffix(".wal"))
            if temp_file_is_stale(judged, prefix=CATALOG_TEMP_PREFIX) or (
                    judged != path and not judged.exists()
                    and temp_file_is_stale(path, max_age_s=600)):
                path.unlink(missing_ok=True)

    @contextmanager
    def connect(self, limits: QueryLimits | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection confined to the warehouse folder (see the module docstring)
        with every table as a view: the catalog file attached read-only (rebuilt first when the
        folder changed since it was built), or, when it cannot be (another process holds it,
        a full disk), the same views built in memory. Memory, threads and spill are bounded by
        ``limits`` (default: the warehouse's, else ``QueryLimits.from_env()``); the wall-clock
        limit applies in ``sql`` only. Logs a warning for each quarantined partition.

        Unlike ``sql`` it does not check statements (a COPY into the warehouse folder would
        run): use it for fixed queries in code, and pass SQL text from users to ``sql``."""
        with_relations()  # the caller may build relations on it
        con, quarantined = self._open(self.query_limits(limits))
        _warn_quarantined(quarantined)
        try:
            yield con
        finally:
            con.close()

    def _open(self, limits: QueryLimits, fingerprint: str | None = None
              ) -> tuple[duckdb.DuckDBPyConnection, list[QuarantinedPartition]]:
        """The confined connection of ``connect`` and the partitions its views leave out;
        ``fingerprint``: the folder's, when the caller has just taken it."""
        con, look = self._attach(fingerprint or self._fingerprint())
        if (con is None and look.status in ("stale", "missing", "corrupt")
                and self._refresh(force=False, wait_s=REFRESH_WAIT_S)):
            con, look = self._attach(self._fingerprint())
        if con is not None:
            try:
                confine(con, self.root, limits, self.view_patterns())
            except BaseException:
                con.close()
                raise
            return con, look.quarantined
        # "stale" here: the folder changed again while the catalog was rebuilt, or another
        # process is rebuilding it; the other outcomes were logged where they were found
        (log.info if look.status == "stale" else log.warning)(
            "catalog %s%s; building the views in memory for this query", look.status,
            f" ({look.detail})" if look.detail else "")
        con = duckdb.connect()
        try:
            quarantined = self._install_views(con, migrate=False)
            confine(con, self.root, limits, self.view_patterns())
        except BaseException:
            con.close()
            raise
        return con, quarantined

    @contextmanager
    def _query_connection(self, limits: QueryLimits, query: str, strict: bool | None, *,
                          reuse: bool = False, entries: list[tuple] | None = None
                          ) -> Iterator[duckdb.DuckDBPyConnection]:
        """``connect``'s connection for ``query``: the quarantined partitions of the tables it
        reads raise ``UnreadablePartitionError`` when ``strict`` (None: ``strict_sql``), else
        are logged. With ``reuse``, the connection this thread's last query left (when the
        folder, the catalog file and the limits' settings are unchanged) and, when the block
        ends without an error, kept for the next one; otherwise a new one, closed at the
        end. ``entries``: the folder's ``fingerprint_entries``, when the caller has just taken
        them."""
        strict = self.strict_sql if strict is None else strict
        key = (os.getpid(), threading.get_ident())
        # the folder as it is and the catalog file as attached (rebuilt or damaged since: open
        # anew, as a fresh query would)
        folder = self._fingerprint(entries)
        fingerprint = (folder, self._catalog_version()) if reuse else ""
        settings = limits.instance_settings()
        with self._idle_lock:
            idle = self._idle.pop(key, None) if reuse else None
        if idle is not None and (idle.fingerprint != fingerprint or idle.settings != settings):
            idle.con.close()
            idle = None
        if idle is not None:
            con, quarantined = idle.con, idle.quarantined
        else:
            con, quarantined = self._open(limits, folder)
            # only a connection to a current catalog file is kept (views built in memory are
            # not: the next query retries the rebuild), with the file's version as attached
            # (_open may have rebuilt it)
            reuse = reuse and _attached(con)
            if reuse:
                fingerprint = (fingerprint[0], self._catalog_version())
        kept = False
        try:
            if quarantined:
                read = self._tables_read(query, con)
                hit = [q for q in quarantined if read is None or q.table in read]
                if strict and hit:
                    raise UnreadablePartitionError(hit, "query")
                _warn_quarantined(hit)
            yield con
            kept = reuse
        finally:
            if kept:
                self._keep_idle(key, _Idle(con, fingerprint, settings, quarantined))
            else:
                con.close()

    def _catalog_version(self) -> tuple[int, int, int] | None:
        try:
            st = self.catalog_path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _keep_idle(self, key: tuple[int, int], entry: _Idle) -> None:
        """Keep ``entry`` for ``key``'s next query; the oldest kept one closes beyond
        ``MAX_IDLE_CONNECTIONS``."""
        with self._idle_lock:
            self._idle[key] = entry
            evicted = []
            while len(self._idle) > MAX_IDLE_CONNECTIONS:
                evicted.append(self._idle.pop(next(iter(self._idle))))
        for old in evicted:
            old.con.close()

    def _tables_read(self, query: str, con: duckdb.DuckDBPyConnection) -> set[str] | None:
        """The tables ``query`` reads, through the view files too; None when unknown."""
        names = relations_read(query, con)
        if names is None:
            return None
        views = {v.name: v.reads for v in load_views(self.views_dir)}
        base = {view: table for table, view in BASE_VIEW_NAMES.items()}
        tables: set[str] = set()
        todo, seen = list(names), set()
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in views:
                todo += views[name]
            tables.add(base.get(name, name))
        return tables

    def sql(self, query: str, params: Mapping[str, Any] | list[Any] | None = None, *,
            limits: QueryLimits | None = None, strict: bool | None = None) -> pa.Table:
        """Run one read-only query; ``params`` bind ``$name`` (dict) or ``?`` (list) placeholders.
        ``limits`` (default: the warehouse's, else ``QueryLimits.from_env()``) bound its memory,
        threads, disk spill and wall-clock time, the time counted from this call.

        Quarantined partitions of the tables it reads are left out with a warning;
        ``strict=True`` (for pipeline code whose output must not miss rows; default: the
        warehouse's ``strict_sql``) raises ``UnreadablePartitionError`` instead.

        Raises ``UnsafeQueryError`` for an empty query, several statements, a statement other
        than the SELECT family, or a file outside the warehouse folder; ``QueryLimitError`` when
        a limit stopped it; ``duckdb.Error`` for ordinary SQL errors."""
        if not isinstance(query, str):
            raise TypeError(f"query must be a SQL string, got {type(query).__name__}")
        limits = self.query_limits(limits)
        started = time.monotonic()

        import pyarrow as pa

        with_relations()

        def run(entries: list[tuple]) -> pa.Table:
            with self._query_connection(limits, query, strict, reuse=True,
                                        entries=entries) as con:
                check_read_only(con, query)
                try:
                    with enforce(con, limits, started):
                        rel = con.sql(query, params=params) if params else con.sql(query)
                        return pa.table({}) if rel is None else rel.to_arrow_table()
                except duckdb.PermissionException as err:
                    raise self._outside_error(err) from err

        return _retry_replaced_files(run, self.root)

    @contextmanager
    def stream(self, query: str, params: Mapping[str, Any] | list[Any] | None = None, *,
               limits: QueryLimits | None = None, batch_rows: int = STREAM_BATCH_ROWS,
               strict: bool | None = None, rows: bool = False
               ) -> Iterator[ResultStream | RowStream]:
        """Run one read-only query like ``sql`` and hand its rows over as DuckDB produces them:
        a ``ResultStream`` of Arrow record batches of at most ``batch_rows`` rows, so memory
        holds one batch whatever the size of the result (write a big result to Parquet with
        ``pyarrow.parquet.ParquetWriter(path, result.schema)``, one ``write_batch`` per batch).
        With ``rows``, a ``RowStream`` of lists of row dicts instead, read without pyarrow
        (DuckDB's own Python values: ``warehouse.results``). Stopping early (leaving the
        ``with`` block) stops the query.

        The wall-clock limit of ``limits`` covers the whole ``with`` block, counted from this
        call: the consumer's work between batches counts too, and the next batch raises
        ``QueryLimitError`` once it has passed. Raises what ``sql`` raises (``strict`` as
        there); a query whose files a writer replaced before its first batch runs again, after
        that the error propagates."""
        if not isinstance(query, str):
            raise TypeError(f"query must be a SQL string, got {type(query).__name__}")
        if not isinstance(batch_rows, int) or batch_rows < 1:
            raise ValueError(f"batch_rows must be a whole number of at least 1, got {batch_rows!r}")
        limits = self.query_limits(limits)
        started = time.monotonic()
        if not rows:
            with_relations()
        for attempt in range(RETRY_ATTEMPTS):
            before = _file_versions(self.root)
            with self._query_connection(limits, query, strict, entries=before) as con:
                check_read_only(con, query)
                with enforce(con, limits, started) as deadline:
                    rel = reader = None
                    try:
                        if rows:
                            result = self._row_stream(con, query, params, deadline, batch_rows)
                        else:
                            rel = con.sql(query, params=params) if params else con.sql(query)
                            reader = _arrow_reader(rel, batch_rows)
                            result = ResultStream(reader, next_batch(reader), deadline, keep=rel)
                    except duckdb.PermissionException as err:
                        raise self._outside_error(err) from err
                    except duckdb.Error:
                        if reader is not None:
                            reader.close()
                        rel = reader = None
                        if attempt == RETRY_ATTEMPTS - 1 or _file_versions(self.root) == before:
                            raise
                    else:
                        try:
                            yield result
                        finally:
                            result.close()
                        return
            time.sleep(0.01 * (attempt + 1))

    @staticmethod
    def _row_stream(con: duckdb.DuckDBPyConnection, query: str,
                    params: Mapping[str, Any] | list[Any] | None, deadline: Deadline,
                    batch_rows: int) -> RowStream:
        """``query``'s rows read with DuckDB's ``fetchmany`` (no pyarrow), its first batch
        fetched (so errors of the query's start are raised here)."""
        con.execute(query, params) if params else con.execute(query)
        description = con.description
        names = [d[0] for d in description] if description else []
        return RowStream(con, names, con.fetchmany(batch_rows) if names else [], deadline,
                         batch_rows)

    def _outside_error(self, err: duckdb.PermissionException) -> UnsafeQueryError:
        return UnsafeQueryError(
            f"{err}. Queries may read files only under the warehouse folder {self.root}; query "
            "its tables and views by name instead (python -m warehouse tables lists them)")


def _warn_quarantined(quarantined: Iterable[QuarantinedPartition]) -> None:
    for bad in quarantined:
        log.warning("partition left out of the %s view: %s", bad.table, bad.describe())


_SCHEMA_SIGNATURE: list[str] = []


def _table_inputs(root: Path, table: str, scan: TableScan) -> tuple:
    """What ``table``'s view is built from (``Warehouse._view_sql``): the distinct column
    signatures of its readable files (one: read plainly; several: unioned by name; none: the
    declared columns, empty), its quarantined files with the reason, and, when there are any,
    the readable files the view then lists one by one."""
    signatures = scan.signatures if scan.signatures is not None else {
        data_file_signature(f) for f in scan.files}
    quarantined = sorted((q.partition, str(q.path), q.reason) for q in scan.quarantined)
    listed = [f.relative_to(root).as_posix() for f in scan.files] if scan.quarantined else []
    return (table, sorted(map(repr, signatures)), quarantined, listed)


def _schema_signature() -> str:
    """What the catalog's views are built from besides the files: the declarations of
    ``warehouse.schema`` and the tables' view names. Hashes the declaring module's source, so
    a query need not import pyarrow to build the declared schemas: any edit of that file
    (a comment too) rebuilds the catalog once, which is always safe."""
    if not _SCHEMA_SIGNATURE:
        spec = importlib.util.find_spec("warehouse.schema")
        try:
            text = Path(spec.origin).read_bytes().decode("utf-8", "replace")
        except (AttributeError, OSError, TypeError):  # no source file (frozen, zipped)
            from warehouse.schema import TABLES

            text = repr(sorted((name, str(schema)) for name, schema in TABLES.items()))
        _SCHEMA_SIGNATURE.append(hashlib.sha256(
            (text + repr(sorted(BASE_VIEW_NAMES.items()))).encode()).hexdigest())
    return _SCHEMA_SIGNATURE[0]


def _retry_replaced_files(fn, root: Path, attempts: int = RETRY_ATTEMPTS):
    """DuckDB opens a Parquet file more than once per query (schema, then data). If a writer
    replaced the file in between, the two opens see different versions and the query fails.
    Each file is always whole, so when a data file under ``root`` changed during a failed
    query, the query runs again and sees one consistent version; other errors propagate.
    ``fn`` gets the versions taken before its attempt (``_file_versions``)."""
    for attempt in range(attempts):
        before = _file_versions(root)
        try:
            return fn(before)
        except duckdb.Error:
            if attempt == attempts - 1 or _file_versions(root) == before:
                raise
            time.sleep(0.01 * (attempt + 1))
    raise AssertionError("unreachable")


def _file_versions(root: Path) -> list[tuple]:
    """Every table's partition files with their versions (inode, size, mtime, ctime: inodes
    are recycled), from the same stats as the catalog's fingerprint."""
    return fingerprint_entries(root)


def _arrow_reader(rel: DuckDBPyRelation | None, batch_rows: int
                  ) -> pa.RecordBatchReader:
    """``rel``'s Arrow batches (none for a statement without a result)."""
    import pyarrow as pa

    if rel is None:
        return pa.RecordBatchReader.from_batches(pa.schema([]), [])
    return rel.to_arrow_reader(batch_rows)


def _duck_type(dtype: pa.DataType) -> str:
    import pyarrow as pa

    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return "VARCHAR"
    if pa.types.is_integer(dtype):
        return "BIGINT"
    if pa.types.is_floating(dtype):
        return "DOUBLE"
    if pa.types.is_boolean(dtype):
        return "BOOLEAN"
    if pa.types.is_timestamp(dtype):
        return "TIMESTAMPTZ" if dtype.tz else "TIMESTAMP"
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return f"{_duck_type(dtype.value_type)}[]"
    if pa.types.is_struct(dtype):
        fields = ", ".join(f'"{f.name}" {_duck_type(f.type)}' for f in dtype)
        return f"STRUCT({fields})"
    raise TypeError(f"no DuckDB type mapping for {dtype}")
