"""Typical aggregations through weft's warehouse against plain DuckDB on the same Parquet files,
alternated, at 1M and 10M rows.

A scratch warehouse (``--root``, default a temporary folder, removed at the end) gets an
``eval_samples`` table of ``--rows`` rows in 32 partitions (8 models x 4 benchmarks), written
through ``Warehouse.write`` as the pipeline writes it (every declared column, lineage stamped).
Then, per query, in rounds whose order alternates:

- in-process: ``Warehouse.sql(query)`` (the folder's fingerprint, the statement check, run,
  Arrow result; the catalog attached and the connection confined at the first call only)
  against DuckDB alone over ``read_parquet`` of the same files: a fresh
  ``duckdb.connect()`` per query, one connection kept for every query (as ``duckdb.sql``
  does), and a fresh connection with ``union_by_name=true`` (what a catalog view reads, to
  tell that cost apart); and, reported apart as ``ratio_weft_over_duckdb_footer_cache``, a
  kept connection with ``parquet_metadata_cache`` on, as weft's kept connections have it:
  that ratio is weft's own cost per query (the fingerprint, the statement check, the
  catalog's view and the confinement), the setting's gain left out;
- command line: ``python -m warehouse --root R sql --format csv QUERY`` against a fresh
  ``python -c`` that imports duckdb and prints the same rows as CSV (plain DuckDB, the peer the
  summary judges against), and against a fresh ``python -c`` that imports only DuckDB's engine
  module ``_duckdb`` (as weft's command does: ``warehouse.engine``) and has DuckDB copy the
  rows to stdout as CSV. The second ratio is weft's own cost at the command line (its imports,
  attaching and checking the catalog, confining the connection, the statement check and its
  output), which the first no longer shows once weft skips the package's Python layer.

Prints one JSON line per (query, rows, mode) with the medians and the ratios weft / DuckDB, and
a summary of weft against the faster DuckDB variant of each pair, against the goal (within
1.05x).

``.venv/bin/python bench/warehouse_sql.py [--rows 1000000 10000000] [--rounds 7]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PY = sys.executable

MODELS = [f"model-{i}" for i in range(8)]
BENCHMARKS = ["gsm8k", "math500", "aime24", "humaneval"]
GOAL = 1.05

QUERIES = {
    "leaderboard": ("SELECT model, benchmark, count(*) AS n, avg(CAST(correct AS DOUBLE)) AS acc "
                    "FROM {src} GROUP BY model, benchmark ORDER BY acc DESC, model, benchmark"),
    "tokens": ("SELECT model, avg(completion_tokens) AS tokens, "
               "quantile_cont(latency_s, 0.5) AS p50_latency FROM {src} "
               "WHERE finish_reason = 'stop' GROUP BY model ORDER BY model"),
}


def build(root: Path, rows: int, seed: int = 0) -> None:
    """``rows`` eval_samples rows in len(MODELS) x len(BENCHMARKS) partitions under ``root``."""
    import numpy as np
    import pyarrow as pa

    from warehouse import Lineage, Warehouse
    from warehouse.partitions import eval_partition

    wh = Warehouse(root)
    rng = np.random.default_rng(seed)
    parts = [(m, b) for m in MODELS for b in BENCHMARKS]
    per = rows // len(parts)
    for i, (model, bench) in enumerate(parts):
        n = per + (1 if i < rows % len(parts) else 0)
        idx = np.arange(n)
        data = pa.table({
            "model": pa.array([model] * n, pa.string()),
            "benchmark": pa.array([bench] * n, pa.string()),
            "problem_id": pa.array((idx // 4).astype(str), pa.string()),
            "sample_index": pa.array(idx % 4, pa.int64()),
            "correct": pa.array(rng.random(n) < (0.1 + 0.1 * (i % 7)), pa.bool_()),
            "completion_tokens": pa.array(rng.integers(10, 2048, n), pa.int64()),
            "latency_s": pa.array(rng.gamma(2.0, 3.0, n), pa.float64()),
            "finish_reason": pa.array(np.where(rng.random(n) < 0.9, "stop", "length"),
                                      pa.string()),
        })
        part = eval_partition(bench, model)
        wh.write("eval_samples", data, lineage=Lineage(partition=part))


def _plain(root: Path, union: bool) -> str:
    from warehouse import Warehouse

    glob = Warehouse(root).glob("eval_samples")  # the data files themselves, not the catalog
    extra = ", union_by_name=true" if union else ""
    return f"read_parquet('{glob}'{extra}, hive_partitioning=false)"


def _median_pair(fns: dict, rounds: int) -> dict:
    times: dict[str, list[float]] = {k: [] for k in fns}
    loads = []
    for r in range(rounds):
        order = list(fns) if r % 2 == 0 else list(reversed(fns))
        for key in order:
            started = time.perf_counter()
            fns[key]()
            times[key].append(time.perf_counter() - started)
        loads.append(os.getloadavg()[0])
    return {"median_s": {k: round(statistics.median(v), 4) for k, v in times.items()},
            "load_1min": [round(min(loads), 1), round(max(loads), 1)]}


def in_process(root: Path, name: str, rounds: int) -> dict:
    import duckdb

    from warehouse import Warehouse

    q = QUERIES[name]
    wh = Warehouse(root)
    weft_rows = wh.sql(q.format(src="eval_samples")).to_pylist()  # builds the catalog once
    plain_rows = duckdb.connect().sql(q.format(src=_plain(root, False))).to_arrow_table().to_pylist()
    if [tuple(r.values()) for r in weft_rows] != [tuple(r.values()) for r in plain_rows]:
        raise SystemExit(f"{name}: weft and DuckDB disagree on the result")

    def plain(union: bool):
        def go():
            con = duckdb.connect()
            try:
                con.sql(q.format(src=_plain(root, union))).to_arrow_table()
            finally:
                con.close()
        return go

    kept = duckdb.connect()  # what duckdb.sql() does: one connection for the whole session
    # weft's kept connections cache Parquet footers (parquet_metadata_cache); a kept DuckDB
    # connection with that setting too tells the setting's gain from weft's own cost
    cached = duckdb.connect()
    cached.execute("SET parquet_metadata_cache = true")
    out = _median_pair({"weft": lambda: wh.sql(q.format(src="eval_samples")),
                        "duckdb": plain(False), "duckdb_union_by_name": plain(True),
                        "duckdb_one_connection": lambda: kept.sql(
                            q.format(src=_plain(root, False))).to_arrow_table(),
                        "duckdb_one_connection_footer_cache": lambda: cached.sql(
                            q.format(src=_plain(root, False))).to_arrow_table()}, rounds)
    kept.close()
    cached.close()
    wh.close()
    med = out["median_s"]
    out["ratio_weft_over_duckdb_footer_cache"] = round(
        med["weft"] / med["duckdb_one_connection_footer_cache"], 3)
    return out


def command_line(root: Path, name: str, rounds: int) -> dict:
    q = QUERIES[name]
    weft = [PY, "-m", "warehouse", "--root", str(root), "sql", "--format", "csv",
            "--max-rows", "0", q.format(src="eval_samples")]
    peer = [PY, "-c", ("import duckdb\n"
                       f"duckdb.sql({q.format(src=_plain(root, False))!r})"
                       ".write_csv('/dev/stdout')")]
    copy = f"COPY ({q.format(src=_plain(root, False))}) TO '/dev/stdout' (FORMAT csv)"
    engine = [PY, "-c", f"import _duckdb\n_duckdb.connect().execute({copy!r})"]

    def run(cmd):
        return lambda: subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, check=True,
                                      timeout=600)

    def rows(cmd):
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True,
                             timeout=600).stdout
        return [line.split(",") for line in out.splitlines()[1:]]

    # the three print the same rows (numbers compared as numbers: the formats differ)
    got = [rows(cmd) for cmd in (weft, peer, engine)]
    as_numbers = [[[_number(v) for v in row] for row in rs] for rs in got]
    if not (as_numbers[0] == as_numbers[1] == as_numbers[2]):
        raise SystemExit(f"{name}: the command line and DuckDB disagree on the result")
    out = _median_pair({"weft": run(weft), "duckdb": run(peer), "duckdb_engine": run(engine)},
                       rounds)
    med = out["median_s"]
    out["ratio_weft_over_duckdb_engine"] = round(med["weft"] / med["duckdb_engine"], 3)
    return out


def _number(text: str):
    try:
        return round(float(text), 9)
    except ValueError:
        return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--root", type=Path, default=None,
                        help="scratch folder (default: a temporary one, removed at the end)")
    parser.add_argument("--query", choices=sorted(QUERIES), nargs="+", default=sorted(QUERIES))
    args = parser.parse_args(argv)
    summary = []
    for rows in args.rows:
        root = (args.root / f"rows-{rows}") if args.root else Path(
            tempfile.mkdtemp(prefix=f"weft-sql-bench-{rows}-"))
        try:
            started = time.perf_counter()
            if not (root / "eval_samples").is_dir():
                build(root, rows)
            print(json.dumps({"built": rows, "root": str(root),
                              "seconds": round(time.perf_counter() - started, 1)}), flush=True)
            for name in args.query:
                for mode, fn in (("in_process", in_process), ("cli", command_line)):
                    r = fn(root, name, args.rounds)
                    med = r["median_s"]
                    # in-process: against the faster of DuckDB's fresh and kept connection; on
                    # the command line against plain DuckDB (``duckdb_engine`` is reported apart)
                    best = min(med["duckdb"], med.get("duckdb_one_connection", med["duckdb"]))
                    r.update(query=name, rows=rows, mode=mode, rounds=args.rounds,
                             ratio_weft_over_duckdb=round(med["weft"] / med["duckdb"], 3),
                             ratio_weft_over_fastest_duckdb=round(med["weft"] / best, 3))
                    if "duckdb_union_by_name" in med:
                        r["ratio_union_by_name_over_duckdb"] = round(
                            med["duckdb_union_by_name"] / med["duckdb"], 3)
                        r["ratio_weft_over_duckdb_one_connection"] = round(
                            med["weft"] / med["duckdb_one_connection"], 3)
                    print(json.dumps(r), flush=True)
                    summary.append((name, rows, mode, r["ratio_weft_over_fastest_duckdb"],
                                    r.get("ratio_weft_over_duckdb_footer_cache")))
        finally:
            if args.root is None:
                shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"summary": [{"query": q, "rows": n, "mode": m, "ratio": x, "met": x <= GOAL,
                                   **({} if c is None else {"ratio_over_footer_cache": c})}
                                  for q, n, m, x, c in summary],
                      "goal": GOAL}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
