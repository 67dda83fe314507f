"""Ingestion of reasoning traces: (problem, reasoning, final response, gold answer) rows.

Reads the trace files under ``WEFT_DATA_DIR/traces`` (s1K, LIMO, OpenMathReasoning) and, for
s1K, the matching Hugging Face layout. Each source has one adapter that splits a record into
reasoning and final response; a record that cannot be split (no ``</think>``, empty
reasoning, no gold answer, an unparseable trajectory list) becomes a :class:`Reject`, and so
does a record over the :class:`pipelines.ingest.RecordLimits` (field size, nesting depth).
Control characters are stripped from problem text exactly as for ``problems`` (and counted:
``control_chars_stripped``, ``control_char_rows``), so ids keep joining; reasoning and response
text is kept as written. Trace files carry no dataset ids, so there is no id-conflict check.

Guarantees: ``problem_id`` is computed exactly as for ``problems`` rows (same hash of source
name and normalised text), so traces join problems of the same source; ``trace_id`` hashes
source, problem, reasoning and response, so re-ingesting gives the same ids and exact
duplicate traces are dropped (counted). Not guaranteed: that a trace's response is correct
(the files hold both correct and incorrect attempts; grading is a later stage), or that
``answer`` is short — s1K's gold for proof/science items is a reference solution text.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.ingest import adapters as ad
from pipelines.ingest.io import (
    DEFAULT_LIMITS,
    HubUnavailableError,
    IngestError,
    RawRecord,
    RecordLimits,
    check_record,
    load_hf_records,
    read_local_records,
    record_raw,
)
from pipelines.ingest.sources import Prefer, Reject, clean_problem_text, dump_meta, problem_id
from pipelines.settings import data_dir as default_data_dir
from pipelines.text import last_boxed, normalize_problem_text

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
_THINK_OPEN_RE = re.compile(r"^\s*<think>", re.IGNORECASE)


@dataclass(frozen=True)
class Trace:
    """One canonical ``traces`` row; ``meta`` is a JSON string."""

    trace_id: str
    problem_id: str
    source: str
    problem: str
    reasoning: str
    response: str
    answer: str
    meta: str = "{}"

    def to_row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def meta_dict(self) -> dict[str, Any]:
        return json.loads(self.meta)

    def __repr__(self) -> str:
        return (
            f"Trace(trace_id={self.trace_id!r}, problem_id={self.problem_id!r}, "
            f"source={self.source!r}, "
            f"answer={self.answer[:40]!r}, reasoning=<{len(self.reasoning)} chars>, "
            f"response=<{len(self.response)} chars>)"
        )


@dataclass(frozen=True)
class ParsedTrace:
    problem: str
    reasoning: str
    response: str
    answer: str
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass
class TraceResult:
    traces: list[Trace]
    rejects: list[Reject]
    origin: str
    duplicates: int = 0
    control_chars_stripped: int = 0
    control_char_rows: int = 0

    def counts(self) -> dict[str, int]:
        return {
            "traces": len(self.traces),
            "rejects": len(self.rejects),
            "duplicates": self.duplicates,
            "control_chars_stripped": self.control_chars_stripped,
            "control_char_rows": self.control_char_rows,
        }


@dataclass(frozen=True)
class TraceSpec:
    name: str
    adapter: Callable[[Mapping[str, Any]], ParsedTrace]
    local_path: str | None = None
    hf_id: str | None = None
    hf_config: str | None = None
    hf_split: str = "train"


def trace_id(source: str, problem: str, reasoning: str, response: str) -> str:
    """First 16 hex chars of sha1 over source, normalised problem, reasoning and response."""
    key = "\x1f".join((source, normalize_problem_text(problem), reasoning, response))
    return hashlib.sha1(key.encode("utf-8")).hexdigest()[:16]


def split_think(text: str) -> tuple[str, str]:
    """``"<think>R</think>F"`` -> (R, F), both stripped; the opening tag is optional.

    Raises :class:`ad.RowError` when there is no ``</think>`` or more than one.
    """
    count = text.count(THINK_CLOSE)
    if count == 0:
        raise ad.RowError("no </think> tag: cannot separate the reasoning from the final response")
    if count > 1:
        raise ad.RowError(f"{count} </think> tags: ambiguous split between reasoning and response")
    reasoning, response = text.split(THINK_CLOSE)
    reasoning = _THINK_OPEN_RE.sub("", reasoning, count=1)
    return reasoning.strip(), response.strip()


def _gold_from_solution(solution: str) -> str:
    return (last_boxed(solution) or solution).strip()


def _literal_or_text(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return value
    return value


def adapt_s1k(record: Mapping[str, Any]) -> ParsedTrace:
    """s1K: ``thinking_trajectories`` (a list, or a list written as text) joined by blank lines;
    ``attempt`` is the response; gold = last ``\\boxed{}`` of ``solution`` or the solution text."""
    items = ad.literal_list(record.get("thinking_trajectories"), "thinking_trajectories")
    reasoning = "\n\n".join(ad.as_text(i, "thinking_trajectories").strip() for i in items).strip()
    solution = ad.as_text(record.get("solution"), "solution")
    meta = {
        "cot_type": record.get("cot_type"),
        "source_type": record.get("source_type"),
        "original_metadata": _literal_or_text(record.get("metadata")),
    }
    if _gold_from_solution(solution) != solution.strip():
        meta["gold_solution"] = solution
    return ParsedTrace(
        problem=ad.as_text(record.get("question"), "question"),
        reasoning=reasoning,
        response=ad.as_text(record.get("attempt"), "attempt").strip(),
        answer=_gold_from_solution(solution),
        meta={k: v for k, v in meta.items() if v is not None},
    )


def adapt_limo(record: Mapping[str, Any]) -> ParsedTrace:
    """LIMO (instruction format): ``output`` = ``<think>…</think>`` + final solution;
    gold = last ``\\boxed{}`` of the final solution (else of the whole output)."""
    instruction = ad.as_text(record.get("instruction"), "instruction").strip()
    extra = ad.as_text(record.get("input"), "input").strip()
    problem = f"{instruction}\n\n{extra}" if extra else instruction
    output = ad.as_text(record.get("output"), "output")
    reasoning, response = split_think(output)
    answer = (last_boxed(response) or last_boxed(output) or "").strip()
    if not answer:
        raise ad.RowError("missing answer: no \\boxed{} in the LIMO output")
    meta = {"system": record.get("system")} if record.get("system") else {}
    return ParsedTrace(problem, reasoning, response, answer, meta)


def adapt_openmathreasoning(record: Mapping[str, Any]) -> ParsedTrace:
    """OpenMathReasoning: ``generated_solution`` = ``<think>…</think>`` + answer;
    gold = ``expected_answer`` or the last ``\\boxed{}`` of the response."""
    output = ad.as_text(record.get("generated_solution"), "generated_solution")
    reasoning, response = split_think(output)
    answer = ad.as_text(record.get("expected_answer"), "expected_answer").strip()
    if not answer:
        answer = (last_boxed(response) or "").strip()
    meta = {
        k: record.get(k)
        for k in ("problem_type", "problem_source", "generation_model", "pass_rate_72b_tir")
    }
    return ParsedTrace(
        problem=ad.as_text(record.get("problem"), "problem"),
        reasoning=reasoning,
        response=response,
        answer=answer,
        meta={k: v for k, v in meta.items() if v is not None},
    )


def _build_trace_sources() -> dict[str, TraceSpec]:
    specs = [
        TraceSpec("s1k", adapt_s1k, "traces/s1k_sample50.jsonl", "simplescaling/s1K"),
        # LIMO's hub release has no <think> split and OpenMathReasoning's is millions of rows:
        # both are local-file sources here.
        TraceSpec("limo", adapt_limo, "traces/limo_v2_subset40.jsonl"),
        TraceSpec(
            "openmathreasoning",
            adapt_openmathreasoning,
            "traces/openmathreasoning_r1_short72.jsonl",
        ),
    ]
    registry: dict[str, TraceSpec] = {}
    for spec in specs:
        if spec.name in registry:
            raise KeyError(f"trace source {spec.name!r} is registered twice")
        registry[spec.name] = spec
    return registry


TRACE_SOURCES: dict[str, TraceSpec] = _build_trace_sources()


def build_traces(
    spec: TraceSpec, records: list[RawRecord], origin: str, limits: RecordLimits = DEFAULT_LIMITS
) -> TraceResult:
    """Adapt and validate records into traces; exact duplicate traces are counted, not kept."""
    traces: list[Trace] = []
    rejects: list[Reject] = []
    seen: set[str] = set()
    result = TraceResult(traces, rejects, origin)
    for item in records:
        if not isinstance(item.record, Mapping):
            rejects.append(
                Reject(
                    spec.name,
                    origin,
                    item.line,
                    f"record is a JSON {type(item.record).__name__}, expected an object",
                    item.raw,
                )
            )
            continue
        too_big = check_record(item.record, limits)
        if too_big:
            rejects.append(Reject(spec.name, origin, item.line, too_big, item.raw))
            continue
        try:
            parsed = spec.adapter(item.record)
        except ad.RowError as exc:
            rejects.append(Reject(spec.name, origin, item.line, str(exc), item.raw))
            continue
        problem, removed = clean_problem_text(parsed.problem)
        parsed = dataclasses.replace(parsed, problem=problem)
        missing = [
            name
            for name in ("problem", "reasoning", "response", "answer")
            if not getattr(parsed, name).strip()
        ]
        if missing:
            reason = "missing answer" if missing == ["answer"] else f"empty {', '.join(missing)}"
            rejects.append(Reject(spec.name, origin, item.line, reason, item.raw))
            continue
        tid = trace_id(spec.name, parsed.problem, parsed.reasoning, parsed.response)
        if tid in seen:
            result.duplicates += 1
            continue
        seen.add(tid)
        if removed:
            result.control_chars_stripped += removed
            result.control_char_rows += 1
        traces.append(
            Trace(
                trace_id=tid,
                problem_id=problem_id(spec.name, parsed.problem),
                source=spec.name,
                problem=parsed.problem,
                reasoning=parsed.reasoning,
                response=parsed.response,
                answer=parsed.answer.strip(),
                meta=dump_meta(parsed.meta),
            )
        )
    return result


def load_traces(
    name: str,
    *,
    data_dir: Path | str | None = None,
    prefer: Prefer = "local",
    limit: int | None = None,
    limits: RecordLimits = DEFAULT_LIMITS,
) -> TraceResult:
    """Load one registered trace source (local file first unless ``prefer="hf"``); ``limits``
    bounds each raw record's field size and nesting (over it: a reject)."""
    if name not in TRACE_SOURCES:
        raise KeyError(f"unknown trace source {name!r}; known: {', '.join(sorted(TRACE_SOURCES))}")
    if prefer not in ("local", "hf"):
        raise ValueError(f"prefer must be 'local' or 'hf', got {prefer!r}")
    spec = TRACE_SOURCES[name]
    base = Path(data_dir) if data_dir is not None else default_data_dir()
    path = base / spec.local_path if (base is not None and spec.local_path) else None
    attempts: list[str] = []
    for way in ("local", "hf") if prefer == "local" else ("hf", "local"):
        if way == "local":
            if path is None or not path.is_file():
                attempts.append(f"local: {path or spec.local_path} not found")
                continue
            records, bad = read_local_records(path, limit=limit)
            result = build_traces(spec, records, str(path), limits)
            result.rejects[:0] = [
                Reject(spec.name, str(path), line, reason, raw) for line, reason, raw in bad
            ]
            return result
        if spec.hf_id is None:
            attempts.append("hub: this trace source has no Hugging Face id")
            continue
        try:
            rows = load_hf_records(spec.hf_id, spec.hf_config, spec.hf_split, limit=limit)
        except HubUnavailableError as exc:
            attempts.append(f"hub: {str(exc).rstrip('.')}")
            continue
        origin = f"hf://{spec.hf_id}/{spec.hf_split}"
        records = [RawRecord(i + 1, row, record_raw(row)) for i, row in enumerate(rows)]
        return build_traces(spec, records, origin, limits)
    raise IngestError(
        f"could not load trace source {name!r}. Tried: {'; '.join(attempts)}. Put "
        f"{spec.local_path} under a data folder and set WEFT_DATA_DIR to that folder."
    )
