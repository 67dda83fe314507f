"""Ingestion: public datasets -> canonical ``problems`` rows, reasoning traces and TIR
trajectories, each with ``rejects`` rows for the records that cannot be used.

One front end for every kind (``core``): a registry of specs and one loader per kind, all going
through the same read -> adapt -> limits -> dedup -> decontaminate loop with the same checks and
reject reasons. :data:`SOURCES` and :func:`load_source` for problems, :data:`TRACE_SOURCES` and
:func:`load_traces` for reasoning traces, :data:`TIR_SOURCES` and :func:`load_tir` for real
tool-integrated reasoning trajectories. A bad record becomes a :class:`Reject` with its reason
and the other records still load; whole-file damage raises :class:`IngestError`. Each module's
docstring says what it guarantees.

Modules:

- ``core``: the shared loop (:func:`build_rows`, :func:`read_records`), the spec base class
  (:class:`IngestSpec`), results (:class:`LoadResult`) and rejects.
- ``sources``: the problem sources registry (:class:`SourceSpec`, :data:`SOURCES`, one table
  row per source, with :class:`BenchmarkUse` when it is a benchmark), :class:`Problem` rows,
  :func:`load_source`, and :func:`load_rows` (read, decontaminate against registered problem
  sources, build: every kind's loader, so it lives beside the registry it loads from).
- ``benchmark_file``: local JSONL benchmarks declared in ``$WEFT_BENCHMARKS`` or
  ``$WEFT_HOME/benchmarks.yaml``, registered when this package is imported (a file with
  mistakes registers nothing; its problems are in :data:`CONFIG_PROBLEMS`).
- ``io``: reading raw records from local files, the Hugging Face hub and reasoning-gym, and the
  per-record size and nesting limits (:class:`RecordLimits`).
- ``adapters``: one pure adapter per dataset layout (one raw record -> one normalised row), and
  :class:`adapters.FieldMap` for files already shaped as problem/answer rows.
- ``traces``: reasoning traces (s1K, LIMO, OpenMathReasoning) split into reasoning and response.
- ``trajectories``: MathCoder and ToRA trajectories in the TIR schema (``pipelines.tir``).

Import public names from ``pipelines.ingest``; the submodules import each other directly.
"""

from __future__ import annotations

from pipelines.ingest.benchmark_file import (
    BenchmarkFileError,
    benchmark_file,
    read_benchmark_file,
    register_benchmark_file,
    register_configured_benchmarks,
)
from pipelines.ingest.core import (
    REDACTED,
    IngestSpec,
    LoadResult,
    Registry,
    Reject,
    build_rows,
    clean_problem_text,
    dump_meta,
    problem_id,
    read_records,
)
from pipelines.ingest.io import (
    DEFAULT_LIMITS,
    LOCAL_SUFFIXES,
    REASONING_GYM_DEFAULT_COUNT,
    REASONING_GYM_TASKS,
    HubUnavailableError,
    IngestError,
    RawRecord,
    RecordLimits,
    check_record,
    generate_reasoning_gym,
    load_hf_records,
    probe_endpoint,
    raw_text,
    read_local_records,
    record_raw,
)
from pipelines.ingest.sources import (
    SOURCE_ID_KEYS,
    SOURCES,
    BenchmarkUse,
    IngestResult,
    Problem,
    SourceSpec,
    load_file,
    load_rows,
    load_source,
    register_source,
)
from pipelines.ingest.traces import TRACE_SOURCES, Trace, TraceResult, TraceSpec, load_traces
from pipelines.ingest.trajectories import TIR_SOURCES, TIRResult, TIRSpec, load_tir

__all__ = [
    "DEFAULT_LIMITS",
    "LOCAL_SUFFIXES",
    "REASONING_GYM_DEFAULT_COUNT",
    "REASONING_GYM_TASKS",
    "REDACTED",
    "SOURCES",
    "SOURCE_ID_KEYS",
    "TIR_SOURCES",
    "TRACE_SOURCES",
    "BenchmarkFileError",
    "BenchmarkUse",
    "HubUnavailableError",
    "IngestError",
    "IngestResult",
    "IngestSpec",
    "LoadResult",
    "Problem",
    "RawRecord",
    "RecordLimits",
    "Registry",
    "Reject",
    "SourceSpec",
    "TIRResult",
    "TIRSpec",
    "Trace",
    "TraceResult",
    "TraceSpec",
    "benchmark_file",
    "build_rows",
    "check_record",
    "clean_problem_text",
    "dump_meta",
    "generate_reasoning_gym",
    "load_file",
    "load_hf_records",
    "load_rows",
    "load_source",
    "load_tir",
    "load_traces",
    "probe_endpoint",
    "problem_id",
    "raw_text",
    "read_benchmark_file",
    "read_local_records",
    "read_records",
    "record_raw",
    "register_benchmark_file",
    "register_configured_benchmarks",
    "register_source",
]

# Local JSONL benchmarks of $WEFT_BENCHMARKS or $WEFT_HOME/benchmarks.yaml join the registry once,
# here, so every process that ingests or evaluates sees the same sources. A file with mistakes
# registers nothing and does not stop the import (the UI and every command still load): its
# problems are kept in CONFIG_PROBLEMS, which `weft` prints (one line each, exit 2) and which an
# unknown benchmark's error repeats.
CONFIG_PROBLEMS: list[str] = []
try:
    register_configured_benchmarks()
except BenchmarkFileError as _err:
    CONFIG_PROBLEMS = _err.problems
    import logging as _logging

    _logging.getLogger(__name__).warning(
        "the benchmarks file has %d problem(s); none of its benchmarks is registered:\n%s",
        len(CONFIG_PROBLEMS), "\n".join(CONFIG_PROBLEMS))
