"""``python -m warehouse`` — query the weft warehouse with SQL.

    python -m warehouse sql "SELECT * FROM latest_scores"
    python -m warehouse sql --format csv "SELECT * FROM eval_samples LIMIT 5"
    python -m warehouse tables
    python -m warehouse samples --benchmark gsm8k --model smollm2-135m-instruct --wrong --limit 3

Queries are read-only and confined to the warehouse folder (see ``warehouse.store``): one
SELECT-family statement per call. They run under resource limits (``warehouse.limits``), set by
``--memory-limit``, ``--threads``, ``--spill-limit``, ``--spill-dir`` and ``--timeout`` after the
command (or the ``WEFT_SQL_*`` environment variables):

    python -m warehouse sql --timeout 900 --memory-limit 8GB "SELECT ..."

Exit status: 0 success, 1 SQL error, 2 refused query (empty, several statements, a write or
other non-SELECT statement, a file outside the warehouse), 3 stopped by a limit (the message
names the limit and how to raise it).
``samples`` prints whole evaluation samples (``warehouse.samples``); it exits 1 when none match.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from warehouse.limits import (
    DEFAULT_SPILL,
    DEFAULT_TIMEOUT_S,
    ENV_MEMORY,
    ENV_SPILL,
    ENV_SPILL_DIR,
    ENV_THREADS,
    ENV_TIMEOUT,
    QueryLimitError,
    QueryLimits,
    default_memory,
    default_threads,
    enforce,
    format_size,
    parse_size,
)
from warehouse.store import UnsafeQueryError, Warehouse


def _cell(value: Any, width: int) -> str:
    text = "NULL" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 1] + "…"


def format_table(table: pa.Table, max_width: int = 40, max_rows: int = 200) -> str:
    """Aligned plain-text rendering with truncated cells and a row count footer."""
    names = table.column_names
    rows = table.slice(0, max_rows).to_pylist()
    cells = [[_cell(r[n], max_width) for n in names] for r in rows]
    widths = [max([len(n)] + [len(c[i]) for c in cells]) for i, n in enumerate(names)]
    line = "  ".join(n.ljust(w) for n, w in zip(names, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    more = f" (showing {max_rows})" if table.num_rows > max_rows else ""
    out.append(f"({table.num_rows} row{'s' if table.num_rows != 1 else ''}{more})")
    return "\n".join(out)


def format_result(table: pa.Table, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(table.to_pylist(), default=str, indent=1)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(table.column_names)
        for row in table.to_pylist():
            writer.writerow(["" if row[n] is None else row[n] for n in table.column_names])
        return buf.getvalue().rstrip("\n")
    return format_table(table)


def _print_samples(wh: Warehouse, args: argparse.Namespace) -> int:
    from warehouse.samples import SamplesQueryError, format_sample, read_samples

    try:
        rows = read_samples(wh, args.benchmark, args.model, wrong=args.wrong, limit=args.limit,
                            problem_id=args.problem)
    except SamplesQueryError as err:
        print(err, file=sys.stderr)
        return 1
    if not rows:
        what = "graded wrong " if args.wrong else ""
        print(f"no samples {what}of {args.benchmark} / {args.model}"
              + (f" for problem {args.problem}" if args.problem else ""), file=sys.stderr)
        return 1
    print("\n\n".join(format_sample(r, width=max(20, args.width)) for r in rows))
    print(f"\n({len(rows)} sample{'s' if len(rows) != 1 else ''}"
          + (f", at most {args.limit}: raise --limit for more" if len(rows) == args.limit else "")
          + ")")
    return 0


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _limits_parser() -> argparse.ArgumentParser:
    lim = argparse.ArgumentParser(add_help=False)
    group = lim.add_argument_group("resource limits (a flag wins over its environment variable)")
    group.add_argument("--memory-limit", type=_size, default=None, metavar="SIZE",
                       help=f"DuckDB memory limit, e.g. 8GB (env {ENV_MEMORY}; default "
                            f"{format_size(default_memory())} here: RAM/4, at most 4 GiB)")
    group.add_argument("--threads", type=int, default=None,
                       help=f"DuckDB threads (env {ENV_THREADS}; default {default_threads()} "
                            "here: the usable cores, at most 4)")
    group.add_argument("--spill-limit", type=_size, default=None, metavar="SIZE",
                       help=f"most disk a query may spill to, 0 = no spilling (env {ENV_SPILL}; "
                            f"default {format_size(DEFAULT_SPILL)})")
    group.add_argument("--spill-dir", default=None,
                       help=f"spill folder (env {ENV_SPILL_DIR}; default WEFT_HOME/tmp/sql-spill)")
    group.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                       help=f"wall-clock limit per query (env {ENV_TIMEOUT}; default "
                            f"{DEFAULT_TIMEOUT_S:g})")
    return lim


def limits_from_args(args: argparse.Namespace) -> QueryLimits:
    return QueryLimits.from_env(memory=args.memory_limit, threads=args.threads,
                                spill=args.spill_limit, timeout_s=args.timeout,
                                spill_dir=Path(args.spill_dir) if args.spill_dir else None)


def _print_tables(wh: Warehouse) -> None:
    limits = wh.query_limits()
    started = time.monotonic()
    with wh.connect(limits) as con, enforce(con, limits, started):
        names = [r[0] for r in con.execute(
            "SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1").fetchall()]
        rows = [{"table": n, "rows": con.execute(f"SELECT count(*) FROM {n}").fetchall()[0][0]}
                for n in names]
    print(format_table(pa.Table.from_pylist(rows) if rows else pa.table({"table": [], "rows": []})))
    for bad in wh.quarantined():
        print(f"quarantined partition, left out of its table: {bad}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m warehouse")
    parser.add_argument("--root", default=None, help="warehouse folder (default WEFT_HOME/warehouse)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    lim = _limits_parser()
    q = sub.add_parser("sql", help="run a SQL query against the catalog", parents=[lim])
    q.add_argument("query")
    q.add_argument("--format", choices=["table", "csv", "json"], default="table")
    sub.add_parser("tables", help="list tables with row counts", parents=[lim])
    smp = sub.add_parser("samples", help="print whole evaluation samples (prompt, output, "
                                         "extracted answer, gold, correct)", parents=[lim])
    smp.add_argument("--benchmark", required=True)
    smp.add_argument("--model", required=True, help="model id (python -m eval.models list)")
    smp.add_argument("--wrong", action="store_true", help="only samples graded wrong")
    smp.add_argument("--limit", type=int, default=10, help="at most this many (default 10)")
    smp.add_argument("--problem", default=None, help="only this problem_id")
    smp.add_argument("--width", type=int, default=100, help="wrap text at this many characters")
    args = parser.parse_args(argv)
    try:
        limits = limits_from_args(args)
    except ValueError as err:  # a bad WEFT_SQL_* variable or flag value
        parser.error(str(err))
    wh = Warehouse(args.root, limits=limits)
    try:
        if args.cmd == "samples":
            return _print_samples(wh, args)
        if args.cmd == "tables":
            _print_tables(wh)
        else:
            print(format_result(wh.sql(args.query), args.format))
    except UnsafeQueryError as err:
        print(f"query refused: {err}", file=sys.stderr)
        return 2
    except QueryLimitError as err:
        print(err, file=sys.stderr)
        return 3
    except duckdb.Error as err:
        print(f"SQL error: {err}\nTables: python -m warehouse tables", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
