"""Printing query results within caps: the formats of ``python -m warehouse sql`` (table, csv,
json), its row and byte caps, and a writer that stops at the query's deadline.

Rows come from ``Warehouse.stream`` one batch at a time (lists of row dicts read without
pyarrow, as the command reads them, or Arrow record batches) and are formatted and written as
they come (the table format keeps the rows it shows, their cells cut to ``CELL_WIDTH``
characters, to align them), so memory holds one batch plus what is shown, and reading stops
once a cap is reached: the rest of the result is never read.

Caps (0 turns one off), each set by a flag of the command or an environment variable:

=========  =====================================  ======================  ===============
cap        default                                environment variable    flag
=========  =====================================  ======================  ===============
rows       200 for ``table``, 10,000 for ``csv``   ``WEFT_SQL_MAX_ROWS``   ``--max-rows``
           and ``json``
bytes      8 MiB                                  ``WEFT_SQL_MAX_BYTES``  ``--max-bytes``
=========  =====================================  ======================  ===============

Why these defaults: the output goes to a terminal or a pipe, to be read or pasted. DuckDB's own
CLI shows 40 rows in its box mode and psql hands every row to a pager; 10,000 rows is more than
anyone reads or pastes, and a result bigger than that belongs in a file written from Python
(``Warehouse.sql`` returns a pyarrow Table, ``Warehouse.stream`` hands it over in batches). The
table format keeps the 200 rows it always showed: aligned columns are for reading on screen.
8 MiB holds 10,000 rows of up to about 800 bytes each; wider rows (whole prompts and model
outputs from ``eval_samples`` run to kilobytes) stop at the byte cap first.

Guaranteed: stdout gets at most the byte cap of UTF-8 text, whole rows only (a JSON result stays
valid JSON, its closing bracket counted in the cap), and at most the row cap of rows; whether
more rows exist is known exactly (the writer reads one row past a cap), and the command says on
stderr what stopped it and how to lift it. Formatting and writing count towards the query's
wall-clock limit: the deadline is checked before each batch and each write, and on a pipe or a
terminal every write waits for room with ``select`` no longer than the deadline, in pieces of at
most ``PIPE_BUF`` bytes, so a reader that stops reading cannot hold the command past it.

Not guaranteed: the total number of rows of a capped result (counting it would run the whole
query); bounded memory for the table format with both caps off (it keeps every row it shows,
cells cut to ``CELL_WIDTH``: print long results as csv or json); a header (the CSV column names)
longer than the byte cap is printed anyway; output written before a limit stopped the command
stays, incomplete (the command says so); a write to a regular file is not waited on with
``select`` (it does not wait for a reader); caps count UTF-8 bytes whatever stdout's encoding.
"""

from __future__ import annotations

import csv
import io
import json
import os
import select
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from warehouse.limits import MIB, Deadline, format_size, parse_size

if TYPE_CHECKING:
    import pyarrow as pa

ENV_MAX_ROWS = "WEFT_SQL_MAX_ROWS"
ENV_MAX_BYTES = "WEFT_SQL_MAX_BYTES"
DEFAULT_MAX_ROWS = 10_000
TABLE_MAX_ROWS = 200
DEFAULT_MAX_BYTES = 8 * MIB
FORMATS = ("table", "csv", "json")
CELL_WIDTH = 40
# text is handed to stdout in chunks of about this size
WRITE_CHUNK = 64 * 1024
EXPORT_HINT = ("For a large result use Python: Warehouse().sql(query) returns a pyarrow Table "
               "(.to_pandas(), pyarrow.parquet.write_table(table, 'out.parquet')), and "
               "Warehouse().stream(query) hands it over in record batches (docs/warehouse.md)")


@dataclass(frozen=True)
class OutputCaps:
    """Most rows and bytes one ``sql`` command prints; 0 means no cap. ``max_rows`` None is
    the format's default (``TABLE_MAX_ROWS`` for table, ``DEFAULT_MAX_ROWS`` otherwise)."""

    max_rows: int | None = None
    max_bytes: int = DEFAULT_MAX_BYTES

    def __post_init__(self) -> None:
        if self.max_rows is not None and (not isinstance(self.max_rows, int)
                                          or self.max_rows < 0):
            raise ValueError(f"max rows must be 0 (no cap) or more, got {self.max_rows!r}")
        if not isinstance(self.max_bytes, int) or self.max_bytes < 0:
            raise ValueError(f"max bytes must be 0 (no cap) or more, got {self.max_bytes!r}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides) -> OutputCaps:
        """Defaults, replaced by ``WEFT_SQL_MAX_ROWS``/``WEFT_SQL_MAX_BYTES`` set in ``env``
        (default ``os.environ``), replaced by the ``overrides`` that are not None."""
        env = os.environ if env is None else env
        values: dict = {}
        if env.get(ENV_MAX_ROWS):
            values["max_rows"] = parse_count(env[ENV_MAX_ROWS], ENV_MAX_ROWS)
        if env.get(ENV_MAX_BYTES):
            values["max_bytes"] = parse_size(env[ENV_MAX_BYTES], ENV_MAX_BYTES)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def rows_for(self, fmt: str) -> int:
        if self.max_rows is not None:
            return self.max_rows
        return TABLE_MAX_ROWS if fmt == "table" else DEFAULT_MAX_ROWS


def parse_count(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{what} must be a whole number (0 = no cap), got {text!r}") from None
    if value < 0:
        raise ValueError(f"{what} must be 0 (no cap) or more, got {text!r}")
    return value


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _cell(value: Any, width: int) -> str:
    text = "NULL" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 1] + "…"


def _table_text(names: list[str], cells: list[list[str]], footer: str) -> str:
    widths = [max([len(n)] + [len(c[i]) for c in cells]) for i, n in enumerate(names)]
    out = ["  ".join(n.ljust(w) for n, w in zip(names, widths)),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    out.append(footer)
    return "\n".join(out)


def _rows_text(n: int) -> str:
    return f"{n:,} row{'s' if n != 1 else ''}"


def format_table(table: pa.Table, max_width: int = CELL_WIDTH, max_rows: int = TABLE_MAX_ROWS
                 ) -> str:
    """Aligned plain-text rendering of a whole Arrow table with truncated cells and a row
    count footer."""
    return format_rows(table.column_names, table.slice(0, max_rows).to_pylist(),
                       total=table.num_rows, max_width=max_width)


def format_rows(names: list[str], rows: list[dict], *, total: int | None = None,
                max_width: int = CELL_WIDTH) -> str:
    """``rows`` (dicts by column name) as aligned plain text with truncated cells and a row
    count footer; ``total`` the result's rows when ``rows`` shows only the first ones (the
    table format of ``python -m warehouse tables``)."""
    total = len(rows) if total is None else total
    cells = [[_cell(r[n], max_width) for n in names] for r in rows]
    more = f" (showing {len(rows)})" if total > len(rows) else ""
    return _table_text(names, cells, f"({total} row{'s' if total != 1 else ''}{more})")


def format_result(table: pa.Table, fmt: str) -> str:
    """A whole table in ``fmt`` (table, csv or json), as ``python -m warehouse sql`` prints it
    without caps (the table format shows at most ``TABLE_MAX_ROWS`` rows)."""
    if fmt == "table":
        return format_table(table)
    buf = io.StringIO()
    writer = ResultWriter(fmt, table.column_names, max_rows=0, max_bytes=0, out=buf)
    writer.write(table.to_batches())
    return buf.getvalue().removesuffix("\n")


# ---- formats: each measures a row's bytes before it is written ---------------------------
class _Csv:
    """RFC 4180 CSV (csv module defaults, CRLF line ends); NULL is an empty field."""

    closing_reserve = 0

    def __init__(self, names: list[str]):
        self.names = names
        self._buf = io.StringIO()
        self._writer = csv.writer(self._buf)

    def _line(self, values: Iterable[Any]) -> str:
        self._buf.seek(0)
        self._buf.truncate()
        self._writer.writerow(values)
        return self._buf.getvalue()

    def opening(self) -> str:
        return self._line(self.names)

    def measure(self, row: dict) -> tuple[int, str]:
        line = self._line(["" if row[n] is None else row[n] for n in self.names])
        return _utf8_len(line), line

    def accept(self, line: str) -> str:
        return line

    def closing(self, complete: bool) -> str:
        return ""


_JSON_COMPACT = json.JSONEncoder(default=str)
_JSON_INDENTED = json.JSONEncoder(default=str, indent=1)


class _Json:
    """One JSON array of objects, laid out as ``json.dumps(rows, indent=1, default=str)``
    (each object at indent level 1, its values at level 2); scalars go through the C encoder,
    only non-empty lists and objects through the indenting one."""

    closing_reserve = 3  # "\n]\n"

    def __init__(self, names: list[str]):
        self.rows = 0
        self._keys = {n: _JSON_COMPACT.encode(n) for n in names}

    def _value(self, value: Any) -> str:
        if isinstance(value, (list, tuple, dict)) and value:
            return _JSON_INDENTED.encode(value).replace("\n", "\n  ")
        return _JSON_COMPACT.encode(value)

    def measure(self, row: dict) -> tuple[int, str]:
        fields = ",\n".join(f"  {self._keys.get(k) or _JSON_COMPACT.encode(k)}: {self._value(v)}"
                            for k, v in row.items())
        text = ("[\n {\n" if self.rows == 0 else ",\n {\n") + fields + "\n }"
        return _utf8_len(text), text

    def opening(self) -> str:
        return ""

    def accept(self, text: str) -> str:
        self.rows += 1
        return text

    def closing(self, complete: bool) -> str:
        return "\n]\n" if self.rows else "[]\n"


class _Table:
    """Aligned columns, cells cut to ``CELL_WIDTH`` characters: the rows are kept and printed
    at the end, and a row's bytes are what it adds to the whole table (columns may widen)."""

    def __init__(self, names: list[str]):
        self.names = names
        self.cells: list[list[str]] = []
        self.widths = [len(n) for n in names]
        # bytes beyond one per character (non-ASCII text), over every cell and name
        self.extra = sum(_utf8_len(n) - len(n) for n in names)
        self.size = self._size(0, self.widths, self.extra)
        # printed at the end: the header and separator lines as they are now (what rows add
        # to them is in each row's bytes), and the footer line
        self.closing_reserve = self.size + 64

    def _size(self, rows: int, widths: list[int], extra: int) -> int:
        # header, separator and rows, each as wide as the columns, then a newline
        return (rows + 2) * (sum(widths) + 2 * max(0, len(widths) - 1) + 1) + extra

    def opening(self) -> str:
        return ""

    def measure(self, row: dict) -> tuple[int, tuple]:
        cells = [_cell(row[n], CELL_WIDTH) for n in self.names]
        widths = [max(w, len(c)) for w, c in zip(self.widths, cells)]
        extra = self.extra + sum(_utf8_len(c) - len(c) for c in cells)
        size = self._size(len(self.cells) + 1, widths, extra)
        return size - self.size, (cells, widths, extra, size)

    def accept(self, staged: tuple) -> str:
        cells, self.widths, self.extra, self.size = staged
        self.cells.append(cells)
        return ""

    def closing(self, complete: bool) -> str:
        n = len(self.cells)
        footer = f"({_rows_text(n)})" if complete else f"(first {_rows_text(n)}; more not shown)"
        return _table_text(self.names, self.cells, footer) + "\n"


_FORMATS = {"table": _Table, "csv": _Csv, "json": _Json}


# ---- writing -----------------------------------------------------------------------------
class DeadlineWriter:
    """Text to ``stream`` in chunks of about ``WRITE_CHUNK``, each checking ``deadline``
    (None: no deadline). When ``stream`` is a pipe, terminal or socket, chunks go straight to
    its file descriptor in pieces of at most ``PIPE_BUF`` bytes, each after ``select`` says
    there is room, waiting no longer than the deadline; other streams (a regular file, an
    in-memory buffer) are written as they are. ``written`` counts the bytes handed over."""

    def __init__(self, stream: TextIO, deadline: Deadline | None = None):
        self.stream = stream
        self.deadline = deadline
        self.written = 0
        self._parts: list[str] = []
        self._buffered = 0
        self._fd = _waitable_fd(stream)
        self._encoding = getattr(stream, "encoding", None) or "utf-8"
        self._errors = getattr(stream, "errors", None) or "strict"

    def write(self, text: str) -> None:
        if text:
            self._parts.append(text)
            self._buffered += len(text)
            if self._buffered >= WRITE_CHUNK:
                self.flush()

    def flush(self) -> None:
        text = "".join(self._parts)
        self._parts, self._buffered = [], 0
        if not text:
            return
        if self.deadline is not None:
            self.deadline.check()
        if self._fd is None:
            self.stream.write(text)
            self.stream.flush()
            self.written += len(text)
            return
        self.stream.flush()  # whatever was printed through the stream goes first
        view = memoryview(text.encode(self._encoding, self._errors))
        while view:
            wait = None if self.deadline is None else self.deadline.remaining_s()
            if wait is not None and wait <= 0:
                raise self.deadline.error()
            _, ready, _ = select.select([], [self._fd], [], wait)
            if not ready:
                continue  # the deadline has passed: raised above
            try:
                done = os.write(self._fd, view[:select.PIPE_BUF])
            except BlockingIOError:  # a non-blocking descriptor without room after all
                continue
            self.written += done
            view = view[done:]


def _waitable_fd(stream: TextIO) -> int | None:
    """``stream``'s file descriptor when writing to it can block on a reader (a pipe, a
    terminal, a socket), else None."""
    try:
        fd = stream.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return None
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or (stat.S_ISCHR(mode) and os.isatty(fd)):
        return fd
    return None


class ResultWriter:
    """Formats rows in ``fmt`` and writes them to ``out`` (a ``DeadlineWriter`` or any text
    stream) within ``max_rows`` rows and ``max_bytes`` bytes (0: no cap). After ``write``:
    ``rows`` written, ``more`` (rows were left out), ``capped_by`` (``"rows"``, ``"bytes"`` or
    None)."""

    def __init__(self, fmt: str, names: list[str], *, max_rows: int, max_bytes: int, out: Any):
        if fmt not in _FORMATS:
            raise ValueError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
        self.fmt = fmt
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.out = out
        self.rows = 0
        self.size = 0
        self.more = False
        self.capped_by: str | None = None
        self._format = _FORMATS[fmt](list(names))

    def write(self, batches: Iterable[pa.RecordBatch | list[dict[str, Any]]]) -> None:
        """Write the rows of ``batches``: Arrow record batches or lists of row dicts."""
        fmt = self._format
        opening = fmt.opening()
        self.size = _utf8_len(opening)
        self.out.write(opening)
        budget = self.max_bytes - fmt.closing_reserve if self.max_bytes else None
        for batch in batches:
            for row in (batch if isinstance(batch, list) else batch.to_pylist()):
                if self.max_rows and self.rows >= self.max_rows:
                    self.more, self.capped_by = True, "rows"
                    break
                cost, staged = fmt.measure(row)
                if budget is not None and self.size + cost > budget:
                    self.more, self.capped_by = True, "bytes"
                    break
                self.out.write(fmt.accept(staged))
                self.size += cost
                self.rows += 1
            if self.more:
                break
        self.out.write(fmt.closing(complete=not self.more))
        if hasattr(self.out, "flush"):
            self.out.flush()

    def cap_note(self) -> str | None:
        """What stopped the output and how to print more, for stderr; None when whole."""
        if not self.more:
            return None
        if self.capped_by == "rows":
            also = (f"; the output is also capped at {format_size(self.max_bytes)}: "
                    f"--max-bytes SIZE (0 = no cap) or {ENV_MAX_BYTES}=SIZE"
                    if self.max_bytes else "")
            return (f"output capped at the first {_rows_text(self.rows)} (--max-rows "
                    f"{self.max_rows}): the result has more. Print more with --max-rows N "
                    f"(0 = no cap) or {ENV_MAX_ROWS}=N{also}. {EXPORT_HINT}")
        also = (f", and --max-rows N (0 = no cap) or {ENV_MAX_ROWS}=N beyond "
                f"{_rows_text(self.max_rows)}" if self.max_rows else "")
        return (f"output capped at {format_size(self.max_bytes)} after {_rows_text(self.rows)} "
                f"(--max-bytes): the result has more. Print more with --max-bytes SIZE "
                f"(e.g. 64MB, 0 = no cap) or {ENV_MAX_BYTES}=SIZE{also}. {EXPORT_HINT}")
