"""Ingestion of reasoning traces: (problem, reasoning, final response, gold answer) rows.

Reads the trace files under ``WEFT_DATA_DIR/traces`` (s1K, LIMO, OpenMathReasoning), GSM8K's
training split as short traces (``gsm8k_worked``: its calculator notes as reasoning, its worked
lines as the answer) and, for s1K and GSM8K, the matching Hugging Face layout. Each source has
one adapter that splits a record into reasoning and final response; a record that cannot be
split (no ``</think>``, empty reasoning, no gold answer, an unparseable trajectory list, a GSM8K
solution without calculator notes) becomes a :class:`Reject`, and so does a record over the
:class:`pipelines.ingest.RecordLimits` (field size, nesting depth): the checks and reject
reasons are ``pipelines.ingest.core``'s, shared with problems and TIR. Control characters are
stripped from problem text exactly as for ``problems`` (and counted: ``control_chars_stripped``,
``control_char_rows``), so ids keep joining; reasoning and response text is kept as written.
Trace files carry no dataset ids, so there is no id-conflict check.

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
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.ingest import adapters as ad
from pipelines.ingest.core import (
    IngestSpec,
    LoadResult,
    Prefer,
    Registry,
    TableRow,
    dump_meta,
    lookup,
)
from pipelines.ingest.io import DEFAULT_LIMITS, RecordLimits
from pipelines.ingest.sources import load_rows
from pipelines.text import last_boxed, normalize_problem_text

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
_THINK_OPEN_RE = re.compile(r"^\s*<think>", re.IGNORECASE)


@dataclass(frozen=True)
class Trace(TableRow):
    """One canonical ``traces`` row; ``meta`` is a JSON string."""

    trace_id: str
    problem_id: str
    source: str
    problem: str
    reasoning: str
    response: str
    answer: str
    meta: str = "{}"

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


class TraceResult(LoadResult[Trace]):
    """Output of :func:`load_traces`: the traces, rejects and exact duplicates dropped (trace
    files carry no dataset ids and no trace source is decontaminated, so those counts stay
    out of :meth:`counts`)."""

    ROWS = "traces"
    COUNTED = ("duplicates", "control_chars_stripped", "control_char_rows")

    @property
    def traces(self) -> list[Trace]:
        return self.rows


@dataclass(frozen=True, kw_only=True)
class TraceSpec(IngestSpec):
    """One reasoning-trace source: its adapter splits a record into reasoning and response.
    Rows and rejects carry ``name`` as their source; problem ids use ``name`` too."""

    adapter: Callable[[Mapping[str, Any]], ParsedTrace]

    KIND = "trace source"
    RESULT = TraceResult
    REQUIRED = ("reasoning", "response")

    def make_row(self, parsed: ParsedTrace, problem: str, pid: str,
                 extra_meta: Mapping[str, Any]) -> Trace:
        return Trace(
            trace_id=trace_id(self.name, problem, parsed.reasoning, parsed.response),
            problem_id=pid,
            source=self.name,
            problem=problem,
            reasoning=parsed.reasoning,
            response=parsed.response,
            answer=parsed.answer.strip(),
            meta=dump_meta(parsed.meta),
        )

    def dedup_key(self, row: Trace) -> str:
        return row.trace_id


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


_CALC_NOTE_RE = re.compile(r"<<([^<>]*)>>")


def adapt_gsm8k_worked(record: Mapping[str, Any]) -> ParsedTrace:
    """GSM8K's human-written worked solutions as short traces. Each solution line's calculator
    notes (``<<48/2=24>>``, the arithmetic its writer did aside) are that line's reasoning
    block; the line with its notes removed is the visible answer's block, and the answer ends
    with a line that states the ``####`` result (``\\boxed{}``, so graders find it). Blocks
    are separated by blank lines, one per solution line, so segmentation follows the lines.

    A stand-in for the paper's (x, r, a) triples where traces must be short (about 100-200
    tokens, where the reasoning traces run to thousands): the reasoning is scratch arithmetic,
    not an exploratory trace, and the answer restates it line by line. A solution with no
    calculator note has no private reasoning and is a reject. Problem and gold answer are
    read exactly as for the ``gsm8k`` problem sources."""
    parsed = ad.adapt_gsm8k(record)
    worked = ad.as_text(record.get("answer"), "answer").rsplit("####", 1)[0]
    reasoning, response = [], []
    for line in worked.splitlines():
        notes = [n.strip() for n in _CALC_NOTE_RE.findall(line) if n.strip()]
        if notes:
            reasoning.append("\n".join(notes))
        shown = " ".join(_CALC_NOTE_RE.sub("", line).split())
        if shown:
            response.append(shown)
    if not reasoning:
        raise ad.RowError("no calculator notes (<<...>>) in the worked solution: it has no "
                          "private reasoning to separate from the answer")
    response.append(f"The answer is $\\boxed{{{parsed.answer}}}$.")
    return ParsedTrace(problem=parsed.problem, reasoning="\n\n".join(reasoning),
                       response="\n\n".join(response), answer=parsed.answer)


# LIMO's hub release has no <think> split and OpenMathReasoning's is millions of rows: both are
# local-file sources here.
TRACE_SOURCES: dict[str, TraceSpec] = Registry()
for _spec in (
    TraceSpec(name="s1k", adapter=adapt_s1k, local_path="traces/s1k_sample50.jsonl",
              hf_id="simplescaling/s1K", hf_split="train"),
    TraceSpec(name="limo", adapter=adapt_limo, local_path="traces/limo_v2_subset40.jsonl"),
    TraceSpec(name="openmathreasoning", adapter=adapt_openmathreasoning,
              local_path="traces/openmathreasoning_r1_short72.jsonl"),
    # the GSM8K training split (the same file and hub rows as the gsm8k_train problems)
    TraceSpec(name="gsm8k_worked", adapter=adapt_gsm8k_worked,
              local_path="train/gsm8k_train.jsonl", hf_id="openai/gsm8k", hf_configs=("main",),
              hf_split="train", family="gsm8k"),
):
    TRACE_SOURCES[_spec.name] = _spec


def load_traces(
    name: str,
    *,
    data_dir: Path | str | None = None,
    prefer: Prefer = "local",
    limit: int | None = None,
    decontaminate: bool = True,
    limits: RecordLimits = DEFAULT_LIMITS,
) -> TraceResult:
    """Load one registered trace source (local file first unless ``prefer="hf"``) through
    ``pipelines.ingest.sources.load_rows``; ``limit`` caps raw records read, ``limits`` bounds each
    raw record's field size and nesting (over it: a reject); ``decontaminate`` applies to a
    spec with ``exclude_sources`` (none of the built-in ones)."""
    return load_rows(lookup(TRACE_SOURCES, name, TraceSpec.KIND), data_dir=data_dir,
                     prefer=prefer, limit=limit, decontaminate=decontaminate, limits=limits)

