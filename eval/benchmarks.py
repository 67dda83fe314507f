"""Benchmark registry: which problems, how to prompt for them, how to grade the answers.

A benchmark names an ingestion source (``pipelines.ingest.SOURCES`` gives its Hugging Face id
and split and its local file under ``WEFT_DATA_DIR``), a prompt template, the grader kind
shared with RL rewards (``eval.graders``: math, choice, code), a default number of samples k,
and optionally an answer normaliser applied to the model output before grading. Adding a
benchmark is one ``register`` call (plus, at most, one normaliser). The registry is a plain
dict that refuses duplicate names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
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


def _thousands(text: str) -> str:
    """GSM8K answers are integers: drop thousands separators ("1,000" → "1000") in the output."""
    return re.sub(r"(?<=\d),(?=\d{3}\b)", "", text or "")


@dataclass(frozen=True)
class Benchmark:
    name: str
    source: str  # ingestion source name (a `problems` partition)
    grader: str  # grader kind: "math", "choice", "code"
    prompt_template: str
    default_k: int = 1
    version: str = "1"
    normalizer: Callable[[str], str] | None = None
    private_text: bool = False  # never log or store problem text (GPQA asks for this)

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


BENCHMARKS: dict[str, Benchmark] = {}


def register(bench: Benchmark) -> Benchmark:
    if bench.name in BENCHMARKS:
        raise ValueError(f"benchmark {bench.name!r} is already registered")
    BENCHMARKS[bench.name] = bench
    return bench


def get(name: str) -> Benchmark:
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise KeyError(
            f"unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}"
        ) from None


register(Benchmark("gsm8k", "gsm8k", "math", MATH_INSTRUCTION, 1, normalizer=_thousands))
register(Benchmark("math500", "math500", "math", MATH_INSTRUCTION, 1))
register(Benchmark("aime24", "aime24", "math", MATH_INSTRUCTION, 8))
register(Benchmark("aime25", "aime25", "math", MATH_INSTRUCTION, 8))
register(Benchmark("amc23", "amc23", "math", MATH_INSTRUCTION, 4))
register(Benchmark("minerva_math", "minerva_math", "math", MATH_INSTRUCTION, 1))
register(Benchmark("olympiadbench", "olympiadbench", "math", MATH_INSTRUCTION, 1))
register(Benchmark("gpqa_diamond", "gpqa_diamond", "choice", CHOICE_INSTRUCTION, 1, private_text=True))
register(Benchmark("humaneval", "humaneval", "code", FUNCTION_INSTRUCTION, 1))
register(Benchmark("mbppplus", "mbppplus", "code", TASK_INSTRUCTION, 1))
register(Benchmark("livecodebench", "livecodebench", "code", CONTEST_INSTRUCTION, 1))
