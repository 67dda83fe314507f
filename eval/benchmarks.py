"""Benchmark registry: which problems, how to prompt for them, how to grade the answers.

A benchmark names an ingestion source (``pipelines.ingest.SOURCES``: local file under
``WEFT_DATA_DIR`` or the Hugging Face dataset), a prompt template, the grader kind shared with
RL rewards (``eval.graders``), and a default number of samples k. Adding a benchmark is one
``register`` call. The registry is a plain dict that refuses duplicate names.
"""

from __future__ import annotations

from dataclasses import dataclass

MATH_INSTRUCTION = (
    "Solve the problem below. Think it through step by step, then write the final answer "
    "inside \\boxed{{}}.\n\n{problem}"
)
CHOICE_INSTRUCTION = (
    "Answer the multiple-choice question below. Reason briefly, then give the letter of the "
    "correct option inside \\boxed{{}}, for example \\boxed{{B}}.\n\n{problem}"
)


@dataclass(frozen=True)
class Benchmark:
    name: str
    source: str  # ingestion source name (a `problems` partition)
    grader: str  # grader kind: "math", "choice", "code"
    prompt_template: str
    default_k: int = 1
    version: str = "1"
    private_text: bool = False  # never log problem text (GPQA asks for this)

    def render(self, problem: str) -> str:
        return self.prompt_template.format(problem=problem)


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


for _name, _k in [
    ("gsm8k", 1), ("math500", 1), ("aime24", 8), ("aime25", 8), ("amc23", 4),
    ("minerva_math", 1), ("olympiadbench", 1),
]:
    register(Benchmark(name=_name, source=_name, grader="math", prompt_template=MATH_INSTRUCTION, default_k=_k))
register(Benchmark(name="gpqa_diamond", source="gpqa_diamond", grader="choice",
                   prompt_template=CHOICE_INSTRUCTION, default_k=1, private_text=True))
