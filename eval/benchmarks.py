"""Benchmark registry: which problems, how to prompt for them, how to grade the answers.

A benchmark is declared once, as the row of its ingestion source: a
``pipelines.ingest.SourceSpec`` with a ``benchmark=BenchmarkUse(grader=..., prompt=..., k=...,
normalizer=...)`` (built-in rows in ``pipelines/ingest/sources.py``; local JSONL benchmarks in a
config file, ``pipelines.ingest.benchmark_file``). The row gives the hub id and split, the local
file under ``WEFT_DATA_DIR``, the adapter or field mapping and whether it is in the default
ingest; this module reads every such row and resolves its names: the prompt (a key of
:data:`INSTRUCTIONS` or a template with ``{problem}``), the grader kind shared with RL rewards
(``eval.graders``: math, choice; code is graded by ``eval.code_grader``) and the optional output
normaliser (:data:`NORMALIZERS`) applied to the model output before grading.

Why the declaration lives in ``pipelines`` and not here: ``pipelines`` must not import ``eval``
(docs/architecture.md), yet ``pipelines.ingest`` has to know every source, benchmarks included,
for ``load_source`` and the ingest assets. So the source row carries the evaluation settings as
plain names, and this module, which may import ``pipelines``, turns them into
:class:`Benchmark` objects. :data:`BENCHMARKS` holds every benchmark of the sources registered
when this module was imported; :func:`get` also finds one registered later (e.g. with
``pipelines.ingest.register_benchmark_file``). A name that cannot be resolved raises
ValueError naming the benchmark, where it was declared and the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any

MATH_INSTRUCTION = (
    "Solve the problem below. Think it through step by step, then write the final answer "
    "inside \\boxed{{}}.\n\n{problem}"
)
CHOICE_INSTRUCTION = (
    "Answer the multiple-choice question below. Reason briefly, then give the letter of the "
    "correct option inside \\boxed{{}}, for example \\boxed{{B}}.\n\n{problem}"
)
FUNCTION_INSTRUCTION = (
    "Complete the Python function below. Reply with the whole function, including its "
    "signature, in a single ```python code block.\n\n```python\n{problem}```"
)
TASK_INSTRUCTION = (
    "Write Python code for the task below. The example assertion shows the function name and "
    "signature to use. Reply with the code in a single ```python code block.\n\n{problem}"
)
CONTEST_INSTRUCTION = (
    "Solve the programming problem below in Python. {io}\n\n{problem}{starter}"
)


INSTRUCTIONS: dict[str, str] = {
    "math": MATH_INSTRUCTION,
    "choice": CHOICE_INSTRUCTION,
    "function": FUNCTION_INSTRUCTION,
    "task": TASK_INSTRUCTION,
    "contest": CONTEST_INSTRUCTION,
}
GRADER_KINDS = ("math", "choice", "code")  # code: eval.code_grader, the others eval.graders
_PLACEHOLDERS = {"problem": "", "io": "", "starter": ""}


def _thousands(text: str) -> str:
    """GSM8K answers are integers: drop thousands separators ("1,000" → "1000") in the output."""
    return re.sub(r"(?<=\d),(?=\d{3}\b)", "", text or "")


NORMALIZERS: dict[str, Callable[[str], str]] = {"thousands": _thousands}


@dataclass(frozen=True)
class Benchmark:
    """A resolved benchmark; built from its source row by :func:`from_source` (or directly,
    for a benchmark that is not a registered source). ``source`` is the ingestion source name
    (a ``problems`` partition); ``private_text``: never log or store problem text (GPQA asks
    for this; from the source's ``redact_raw``)."""

    name: str
    source: str
    grader: str  # grader kind: "math", "choice", "code"
    prompt_template: str
    _: KW_ONLY
    default_k: int = 1
    version: str = "1"
    normalizer: Callable[[str], str] | None = None
    private_text: bool = False

    def render(self, problem: Mapping[str, Any] | str) -> str:
        """The user prompt for a problem row (or its text)."""
        if isinstance(problem, str):
            return self.prompt_template.format(problem=problem, io="", starter="")
        meta = problem.get("meta") or "{}"
        meta = json.loads(meta) if isinstance(meta, str) else dict(meta)
        starter = str(meta.get("starter_code") or "")
        io = ("Complete the starter code below; reply with the whole class in one ```python block."
              if starter.strip() else
              "Read the input from standard input and write the answer to standard output; reply "
              "with the whole program in one ```python block.")
        starter_block = f"\n\nStarter code:\n```python\n{starter}\n```" if starter.strip() else ""
        return self.prompt_template.format(problem=problem["problem"], io=io, starter=starter_block)

    def source_spec(self):
        from pipelines.ingest import SOURCES

        return SOURCES[self.source]

    def describe(self) -> dict[str, Any]:
        spec = self.source_spec()
        return {"name": self.name, "version": self.version, "grader": self.grader,
                "default_k": self.default_k, "hf_id": spec.hf_id, "hf_split": spec.hf_split,
                "local_path": spec.local_path}


def _resolve_prompt(prompt: str, fail: Callable[[str, str], ValueError]) -> str:
    template = INSTRUCTIONS.get(prompt, prompt)
    if "{problem}" not in template:
        raise fail("prompt", f"{prompt!r} is neither a named instruction "
                             f"({', '.join(sorted(INSTRUCTIONS))}) nor a template with {{problem}}")
    try:
        template.format(**_PLACEHOLDERS)
    except (KeyError, IndexError, ValueError) as exc:
        raise fail("prompt", f"the template has a placeholder other than {{problem}}, {{io}}, "
                             f"{{starter}} ({exc!r}); write literal braces as {{{{ and }}}}") from None
    return template


def from_source(spec: Any) -> Benchmark:
    """The benchmark a ``pipelines.ingest.SourceSpec`` with ``benchmark`` set declares.

    ValueError naming the benchmark, where it was declared and the field when its grader kind,
    prompt, k or normaliser cannot be used."""
    use = spec.benchmark
    if use is None:
        raise ValueError(f"source {spec.name!r} is not a benchmark (its row has no benchmark=)")
    where = f" ({use.declared_in})" if use.declared_in else ""

    def fail(field: str, problem: str) -> ValueError:
        return ValueError(f"benchmark {spec.name!r}{where}, field {field!r}: {problem}")

    if use.grader not in GRADER_KINDS:
        raise fail("grader", f"unknown grader kind {use.grader!r}; use one of "
                             f"{', '.join(GRADER_KINDS)}")
    if use.normalizer is not None and use.normalizer not in NORMALIZERS:
        raise fail("normalizer", f"unknown normaliser {use.normalizer!r}; use one of "
                                 f"{', '.join(sorted(NORMALIZERS))} or none")
    if isinstance(use.k, bool) or not isinstance(use.k, int) or use.k < 1:
        raise fail("k", f"should be a whole number >= 1, got {use.k!r}")
    return Benchmark(spec.name, spec.name, use.grader, _resolve_prompt(use.prompt, fail),
                     default_k=use.k, version=use.version,
                     normalizer=NORMALIZERS[use.normalizer] if use.normalizer else None,
                     private_text=spec.redact_raw)


BENCHMARKS: dict[str, Benchmark] = {}


def _add_registered_sources() -> None:
    from pipelines.ingest import SOURCES

    for name, spec in list(SOURCES.items()):
        if spec.benchmark is not None and name not in BENCHMARKS:
            BENCHMARKS[name] = from_source(spec)


def get(name: str) -> Benchmark:
    """The benchmark ``name``, including one whose source was registered after this module
    was imported; KeyError naming the known benchmarks otherwise."""
    if name not in BENCHMARKS:
        _add_registered_sources()
    try:
        return BENCHMARKS[name]
    except KeyError:
        from pipelines.ingest import CONFIG_PROBLEMS

        broken = ("; the benchmarks file registered nothing because of: "
                  + " | ".join(CONFIG_PROBLEMS)) if CONFIG_PROBLEMS else ""
        raise KeyError(
            f"unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}{broken}"
        ) from None


_add_registered_sources()
