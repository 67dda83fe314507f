"""Parquet store with atomic partition replacement, and the DuckDB catalog over it.

Layout: ``<root>/<table>/<partition dir>/data.parquet`` (zstd). A partition is written to a
temporary file in the same folder and moved into place with ``os.replace``, so a concurrent
reader sees either the previous file or the new one, never a partial file, and writing a
partition again replaces its rows instead of adding to them.

The DuckDB catalog (``<root>/catalog.duckdb``) holds only views over the Parquet globs plus
versioned migrations (``warehouse/migrations/NNN_*.sql``). Writers never open it: DuckDB allows
one writing process per file. Whoever queries refreshes the views when it can take the write
lock; otherwise it reads the catalog as it is (read-only), or, if that is locked too, builds
the same views in memory.

Not guaranteed: cross-partition transactions (each partition is replaced on its own).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import logging
import os
import re
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping
from urllib.parse import quote, unquote

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.settings import weft_home
from warehouse.schema import LINEAGE_COLUMNS, TABLES

log = logging.getLogger(__name__)

DATA_FILE = "data.parquet"
_TABLE_RE = re.compile(r"^[a-z][a-z0-9_]*$")
MIGRATIONS_DIR = Path(__file__).with_name("migrations")


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


def partition_dir_name(partition: str) -> str:
    """Filesystem-safe, reversible folder name for a partition key."""
    if not partition:
        raise ValueError("partition key must be a non-empty string")
    return quote(partition, safe="-_.=")


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
    return pa.Table.from_pylist(rows, schema=pa.schema(fields))


class Warehouse:
    """Parquet files under ``root`` plus the DuckDB catalog that makes them queryable."""

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root else weft_home() / "warehouse"
        self.catalog_path = self.root / "catalog.duckdb"

    # ---- writing -------------------------------------------------------------------------
    def write(
        self,
        table: str,
        data: pa.Table | Iterable[Mapping[str, Any]],
        *,
        lineage: Lineage | None = None,
        partition: str | None = None,
    ) -> WriteResult:
        """Replace one partition of ``table`` with ``data`` atomically; stamp lineage columns."""
        _check_table(table)
        lineage = lineage or Lineage()
        partition = lineage.partition if partition is None else partition
        arrow = _to_arrow(table, data)
        n = arrow.num_rows
        stamp = dict(lineage.as_columns(), partition=partition)
        for name, value in stamp.items():
            if name not in arrow.column_names:
                arrow = arrow.append_column(name, pa.array([value] * n, pa.string()))
        if "created_at" not in arrow.column_names:
            now = dt.datetime.now(dt.timezone.utc)
            arrow = arrow.append_column(
                "created_at", pa.array([now] * n, pa.timestamp("us", tz="UTC"))
            )
        folder = self.root / table / partition_dir_name(partition)
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / DATA_FILE
        tmp = folder / f".{DATA_FILE}.{uuid.uuid4().hex}.tmp"
        try:
            pq.write_table(arrow, tmp, compression="zstd")
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, final)
        finally:
            if tmp.exists():
                tmp.unlink()
        return WriteResult(table=table, partition=partition, path=final, rows=n)

    def delete_partition(self, table: str, partition: str) -> bool:
        _check_table(table)
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
            p.name for p in self.root.iterdir() if p.is_dir() and any(p.glob(f"*/{DATA_FILE}"))
        )

    def partitions(self, table: str) -> list[str]:
        _check_table(table)
        base = self.root / table
        if not base.is_dir():
            return []
        return sorted(unquote(p.parent.name) for p in base.glob(f"*/{DATA_FILE}"))

    def files(self, table: str) -> list[Path]:
        _check_table(table)
        return sorted((self.root / table).glob(f"*/{DATA_FILE}"))

    def read(self, table: str, partition: str | None = None) -> pa.Table:
        """All rows of a table (or one partition) as Arrow; empty declared schema if none."""
        _check_table(table)
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
        return str(self.root / table / "*" / DATA_FILE)

    # ---- the catalog ----------------------------------------------------------------------
    def _view_sql(self, table: str, con: duckdb.DuckDBPyConnection) -> str | None:
        schema = TABLES.get(table)
        if self.files(table):
            path = self.glob(table).replace("'", "''")
            source = f"read_parquet('{path}', union_by_name=true, hive_partitioning=false)"
            # Files written before a column was declared lack it: the view still has every
            # declared column (NULL there), so views built on top of it keep working.
            present = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
            missing = [f for f in (schema or []) if f.name not in present]
            extra = "".join(f", CAST(NULL AS {_duck_type(f.type)}) AS {f.name}" for f in missing)
            return f"CREATE OR REPLACE VIEW {table} AS SELECT *{extra} FROM {source}"
        if schema is None:
            return None
        cols = ", ".join(
            f"CAST(NULL AS {_duck_type(field.type)}) AS {field.name}" for field in schema
        )
        return f"CREATE OR REPLACE VIEW {table} AS SELECT {cols} WHERE false"

    def _install_views(self, con: duckdb.DuckDBPyConnection) -> None:
        for table in sorted(set(TABLES) | set(self.tables())):
            sql = self._view_sql(table, con)
            if sql:
                con.execute(sql)
        applied = _apply_migrations(con, self.root)
        if applied:
            log.info("warehouse migrations applied: %s", applied)

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
        """Create/refresh the views and apply migrations; False if another process holds it."""
        with self._catalog_lock() as locked:
            if not locked:
                return False
            try:
                con = duckdb.connect(str(self.catalog_path))
            except duckdb.IOException:
                return False
            try:
                self._install_views(con)
                con.execute("CHECKPOINT")
            finally:
                con.close()
            return True

    @contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection with every table as a view: refreshed catalog, or an in-memory copy."""
        self.refresh_catalog()
        con = None
        for _ in range(3):
            try:
                con = duckdb.connect(str(self.catalog_path), read_only=True)
                break
            except duckdb.Error:
                time.sleep(0.2)
        if con is None:
            log.warning("catalog busy; building the views in memory for this query")
            con = duckdb.connect()
            self._install_views(con)
        try:
            yield con
        finally:
            con.close()

    def sql(self, query: str, params: Mapping[str, Any] | list[Any] | None = None) -> pa.Table:
        """Run a query; ``params`` bind ``$name`` (dict) or ``?`` (list) placeholders."""

        def run() -> pa.Table:
            with self.connect() as con:
                rel = con.sql(query, params=params) if params else con.sql(query)
                if rel is None:  # a statement without a result (e.g. SET)
                    return pa.table({})
                return rel.to_arrow_table()

        return _retry_replaced_files(run, self.root)


def _retry_replaced_files(fn, root: Path, attempts: int = 8):
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
    raise TypeError(f"no DuckDB type mapping for {dtype}")


def _apply_migrations(con: duckdb.DuckDBPyConnection, root: Path) -> list[str]:
    """Run migrations in order. Derived views are re-created every time (they may depend on
    base views that were just rebuilt); the version table records what has been applied."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS weft_migrations (version INTEGER PRIMARY KEY, name VARCHAR, "
        "applied_at TIMESTAMPTZ DEFAULT now())"
    )
    done = {row[0] for row in con.execute("SELECT version FROM weft_migrations").fetchall()}
    applied = []
    for path in sorted(MIGRATIONS_DIR.glob("[0-9][0-9][0-9]_*.sql")):
        version = int(path.name[:3])
        con.execute(path.read_text().replace("{warehouse}", str(root).replace("'", "''")))
        if version not in done:
            con.execute("INSERT INTO weft_migrations (version, name) VALUES (?, ?)", [version, path.stem])
            applied.append(path.stem)
    return applied


def lineage_columns() -> list[str]:
    return list(LINEAGE_COLUMNS)
