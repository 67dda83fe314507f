"""Problem sources: public problem datasets -> canonical ``problems`` rows plus ``rejects`` rows.

Sources come from three places: local copies of public files under ``WEFT_DATA_DIR``
(.jsonl, .jsonl.gz, .json, .json.gz, .parquet), the Hugging Face hub through
``datasets.load_dataset``, and a built-in offline generator (``reasoning-gym``). Every source
is one :class:`SourceSpec` row in :data:`SOURCES` (built-in ones below, local JSONL benchmarks
from a config file: ``pipelines.ingest.benchmark_file``); reading and the checks every kind
shares live in ``pipelines.ingest.core``, the per-format adapters in
``pipelines.ingest.adapters`` (one raw record -> one normalised row).

A source that is also a benchmark carries a :class:`BenchmarkUse` (grader kind, prompt, k,
output normaliser): ``eval.benchmarks`` builds its registry from these rows, so a benchmark is
declared in one place. ``default_ingest`` says whether the source gets a ``<name>_problems``
asset in the default ingest job (``assets.ingest``).

Guarantees (besides ``pipelines.ingest.core``'s): within one call, problems are deduplicated
by normalised text (first kept; a later copy with a *different* answer becomes a reject); a
record whose dataset id (``unique_id``, ``task_id`` or ``original_id`` in the adapter's meta)
was already used by an earlier record with *different* normalised text is rejected and counted
(``id_conflicts``); the reason names the kept row's line and problem id so a person can compare
the two. ``problem_id`` is stable across runs and machines. The hub loader never hangs offline:
it checks that the endpoint answers within a few seconds first.

Not guaranteed: answers are normalised strings, not verified to be correct; Hugging Face
layouts other than the ones named in ``SOURCES`` may not map.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.ingest import adapters as ad
from pipelines.ingest.core import (
    IngestError,
    IngestSpec,
    LoadResult,
    Prefer,
    Registry,
    TableRow,
    build_rows,
    check_load_args,
    dump_meta,
    lookup,
    read_local,
    read_records,
)
from pipelines.ingest.io import (
    DEFAULT_LIMITS,
    REASONING_GYM_DEFAULT_COUNT,
    REASONING_GYM_TASKS,
    RawRecord,
    RecordLimits,
    generate_reasoning_gym,
    raw_text,
)
from pipelines.text import normalize_problem_text

# Meta keys that hold a dataset's own record id (see the adapters); each must map to one text.
SOURCE_ID_KEYS = ("unique_id", "task_id", "original_id")


# ----------------------------------------------------------------------------- row types


@dataclass(frozen=True)
class Problem(TableRow):
    """One canonical ``problems`` row. ``meta`` is a JSON string (see :meth:`meta_dict`)."""

    problem_id: str
    source: str
    split: str
    problem: str
    answer: str
    solution: str
    answer_type: str
    meta: str = "{}"

    def __repr__(self) -> str:  # never print problem text (GPQA must not reach logs)
        return (
            f"Problem(problem_id={self.problem_id!r}, source={self.source!r}, "
            f"split={self.split!r}, answer={self.answer[:40]!r}, "
            f"answer_type={self.answer_type!r}, problem=<{len(self.problem)} chars>)"
        )


class IngestResult(LoadResult[Problem]):
    """Output of :func:`load_source`. ``duplicates``: same text and answer as a kept row;
    ``excluded``: removed on purpose (e.g. MATH-500 problems dropped from the MATH train pool);
    ``id_conflicts``: rejects whose dataset id an earlier record used with different text
    (also in ``rejects``); ``control_chars_stripped`` / ``control_char_rows``: control
    characters removed from problem text and the rows they were removed from."""

    ROWS = "problems"

    @property
    def problems(self) -> list[Problem]:
        return self.rows


@dataclass(frozen=True, kw_only=True)
class BenchmarkUse:
    """How a source is evaluated as a benchmark; ``eval.benchmarks`` resolves the names.

    ``grader``: the grader kind (``math``, ``choice``, ``code``); ``prompt``: a named
    instruction of ``eval.benchmarks.INSTRUCTIONS`` or a template holding ``{problem}``;
    ``k``: default samples per problem; ``normalizer``: a named output normaliser of
    ``eval.benchmarks.NORMALIZERS`` applied before grading; ``declared_in``: where this was
    declared, for error messages (a config file and entry; empty for built-in rows)."""

    grader: str
    prompt: str
    k: int = 1
    normalizer: str | None = None
    version: str = "1"
    declared_in: str = ""


@dataclass(frozen=True, kw_only=True)
class SourceSpec(IngestSpec):
    """How to load one problem source. ``family`` is the ``source`` column (defaults to
    ``name``); two specs of one family (gsm8k train/test) share the problem-id namespace, so
    overlap between them shows up as equal ids. ``answer_type_of`` picks a row's answer type
    from the parsed record (else ``answer_type``). ``benchmark``: set when the source is a
    benchmark; ``default_ingest``: whether the default ingest job loads it."""

    split: str
    answer_type: str
    adapter: ad.Adapter
    answer_type_of: Callable[[ad.Parsed], str] | None = None
    benchmark: BenchmarkUse | None = None
    default_ingest: bool = True

    KIND = "source"
    RESULT = IngestResult
    ID_KEYS = SOURCE_ID_KEYS
    STAMPS_DECONTAMINATION = True

    @property
    def source(self) -> str:
        return self.family or self.name

    def make_row(self, parsed: ad.Parsed, problem: str, pid: str,
                 extra_meta: Mapping[str, Any]) -> Problem:
        return Problem(
            problem_id=pid,
            source=self.source,
            split=self.split,
            problem=problem,
            answer=parsed.answer.strip(),
            solution=parsed.solution,
            answer_type=self.answer_type_of(parsed) if self.answer_type_of else self.answer_type,
            meta=dump_meta({**parsed.meta, **extra_meta}),
        )

    def dedup_key(self, row: Problem) -> str:
        return normalize_problem_text(row.problem)

    def duplicate_reason(self, kept: Problem, row: Problem) -> str | None:
        if kept.answer == row.answer:
            return None
        return (f"duplicate of problem {kept.problem_id} with a different answer "
                f"({row.answer[:60]!r} vs kept {kept.answer[:60]!r})")


# ----------------------------------------------------------------------------- registry

_MATH = BenchmarkUse(grader="math", prompt="math")
_MATH_CONFIGS = ("algebra", "counting_and_probability", "geometry", "intermediate_algebra",
                 "number_theory", "prealgebra", "precalculus")
# Built-in sources, one row each. LiveCodeBench's hub release is a loading script that
# `datasets` 4+ no longer runs, so it is a local-file source.
_BUILTIN = (
    SourceSpec(name="gsm8k", split="test", answer_type="math", adapter=ad.adapt_gsm8k,
               local_path="benchmarks/gsm8k_test.jsonl", hf_id="openai/gsm8k",
               hf_configs=("main",), hf_split="test",
               benchmark=BenchmarkUse(grader="math", prompt="math", normalizer="thousands")),
    SourceSpec(name="math500", split="test", answer_type="math", adapter=ad.adapt_math,
               local_path="benchmarks/math500.jsonl", hf_id="HuggingFaceH4/MATH-500",
               hf_split="test", benchmark=_MATH),
    SourceSpec(name="minerva_math", split="test", answer_type="math", adapter=ad.adapt_minerva,
               local_path="benchmarks/minerva_math.jsonl", hf_id="math-ai/minervamath",
               hf_split="test", benchmark=_MATH),
    SourceSpec(name="amc23", split="test", answer_type="math", adapter=ad.adapt_competition,
               local_path="benchmarks/amc23.jsonl", hf_id="math-ai/amc23", hf_split="test",
               benchmark=BenchmarkUse(grader="math", prompt="math", k=4)),
    SourceSpec(name="aime24", split="test", answer_type="math", adapter=ad.adapt_competition,
               local_path="benchmarks/aime24.jsonl", hf_id="HuggingFaceH4/aime_2024",
               hf_split="train", benchmark=BenchmarkUse(grader="math", prompt="math", k=8)),
    SourceSpec(name="aime25", split="test", answer_type="math", adapter=ad.adapt_competition,
               local_path="benchmarks/aime25.jsonl", hf_id="math-ai/aime25", hf_split="test",
               benchmark=BenchmarkUse(grader="math", prompt="math", k=8)),
    SourceSpec(name="olympiadbench", split="test", answer_type="math",
               adapter=ad.adapt_olympiadbench, answer_type_of=ad.olympiadbench_answer_type,
               local_path="benchmarks/olympiadbench.jsonl", hf_id="Hothan/OlympiadBench",
               hf_configs=("OE_TO_maths_en_COMP",), hf_split="train", benchmark=_MATH),
    SourceSpec(name="gpqa_diamond", split="test", answer_type="multiple_choice",
               adapter=ad.adapt_gpqa, local_path="benchmarks/gpqa_diamond.jsonl.gz",
               hf_id="Idavidrein/gpqa", hf_configs=("gpqa_diamond",), hf_split="train",
               redact_raw=True, benchmark=BenchmarkUse(grader="choice", prompt="choice")),
    SourceSpec(name="humaneval", split="test", answer_type="code", adapter=ad.adapt_humaneval,
               local_path="benchmarks/humaneval.jsonl.gz", hf_id="openai/openai_humaneval",
               hf_split="test", benchmark=BenchmarkUse(grader="code", prompt="function")),
    SourceSpec(name="mbppplus", split="test", answer_type="code", adapter=ad.adapt_mbppplus,
               local_path="benchmarks/mbppplus.jsonl", hf_id="evalplus/mbppplus",
               hf_split="test", benchmark=BenchmarkUse(grader="code", prompt="task")),
    SourceSpec(name="livecodebench", split="test", answer_type="code",
               adapter=ad.adapt_livecodebench, local_path="benchmarks/livecodebench_279.json",
               benchmark=BenchmarkUse(grader="code", prompt="contest")),
    SourceSpec(name="gsm8k_train", split="train", answer_type="math", adapter=ad.adapt_gsm8k,
               local_path="train/gsm8k_train.jsonl", hf_id="openai/gsm8k",
               hf_configs=("main",), hf_split="train", family="gsm8k"),
    SourceSpec(name="math_train", split="train", answer_type="math", adapter=ad.adapt_math,
               local_path="train/math_test5000.jsonl", hf_id="EleutherAI/hendrycks_math",
               hf_configs=_MATH_CONFIGS, hf_split="test", family="math",
               exclude_sources=("math500",)),
    SourceSpec(name="dapo_math_17k", split="train", answer_type="math", adapter=ad.adapt_dapo,
               local_path="train/dapo_math_17k.parquet",
               hf_id="BytedTsinghua-SIA/DAPO-Math-17k", hf_split="train"),
    SourceSpec(name="deepscaler", split="train", answer_type="math", adapter=ad.adapt_deepscaler,
               local_path="train/deepscaler_subset2000.json",
               hf_id="agentica-org/DeepScaleR-Preview-Dataset", hf_split="train"),
    SourceSpec(name="reasoning_gym", split="train", answer_type="math",
               adapter=ad.adapt_reasoning_gym),
)

SOURCES: dict[str, SourceSpec] = Registry()
for _spec in _BUILTIN:
    SOURCES[_spec.name] = _spec


def register_source(spec: SourceSpec) -> SourceSpec:
    """Add one problem source (and, with ``spec.benchmark``, one benchmark) to :data:`SOURCES`.

    KeyError when the name is taken; TypeError when ``spec`` is not a :class:`SourceSpec`."""
    if not isinstance(spec, SourceSpec):
        raise TypeError(f"register_source takes a SourceSpec, got {type(spec).__name__}")
    SOURCES[spec.name] = spec
    return spec


# ----------------------------------------------------------------------------- loading


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
        result = build_rows(spec, records, origin)
        if len(result.problems) >= count or wanted >= 4 * count:
            break
        wanted += count - len(result.problems) + len(REASONING_GYM_TASKS)
    del result.problems[count:]
    return result


def decontamination_texts(
    spec: IngestSpec,
    *,
    data_dir: Path | str | None,
    prefer: Prefer,
    limits: RecordLimits,
) -> frozenset[str]:
    """Normalised problem texts of every source in ``spec.exclude_sources``."""
    texts: set[str] = set()
    for other in spec.exclude_sources:
        try:
            found = load_source(other, data_dir=data_dir, prefer=prefer, decontaminate=False,
                                limits=limits)
        except IngestError as exc:
            raise IngestError(
                f"cannot decontaminate {spec.name!r} against {other!r} ({exc}); make that "
                "benchmark available or pass decontaminate=False"
            ) from exc
        texts.update(normalize_problem_text(p.problem) for p in found.problems)
    return frozenset(texts)


def load_rows(
    spec: IngestSpec,
    *,
    data_dir: Path | str | None = None,
    prefer: Prefer = "local",
    limit: int | None = None,
    decontaminate: bool = True,
    limits: RecordLimits = DEFAULT_LIMITS,
) -> LoadResult:
    """Read (:func:`read_records`), decontaminate against ``spec.exclude_sources`` (unless
    ``decontaminate`` is false) and build (:func:`build_rows`) one spec's rows. ``limit`` caps
    raw records read (before deduplication); ``limits`` bounds each raw record's field size
    and nesting (over it: a reject)."""
    check_load_args(prefer, limit)
    records, read_rejects, origin = read_records(spec, data_dir=data_dir, prefer=prefer,
                                                 limit=limit)
    exclude: frozenset[str] = frozenset()
    if decontaminate and spec.exclude_sources:
        exclude = decontamination_texts(spec, data_dir=data_dir, prefer=prefer, limits=limits)
    stamp = spec.STAMPS_DECONTAMINATION and exclude
    result = build_rows(
        spec, records, origin, exclude_texts=exclude, limits=limits,
        extra_meta={"decontaminated_against": list(spec.exclude_sources)} if stamp else None,
    )
    result.rejects[:0] = read_rejects
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
    spec = lookup(SOURCES, name, SourceSpec.KIND)
    check_load_args(prefer, limit)
    if name == "reasoning_gym":
        return _load_reasoning_gym(
            spec, REASONING_GYM_DEFAULT_COUNT if limit is None else limit, seed
        )
    return load_rows(spec, data_dir=data_dir, prefer=prefer, limit=limit,
                     decontaminate=decontaminate, limits=limits)


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
    spec = SourceSpec(name=source, split=split, answer_type=answer_type, adapter=adapter)
    records, rejects, origin = read_local(spec, Path(path), limit)
    result = build_rows(spec, records, origin, limits=limits)
    result.rejects[:0] = rejects
    return result
