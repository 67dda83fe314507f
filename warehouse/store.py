"""Parquet store with atomic partition replacement, and the DuckDB catalog over it.

Layout: ``<root>/<table>/<partition dir>/data.parquet`` (zstd), the folder named after the
partition key (``warehouse.partitions``: Dagster's spelling, ``gsm8k|smollm2-135m-instruct``;
reads and writes of old warehouses first apply the data migration that respells them). A partition is written to a
temporary file in the same folder and moved into place with ``os.replace``, so a concurrent
reader sees either the previous file or the new one, never a partial file, and writing a
partition again replaces its rows instead of adding to them.

The DuckDB catalog (``<root>/catalog.duckdb``) holds only views plus the record of applied
data migrations (``warehouse.catalog``), in a storage format DuckDB clients from 1.1 on open
(``warehouse.catalog.STORAGE_VERSION``). A refresh drops every view and, in one transaction,
creates one view per stored or declared table over its Parquet files (typed and empty from
``warehouse/schema.py`` while it has none), applies pending data migrations, then creates the
derived views of ``warehouse/views/*.sql`` in dependency order. Writers never open it: DuckDB
allows one writing process per file. Whoever queries refreshes the catalog when it can take the
write lock; otherwise it reads the catalog as it is (read-only), or, if that is locked too,
builds the same views in memory (without applying migrations).

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
DuckDB's own parser; on a connection that opens the catalog read-only (or the in-memory
fallback) with DuckDB's external access disabled except for the warehouse folder
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

Quarantined partitions: a partition whose folder or data file resolves (symlinks followed) to a
place outside the warehouse folder cannot be read by the confined connection, and a view over a
glob that matches it would fail for every query on the table. Such a partition is left out of
the table's view, ``files`` and ``read`` (``partitions`` still lists it: it exists), with a
warning naming it and the reason each time the views are built; ``Warehouse.quarantined()``
lists them (``python -m warehouse tables`` prints them). Symlinks that stay inside the
warehouse folder are read like any partition; dangling or looping ones match no data file and
are ignored. While a table has a quarantined partition its view lists the readable files
instead of a glob.

Not guaranteed: cross-partition transactions (each partition is replaced on its own); a temp
file of a live writer that takes longer than ``STALE_TEMP_AGE_S`` for one partition may be
removed (that write then fails and can be re-run); files placed inside the warehouse folder by
someone else are readable by queries; a partition symlinked out after the catalog was built is
noticed at the next query's start, not during a query already running.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from pipelines.settings import weft_home
from warehouse.catalog import (
    MIGRATIONS_DIR,
    STORAGE_VERSION,
    VIEWS_DIR,
    CatalogDefinitionError,
    apply_migrations,
    create_views,
    drop_views,
    load_migrations,
    load_views,
    migration_record,
    needs_rebuild,
    open_catalog_file,
    restore_migration_record,
)
from warehouse.files import (
    DATA_FILE,
    STALE_TEMP_AGE_S,
    TEMP_PREFIX,
    TEMP_SUFFIX,
    temp_file_is_stale,
    write_data_file,
)
from warehouse.limits import QueryLimits, enforce, limit_settings
from warehouse.migrations import DATA_MIGRATIONS
from warehouse.partitions import partition_dir_name, partition_from_dir
from warehouse.results import STREAM_BATCH_ROWS, ResultStream, next_batch
from warehouse.schema import BASE_VIEW_NAMES, LINEAGE_COLUMNS, TABLES

log = logging.getLogger(__name__)

_TABLE_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_EXPLAIN_RE = re.compile(
    r"^\s*EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?:\([^()]*\)\s*)?(?P<inner>.*)$", re.IGNORECASE | re.DOTALL
)
# Opening the catalog (and confining it) is one step at a time per process: DuckDB hands every
# connection to the same path the same database instance, whose settings are global, and
# opening it read-only and read-write at once from two threads fails.
_OPEN_LOCK = threading.Lock()
# The limits each catalog's shared instance was confined with (written under _OPEN_LOCK when a
# fresh instance is confined): a query asking for other limits cannot change a locked instance,
# so it builds its views in memory instead.
_CONFINED_LIMITS: dict[str, tuple] = {}
# Warehouse folders whose pending data migrations this process has applied (Warehouse.upgrade).
_UPGRADED: set[str] = set()
_UPGRADE_LOCK = threading.Lock()
# A query that failed because a writer replaced one of its files runs again this many times.
RETRY_ATTEMPTS = 8


class _OtherLimits(Exception):
    """The catalog's shared instance is confined with other limits than the query asks for."""


class UnsafeQueryError(ValueError):
    """A query the read-only SQL path refuses: empty, several statements, not a SELECT, or
    reaching outside the warehouse folder. The message says what was wrong."""


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
class QuarantinedPartition:
    """A partition left out of its table's reads and view, and why."""

    table: str
    partition: str
    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.table}/{self.path.parent.name} ({self.path}): {self.reason}"


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
                 views_dir: str | Path | None = None, migrations_dir: str | Path | None = None):
        """``views_dir`` and ``migrations_dir`` (default ``warehouse/views`` and
        ``warehouse/migrations``) hold the derived views and data migrations the catalog is
        built from (``warehouse.catalog``); the Python data migrations of
        ``warehouse.migrations`` apply with the default migrations folder only."""
        # absolute, so the views' file paths and the allowed directory agree whatever the cwd
        self.root = Path(os.path.abspath(root)) if root else weft_home() / "warehouse"
        self.catalog_path = self.root / "catalog.duckdb"
        self.limits = limits  # None: QueryLimits.from_env() at each query
        self.views_dir = Path(views_dir) if views_dir is not None else VIEWS_DIR
        self.migrations_dir = Path(migrations_dir) if migrations_dir is not None else MIGRATIONS_DIR
        self.data_migrations = DATA_MIGRATIONS if migrations_dir is None else ()

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
            now = dt.datetime.now(dt.UTC)
            arrow = arrow.append_column(
                "created_at", pa.array([now] * n, pa.timestamp("us", tz="UTC"))
            )
        folder_path = self.root / table / partition_dir_name(folder_key)
        folder_path.mkdir(parents=True, exist_ok=True)
        self.remove_stale_temp_files(table)
        final = folder_path / DATA_FILE
        write_data_file(arrow, final)
        return WriteResult(table=table, partition=partition, path=final, rows=n)

    def remove_stale_temp_files(
        self, table: str, max_age_s: float = STALE_TEMP_AGE_S
    ) -> list[Path]:
        """Delete temp files left in ``table``'s partitions by writers that died (see the module
        docstring for when a temp file counts as stale); returns the removed paths."""
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
        if removed:
            log.info("removed %d stale temp file(s) of %s: %s", len(removed), table,
                     [str(p) for p in removed])
        return removed

    def delete_partition(self, table: str, partition: str) -> bool:
        """Remove ``partition``'s data file; False when it had none."""
        _check_table(table)
        self.upgrade()  # an old-spelled folder would otherwise come back under the key later
        final = self.root / table / partition_dir_name(partition) / DATA_FILE
        if final.exists():
            final.unlink()
            return True
        return False

    # ---- reading without the catalog ----------------------------------------------------
    def tables(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(
            p.name for p in self.root.iterdir()
            if p.is_dir() and _TABLE_RE.match(p.name) and self.files(p.name)
        )

    def upgrade(self) -> None:
        """Apply the pending data migrations (once per warehouse folder and process, through a
        catalog refresh), so that partitions are read under their current keys. ``read``,
        ``partitions`` and ``delete_partition`` call it first; queries refresh the catalog
        anyway. When another process holds the catalog, that process applies them; a view file
        or migration that fails is logged once here (queries raise it)."""
        key = str(self.root)
        with _UPGRADE_LOCK:
            if key in _UPGRADED:
                return
            _UPGRADED.add(key)
        if not self.root.is_dir():
            return
        try:
            self.refresh_catalog()
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
        return self._scan(table)[0]

    def quarantined(self, table: str | None = None) -> list[QuarantinedPartition]:
        """Partitions left out of reads and views, with the reason (module docstring)."""
        tables = [table] if table is not None else (
            sorted(p.name for p in self.root.iterdir() if p.is_dir() and _TABLE_RE.match(p.name))
            if self.root.is_dir() else [])
        return [q for t in tables for q in self._scan(t)[1]]

    def _scan(self, table: str) -> tuple[list[Path], list[QuarantinedPartition]]:
        _check_table(table)
        good, bad = [], []
        inside = os.path.realpath(self.root)
        for path in sorted((self.root / table).glob(f"*/{DATA_FILE}")):
            real = os.path.realpath(path)
            if os.path.commonpath([inside, real]) != inside:
                bad.append(QuarantinedPartition(
                    table, partition_from_dir(path.parent.name), path,
                    f"resolves to {real}, outside the warehouse folder {inside} (a symlink out "
                    "of it), which queries may not read"))
            else:
                good.append(path)
        return good, bad

    def read(self, table: str, partition: str | None = None) -> pa.Table:
        """All rows of a table (or one partition) as Arrow; empty declared schema if none.
        ``partition`` is a key as ``warehouse.partitions`` builds it (for `runs` and
        ``llm_calls``, the run's folder key ``warehouse.runs.run_partition``)."""
        _check_table(table)
        self.upgrade()
        if partition is not None:
            path = self.root / table / partition_dir_name(partition) / DATA_FILE
            files = [path] if path.exists() else []
        else:
            files = self.files(table)
        if not files:
            schema = TABLES.get(table)
            return schema.empty_table() if schema is not None else pa.table({})
        glob = [str(f) for f in files]

        def query() -> pa.Table:
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
        """Every relative glob a table's view may read: one per stored or declared table and
        one per partition file (the allow-list of the confined connection)."""
        names = sorted(set(TABLES) | {p.name for p in self.root.iterdir()
                                      if p.is_dir() and _TABLE_RE.match(p.name)}
                       if self.root.is_dir() else set(TABLES))
        patterns = [self.relative_glob(t) for t in names]
        patterns += [self._relative_file(f) for f in sorted(self.root.glob(f"*/*/{DATA_FILE}"))
                     if _TABLE_RE.match(f.parent.parent.name)]
        return patterns

    # ---- the catalog ----------------------------------------------------------------------
    def _view_sql(self, table: str, con: duckdb.DuckDBPyConnection) -> str | None:
        schema = TABLES.get(table)
        view = BASE_VIEW_NAMES.get(table, table)
        files, quarantined = self._scan(table)
        for bad in quarantined:
            log.warning("partition left out of the %s view: %s", table, bad)
        if files:
            # the glob keeps a read-only catalog current as partitions are added; with a
            # partition quarantined, the view lists the readable files instead
            paths = ([self.relative_glob(table)] if not quarantined
                     else [self._relative_file(f) for f in files])
            listed = ", ".join(_sql_string(p) for p in paths)
            source = f"read_parquet([{listed}], union_by_name=true, hive_partitioning=false)"
            # Files written before a column was declared lack it: the view still has every
            # declared column (NULL there), so views built on top of it keep working.
            present = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
            missing = [f for f in (schema or []) if f.name not in present]
            extra = "".join(f", CAST(NULL AS {_duck_type(f.type)}) AS {f.name}" for f in missing)
            return f"CREATE OR REPLACE VIEW {view} AS SELECT *{extra} FROM {source}"
        if schema is None:
            return None
        cols = ", ".join(
            f"CAST(NULL AS {_duck_type(field.type)}) AS {field.name}" for field in schema
        )
        return f"CREATE OR REPLACE VIEW {view} AS SELECT {cols} WHERE false"

    def _install_tables(self, con: duckdb.DuckDBPyConnection, skip: set[str]) -> None:
        for table in sorted(set(TABLES) | set(self.tables())):
            view = BASE_VIEW_NAMES.get(table, table)
            if view in skip:
                log.warning("table %s has no view in the catalog: the view file %s.sql defines "
                            "a view of that name; read the table with Warehouse.read", table, view)
                continue
            sql = self._view_sql(table, con)
            if sql:
                con.execute(sql)

    def _install_views(self, con: duckdb.DuckDBPyConnection, *, migrate: bool) -> None:
        """Drop every view, then create the tables' views, apply pending data migrations
        (``migrate``: on the catalog file only) and create the derived views, all in one
        transaction: a failure leaves the catalog as it was. Sets ``con``'s
        ``file_search_path`` to the warehouse folder (the views' globs are relative to it)."""
        _search_warehouse(con, self.root)
        views = load_views(self.views_dir)
        migrations = (load_migrations(self.migrations_dir, self.data_migrations)
                      if migrate else [])
        names = {v.name for v in views}
        con.execute("BEGIN TRANSACTION")
        try:
            drop_views(con)
            self._install_tables(con, names)
            applied = apply_migrations(con, self.root, migrations) if migrate else []
            if applied:  # stored data changed: the tables' views may have new columns
                log.info("warehouse migrations applied: %s", applied)
                self._install_tables(con, names)
            create_views(con, views, self.root)
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")

    @contextmanager
    def _catalog_lock(self) -> Iterator[bool]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "catalog.lock", "w") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def refresh_catalog(self) -> bool:
        """Re-create every view and apply pending data migrations (``warehouse.catalog``);
        False if another process holds the catalog. A catalog file in a storage format newer
        than ``warehouse.catalog.STORAGE_VERSION`` is first rebuilt in that format, keeping its
        record of applied migrations. Raises ``CatalogDefinitionError`` for a view file or
        migration that cannot be used (the catalog is then left as it was)."""
        with self._catalog_lock() as locked:
            if not locked:
                return False
            try:
                with _OPEN_LOCK:
                    con = open_catalog_file(self.catalog_path)
            except duckdb.Error:
                # another process writes it, or this process has it open read-only for a query
                return False
            try:
                record = migration_record(con) if needs_rebuild(con) else None
                if record is None:
                    self._install_views(con, migrate=True)
                    con.execute("CHECKPOINT")
            finally:
                con.close()
            if record is not None:
                self._rebuild_catalog(record)
            return True

    def _rebuild_catalog(self, record: list[tuple]) -> None:
        """Write a new catalog file (in ``STORAGE_VERSION``'s format) holding ``record`` as its
        applied migrations and every view, then move it over the old one. The caller holds the
        catalog lock and has closed the old file."""
        tmp = self.root / f".catalog.{os.getpid()}.{uuid.uuid4().hex}.duckdb"
        try:
            with _OPEN_LOCK:
                con = open_catalog_file(tmp)
            try:
                restore_migration_record(con, record)
                self._install_views(con, migrate=True)
                con.execute("CHECKPOINT")
            finally:
                con.close()
            os.replace(tmp, self.catalog_path)
        finally:
            for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
                leftover.unlink(missing_ok=True)
        log.info("catalog %s rebuilt in DuckDB's %s storage format (%d applied migration(s) "
                 "kept)", self.catalog_path, STORAGE_VERSION, len(record))

    @contextmanager
    def connect(self, limits: QueryLimits | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection confined to the warehouse folder (see the module docstring)
        with every table as a view: the refreshed catalog, or an in-memory copy of its views.
        Memory, threads and spill are bounded by ``limits`` (default: the warehouse's, else
        ``QueryLimits.from_env()``); the wall-clock limit applies in ``sql`` only.

        Unlike ``sql`` it does not check statements (a COPY into the warehouse folder would
        run): use it for fixed queries in code, and pass SQL text from users to ``sql``."""
        limits = self.query_limits(limits)
        refreshed = self.refresh_catalog()
        con = None
        # a catalog that could not be refreshed may still have a table's view over a glob that
        # now matches a quarantined partition: then the views are built in memory
        tries = 3 if refreshed or not self.quarantined() else 0
        why = "catalog busy"
        for _ in range(tries):
            with _OPEN_LOCK:
                try:
                    con = duckdb.connect(str(self.catalog_path), read_only=True)
                except duckdb.Error:
                    con = None
                else:
                    try:
                        _confine(con, self.root, limits, self.view_patterns(),
                                 shared=str(self.catalog_path))
                    except _OtherLimits:
                        con.close()
                        con, why = None, "catalog open in this process with other limits"
                        break
                    except BaseException:
                        con.close()
                        raise
            if con is not None:
                break
            time.sleep(0.2)
        if con is None:
            log.warning("%s; building the views in memory for this query",
                        why if tries else "catalog not refreshed and a partition quarantined")
            con = duckdb.connect()
            try:
                self._install_views(con, migrate=False)
                _confine(con, self.root, limits, self.view_patterns())
            except BaseException:
                con.close()
                raise
        try:
            yield con
        finally:
            con.close()

    def sql(self, query: str, params: Mapping[str, Any] | list[Any] | None = None, *,
            limits: QueryLimits | None = None) -> pa.Table:
        """Run one read-only query; ``params`` bind ``$name`` (dict) or ``?`` (list) placeholders.
        ``limits`` (default: the warehouse's, else ``QueryLimits.from_env()``) bound its memory,
        threads, disk spill and wall-clock time, the time counted from this call.

        Raises ``UnsafeQueryError`` for an empty query, several statements, a statement other
        than the SELECT family, or a file outside the warehouse folder; ``QueryLimitError`` when
        a limit stopped it; ``duckdb.Error`` for ordinary SQL errors."""
        if not isinstance(query, str):
            raise TypeError(f"query must be a SQL string, got {type(query).__name__}")
        limits = self.query_limits(limits)
        started = time.monotonic()

        def run() -> pa.Table:
            with self.connect(limits) as con:
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
               limits: QueryLimits | None = None, batch_rows: int = STREAM_BATCH_ROWS
               ) -> Iterator[ResultStream]:
        """Run one read-only query like ``sql`` and hand its rows over as DuckDB produces them:
        a ``ResultStream`` of Arrow record batches of at most ``batch_rows`` rows, so memory
        holds one batch whatever the size of the result (write a big result to Parquet with
        ``pyarrow.parquet.ParquetWriter(path, result.schema)``, one ``write_batch`` per batch).
        Stopping early (leaving the ``with`` block) stops the query.

        The wall-clock limit of ``limits`` covers the whole ``with`` block, counted from this
        call: the consumer's work between batches counts too, and the next batch raises
        ``QueryLimitError`` once it has passed. Raises what ``sql`` raises; a query whose files a
        writer replaced before its first batch runs again, after that the error propagates."""
        if not isinstance(query, str):
            raise TypeError(f"query must be a SQL string, got {type(query).__name__}")
        if not isinstance(batch_rows, int) or batch_rows < 1:
            raise ValueError(f"batch_rows must be a whole number of at least 1, got {batch_rows!r}")
        limits = self.query_limits(limits)
        started = time.monotonic()
        for attempt in range(RETRY_ATTEMPTS):
            before = _file_versions(self.root)
            with self.connect(limits) as con:
                check_read_only(con, query)
                with enforce(con, limits, started) as deadline:
                    rel = reader = None
                    try:
                        rel = con.sql(query, params=params) if params else con.sql(query)
                        reader = (pa.RecordBatchReader.from_batches(pa.schema([]), [])
                                  if rel is None else rel.to_arrow_reader(batch_rows))
                        first = next_batch(reader)
                    except duckdb.PermissionException as err:
                        raise self._outside_error(err) from err
                    except duckdb.Error:
                        if reader is not None:
                            reader.close()
                        rel = reader = None
                        if attempt == RETRY_ATTEMPTS - 1 or _file_versions(self.root) == before:
                            raise
                    else:
                        result = ResultStream(reader, first, deadline, keep=rel)
                        try:
                            yield result
                        finally:
                            result.close()
                        return
            time.sleep(0.01 * (attempt + 1))

    def _outside_error(self, err: duckdb.PermissionException) -> UnsafeQueryError:
        return UnsafeQueryError(
            f"{err}. Queries may read files only under the warehouse folder {self.root}; query "
            "its tables and views by name instead (python -m warehouse tables lists them)")


def check_read_only(con: duckdb.DuckDBPyConnection, query: str) -> None:
    """Raise ``UnsafeQueryError`` unless ``query`` is exactly one SELECT-family statement, as
    DuckDB's parser on ``con`` reads it (parse errors raise ``duckdb.ParserException``)."""
    statements = con.extract_statements(query)
    if not statements:
        raise UnsafeQueryError(
            "empty query: nothing but whitespace or comments was given; write one SELECT "
            "statement, e.g. SELECT * FROM leaderboard"
        )
    if len(statements) > 1:
        raise UnsafeQueryError(
            f"{len(statements)} statements given; run one SELECT statement at a time"
        )
    statement = statements[0]
    if statement.type == duckdb.StatementType.SELECT:
        return
    if statement.type == duckdb.StatementType.EXPLAIN:
        match = _EXPLAIN_RE.match(statement.query)
        inner = con.extract_statements(match["inner"]) if match else []
        if len(inner) == 1 and inner[0].type == duckdb.StatementType.SELECT:
            return
        raise UnsafeQueryError("EXPLAIN is allowed only in front of a single SELECT statement")
    raise UnsafeQueryError(
        f"{statement.type.name} statements are not allowed: warehouse SQL is read-only "
        "(SELECT, WITH, FROM, VALUES, DESCRIBE, SHOW, SUMMARIZE, or EXPLAIN of one of those). "
        "Tables change only by materializing the assets that write them."
    )


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _search_warehouse(con: duckdb.DuckDBPyConnection, root: Path) -> None:
    """Resolve ``con``'s relative globs (the views') against ``root`` only."""
    if "," in str(root):
        raise ValueError(
            f"the warehouse folder {root} has a comma in its path, which DuckDB's "
            "file_search_path cannot hold (it separates folders); move the warehouse to a "
            "folder without one (WEFT_HOME)")
    con.execute(f"SET GLOBAL file_search_path = {_sql_string(str(root))}")


def _confine(con: duckdb.DuckDBPyConnection, root: Path, limits: QueryLimits,
             patterns: Iterable[str] = (), shared: str | None = None) -> None:
    """Lock ``con``'s database down: ``limits`` (resolved) on memory, threads and spill, files
    only under ``root`` or through the relative globs ``patterns`` (resolved against ``root``
    alone), no extension downloads or autoloading, configuration locked. A database
    instance shared with an earlier connection to the path ``shared`` may already be locked
    down; then it is only verified, and ``_OtherLimits`` raised if its limits differ."""
    settings = dict(con.execute(
        "SELECT name, value FROM duckdb_settings() WHERE name IN "
        "('lock_configuration', 'enable_external_access')"
    ).fetchall())
    if settings["lock_configuration"] == "true":
        if settings["enable_external_access"] != "false":
            raise RuntimeError(
                "the warehouse catalog is open in this process with an unconfined, locked "
                "configuration; close that connection before querying through Warehouse.sql"
            )
        if shared is None or _CONFINED_LIMITS.get(shared) != limits.instance_settings():
            raise _OtherLimits(shared)
        return
    dirs = sorted({os.path.abspath(root), os.path.realpath(root)})
    _search_warehouse(con, root)
    allowed = ", ".join(_sql_string(p) for p in sorted(set(patterns)))
    for statement in (
        "SET autoinstall_known_extensions = false",
        "SET autoload_known_extensions = false",
        "SET allow_community_extensions = false",
        # memory, threads and the spill folder and its size (DuckDB allows its temp directory)
        *limit_settings(limits),
        # DuckDB draws a progress bar on stdout during queries over 2 s, into the rows that
        # python -m warehouse prints (a per-connection setting: later connections to a locked
        # shared catalog keep DuckDB's default)
        "SET enable_progress_bar = false",
        f"SET allowed_directories = [{', '.join(_sql_string(d) for d in dirs)}]",
        f"SET allowed_paths = [{allowed}]",
        "SET enable_external_access = false",
        "SET lock_configuration = true",
    ):
        con.execute(statement)
    if shared is not None:
        _CONFINED_LIMITS[shared] = limits.instance_settings()


def _retry_replaced_files(fn, root: Path, attempts: int = RETRY_ATTEMPTS):
    """DuckDB opens a Parquet file more than once per query (schema, then data). If a writer
    replaced the file in between, the two opens see different versions and the query fails.
    Each file is always whole, so when a data file under ``root`` changed during a failed
    query, the query runs again and sees one consistent version; other errors propagate."""
    for attempt in range(attempts):
        before = _file_versions(root)
        try:
            return fn()
        except duckdb.Error:
            if attempt == attempts - 1 or _file_versions(root) == before:
                raise
            time.sleep(0.01 * (attempt + 1))
    raise AssertionError("unreachable")


def _file_versions(root: Path) -> dict[str, tuple[int, int, int]]:
    versions = {}
    for path in root.glob(f"*/*/{DATA_FILE}"):
        try:
            st = path.stat()  # inodes are recycled: compare change time and size too
            versions[str(path)] = (st.st_ino, st.st_ctime_ns, st.st_size)
        except FileNotFoundError:
            pass
    return versions


def _duck_type(dtype: pa.DataType) -> str:
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
