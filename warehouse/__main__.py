"""``python -m warehouse`` — query the weft warehouse with SQL.

    python -m warehouse sql "SELECT * FROM latest_scores"
    python -m warehouse sql --format csv "SELECT * FROM eval_samples LIMIT 5"
    python -m warehouse tables
    python -m warehouse doctor
    python -m warehouse samples --benchmark gsm8k --model smollm2-135m-instruct --wrong --limit 3

Queries are read-only and confined to the warehouse folder (see ``warehouse.store``): one
SELECT-family statement per call. They run under resource limits (``warehouse.limits``), set by
``--memory-limit``, ``--threads``, ``--spill-limit``, ``--spill-dir`` and ``--timeout`` after the
command (or the ``WEFT_SQL_*`` environment variables):

    python -m warehouse sql --timeout 900 --memory-limit 8GB "SELECT ..."

``sql`` reads its result in batches and prints at most 200 rows as a table, 10,000 as CSV or
JSON, and 8 MiB in any format (``warehouse.output``), then says on stderr that the result has
more and how to print more: ``--max-rows N`` / ``WEFT_SQL_MAX_ROWS``, ``--max-bytes SIZE`` /
``WEFT_SQL_MAX_BYTES``, 0 for no cap; big results are for Python (``Warehouse.sql``,
``Warehouse.stream``). Formatting and printing count towards ``--timeout``.

Exit status: 0 success (also when a reader closed the output early, as ``head`` does), 1 SQL
error, 2 refused query (empty, several statements, a write or other non-SELECT statement, a
file outside the warehouse), 3 stopped by a limit (the message names the limit and how to
raise it; output printed before it stopped is incomplete, and the command says so).
``samples`` prints whole evaluation samples (``warehouse.samples``); it exits 1 when none match.
``doctor`` reports the warehouse's health: the catalog's state, every quarantined partition
(left out of reads because its file cannot be read) with the reason and the fix, empty
partition folders, and runs that crashed (the view ``run_status``); it exits 1 when a
partition is quarantined, else 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from warehouse.confine import UnsafeQueryError
from warehouse.engine import duckdb
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
from warehouse.output import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    ENV_MAX_BYTES,
    ENV_MAX_ROWS,
    FORMATS,
    TABLE_MAX_ROWS,
    DeadlineWriter,
    OutputCaps,
    ResultWriter,
    format_rows,
    parse_count,
)
from warehouse.store import Warehouse


def _print_query(wh: Warehouse, query: str, fmt: str, caps: OutputCaps) -> int:
    """Stream ``query``'s rows to stdout within ``caps``, all of it inside the query's limits;
    the cap note goes to stderr. An error after output began says the output is incomplete.
    Rows are read without pyarrow (``Warehouse.stream(rows=True)``): importing it would be most
    of the command's start."""
    writer = None
    try:
        with wh.stream(query, rows=True) as result:
            writer = ResultWriter(fmt, result.names, max_rows=caps.rows_for(fmt),
                                  max_bytes=caps.max_bytes,
                                  out=DeadlineWriter(sys.stdout, result.deadline))
            writer.write(result)
    except (QueryLimitError, duckdb.Error) as err:
        if writer is not None and writer.out.written:
            err.add_note(f"the printed output is incomplete: it stopped after "
                         f"{writer.rows:,} row{'s' if writer.rows != 1 else ''}")
        raise
    note = writer.cap_note()
    if note:
        print(note, file=sys.stderr)
    return 0


def _error(message: str, err: BaseException) -> None:
    print("\n".join([message, *getattr(err, "__notes__", ())]), file=sys.stderr)


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


def _count(text: str) -> int:
    try:
        return parse_count(text, "a row count")
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
    print(format_rows(["table", "rows"], rows))
    for bad in wh.quarantined():
        print(f"quarantined partition, left out of its table: {bad}")


_CATALOG_STATES = {
    "current": "current",
    "stale": "out of date: rebuilt at the next query",
    "missing": "not built yet: built at the next query",
    "corrupt": "damaged: moved aside and rebuilt from the Parquet files at the next query",
    "busy": "held by another connection: queries build their views in memory meanwhile",
}


def _doctor(wh: Warehouse) -> int:
    """Print the warehouse's health; 1 when a partition is quarantined."""
    from warehouse.quarantine import scan_table, table_names

    status, detail = wh.catalog_status()
    print(f"catalog {wh.catalog_path}: {_CATALOG_STATES.get(status, status)}"
          + (f" ({detail})" if detail else ""))
    bad = wh.quarantined()
    print(f"quarantined partitions (left out of their tables' views and non-strict reads; "
          f"strict reads raise): {len(bad)}")
    for q in bad:
        print(f"  {q.describe()}")
    empty = [f for t in table_names(wh.root) for f in scan_table(wh.root, t, validate=False)
             .empty_folders]
    if empty:
        print(f"empty partition folders (left by writers that stopped; removed by the next "
              f"write to their table or catalog rebuild): {len(empty)}")
        for folder in empty[:20]:
            print(f"  {folder}")
    try:
        crashed = wh.sql("SELECT asset, partition, run_id, started_at, last_seen_at, error "
                         "FROM run_status WHERE status = 'crashed' ORDER BY started_at").to_pylist()
    except duckdb.Error as err:
        print(f"crashed runs: unknown ({err})")
    else:
        print(f"crashed runs (no final runs row; the view run_status): {len(crashed)}")
        for run in crashed[:20]:
            print(f"  {run['asset']} {run['partition']} run {run['run_id']}: started "
                  f"{run['started_at']}, last seen {run['last_seen_at']}")
        if len(crashed) > 20:
            print(f"  … {len(crashed) - 20} more: python -m warehouse sql \"SELECT * FROM "
                  "run_status WHERE status = 'crashed'\"")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m warehouse")
    parser.add_argument("--root", default=None, help="warehouse folder (default WEFT_HOME/warehouse)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    lim = _limits_parser()
    q = sub.add_parser("sql", help="run a SQL query against the catalog", parents=[lim])
    q.add_argument("query")
    q.add_argument("--format", choices=FORMATS, default="table")
    caps = q.add_argument_group("output caps (a flag wins over its environment variable)")
    caps.add_argument("--max-rows", type=_count, default=None, metavar="N",
                      help=f"print at most N rows, 0 = all (env {ENV_MAX_ROWS}; default "
                           f"{TABLE_MAX_ROWS} as a table, {DEFAULT_MAX_ROWS:,} as csv or json)")
    caps.add_argument("--max-bytes", type=_size, default=None, metavar="SIZE",
                      help=f"print at most SIZE of output, whole rows only, 0 = no cap (env "
                           f"{ENV_MAX_BYTES}; default {format_size(DEFAULT_MAX_BYTES)})")
    sub.add_parser("tables", help="list tables with row counts", parents=[lim])
    sub.add_parser("doctor", help="report quarantined partitions (exit 1 if any), the catalog's "
                                  "state, empty partition folders and crashed runs", parents=[lim])
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
        caps = (OutputCaps.from_env(max_rows=args.max_rows, max_bytes=args.max_bytes)
                if args.cmd == "sql" else None)
    except ValueError as err:  # a bad WEFT_SQL_* variable or flag value
        parser.error(str(err))
    wh = Warehouse(args.root, limits=limits)
    try:
        if args.cmd == "samples":
            return _print_samples(wh, args)
        if args.cmd == "doctor":
            return _doctor(wh)
        if args.cmd == "tables":
            _print_tables(wh)
        else:
            return _print_query(wh, args.query, args.format, caps)
    except UnsafeQueryError as err:
        _error(f"query refused: {err}", err)
        return 2
    except QueryLimitError as err:
        _error(str(err), err)
        return 3
    except duckdb.Error as err:
        _error(f"SQL error: {err}\nTables: python -m warehouse tables", err)
        return 1
    except BrokenPipeError:  # the reader closed the output (`| head`): nothing left to do
        _silence_stdout()
    return 0


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so flushing it at exit does not fail on the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # not a real file descriptor
        pass


if __name__ == "__main__":
    sys.exit(main())
