"""Ingestion: public datasets -> canonical ``problems`` rows, reasoning traces and TIR
trajectories, each with ``rejects`` rows for the records that cannot be used.

One front end for every source: :data:`SOURCES` and :func:`load_source` for problems,
:data:`TRACE_SOURCES` and :func:`load_traces` for reasoning traces, :data:`TIR_SOURCES` and
:func:`load_tir` for real tool-integrated reasoning trajectories. A bad record becomes a
:class:`Reject` with its reason and the other records still load; whole-file damage raises
:class:`IngestError`. Each module's docstring says what it guarantees.

Modules:

- ``sources``: the problem sources registry (:class:`SourceSpec`, :data:`SOURCES`), canonical
  :class:`Problem` rows, deduplication and :func:`load_source`.
- ``io``: reading raw records from local files, the Hugging Face hub and reasoning-gym, and the
  per-record size and nesting limits (:class:`RecordLimits`).
- ``adapters``: one pure adapter per dataset layout (one raw record -> one normalised row).
- ``traces``: reasoning traces (s1K, LIMO, OpenMathReasoning) split into reasoning and response.
- ``tir``: MathCoder and ToRA trajectories in the TIR schema (``pipelines.tir``).

Import public names from ``pipelines.ingest``; the submodules import each other directly.
"""

from __future__ import annotations

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
    REDACTED,
    SOURCE_ID_KEYS,
    SOURCES,
    IngestResult,
    Problem,
    Registry,
    Reject,
    SourceSpec,
    build_problems,
    clean_problem_text,
    dump_meta,
    load_file,
    load_source,
    problem_id,
)
from pipelines.ingest.tir import TIR_SOURCES, build_tir, load_tir
from pipelines.ingest.traces import TRACE_SOURCES, build_traces, load_traces

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
    "HubUnavailableError",
    "IngestError",
    "IngestResult",
    "Problem",
    "RawRecord",
    "RecordLimits",
    "Registry",
    "Reject",
    "SourceSpec",
    "build_problems",
    "build_tir",
    "build_traces",
    "check_record",
    "clean_problem_text",
    "dump_meta",
    "generate_reasoning_gym",
    "load_file",
    "load_hf_records",
    "load_source",
    "load_tir",
    "load_traces",
    "probe_endpoint",
    "problem_id",
    "raw_text",
    "read_local_records",
    "record_raw",
]
