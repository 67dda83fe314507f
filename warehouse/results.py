"""Query results handed over in batches, read from DuckDB as they are consumed
(``Warehouse.stream``): Arrow record batches (``ResultStream``), or lists of rows as DuckDB's
own Python values (``RowStream``, which needs no pyarrow: ``python -m warehouse sql`` prints
from it).

A ``ResultStream`` wraps DuckDB's streaming Arrow reader: memory holds the batch being read, not
the result, and a consumer that stops early leaves the rest of the query unrun. Before each
batch after the first it checks the query's ``Deadline``, so the consumer's own work between
batches counts towards the wall-clock limit (DuckDB's work is interrupted by the watchdog of
``warehouse.limits.enforce``).

DuckDB's errors reach an Arrow stream reader as ``OSError("<kind> Error: ...")``; ``next_batch``
turns the kinds the limits and the confinement tell apart (interrupt, out of memory,
permission) back into DuckDB's exceptions, and any other into a plain ``duckdb.Error`` with
DuckDB's message, so callers handle one set of errors whichever batch failed.

Not guaranteed: a stream is read once, inside the ``with`` block of ``Warehouse.stream``
(leaving it closes the reader: a reader left open past its connection would block the next
read-write open of the catalog in this process); the error kinds are recognised by DuckDB's
message prefix, so an unknown kind becomes ``duckdb.Error``. A ``RowStream`` gets DuckDB's
exceptions as they are. Its values are what DuckDB's Python client returns, which differ from
Arrow's ``to_pylist`` for a few types no warehouse table declares: a MAP is a dict (Arrow: a list
of pairs), an INTERVAL a ``timedelta`` (Arrow: ``MonthDayNano``), a HUGEINT an int (Arrow: a
``Decimal``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from warehouse.engine import duckdb
from warehouse.limits import Deadline

if TYPE_CHECKING:
    import pyarrow as pa

# DuckDB's vector size: a batch is one chunk of DuckDB's output.
STREAM_BATCH_ROWS = 2048
_ERROR_KINDS = {
    "INTERRUPT Error": duckdb.InterruptException,
    "Out of Memory Error": duckdb.OutOfMemoryException,
    "Permission Error": duckdb.PermissionException,
}
_CLOSED = "the result stream is closed: read it inside the with block of Warehouse.stream"


class ResultStream:
    """The rows of one query, one Arrow record batch at a time as they are iterated; iterate
    once. ``schema`` is known before the first batch; ``deadline`` is the query's wall-clock
    limit, checked before each batch after the first."""

    def __init__(self, reader: pa.RecordBatchReader, first: pa.RecordBatch | None,
                 deadline: Deadline, keep: Any = None):
        self.schema: pa.Schema = reader.schema
        self.names: list[str] = list(reader.schema.names)
        self.deadline = deadline
        self._reader: pa.RecordBatchReader | None = reader
        self._first = first
        self._keep = keep  # the DuckDB relation the reader streams from

    def close(self) -> None:
        """Release the reader (``Warehouse.stream`` does on leaving its block)."""
        reader, self._reader, self._first, self._keep = self._reader, None, None, None
        if reader is not None:
            reader.close()

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if self._reader is None:
            raise ValueError(_CLOSED)
        if self._first is not None:
            batch, self._first = self._first, None
            yield batch
        while True:
            self.deadline.check()
            if self._reader is None:
                raise ValueError(_CLOSED)
            batch = next_batch(self._reader)
            if batch is None:
                return
            yield batch


def next_batch(reader: pa.RecordBatchReader) -> pa.RecordBatch | None:
    """The reader's next batch, None at the end; DuckDB's errors as DuckDB's exceptions."""
    import pyarrow as pa

    try:
        return reader.read_next_batch()
    except StopIteration:
        return None
    except (OSError, pa.ArrowException) as err:  # DuckDB's error, passed on by Arrow
        kind = str(err).split(":", 1)[0]
        raise _ERROR_KINDS.get(kind, duckdb.Error)(str(err)) from err


class RowStream:
    """The rows of one query, as lists of at most ``batch_rows`` dicts (column name to DuckDB's
    Python value) as they are iterated; iterate once. ``names`` are the result's columns, known
    before the first batch; ``deadline`` is checked before each batch after the first. Reads
    with the connection's ``fetchmany``, which DuckDB streams: the rest of the result is not
    computed until it is fetched."""

    def __init__(self, con: duckdb.DuckDBPyConnection, names: list[str],
                 first: list[tuple], deadline: Deadline, batch_rows: int):
        self.names = names
        self.deadline = deadline
        self._con: duckdb.DuckDBPyConnection | None = con
        self._first: list[tuple] | None = first
        self._batch_rows = batch_rows

    def close(self) -> None:
        """Stop reading (``Warehouse.stream`` does on leaving its block)."""
        self._con, self._first = None, None

    def _rows(self, rows: list[tuple]) -> list[dict[str, Any]]:
        names = self.names
        return [dict(zip(names, row)) for row in rows]

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        if self._con is None:
            raise ValueError(_CLOSED)
        if self._first:
            rows, self._first = self._first, None
            yield self._rows(rows)
            if len(rows) < self._batch_rows:
                return
        elif self._first is not None:  # an empty result
            self._first = None
            return
        while True:
            self.deadline.check()
            if self._con is None:
                raise ValueError(_CLOSED)
            rows = self._con.fetchmany(self._batch_rows)
            if not rows:
                return
            yield self._rows(rows)
            if len(rows) < self._batch_rows:
                return
