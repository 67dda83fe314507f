"""What the DuckDB catalog holds besides the tables' own views: derived views and data migrations.

Views (``warehouse/views/<name>.sql``): one ``CREATE OR REPLACE VIEW <name> AS …`` per file,
the file named after the view. They hold no data, so every catalog refresh drops every view and
creates them again: first one view per stored or declared table (``Warehouse``), then the view
files in dependency order (a view that selects from another view file's view comes after it;
ties by name). Editing a file changes the view at the next refresh; deleting a file removes the
view. ``{warehouse}`` in a file stands for the warehouse folder as an absolute path at the time
of the refresh (quotes doubled, for use inside a SQL string); views that read Parquet files read
the tables' views, whose globs are relative to the warehouse folder (``warehouse.store``), so
the catalog goes with its folder when it is copied or moved. A view over tables that have no rows yet still answers, empty and typed, because
every table a view reads is declared in ``warehouse/schema.py``.

Migrations (``warehouse/migrations/NNN_<name>.sql``) are for changes to stored data: each runs
once per warehouse, in version order, and is recorded in the catalog table ``weft_migrations``
(version, name, applied_at) in the same transaction. Changes SQL cannot make (renaming
partition folders) are data migrations written in Python (:class:`DataMigration`, registered in
``warehouse.migrations``): they share the version numbers, order and record; their file
changes are not part of the transaction, so each is idempotent, leaves every partition whole
when interrupted, and is recorded only once it has finished (an interrupted one runs again at
the next refresh). Versions 1–8 are retired: they defined
views before views had their own files, and warehouses built then have them recorded as
applied; a new migration takes the next free version (9 is
``warehouse.migrations.partition_spelling``). Migrations run only on the catalog file,
never on the in-memory copy built while the file is busy (the next refresh applies them).

The catalog file is written in DuckDB's storage format of ``STORAGE_VERSION`` (v1.1.0), so
every DuckDB client from 1.1 on opens it, although weft itself runs a newer DuckDB (whose own
default format older clients refuse). DuckDB never changes the format of an existing file, so
every rebuild writes a new file in that format and moves it over the old one; a catalog written
in a newer format (by weft before this was set) has no fingerprint and is rebuilt at the next
query, its record of applied migrations (``migration_record``) carried into the new file.
Processes that have the old file open keep reading it until they close it.

Besides views and the migration record, a catalog file records the fingerprint of the
warehouse folder it was built from, the key of what its views were built from and the
partitions its views leave out (``store_state``, ``stored_state``): ``Warehouse`` reads it
read-only and rebuilds the file only when the views would come out differently (see
``Warehouse._views_key``). ``is_corrupt`` tells a damaged file (rebuilt from the Parquet files) from
one that is merely locked.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warehouse.engine import duckdb

VIEWS_DIR = Path(__file__).with_name("views")
MIGRATIONS_DIR = Path(__file__).with_name("migrations")
# The view migrations that preceded the views folder; their numbers are never reused.
RETIRED_MIGRATIONS = {
    1: "001_scores_views", 2: "002_eval_views", 3: "003_budget_views", 4: "004_duet",
    5: "005_tandem", 6: "006_models", 7: "007_engagement", 8: "008_ep_budget",
}
# The oldest DuckDB release that must open the catalog file; DuckDB names storage formats after
# the release that introduced them (this one is readable from DuckDB 1.0 on).
STORAGE_VERSION = "v1.1.0"
# Stored tables whose own view has another name: the view ``models`` (warehouse/views/models.sql)
# adds the embedded model to the registrations, which keep the view ``registered_models``.
BASE_VIEW_NAMES: dict[str, str] = {"models": "registered_models"}
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_MIGRATION_RE = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")
_CREATE_RE = re.compile(r"^CREATE\s+OR\s+REPLACE\s+VIEW\s+(\"?)([A-Za-z0-9_]+)\1\s+AS\s+(.*)$",
                        re.IGNORECASE | re.DOTALL)


_PARSED: dict[tuple, tuple[ViewFile, ...]] = {}
_CACHE_LOCK = threading.Lock()


class CatalogDefinitionError(ValueError):
    """A view file or migration that cannot be used; the message names the file and the fix."""


@dataclass(frozen=True)
class ViewFile:
    """One derived view: its name, file, SQL and the relations its query reads."""

    name: str
    path: Path
    sql: str
    reads: frozenset[str]

    def statement(self, root: Path) -> str:
        """The ``CREATE OR REPLACE VIEW`` statement with ``{warehouse}`` set to ``root``."""
        return self.sql.replace("{warehouse}", str(root).replace("'", "''"))


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path

    def statements(self, root: Path) -> str:
        return self.path.read_text().replace("{warehouse}", str(root).replace("'", "''"))


@dataclass(frozen=True)
class DataMigration:
    """A data migration written in Python: ``run(root)`` changes the warehouse folder ``root``
    (idempotent; every partition whole at every moment, see the module docstring)."""

    version: int
    name: str
    run: Callable[[Path], Any]

    @property
    def path(self) -> str:
        """Where it is defined, for messages."""
        return f"{self.run.__module__}.{self.run.__qualname__}"


def load_views(folder: Path = VIEWS_DIR) -> list[ViewFile]:
    """Every ``*.sql`` file of ``folder`` as a view, in an order where each view comes after
    the views it reads. Raises ``CatalogDefinitionError`` for a badly named file, a file that is
    not exactly one ``CREATE OR REPLACE VIEW`` of its own name, SQL that does not parse, or
    views that read each other in a cycle."""
    paths = sorted(folder.glob("*.sql"))
    # parsed once per version of the folder's files (every query refreshes the catalog)
    key = (str(folder.resolve()), tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size)
                                        for p in paths))
    with _CACHE_LOCK:
        cached = _PARSED.get(key)
    if cached is not None:
        return list(cached)
    con = duckdb.connect()
    try:
        views = {v.name: v for v in (_read_view(path, con) for path in paths)}
    finally:
        con.close()
    ordered = _dependency_order(views)
    with _CACHE_LOCK:
        if len(_PARSED) > 16:
            _PARSED.clear()
        _PARSED[key] = tuple(ordered)
    return ordered


def _read_view(path: Path, con: duckdb.DuckDBPyConnection) -> ViewFile:
    name = path.stem
    if not _NAME_RE.match(name):
        raise CatalogDefinitionError(
            f"view file {path}: name views with lower-case letters, digits and underscores "
            "(the file is <view name>.sql)")
    sql = path.read_text()
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as err:
        raise CatalogDefinitionError(f"view file {path} does not parse: {err}") from None
    match = _CREATE_RE.match(statements[0].query.strip()) if len(statements) == 1 else None
    if match is None or match.group(2).lower() != name:
        raise CatalogDefinitionError(
            f"view file {path} must hold exactly one statement, CREATE OR REPLACE VIEW {name} AS "
            f"SELECT …; found {len(statements)} statement(s)"
            + ("" if len(statements) != 1 else f" starting {statements[0].query.strip()[:60]!r}"))
    tree = json.loads(con.execute("SELECT json_serialize_sql($1)", [match.group(3)]).fetchone()[0])
    if tree.get("error"):
        raise CatalogDefinitionError(
            f"view file {path}: the view's query does not parse: {tree.get('error_message')}")
    return ViewFile(name, path, sql, frozenset(_relations(tree)))


def _relations(node: Any) -> Iterable[str]:
    """Names of every table, view or CTE a serialised query tree reads from."""
    if isinstance(node, dict):
        if node.get("type") == "BASE_TABLE" and isinstance(node.get("table_name"), str):
            yield node["table_name"].lower()
        for value in node.values():
            yield from _relations(value)
    elif isinstance(node, list):
        for value in node:
            yield from _relations(value)


def _dependency_order(views: dict[str, ViewFile]) -> list[ViewFile]:
    ordered: list[ViewFile] = []
    state: dict[str, str] = {}  # name -> "visiting" | "done"

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            cycle = " -> ".join([*path[path.index(name):], name])
            raise CatalogDefinitionError(
                f"views read each other in a cycle: {cycle}; a view may read only views "
                "that do not read it back (warehouse/views)")
        state[name] = "visiting"
        for dep in sorted(views[name].reads & views.keys() - {name}):
            visit(dep, [*path, name])
        state[name] = "done"
        ordered.append(views[name])

    for name in sorted(views):
        visit(name, [])
    return ordered


def load_migrations(folder: Path = MIGRATIONS_DIR, data_migrations: Iterable[DataMigration] = ()
                    ) -> list[Migration | DataMigration]:
    """The data migrations of ``folder`` and ``data_migrations`` (Python ones) in version order.
    Raises ``CatalogDefinitionError`` for a ``.sql`` file not named ``NNN_<name>.sql``, a
    retired version (1–8) or a version used twice."""
    found: dict[int, Migration | DataMigration] = {}
    for migration in data_migrations:
        if migration.version in RETIRED_MIGRATIONS or migration.version in found:
            raise CatalogDefinitionError(
                f"data migration {migration.name} ({migration.path}): version "
                f"{migration.version} is retired or used twice; give it a new number")
        found[migration.version] = migration
    for path in sorted(folder.glob("*.sql")):
        match = _MIGRATION_RE.match(path.name)
        if match is None:
            raise CatalogDefinitionError(
                f"migration {path}: name it NNN_<name>.sql (three digits, then lower-case "
                "letters, digits and underscores)")
        version = int(match.group(1))
        if version in RETIRED_MIGRATIONS:
            raise CatalogDefinitionError(
                f"migration {path}: version {version} is retired (it once defined views, now in "
                f"warehouse/views); number it {max(RETIRED_MIGRATIONS) + 1:03d} or above")
        if version in found:
            other = found[version]
            raise CatalogDefinitionError(
                f"migrations {getattr(other.path, 'name', other.path)} and {path.name} share "
                f"version {version}; renumber {path.name}")
        found[version] = Migration(version, path.stem, path)
    return [found[v] for v in sorted(found)]


def drop_views(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Drop every view of the connection's own database; returns their names."""
    names = [row[0] for row in con.execute(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal "
        "AND database_name = current_database() AND schema_name = 'main'").fetchall()]
    for name in names:
        con.execute(f'DROP VIEW IF EXISTS "{name}"')
    return names


def create_views(con: duckdb.DuckDBPyConnection, views: Iterable[ViewFile], root: Path) -> None:
    """Create ``views`` (in the order given) with ``{warehouse}`` set to ``root``."""
    for view in views:
        try:
            con.execute(view.statement(root))
        except duckdb.Error as err:
            raise CatalogDefinitionError(
                f"view file {view.path} could not be created: {err}. Each table it reads must "
                "be declared in warehouse/schema.py or be another view file") from err


def apply_migrations(con: duckdb.DuckDBPyConnection, root: Path,
                     migrations: Iterable[Migration | DataMigration]) -> list[str]:
    """Run each migration not yet recorded in ``weft_migrations`` and record it; returns the
    names applied. The caller holds the transaction (a Python migration's file changes are
    outside it)."""
    _create_migration_table(con)
    done = {row[0] for row in con.execute("SELECT version FROM weft_migrations").fetchall()}
    applied = []
    for migration in migrations:
        if migration.version in done:
            continue
        if isinstance(migration, DataMigration):
            try:
                migration.run(root)
            except Exception as err:
                raise CatalogDefinitionError(
                    f"data migration {migration.name} ({migration.path}) stopped: "
                    f"{type(err).__name__}: {err}. Every partition is still whole; fix the "
                    "cause and query again (it resumes at the next catalog refresh)") from err
            con.execute("INSERT INTO weft_migrations (version, name) VALUES (?, ?)",
                        [migration.version, migration.name])
            applied.append(migration.name)
            continue
        try:
            con.execute(migration.statements(root))
        except duckdb.Error as err:
            raise CatalogDefinitionError(
                f"migration {migration.path} failed: {err}; fix it and query again (it is "
                "applied at the next catalog refresh)") from err
        con.execute("INSERT INTO weft_migrations (version, name) VALUES (?, ?)",
                    [migration.version, migration.name])
        applied.append(migration.name)
    return applied


def open_catalog_file(path: Path) -> duckdb.DuckDBPyConnection:
    """A read-write connection to the catalog file ``path``; a file it creates is written in
    the storage format of ``STORAGE_VERSION`` (an existing file keeps its own format)."""
    return duckdb.connect(str(path), config={"storage_compatibility_version": STORAGE_VERSION})


def migration_record(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    """The rows of ``weft_migrations`` (version, name, applied_at); empty when it has none."""
    exists = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'weft_migrations' "
        "AND database_name = current_database() AND schema_name = 'main'").fetchone()[0]
    if not exists:
        return []
    return con.execute(
        "SELECT version, name, applied_at FROM weft_migrations ORDER BY version").fetchall()


def restore_migration_record(con: duckdb.DuckDBPyConnection, rows: Iterable[tuple]) -> None:
    """Create ``weft_migrations`` on ``con`` holding ``rows`` (from ``migration_record``)."""
    _create_migration_table(con)
    rows = [tuple(r) for r in rows]
    if rows:
        con.executemany(
            "INSERT INTO weft_migrations (version, name, applied_at) VALUES (?, ?, ?)", rows)


def _create_migration_table(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        "CREATE TABLE IF NOT EXISTS weft_migrations (version INTEGER PRIMARY KEY, name VARCHAR, "
        "applied_at TIMESTAMPTZ DEFAULT now())"
    )


# ---- what a catalog file was built from ---------------------------------------------------------
# Tables a catalog file holds besides the migration record: the fingerprint of the warehouse
# folder it was built from (``Warehouse`` rebuilds it when the folder's differs) and the
# partitions its views leave out.
STATE_TABLE = "weft_catalog"
QUARANTINE_TABLE = "weft_quarantine"
# Messages of DuckDB errors that mean the catalog file itself is damaged (not locked or busy).
_CORRUPT_MARKERS = ("not a valid duckdb database file", "corrupt database file", "checksum",
                    "could not read enough bytes", "is a directory", "serialization error",
                    "trying to read a database file with version number")


def store_state(con: duckdb.DuckDBPyConnection, fingerprint: str,
                quarantined: Iterable[tuple[str, str, str, str, str]],
                views_key: str | None = None) -> None:
    """Record on ``con`` the ``fingerprint`` the catalog was built from, the ``views_key``
    of what its views were built from (``Warehouse``: the tables' column signatures and
    quarantined files, not every file's version) and its quarantined partitions (table,
    partition, path relative to the warehouse folder, reason, fix)."""
    con.execute(f"CREATE OR REPLACE TABLE {STATE_TABLE} (fingerprint VARCHAR NOT NULL, "
                "built_at TIMESTAMPTZ DEFAULT now(), views_key VARCHAR)")
    con.execute(f"INSERT INTO {STATE_TABLE} (fingerprint, views_key) VALUES (?, ?)",
                [fingerprint, views_key])
    con.execute(f'CREATE OR REPLACE TABLE {QUARANTINE_TABLE} ("table" VARCHAR, partition '
                "VARCHAR, path VARCHAR, reason VARCHAR, fix VARCHAR)")
    rows = [tuple(q) for q in quarantined]
    if rows:
        con.executemany(f"INSERT INTO {QUARANTINE_TABLE} VALUES (?, ?, ?, ?, ?)", rows)


def stored_state(con: duckdb.DuckDBPyConnection
                 ) -> tuple[str | None, list[tuple], str | None]:
    """The fingerprint ``con``'s catalog was built from (None for a catalog written before
    fingerprints, or by someone else), its quarantined partitions and its views key, as
    ``store_state`` wrote them (the key None for a catalog written before keys). Raises
    ``duckdb.Error`` when the file cannot be read."""
    quarantined = (f"(SELECT list((\"table\", partition, path, reason, fix) ORDER BY \"table\", "
                   f"path) FROM {QUARANTINE_TABLE})")
    try:
        row = con.execute(f"SELECT fingerprint, {quarantined}, views_key FROM {STATE_TABLE} "
                          "LIMIT 1").fetchall()
    except duckdb.CatalogException:  # no such table: built before fingerprints
        return None, [], None
    except duckdb.BinderException:  # no views_key column: built before views keys
        row = [(*r, None) for r in con.execute(
            f"SELECT fingerprint, {quarantined} FROM {STATE_TABLE} LIMIT 1").fetchall()]
    if not row:
        return None, [], None
    row = row[0]
    return (row[0], [tuple(q.values()) if isinstance(q, dict) else tuple(q)
                     for q in row[1] or []], row[2])


def is_corrupt(err: BaseException) -> bool:
    """True when ``err`` (from opening or reading a catalog file) says the file is damaged or
    not a DuckDB file; False for a lock held elsewhere, a conflicting connection of this
    process, permissions and the like."""
    text = str(err).lower()
    return isinstance(err, duckdb.SerializationException) or any(
        marker in text for marker in _CORRUPT_MARKERS)


def relations_read(query: str, con: duckdb.DuckDBPyConnection | None = None) -> set[str] | None:
    """Names of the tables, views and CTEs a SELECT-family ``query`` reads (lower case), parsed
    on ``con`` (a fresh in-memory database when None); None when DuckDB cannot serialise it
    (e.g. DESCRIBE, SHOW, or a query that does not parse)."""
    own = con is None
    con = duckdb.connect() if own else con
    try:
        tree = json.loads(con.execute("SELECT json_serialize_sql($1)", [query]).fetchall()[0][0])
    except duckdb.Error:
        return None
    finally:
        if own:
            con.close()
    if tree.get("error"):
        return None
    return set(_relations(tree))
