"""One run of the Engagement paper's Table 5 (Engagement Process §5.3, App. F, Table 25) as the
``ep_budget_table`` asset runs it: its plan and checks, its data, the base model's spec, and the
rows and figures it writes and shows. The table's own computation (arms, examples, held-out
problems, scores, paired tests) is ``training.ep_budget``; this module puts it together for
one run.

- :func:`table_plan`, :func:`ep_arm`, :func:`check_ep_budgets`, :func:`check_arm_configs`:
  the arms, refused before anything trains when a recipe cannot give the paper's design (the
  EP-aware arm needs budgets, the RLVR arms must not have them, all arms train alike).
- :func:`table_data`: the EP arm's training examples (stored for the RLVR arms) and the
  held-out problems.
- :func:`eval_budgets`, :func:`decoding_limit`: the evaluation's budgets and its one decoding
  limit for every budget (App. F).
- :func:`base_spec`, :func:`ep_heldout_benchmark`, :func:`evaluated_arm`: what is evaluated.
- :func:`stamped_rows`, :func:`typed_scores`, :func:`smallest_budget_figures`: what is written
  and shown.

Problems raise ValueError saying what to change. Not guaranteed: that the arms' training moved
any number (the CIs say what the rows support).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from eval.benchmarks import Benchmark
from eval.modes import BUDGET_LIMIT_FACTOR
from training.arms import Arm, train_summary
from training.config_recipes import RecipeError, parse_overrides
from training.data import fingerprint
from training.ep_budget import (
    ARM_EP,
    HELDOUT_BENCHMARK,
    HELDOUT_TEMPLATE,
    TRAIN_TABLE,
    EvaluatedArm,
    TablePlan,
    config_mismatches,
    heldout_problems,
    training_examples,
)
from warehouse import config_hash

TESTS_COLUMNS = ["budget", "statistic", "alternative", "arm_a", "arm_b", "n", "mean_a", "mean_b",
                 "diff", "ci_low", "ci_high", "p_ttest", "p_bootstrap"]


class TableSettings(Protocol):
    """A Table 5 run's plan: the EP and RLVR recipes, the RLVR arms' cap factors, steps,
    seed, data size, the EP arm's cap (None: the recipe's) and ``key=value`` overrides for
    every arm."""

    ep_recipe: str
    rlvr_recipe: str
    rlvr_cap_factors: Sequence[float]
    max_steps: int
    seed: int
    dataset_limit: int | None
    max_completion_length: int | None
    overrides: Sequence[str]


def table_plan(settings: TableSettings) -> TablePlan:
    """The run's :class:`training.ep_budget.TablePlan`; ValueError on bad settings."""
    try:
        extra = parse_overrides(list(settings.overrides))
        return TablePlan(ep_recipe=settings.ep_recipe, rlvr_recipe=settings.rlvr_recipe,
                         rlvr_cap_factors=tuple(settings.rlvr_cap_factors),
                         max_steps=settings.max_steps, seed=settings.seed,
                         dataset_limit=settings.dataset_limit,
                         max_completion_length=settings.max_completion_length, overrides=extra)
    except (RecipeError, ValueError) as exc:
        raise ValueError(f"bad ep_budget_table config: {exc}") from exc


def ep_arm(plan: TablePlan) -> Arm:
    """The EP recipe with the plan's overrides, seed, steps and data size: resolved, it gives
    the budgets, cap and GRPO settings every arm shares."""
    return Arm("ep", plan.ep_recipe, {
        **plan.overrides, "seed": plan.seed, "max_steps": plan.max_steps,
        **({"dataset_limit": plan.dataset_limit} if plan.dataset_limit is not None else {}),
        # the EP arm's cap: the start's lengths are measured up to it (training.ep_budget)
        **({"max_completion_length": plan.max_completion_length}
           if plan.max_completion_length is not None else {}),
    })


def check_ep_budgets(plan: TablePlan, ep_config: Any) -> None:
    """ValueError unless the EP recipe has budgets (the EP-aware arm's budget reward)."""
    if not ep_config.budgets:
        raise ValueError(f"recipe {plan.ep_recipe!r} has no budgets: the EP-aware arm needs the "
                         "budget reward (e.g. budget_grpo.cpu)")


def check_arm_configs(plan: TablePlan, configs: Mapping[str, Any]) -> None:
    """ValueError unless the RLVR arms reward correctness only and every arm's resolved
    config (by label) shares the GRPO settings, seed, steps and data size."""
    rlvr_with_budget = [a for a, c in configs.items() if a != ARM_EP and c.budgets]
    if rlvr_with_budget:
        raise ValueError(f"recipe {plan.rlvr_recipe!r} has budgets: the RLVR arms must reward "
                         "correctness only (e.g. rlvr_grpo.cpu)")
    mismatches = config_mismatches(configs)
    if mismatches:
        raise ValueError("the arms would not train alike: " + "; ".join(mismatches))


@dataclass(frozen=True)
class TableData:
    """The EP arm's training ``examples`` (stored under ``train_id`` for the RLVR arms) and
    the held-out ``problems`` from ``heldout_spec``."""

    examples: list[dict[str, Any]]
    problems: list[dict[str, Any]]
    heldout_spec: str
    train_id: str

    @property
    def train_spec(self) -> str:
        """The dataset spec the RLVR arms read the stored examples from."""
        return f"warehouse:{TRAIN_TABLE}/{self.train_id}"


def table_data(ep_config: Any, heldout_dataset: str, heldout_n: int,
               heldout_seed: int) -> TableData:
    """The EP arm's examples and ``heldout_n`` held-out problems (drawn with
    ``heldout_seed`` from ``heldout_dataset``, "" for the EP recipe's dataset, minus the
    training problems); ValueError (``DatasetError``) when they cannot be read."""
    spec = heldout_dataset or ep_config.dataset
    examples = training_examples(ep_config)
    problems = heldout_problems(spec, heldout_n, heldout_seed, examples)
    return TableData(examples, problems, spec, fingerprint(examples))


def eval_budgets(requested: Sequence[int], recipe_budgets: Sequence[int]) -> list[int]:
    """The evaluation's budgets, sorted (``requested``, or the EP recipe's when empty);
    ValueError unless every one is a positive token count."""
    budgets = sorted(set(requested or recipe_budgets))
    if any(b <= 0 for b in budgets):
        raise ValueError(f"budgets must be positive token counts, got {budgets}")
    return budgets


def decoding_limit(budget_limit: int | None, budgets: Sequence[int]) -> int:
    """One decoding limit for every budget (App. F): ``budget_limit``, else
    ``BUDGET_LIMIT_FACTOR`` x the largest budget."""
    return budget_limit or BUDGET_LIMIT_FACTOR * max(budgets)


def table_id(ep_recipe: str, config: Mapping[str, Any]) -> str:
    """``<EP recipe>-<hash8 of the run's config>``: the run's partition and the rows' id."""
    return f"{ep_recipe}-{config_hash(dict(config))[:8]}"


def base_spec(model: str) -> Any:
    """The untrained model's ModelSpec: the embedded model's (reusing its default server) or a
    local folder's; ValueError when ``model`` is neither."""
    from eval.models import ModelSpec, embedded_spec, safe_model_id
    from pipelines.models import embedded_model_dir
    from training.model_path import EMBEDDED

    path = str(Path(model).expanduser())
    if model == EMBEDDED or Path(path).resolve() == Path(embedded_model_dir()).resolve():
        return embedded_spec()
    if not (Path(path) / "config.json").is_file():
        raise ValueError(f"base model {model!r} is not a model folder; the table serves it "
                         "locally (set model_name_or_path to a folder or `embedded`)")
    model_id = safe_model_id(Path(path).name)
    return ModelSpec(model_id=model_id, kind="local", path=path, served_model=model_id)


def ep_heldout_benchmark() -> Benchmark:
    """The held-out benchmark: math grading, :data:`training.ep_budget.HELDOUT_TEMPLATE`."""
    return Benchmark(HELDOUT_BENCHMARK, "builtin", "math", HELDOUT_TEMPLATE)


def evaluated_arm(arm: Arm, checkpoint_id: str, samples: list[dict[str, Any]],
                  metrics: Sequence[Mapping[str, Any]]) -> EvaluatedArm:
    """A trained arm's row of the table: its recipe, checkpoint, training cap and training
    summary (``training.arms.train_summary`` of its ``train_metrics`` rows)."""
    return EvaluatedArm(arm.label, checkpoint_id, samples, recipe=arm.recipe,
                        checkpoint_id=checkpoint_id,
                        train_cap=int(arm.overrides["max_completion_length"]),
                        train=train_summary(metrics))


def stamped_rows(rows: Sequence[Mapping[str, Any]], table: str, train_spec: str,
                 heldout: str) -> list[dict[str, Any]]:
    """The score rows with the table id, training data spec and held-out spec."""
    return [dict(r, table_id=table, train_data=train_spec, heldout=heldout) for r in rows]


def typed_scores(rows: Sequence[Mapping[str, Any]]) -> Any:
    """The score rows as a pyarrow table with every column typed (a column that is None in
    every row, as the training columns of a run of the base model alone, would be untyped)."""
    import pyarrow as pa

    types = {"checkpoint_id": pa.string(), "recipe": pa.string(), "train_cap": pa.int64(),
             "generation_limit": pa.int64(), "steps": pa.int64(), "train_wall_s": pa.float64(),
             "train_reward": pa.float64(), "train_completion_length": pa.float64()}
    names = list(dict.fromkeys(k for r in rows for k in r))
    fields = [pa.field(n, types[n]) if n in types else
              pa.field(n, pa.array([r.get(n) for r in rows]).type) for n in names]
    return pa.Table.from_pylist(list(rows), schema=pa.schema(fields))


def smallest_budget_figures(rows: Sequence[Mapping[str, Any]],
                            budgets: Sequence[int]) -> dict[str, float]:
    """``BS@<smallest budget>/<arm>`` for every arm: the table's headline figures."""
    smallest = min(budgets)
    return {f"BS@{smallest}/{r['arm']}": float(r["budgeted_success"])
            for r in rows if r["budget"] == smallest}


def generation_limit(rows: Sequence[Mapping[str, Any]]) -> int:
    """The largest decoding limit any row was evaluated with."""
    return max(r["generation_limit"] or 0 for r in rows)
