"""Ingestion: public problem datasets -> canonical ``problems`` rows plus ``rejects`` rows.

Sources come from three places: local copies of public files under ``WEFT_DATA_DIR``
(.jsonl, .jsonl.gz, .json, .json.gz, .parquet), the Hugging Face hub through
``datasets.load_dataset``, and a built-in offline generator (``reasoning-gym``). Every source
is described by one :class:`SourceSpec` in :data:`SOURCES`; reading raw records lives in
``pipelines.ingest.io`` and the per-format adapters in ``pipelines.ingest.adapters`` (one
raw record -> one normalised row); traces are in ``pipelines.ingest.traces``.

Guarantees: a malformed line, a non-UTF-8 line, a line nested too deeply to parse, a record
over the :class:`RecordLimits` (a field longer than ``max_field_chars``, nesting deeper than
``max_depth``) or a record an adapter cannot use becomes a :class:`Reject` with a specific
reason, and the other records still load. Control characters (Unicode Cc: NUL, the other C0 and
C1 controls, DEL; not tab or newline; CR/CRLF become newline) are removed from problem text
before ids and dedup keys are computed; the removed characters and affected rows are counted
over the kept rows (``control_chars_stripped``, ``control_char_rows``). Within one call,
problems are deduplicated by normalised text (first kept; a later copy with a *different*
answer becomes a reject). A record whose dataset id (``unique_id``, ``task_id`` or
``original_id`` in the adapter's meta) was already used by an earlier record with *different*
normalised text is rejected and counted (``id_conflicts``); the first record is kept.
Keep-first (rather than rejecting both) is the rule the text dedup already follows, and it means
appending rows to a file never changes which earlier rows are kept, so a source's dataset
version only moves when its earlier content does; the reason names the kept row's line and
problem id so a person can compare the two. ``problem_id`` is stable across runs and machines.
The hub loader never hangs offline: it checks that the endpoint answers within a few seconds
first.

Not guaranteed: answers are normalised strings, not verified to be correct; whole-file damage
(a corrupt gzip or Parquet container, a missing file) raises :class:`IngestError` instead of
producing rejects; Hugging Face layouts other than the ones named in ``SOURCES`` may not map.
Nothing here writes files except the Hugging Face cache under ``WEFT_HOME/cache``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pipelines.ingest import adapters as ad
from pipelines.ingest.io import (
    DEFAULT_LIMITS,
    REASONING_GYM_DEFAULT_COUNT,
    REASONING_GYM_TASKS,
    HubUnavailableError,
    IngestError,
    RawRecord,
    RecordLimits,
    check_record,
    generate_reasoning_gym,
    load_hf_records,
    raw_text,
    read_local_records,
    record_raw,
)
from pipelines.settings import data_dir as default_data_dir
from pipelines.text import normalize_problem_text, strip_control_chars

REDACTED = "<redacted: this dataset's text must not be stored or logged in plain text>"
# Meta keys that hold a dataset's own record id (see the adapters); each must map to one text.
SOURCE_ID_KEYS = ("unique_id", "task_id", "original_id")

Prefer = Literal["local", "hf"]


# ----------------------------------------------------------------------------- row types


def problem_id(source: str, problem: str) -> str:
    """Stable id: first 16 hex chars of sha1(source + US + normalised problem text)."""
    key = f"{source}\x1f{normalize_problem_text(problem)}"
    return hashlib.sha1(key.encode("utf-8")).hexdigest()[:16]


def dump_meta(meta: Mapping[str, Any]) -> str:
    """Meta as a JSON string with sorted keys, so identical inputs give identical text."""
    return json.dumps(dict(meta), sort_keys=True, ensure_ascii=False, default=str)


@dataclass(frozen=True)
class Problem:
    """One canonical ``problems`` row. ``meta`` is a JSON string (see :meth:`meta_dict`)."""

    problem_id: str
    source: str
    split: str
    problem: str
    answer: str
    solution: str
    answer_type: str
    meta: str = "{}"

    def to_row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def meta_dict(self) -> dict[str, Any]:
        return json.loads(self.meta)

    def __repr__(self) -> str:  # never print problem text (GPQA must not reach logs)
        return (
            f"Problem(problem_id={self.problem_id!r}, source={self.source!r}, "
            f"split={self.split!r}, answer={self.answer[:40]!r}, "
            f"answer_type={self.answer_type!r}, problem=<{len(self.problem)} chars>)"
        )


@dataclass(frozen=True)
class Reject:
    """One ``rejects`` row: where the bad record came from and why it was refused."""

    source: str
    origin: str
    line: int
    reason: str
    raw: str

    def to_row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class IngestResult:
    """Output of :func:`load_source`. ``duplicates``: same text and answer as a kept row;
    ``excluded``: removed on purpose (e.g. MATH-500 problems dropped from the MATH train pool);
    ``id_conflicts``: rejects whose dataset id an earlier record used with different text
    (also in ``rejects``); ``control_chars_stripped`` / ``control_char_rows``: control
    characters removed from problem text and the rows they were removed from."""

    problems: list[Problem]
    rejects: list[Reject]
    origin: str
    duplicates: int = 0
    excluded: int = 0
    id_conflicts: int = 0
    control_chars_stripped: int = 0
    control_char_rows: int = 0

    def counts(self) -> dict[str, int]:
        return {
            "problems": len(self.problems),
            "rejects": len(self.rejects),
            "duplicates": self.duplicates,
            "excluded": self.excluded,
            "id_conflicts": self.id_conflicts,
            "control_chars_stripped": self.control_chars_stripped,
            "control_char_rows": self.control_char_rows,
        }


@dataclass(frozen=True)
class SourceSpec:
    """How to load one dataset. ``family`` is the ``source`` column (defaults to ``name``);
    two specs of one family (gsm8k train/test) share the problem-id namespace, so overlap
    between them shows up as equal ids."""

    name: str
    split: str
    answer_type: str
    adapter: ad.Adapter
    local_path: str | None = None
    hf_id: str | None = None
    hf_configs: tuple[str | None, ...] = (None,)
    hf_split: str | None = None
    family: str | None = None
    exclude_sources: tuple[str, ...] = ()
    redact_raw: bool = False
    answer_type_of: Callable[[ad.Parsed], str] | None = None

    @property
    def source(self) -> str:
        return self.family or self.name


# ----------------------------------------------------------------------------- registry


class Registry(dict):
    """A plain dict that refuses to register a name twice."""

    def __setitem__(self, key: str, value: Any) -> None:
        if key in self:
            raise KeyError(f"{key!r} is already registered; pick another name")
        super().__setitem__(key, value)


def _build_sources() -> Registry:
    specs = [
        SourceSpec(
            "gsm8k",
            "test",
            "math",
            ad.adapt_gsm8k,
            "benchmarks/gsm8k_test.jsonl",
            "openai/gsm8k",
            ("main",),
            "test",
        ),
        SourceSpec(
            "math500",
            "test",
            "math",
            ad.adapt_math,
            "benchmarks/math500.jsonl",
            "HuggingFaceH4/MATH-500",
            hf_split="test",
        ),
        SourceSpec(
            "minerva_math",
            "test",
            "math",
            ad.adapt_minerva,
            "benchmarks/minerva_math.jsonl",
            "math-ai/minervamath",
            hf_split="test",
        ),
        SourceSpec(
            "amc23",
            "test",
            "math",
            ad.adapt_competition,
            "benchmarks/amc23.jsonl",
            "math-ai/amc23",
            hf_split="test",
        ),
        SourceSpec(
            "aime24",
            "test",
            "math",
            ad.adapt_competition,
            "benchmarks/aime24.jsonl",
            "HuggingFaceH4/aime_2024",
            hf_split="train",
        ),
        SourceSpec(
            "aime25",
            "test",
            "math",
            ad.adapt_competition,
            "benchmarks/aime25.jsonl",
            "math-ai/aime25",
            hf_split="test",
        ),
        SourceSpec(
            "olympiadbench",
            "test",
            "math",
            ad.adapt_olympiadbench,
            "benchmarks/olympiadbench.jsonl",
            "Hothan/OlympiadBench",
            ("OE_TO_maths_en_COMP",),
            "train",
            answer_type_of=ad.olympiadbench_answer_type,
        ),
        SourceSpec(
            "gpqa_diamond",
            "test",
            "multiple_choice",
            ad.adapt_gpqa,
            "benchmarks/gpqa_diamond.jsonl.gz",
            "Idavidrein/gpqa",
            ("gpqa_diamond",),
            "train",
            redact_raw=True,
        ),
        SourceSpec(
            "humaneval",
            "test",
            "code",
            ad.adapt_humaneval,
            "benchmarks/humaneval.jsonl.gz",
            "openai/openai_humaneval",
            hf_split="test",
        ),
        SourceSpec(
            "mbppplus",
            "test",
            "code",
            ad.adapt_mbppplus,
            "benchmarks/mbppplus.jsonl",
            "evalplus/mbppplus",
            hf_split="test",
        ),
        # LiveCodeBench's hub release is a loading script that `datasets` 4+ no longer runs.
        SourceSpec(
            "livecodebench",
            "test",
            "code",
            ad.adapt_livecodebench,
            "benchmarks/livecodebench_279.json",
        ),
        SourceSpec(
            "gsm8k_train",
            "train",
            "math",
            ad.adapt_gsm8k,
            "train/gsm8k_train.jsonl",
            "openai/gsm8k",
            ("main",),
            "train",
            family="gsm8k",
        ),
        SourceSpec(
            "math_train",
            "train",
            "math",
            ad.adapt_math,
            "train/math_test5000.jsonl",
            "EleutherAI/hendrycks_math",
            (
                "algebra",
                "counting_and_probability",
                "geometry",
                "intermediate_algebra",
                "number_theory",
                "prealgebra",
                "precalculus",
            ),
            "test",
            family="math",
            exclude_sources=("math500",),
        ),
        SourceSpec(
            "dapo_math_17k",
            "train",
            "math",
            ad.adapt_dapo,
            "train/dapo_math_17k.parquet",
            "BytedTsinghua-SIA/DAPO-Math-17k",
            hf_split="train",
        ),
        SourceSpec(
            "deepscaler",
            "train",
            "math",
            ad.adapt_deepscaler,
            "train/deepscaler_subset2000.json",
            "agentica-org/DeepScaleR-Preview-Dataset",
            hf_split="train",
        ),
        SourceSpec("reasoning_gym", "train", "math", ad.adapt_reasoning_gym),
    ]
    registry = Registry()
    for spec in specs:
        registry[spec.name] = spec
    return registry


SOURCES: dict[str, SourceSpec] = _build_sources()


# ----------------------------------------------------------------------------- assembly


def clean_problem_text(text: str) -> tuple[str, int]:
    """Problem text without control characters (see ``pipelines.text.strip_control_chars``:
    CR and CRLF become LF) and the number removed; outer whitespace is trimmed only when a
    character was removed, so text without control characters keeps its exact form."""
    cleaned, removed = strip_control_chars(text)
    return (cleaned.strip() if removed else cleaned), removed


def build_problems(
    spec: SourceSpec,
    records: list[RawRecord],
    origin: str,
    *,
    exclude_texts: frozenset[str] = frozenset(),
    extra_meta: Mapping[str, Any] | None = None,
    limits: RecordLimits = DEFAULT_LIMITS,
) -> IngestResult:
    """Adapt, validate, deduplicate and (optionally) exclude; pure given its inputs.

    ``extra_meta`` is merged into every kept row's meta (e.g. what it was decontaminated
    against). Records over ``limits`` and records whose dataset id conflicts with an earlier
    record's are rejected (see the module docstring)."""
    problems: list[Problem] = []
    rejects: list[Reject] = []
    kept: dict[str, Problem] = {}
    # (id key, id value) -> (normalised text, line, problem id) of the first record using it
    ids_seen: dict[tuple[str, str], tuple[str, int, str]] = {}
    result = IngestResult(problems, rejects, origin)

    def reject(line: int, reason: str, raw: str) -> None:
        rejects.append(
            Reject(spec.source, origin, line, reason, REDACTED if spec.redact_raw else raw)
        )

    for item in records:
        if not isinstance(item.record, Mapping):
            reject(
                item.line,
                f"record is a JSON {type(item.record).__name__}, expected an object",
                item.raw,
            )
            continue
        too_big = check_record(item.record, limits)
        if too_big:
            reject(item.line, too_big, item.raw)
            continue
        try:
            parsed = spec.adapter(item.record)
        except ad.RowError as exc:
            reject(item.line, str(exc), item.raw)
            continue
        text, removed = clean_problem_text(parsed.problem)
        if not text.strip():
            reject(item.line, "missing problem text", item.raw)
            continue
        if not parsed.answer.strip():
            reject(item.line, "missing answer", item.raw)
            continue
        key = normalize_problem_text(text)
        pid = problem_id(spec.source, text)
        conflict = _id_conflict(parsed.meta, key, item.line, pid, ids_seen)
        if conflict:
            result.id_conflicts += 1
            reject(item.line, conflict, item.raw)
            continue
        if key in exclude_texts:
            result.excluded += 1
            continue
        if key in kept:
            first = kept[key]
            if first.answer == parsed.answer.strip():
                result.duplicates += 1
            else:
                reject(
                    item.line,
                    f"duplicate of problem {first.problem_id} with a different answer "
                    f"({parsed.answer.strip()[:60]!r} vs kept {first.answer[:60]!r})",
                    item.raw,
                )
            continue
        answer_type = spec.answer_type_of(parsed) if spec.answer_type_of else spec.answer_type
        row = Problem(
            problem_id=pid,
            source=spec.source,
            split=spec.split,
            problem=text,
            answer=parsed.answer.strip(),
            solution=parsed.solution,
            answer_type=answer_type,
            meta=dump_meta({**parsed.meta, **(extra_meta or {})}),
        )
        kept[key] = row
        problems.append(row)
        if removed:
            result.control_chars_stripped += removed
            result.control_char_rows += 1
    return result


def _id_conflict(
    meta: Mapping[str, Any],
    key: str,
    line: int,
    pid: str,
    seen: dict[tuple[str, str], tuple[str, int, str]],
) -> str | None:
    """The reject reason when one of the record's dataset ids was used by an earlier record
    with different normalised text; otherwise registers its ids and returns None."""
    ids = [(name, str(meta[name])) for name in SOURCE_ID_KEYS if meta.get(name) is not None]
    for name, value in ids:
        first = seen.get((name, value))
        if first is not None and first[0] != key:
            return (
                f"duplicate source id: {name}={value[:80]!r} was already used by line "
                f"{first[1]} (problem {first[2]}) with different problem text; the first "
                "record is kept, check which one is right"
            )
    for name, value in ids:
        seen.setdefault((name, value), (key, line, pid))
    return None


def _local_path(spec: SourceSpec, data_dir: Path | None) -> Path | None:
    if spec.local_path is None or data_dir is None:
        return None
    return Path(data_dir) / spec.local_path


def _load_local(
    spec: SourceSpec, path: Path, limit: int | None
) -> tuple[list[RawRecord], list[Reject], str]:
    records, bad = read_local_records(path, limit=limit)
    origin = str(path)
    rejects = [
        Reject(spec.source, origin, line, reason, REDACTED if spec.redact_raw else raw)
        for line, reason, raw in bad
    ]
    return records, rejects, origin


def _load_hf(spec: SourceSpec, limit: int | None) -> tuple[list[RawRecord], list[Reject], str]:
    assert spec.hf_id is not None
    records: list[RawRecord] = []
    split = spec.hf_split or spec.split
    for config in spec.hf_configs:
        remaining = None if limit is None else limit - len(records)
        if remaining is not None and remaining <= 0:
            break
        rows = load_hf_records(spec.hf_id, config, split, limit=remaining)
        start = len(records)
        records.extend(RawRecord(start + i + 1, row, record_raw(row)) for i, row in enumerate(rows))
    return records, [], f"hf://{spec.hf_id}/{split}"


def _load_reasoning_gym(spec: SourceSpec, count: int, seed: int) -> IngestResult:
    """``count`` unique problems: generate more items (same order) while duplicates fall out."""
    origin = f"reasoning_gym:seed={seed}:tasks={','.join(REASONING_GYM_TASKS)}"
    wanted = count
    while True:
        generated = generate_reasoning_gym(wanted, seed=seed)
        records = [
            RawRecord(i + 1, rec, raw_text(json.dumps(rec, default=str)))
            for i, (_, rec) in enumerate(generated)
        ]
        result = build_problems(spec, records, origin)
        if len(result.problems) >= count or wanted >= 4 * count:
            break
        wanted += count - len(result.problems) + len(REASONING_GYM_TASKS)
    del result.problems[count:]
    return result


def load_source(
    name: str,
    *,
    data_dir: Path | str | None = None,
    prefer: Prefer = "local",
    limit: int | None = None,
    seed: int = 0,
    decontaminate: bool = True,
    limits: RecordLimits = DEFAULT_LIMITS,
) -> IngestResult:
    """Load one registered source into canonical problems and rejects.

    ``prefer="local"`` tries ``data_dir / spec.local_path`` (``data_dir`` defaults to
    ``WEFT_DATA_DIR`` / ``../shared/data``) and then the hub; ``prefer="hf"`` the reverse.
    ``limit`` caps raw records read (before dedup); for ``reasoning_gym`` it is the number of
    problems generated (default 1000) and ``seed`` picks them. With ``decontaminate`` the
    problems of ``spec.exclude_sources`` (MATH-500 for ``math_train``) are dropped by
    normalised text and counted in ``IngestResult.excluded``. ``limits`` bounds each raw
    record's field size and nesting (over it: a reject).
    """
    if name not in SOURCES:
        raise KeyError(f"unknown source {name!r}; known sources: {', '.join(sorted(SOURCES))}")
    if prefer not in ("local", "hf"):
        raise ValueError(f"prefer must be 'local' or 'hf', got {prefer!r}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    spec = SOURCES[name]
    if name == "reasoning_gym":
        return _load_reasoning_gym(
            spec, REASONING_GYM_DEFAULT_COUNT if limit is None else limit, seed
        )

    base = Path(data_dir) if data_dir is not None else default_data_dir()
    path = _local_path(spec, base)
    attempts: list[str] = []
    loaded: tuple[list[RawRecord], list[Reject], str] | None = None
    for way in ("local", "hf") if prefer == "local" else ("hf", "local"):
        if way == "local":
            if path is None:
                attempts.append(
                    "local: no local file for this source"
                    if spec.local_path is None
                    else "local: no data directory (WEFT_DATA_DIR unset and ../shared/data missing)"
                )
                continue
            if not path.is_file():
                attempts.append(f"local: {path} not found")
                continue
            loaded = _load_local(spec, path, limit)
            break
        if spec.hf_id is None:
            attempts.append("hub: this source has no Hugging Face id")
            continue
        try:
            loaded = _load_hf(spec, limit)
            break
        except HubUnavailableError as exc:
            attempts.append(f"hub: {str(exc).rstrip('.')}")
    if loaded is None:
        looked_for = spec.local_path or "(none)"
        raise IngestError(
            f"could not load source {name!r}. Tried: {'; '.join(attempts)}. Put the file "
            f"{looked_for} under a data folder and set WEFT_DATA_DIR to that folder, or use a "
            "machine with access to the Hugging Face hub."
        )
    records, read_rejects, origin = loaded
    exclude: set[str] = set()
    if decontaminate:
        for other in spec.exclude_sources:
            other_result = load_source(
                other, data_dir=data_dir, prefer=prefer, decontaminate=False, limits=limits
            )
            exclude.update(normalize_problem_text(p.problem) for p in other_result.problems)
    result = build_problems(
        spec,
        records,
        origin,
        exclude_texts=frozenset(exclude),
        extra_meta={"decontaminated_against": list(spec.exclude_sources)} if exclude else None,
        limits=limits,
    )
    result.rejects[:0] = read_rejects
    return result


def load_file(
    path: Path | str,
    adapter: ad.Adapter,
    *,
    source: str,
    split: str,
    answer_type: str,
    limit: int | None = None,
    limits: RecordLimits = DEFAULT_LIMITS,
) -> IngestResult:
    """Ingest any local file with a given adapter (for data not in :data:`SOURCES`)."""
    spec = SourceSpec(source, split, answer_type, adapter)
    records, rejects, origin = _load_local(spec, Path(path), limit)
    result = build_problems(spec, records, origin, limits=limits)
    result.rejects[:0] = rejects
    return result
