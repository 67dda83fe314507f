"""Confining a query's DuckDB connection: the read-only check on user SQL and the settings that
keep a connection inside the warehouse folder and within its resource limits.

``check_read_only`` accepts exactly one SELECT-family statement (SELECT/WITH/FROM/VALUES/
DESCRIBE/SHOW/SUMMARIZE, or EXPLAIN of one of those), checked with DuckDB's own parser, and
raises ``UnsafeQueryError`` saying why otherwise. ``confine`` locks a connection down: memory,
threads and spill from ``warehouse.limits``, external access only to the warehouse folder
(``allowed_directories``) and the views' relative globs (``allowed_paths``, resolved against the
folder alone through ``file_search_path``), no extension install or autoload, configuration
locked so the query cannot undo any of it. Parquet footers are cached for the connection's
life (``parquet_metadata_cache``), which saves a repeated query the reading of every footer.
Each connection confined here is a database of its own (in memory, with the catalog file
attached read-only), so the settings bind only it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from warehouse.engine import duckdb
from warehouse.limits import QueryLimits, limit_settings

_EXPLAIN_RE = re.compile(
    r"^\s*EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?:\([^()]*\)\s*)?(?P<inner>.*)$", re.IGNORECASE | re.DOTALL
)


class UnsafeQueryError(ValueError):
    """A query the read-only SQL path refuses: empty, several statements, not a SELECT, or
    reaching outside the warehouse folder. The message says what was wrong."""


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


def sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def search_warehouse(con: duckdb.DuckDBPyConnection, root: Path) -> None:
    """Resolve ``con``'s relative globs (the views') against ``root`` only."""
    if "," in str(root):
        raise ValueError(
            f"the warehouse folder {root} has a comma in its path, which DuckDB's "
            "file_search_path cannot hold (it separates folders); move the warehouse to a "
            "folder without one (WEFT_HOME)")
    con.execute(f"SET GLOBAL file_search_path = {sql_string(str(root))}")


def confine(con: duckdb.DuckDBPyConnection, root: Path, limits: QueryLimits,
             patterns: Iterable[str] = ()) -> None:
    """Lock ``con``'s database down: ``limits`` (resolved) on memory, threads and spill, files
    only under ``root`` or through the relative globs ``patterns`` (resolved against ``root``
    alone), no extension downloads or autoloading, configuration locked. ``con`` is a
    database of its own (in memory, the catalog file attached), so nothing else shares it."""
    dirs = sorted({os.path.abspath(root), os.path.realpath(root)})
    search_warehouse(con, root)
    allowed = ", ".join(sql_string(p) for p in sorted(set(patterns)))
    for statement in (
        "SET autoinstall_known_extensions = false",
        "SET autoload_known_extensions = false",
        "SET allow_community_extensions = false",
        # memory, threads and the spill folder and its size (DuckDB allows its temp directory)
        *limit_settings(limits),
        # DuckDB draws a progress bar on stdout during queries over 2 s, into the rows that
        # python -m warehouse prints
        "SET enable_progress_bar = false",
        # keep each Parquet file's footer between queries: a kept connection serves only a
        # folder whose file versions (inode, size, mtime, ctime) are as they were when it
        # opened, and DuckDB checks each entry against the file's mtime on top of that
        "SET parquet_metadata_cache = true",
        f"SET allowed_directories = [{', '.join(sql_string(d) for d in dirs)}]",
        f"SET allowed_paths = [{allowed}]",
        "SET enable_external_access = false",
        "SET lock_configuration = true",
    ):
        con.execute(statement)
