"""The held-out arithmetic benchmarks: problems no checkpoint of a run trained on, evaluated
like any other benchmark (``eval.recorded``, against the served checkpoints), and the claims of
the demo's learning check computed from those evaluations.

- :func:`heldout_arith` draws problems of ``training.data.builtin_arith1`` whose text is not in
  a given set (all 207 in the order of one seed); :func:`heldout_chain` does the same for the
  multi-step chains of ``training.data.builtin_chain`` (benchmark ``chain_heldout``), and
  :func:`heldout_problems` picks either by task name (:data:`HELDOUT_TASKS`).
- :func:`training_problems` (recipes and overrides) and :func:`checkpoint_problems` (the
  ``checkpoints`` rows of a lineage, read through their recorded dataset specs) give that set.
- :func:`heldout_benchmark` is the benchmark: the math grader, the boxed-answer instruction GRPO
  trains on followed by the problem, in one user turn (evaluation modes send one user turn);
  named ``arith1_heldout`` by default, ``chain_heldout`` for the chains (one name per task, so
  their ``eval_samples`` rows never mix).
- :func:`learning_claims`: the trained model against the base model and against its SFT start,
  per-problem avg@k, judged by ``eval.claims.judge``.

Not guaranteed: that a few CPU steps move held-out accuracy beyond noise; the claims say what
was measured either way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from eval.benchmarks import Benchmark
from eval.claims import Claim, judge
from pipelines.formats import BOXED_SYSTEM_PROMPT

DEMO_SFT_RECIPE = "demo_sft"  # the demo's SFT recipe: its problems are never held out
HELDOUT_BENCHMARK = "arith1_heldout"
HELDOUT_CHAIN_BENCHMARK = "chain_heldout"
HELDOUT_SEED = 1
HELDOUT_TEMPERATURE = 1.0  # the GRPO sampling temperature: the score GRPO's reward estimates
HELDOUT_MAX_TOKENS = 32  # = demo_grpo's max_completion_length
LEARNING_PAPER = "weft demo"


def heldout_benchmark(name: str = HELDOUT_BENCHMARK) -> Benchmark:
    """The held-out one-digit arithmetic (or, with ``name`` :data:`HELDOUT_CHAIN_BENCHMARK`,
    the held-out chains) as a benchmark (not an ingestion source: its problems depend on what
    was trained, :func:`heldout_arith`, :func:`heldout_chain`)."""
    instruction = BOXED_SYSTEM_PROMPT.replace("{", "{{").replace("}", "}}")
    return Benchmark(name, name, "math", instruction + "\n\n{problem}")


def problem_text(row: Mapping[str, Any]) -> str:
    """The problem of a training row: its ``problem`` column, or the last user message of its
    ``prompt`` (SFT rows)."""
    if "problem" in row:
        return str(row["problem"])
    from training.data import as_messages

    prompt = as_messages(row["prompt"], "prompt")
    if isinstance(prompt, str):
        return prompt
    return [m["content"] for m in prompt if m["role"] == "user"][-1]


def dataset_problems(dataset: str, *, fallback: str = "", limit: int | None = None,
                     seed: int = 0) -> set[str]:
    """Every problem text of a training dataset spec (``training.data.load_dataset``)."""
    from training.data import load_dataset

    data = load_dataset(dataset, fallback=fallback, limit=limit, seed=seed)
    return {problem_text(r) for r in data.rows}


def training_problems(runs: list[tuple[str, list[str]]]) -> set[str]:
    """Every problem text the (recipe, overrides) runs train on (read through their dataset
    specs)."""
    from training.config import load_config

    seen: set[str] = set()
    for recipe, overrides in runs:
        config = load_config(recipe, overrides)
        seen |= dataset_problems(config.dataset, fallback=config.dataset_fallback,
                                 limit=config.dataset_limit, seed=config.seed)
    return seen


def checkpoint_problems(rows: Iterable[Mapping[str, Any]]) -> set[str]:
    """Every problem text the checkpoints of ``rows`` (``checkpoints`` table rows, whose
    ``config_json`` is the resolved training config) trained on."""
    seen: set[str] = set()
    for row in rows:
        config = json.loads(row.get("config_json") or "{}")
        if not config.get("dataset"):
            raise ValueError(f"checkpoint {row.get('checkpoint_id')!r} records no dataset in its "
                             "config; its training problems cannot be held out")
        seen |= dataset_problems(config["dataset"], fallback=config.get("dataset_fallback") or "",
                                 limit=config.get("dataset_limit"),
                                 seed=int(config.get("seed") or 0))
    return seen


def checkpoint_chain(wh: Any, checkpoint_id: str) -> list[dict[str, Any]]:
    """The ``checkpoints`` rows of ``checkpoint_id`` and of every checkpoint it was trained
    from (``parent_checkpoint``), newest row of each id, the checkpoint first. ValueError when
    one of them is not in the table."""
    chain: list[dict[str, Any]] = []
    current: str | None = checkpoint_id
    while current:
        if any(r["checkpoint_id"] == current for r in chain):
            raise ValueError(f"checkpoint {current!r} is its own ancestor in `checkpoints`")
        rows = wh.sql("SELECT * FROM checkpoints WHERE checkpoint_id = $id ORDER BY created_at "
                      "DESC LIMIT 1", {"id": current}).to_pylist()
        if not rows:
            raise ValueError(f"checkpoint {current!r} is not in the `checkpoints` table; "
                             "materialize the checkpoint asset that trains it")
        chain.append(rows[0])
        current = rows[0].get("parent_checkpoint") or None
    return chain


def heldout_arith(n: int, seed: int = HELDOUT_SEED, exclude: set[str] | frozenset[str] = frozenset()
                  ) -> list[dict]:
    """``n`` one-digit problems (``training.data.builtin_arith1``, all 207 in the order of
    ``seed``) whose text is not in ``exclude`` (the training problems)."""
    from training.data import ARITH1_SIZE, builtin_arith1

    if n < 2:
        raise ValueError(f"held-out problems: need at least 2 for a paired test, got {n}")
    rows = [r for r in builtin_arith1(ARITH1_SIZE, seed) if r["problem"] not in exclude]
    if len(rows) < n:
        raise ValueError(f"only {len(rows)} one-digit problems are left after excluding the "
                         f"{len(exclude)} training problems; ask for at most {len(rows)}")
    return rows[:n]


def heldout_chain(n: int, seed: int = HELDOUT_SEED,
                  exclude: set[str] | frozenset[str] = frozenset()) -> list[dict]:
    """``n`` multi-step chain problems (``training.data.builtin_chain``: a one-digit start and 2
    to 5 one-digit operations) in the order of ``seed`` whose text is not in ``exclude`` (the
    training problems). The chains are drawn one after another from the seed, so the rows are
    the first ``n`` kept ones of that one sequence whatever ``exclude`` holds (a larger
    ``exclude`` only skips more of it)."""
    from training.data import builtin_chain

    if n < 2:
        raise ValueError(f"held-out problems: need at least 2 for a paired test, got {n}")
    # every excluded problem can remove at most one of the first n + len(exclude) chains
    rows = [r for r in builtin_chain(n + len(exclude), seed) if r["problem"] not in exclude]
    return rows[:n]


# task name -> (draw(n, seed, exclude), benchmark name); the training dataset each stands for
HELDOUT_TASKS = {
    "arith1": (heldout_arith, HELDOUT_BENCHMARK),  # builtin:arith1
    "chain": (heldout_chain, HELDOUT_CHAIN_BENCHMARK),  # builtin:chain
}


def heldout_problems(task: str, n: int, seed: int = HELDOUT_SEED,
                     exclude: set[str] | frozenset[str] = frozenset()
                     ) -> tuple[Benchmark, list[dict]]:
    """(the benchmark, ``n`` held-out problems) of ``task`` (a key of :data:`HELDOUT_TASKS`:
    ``arith1`` one-digit problems, ``chain`` multi-step chains), none of them in ``exclude``."""
    if task not in HELDOUT_TASKS:
        raise ValueError(f"no held-out task {task!r}; tasks are {sorted(HELDOUT_TASKS)}")
    draw, name = HELDOUT_TASKS[task]
    return heldout_benchmark(name), draw(n, seed=seed, exclude=exclude)


def learning_claims(base: Mapping[str, float], sft: Mapping[str, float],
                    trained: Mapping[str, float], *, k: int, temperature: float,
                    n_boot: int = 10_000) -> list[dict[str, Any]]:
    """The learning check as ``claims`` rows: the trained model (SFT then GRPO) beats the base
    model, and GRPO improves on its SFT start, on per-problem avg@k of the same held-out
    problems (``eval.claims.judge``: paired bootstrap over problems)."""
    common = {"paper": LEARNING_PAPER, "metric": f"avg@{k}", "bounds": (0.0, 1.0),
              "section": f"held-out one-digit arithmetic, avg@{k} at T={temperature:g}"}
    return [
        judge(Claim(**common, statement="SFT then GRPO beats the base model",
                    reference="base", treatment="sft+grpo"), base, trained, n_boot=n_boot),
        judge(Claim(**common, statement="GRPO improves on its SFT start",
                    reference="sft", treatment="sft+grpo"), sft, trained, n_boot=n_boot),
    ]
