"""``python -m warehouse sql`` prints results within its limits: at most a capped number of rows
and bytes by default (each cap raised or removed by a flag or an environment variable), rows
read from DuckDB in batches, and formatting and writing inside the query's wall-clock limit.

Every test queries a real DuckDB catalog in a temp WEFT_HOME; the big results are
``range(3000000)`` (3 million rows). The checks are on what was printed (rows, bytes, stderr,
exit status) and on the command's peak memory, never on how long anything took: the liveness
bounds (``timeout=``) are only there so a broken limit fails instead of hanging.
"""

import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from warehouse import Lineage, Warehouse
from warehouse.__main__ import main as warehouse_main
from warehouse.limits import MIB, QueryLimitError, QueryLimits

REPO = Path(__file__).resolve().parents[2]
N = 3_000_000
BIG = f"SELECT * FROM range({N})"
# three columns, so formatting 3M rows takes long enough for a timeout to land mid-output
WIDE = f"SELECT range AS i, md5(range::varchar) AS h, range * 0.5 AS x FROM range({N})"
# about 1 KB per row: the byte cap binds before the row cap
FAT = "SELECT range AS i, repeat('x', 1000) AS pad FROM range(100000)"
ENV_CAPS = ("WEFT_SQL_MAX_ROWS", "WEFT_SQL_MAX_BYTES", "WEFT_SQL_TIMEOUT_S",
            "WEFT_SQL_MEMORY_LIMIT", "WEFT_SQL_THREADS", "WEFT_SQL_SPILL_LIMIT",
            "WEFT_SQL_SPILL_DIR")


@pytest.fixture
def wh(tmp_path, weft_home, monkeypatch):
    for name in ENV_CAPS:
        monkeypatch.delenv(name, raising=False)
    wh = Warehouse(tmp_path / "wh")
    wh.write("problems", [{"problem_id": "a", "source": "s", "split": "test", "problem": "p",
                           "answer": "1"}], lineage=Lineage(partition="p"))
    assert wh.refresh_catalog()  # built once, so a command's time goes to its query
    return wh


def _sql(wh, *args):
    return warehouse_main(["--root", str(wh.root), "sql", *args])


def _command(wh, *args):
    return [sys.executable, "-m", "warehouse", "--root", str(wh.root), "sql", *args]


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ENV_CAPS}
    return {**env, "PYTHONPATH": str(REPO)}


def _csv_rows(out):
    return list(csv.reader(io.StringIO(out)))


# ---- caps --------------------------------------------------------------------------------
def test_default_csv_output_is_capped_at_10000_rows_and_says_so(wh, capsys):
    assert _sql(wh, "--format", "csv", BIG) == 0
    out, err = capsys.readouterr()
    rows = _csv_rows(out)
    assert rows[0] == ["range"]
    assert [int(r[0]) for r in rows[1:]] == list(range(10_000))
    assert "10,000 rows" in err and "the result has more" in err
    assert "--max-rows" in err and "WEFT_SQL_MAX_ROWS" in err
    assert "Warehouse().sql(" in err and "Warehouse().stream(" in err  # where big results go


def test_default_json_output_is_capped_and_stays_valid_json(wh, capsys):
    assert _sql(wh, "--format", "json", BIG) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == [{"range": i} for i in range(10_000)]
    assert "10,000 rows" in err and "--max-rows" in err


def test_default_table_output_shows_200_rows_and_says_there_are_more(wh, capsys):
    assert _sql(wh, BIG) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    body = [line.strip() for line in lines[2:-1]]
    assert body == [str(i) for i in range(200)]
    assert "more" in lines[-1]
    assert "200 rows" in err and "the result has more" in err and "--max-rows" in err


def test_a_result_within_the_caps_prints_whole_without_a_note(wh, capsys):
    assert _sql(wh, "--format", "csv", "SELECT * FROM range(10000)") == 0
    out, err = capsys.readouterr()
    assert len(_csv_rows(out)) == 10_001 and err == ""
    assert _sql(wh, "SELECT * FROM range(200)") == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == "(200 rows)" and err == ""


def test_max_rows_raises_the_cap_and_the_flag_wins_over_the_variable(wh, capsys, monkeypatch):
    assert _sql(wh, "--format", "csv", "--max-rows", "12345", BIG) == 0
    out, err = capsys.readouterr()
    assert len(_csv_rows(out)) == 12_346 and "12,345 rows" in err
    monkeypatch.setenv("WEFT_SQL_MAX_ROWS", "50")
    assert _sql(wh, "--format", "json", BIG) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out)) == 50 and "50 rows" in err
    assert _sql(wh, "--format", "json", "--max-rows", "70", BIG) == 0
    assert len(json.loads(capsys.readouterr().out)) == 70
    monkeypatch.setenv("WEFT_SQL_MAX_ROWS", "many")
    with pytest.raises(SystemExit):
        _sql(wh, BIG)
    assert "WEFT_SQL_MAX_ROWS must be a whole number" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["-1", "ten"])
def test_max_rows_must_be_a_count(wh, capsys, bad):
    with pytest.raises(SystemExit):
        _sql(wh, "--max-rows", bad, BIG)
    assert "--max-rows" in capsys.readouterr().err


def test_the_byte_cap_stops_at_a_whole_row(wh, capsys):
    cap = 8 * MIB  # the default
    assert _sql(wh, "--format", "csv", FAT) == 0
    out, err = capsys.readouterr()
    rows = _csv_rows(out)
    assert len(out.encode()) <= cap
    assert 5_000 < len(rows) - 1 < 10_000  # the byte cap, not the row cap, stopped it
    assert all(r[1] == "x" * 1000 for r in rows[1:])  # no row cut in half
    assert "8.0 MiB" in err and "--max-bytes" in err and "WEFT_SQL_MAX_BYTES" in err
    assert f"{len(rows) - 1:,} rows" in err


@pytest.mark.parametrize("fmt", ["csv", "json", "table"])
def test_every_format_keeps_under_a_raised_or_lowered_byte_cap(wh, capsys, fmt):
    assert _sql(wh, "--format", fmt, "--max-bytes", "100KB", "--max-rows", "0", FAT) == 0
    out, err = capsys.readouterr()
    assert 50_000 < len(out.encode()) <= 100_000
    assert "--max-bytes" in err
    if fmt == "json":
        assert all(r["pad"] == "x" * 1000 for r in json.loads(out))
    if fmt == "table":
        assert "more" in out.splitlines()[-1]


def test_both_caps_off_prints_every_row_with_bounded_memory(wh, tmp_path):
    """3 million rows through a pipe to a file, the peak RSS of the command measured from a
    parent that runs nothing else: before streaming it held the whole result (1.8 GB)."""
    target = tmp_path / "all.csv"
    probe = ("import resource, subprocess, sys\n"
             "with open(sys.argv[1], 'w') as out:\n"
             "    rc = subprocess.run(sys.argv[2:], stdout=out).returncode\n"
             "print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    proc = subprocess.run(
        [sys.executable, "-c", probe, str(target),
         *_command(wh, "--format", "csv", "--max-rows", "0", "--max-bytes", "0",
                   "--memory-limit", "256MB", "--timeout", "600", WIDE)],
        check=False, capture_output=True, text=True, cwd=REPO, env=_env(), timeout=900)
    rc, peak_kib = map(int, proc.stdout.split())
    assert rc == 0, proc.stderr
    assert "capped" not in proc.stderr
    with open(target, newline="") as fh:
        count = sum(1 for _ in csv.reader(fh)) - 1
        assert count == N
    assert peak_kib * 1024 < 768 * MIB, f"peak RSS {peak_kib / 1024:.0f} MiB"


# ---- formats are unchanged ---------------------------------------------------------------
TYPED = ("SELECT * FROM (VALUES (1, 0.5, 'plain', NULL, [1, 2], TIMESTAMP '2026-01-02 03:04:05',"
         " {'k': [[1], []], 'm': 'é'}), (2, NULL, 'a,\"quoted\"\nline', 'x', [], NULL,"
         " {'k': [], 'm': NULL})) t(i, f, s, n, l, ts, st) ORDER BY i")


def test_csv_and_json_match_the_whole_result_formatted_at_once(wh, capsys):
    rows = wh.sql(TYPED).to_pylist()
    assert _sql(wh, "--format", "json", TYPED) == 0
    assert capsys.readouterr().out == json.dumps(rows, default=str, indent=1) + "\n"
    assert _sql(wh, "--format", "json", "SELECT * FROM range(0)") == 0
    assert capsys.readouterr().out == "[]\n"
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["i", "f", "s", "n", "l", "ts", "st"])
    for r in rows:
        writer.writerow(["" if v is None else v for v in r.values()])
    assert _sql(wh, "--format", "csv", TYPED) == 0
    assert capsys.readouterr().out == buf.getvalue()


def test_table_format_explain_and_describe_still_print(wh, capsys):
    assert _sql(wh, TYPED) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["i", "f", "s", "n", "l", "ts", "st"]
    assert "NULL" in out and "(2 rows)" in out
    assert _sql(wh, "DESCRIBE problems") == 0
    assert "problem_id" in capsys.readouterr().out
    assert _sql(wh, "EXPLAIN SELECT * FROM problems") == 0
    assert "physical_plan" in capsys.readouterr().out


# ---- the time limit covers formatting and writing ----------------------------------------
def test_a_timeout_while_formatting_a_huge_result_stops_the_command(wh):
    proc = subprocess.run(
        _command(wh, "--format", "json", "--max-rows", "0", "--max-bytes", "0",
                 "--timeout", "5", "--memory-limit", "256MB", WIDE),
        check=False, capture_output=True, text=True, cwd=REPO, env=_env(), timeout=300)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "wall-clock limit of 5 s" in proc.stderr and "--timeout" in proc.stderr
    assert "output is incomplete" in proc.stderr
    assert proc.stdout.startswith("[\n {\n")  # it had started printing
    assert f'"i": {N - 1}' not in proc.stdout  # and stopped before the last row


def test_a_timeout_stops_the_command_while_its_reader_does_not_read(wh):
    """stdout is a pipe nobody reads: the write blocks once the pipe is full, and the time
    limit still ends the command."""
    proc = subprocess.Popen(
        _command(wh, "--format", "csv", "--max-rows", "0", "--max-bytes", "0",
                 "--timeout", "3", BIG),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, env=_env())
    try:
        rc = proc.wait(timeout=120)
    finally:
        proc.kill()
        err = proc.stderr.read().decode()
        proc.stdout.close()
        proc.stderr.close()
    assert rc == 3, err
    assert "wall-clock limit of 3 s" in err and "output is incomplete" in err


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(wh):
    proc = subprocess.Popen(_command(wh, "--format", "csv", "--max-rows", "0", BIG),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, env=_env())
    try:
        assert proc.stdout.read(100).startswith(b"range")
        proc.stdout.close()  # like `| head -c 100`
        rc = proc.wait(timeout=120)
    finally:
        proc.kill()
        err = proc.stderr.read().decode()
        proc.stderr.close()
    assert rc == 0 and "Traceback" not in err and err == ""


def test_an_error_after_some_rows_is_a_sql_error(wh, capsys):
    failing = ("SELECT CASE WHEN range > 100000 THEN error('boom at the end') ELSE range END AS v"
               " FROM range(1000000)")
    assert _sql(wh, "--format", "csv", "--max-rows", "0", failing) == 1
    err = capsys.readouterr().err
    assert "SQL error" in err and "boom at the end" in err


# ---- the Python API ----------------------------------------------------------------------
def test_stream_hands_a_big_result_over_in_bounded_batches(wh):
    seen, biggest = 0, 0
    with wh.stream(BIG, batch_rows=4096) as result:
        assert result.schema.names == ["range"]
        for batch in result:
            biggest = max(biggest, batch.num_rows)
            seen += batch.num_rows
    assert (seen, biggest) == (N, 4096)
    with wh.stream("SELECT * FROM range($n)", {"n": 5}) as result:
        assert [r["range"] for b in result for r in b.to_pylist()] == list(range(5))


def test_a_big_result_exports_to_parquet_through_stream(wh, tmp_path):
    # the recipe the command's cap note and docs/warehouse.md point to
    target = tmp_path / "out.parquet"
    with wh.stream(WIDE) as result, pq.ParquetWriter(target, result.schema) as out:
        for batch in result:
            out.write_batch(batch)
    got = pq.read_table(target)
    assert got.num_rows == N and got.column_names == ["i", "h", "x"]
    assert got.slice(N - 1).to_pylist() == [{"i": N - 1, "h": hashlib.md5(
        str(N - 1).encode()).hexdigest(), "x": (N - 1) * 0.5}]


def test_stream_time_limit_covers_the_consumer(wh):
    consumed = 0
    slow = wh.stream(BIG, limits=QueryLimits(timeout_s=1), batch_rows=2048)
    with pytest.raises(QueryLimitError) as info, slow as result:
        for batch in result:
            consumed += batch.num_rows
            time.sleep(0.05)  # slow work on each batch, outside DuckDB
    assert info.value.limit == "time"
    assert 0 < consumed < N
    assert wh.sql("SELECT count(*) AS n FROM problems").to_pylist() == [{"n": 1}]


def test_stream_rows_are_arrows_rows_in_bounded_batches(wh):
    """``rows=True`` (what the command prints from) reads with DuckDB's fetch instead of
    Arrow: the same rows, the same batching, the empty result and parameters alike."""
    for query in (TYPED, "SELECT * FROM problems", "SELECT * FROM range(0)",
                  "DESCRIBE problems"):
        with wh.stream(query, rows=True) as result:
            names, got = result.names, [r for batch in result for r in batch]
        assert names == wh.sql(query).column_names
        assert got == wh.sql(query).to_pylist(), query
    sizes = []
    with wh.stream(BIG, rows=True, batch_rows=4096) as result:
        for batch in result:
            sizes.append(len(batch))
            if len(sizes) == 1:
                assert batch[:2] == [{"range": 0}, {"range": 1}]
    assert sum(sizes) == N and max(sizes) == 4096 and set(sizes[:-1]) == {4096}
    with wh.stream("SELECT * FROM range($n)", {"n": 5}, rows=True) as result:
        assert [r["range"] for b in result for r in b] == list(range(5))
    with wh.stream("SELECT * FROM range(10)", rows=True, batch_rows=10) as result:
        assert [len(b) for b in result] == [10]


def test_a_row_stream_stops_early_and_its_time_limit_covers_the_consumer(wh):
    with wh.stream(BIG, rows=True, batch_rows=100) as result:
        first = next(iter(result))
    assert len(first) == 100
    with pytest.raises(ValueError, match="closed"):
        next(iter(result))
    consumed = 0
    slow = wh.stream(BIG, limits=QueryLimits(timeout_s=1), batch_rows=2048, rows=True)
    with pytest.raises(QueryLimitError) as info, slow as result:
        for batch in result:
            consumed += len(batch)
            time.sleep(0.05)
    assert info.value.limit == "time"
    assert 0 < consumed < N


def test_the_command_prints_without_importing_pyarrow(wh):
    """On a current catalog ``sql`` needs neither pyarrow (nor numpy, which it imports) nor
    the declared schemas built with it: importing them was most of the command's start."""
    script = ("import sys\n"
              "from warehouse.__main__ import main\n"
              f"code = main(['--root', {str(wh.root)!r}, 'sql', '--format', 'csv', "
              "'SELECT problem_id, created_at FROM problems'])\n"
              "print('loaded', sorted(m for m in ('pyarrow', 'numpy', 'warehouse.schema') "
              "if m in sys.modules), 'exit', code)\n")
    proc = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True,
                          text=True, cwd=REPO, env=_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "problem_id,created_at" and lines[1].startswith("a,20")
    assert lines[-1] == "loaded [] exit 0"


def test_stream_refuses_what_sql_refuses(wh):
    from warehouse.confine import UnsafeQueryError

    with pytest.raises(UnsafeQueryError), wh.stream("SELECT 1; SELECT 2"):
        pass
    with pytest.raises(duckdb.Error), wh.stream("SELECT * FROM nope"):
        pass
