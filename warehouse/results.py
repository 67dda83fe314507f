"""Query results handed over in Arrow record batches, read from DuckDB as they are consumed
(``Warehouse.stream``).

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
message prefix, so an unknown kind becomes ``duckdb.Error``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import duckdb
import pyarrow as pa

from warehouse.limits import Deadline

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
    try:
        return reader.read_next_batch()
    except StopIteration:
        return None
    except (OSError, pa.ArrowException) as err:  # DuckDB's error, passed on by Arrow
        kind = str(err).split(":", 1)[0]
        raise _ERROR_KINDS.get(kind, duckdb.Error)(str(err)) from err
