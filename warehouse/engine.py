"""DuckDB's engine for the warehouse modules, without the package's Python layer until needed.

``import duckdb`` loads the engine (the compiled ``_duckdb`` module: connections, ``execute``,
``fetchmany``, the parser, every exception class, about 12 ms) and then the package's
pure-Python layer on top of it: relations (``con.sql``, ``to_arrow_table``), expressions and a
version look-up through ``importlib.metadata``, about 45-60 ms more on an idle machine. That
layer was most of the start of ``python -m warehouse sql``, which only executes one statement
and fetches its rows.

So the warehouse modules take DuckDB's names from here: ``duckdb`` is the engine module, whose
classes, functions and exceptions are the very objects the package re-exports
(``duckdb.Error is _duckdb.Error``), so ``except duckdb.Error`` and ``isinstance`` checks
behave the same whichever was imported. The relational API is installed on the engine's
connection class when the package is imported, also on connections opened before;
``with_relations()`` imports it, and every warehouse path that builds relations or hands a
connection to a caller (``Warehouse.sql``, ``read``, ``connect``, ``stream`` of Arrow batches)
calls it first. Where the engine module cannot be imported on its own (a DuckDB laid out
differently), ``duckdb`` is the package itself.
"""

from __future__ import annotations

from types import ModuleType

try:
    import _duckdb as duckdb
except ImportError:  # pragma: no cover - a DuckDB without a separate engine module
    import duckdb

__all__ = ["duckdb", "with_relations"]


def with_relations() -> ModuleType:
    """The ``duckdb`` package, imported now if it was not: its relational API (``con.sql``,
    ``to_arrow_table``, ``to_arrow_reader``) is then available on every connection."""
    import duckdb as package

    return package
