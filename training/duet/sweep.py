"""The DUET paper's budget sweep as plain functions (§4.1 setup,
§4.3 and Figure 9: GRPO at the full budget against DUET at full, half and quarter budget, same
prompts and seed; speedup against budget and accuracy against wall clock).

What is here (no Dagster, no trainer imports; ``assets.duet`` wires it to the trainer launcher,
the evaluation code path and the warehouse; the helpers shared with other arm comparisons are
in ``training.arms``):

- :class:`SweepPlan` and :func:`plan_arms`: the arms of one sweep as recipe overrides. Every
  arm shares the recipe, seed, dataset, step count, length cap and the number of prompts per
  step; GRPO gets ``full_rollouts`` rollouts per prompt (``kind=grpo``: the recipe as plain
  GRPO), DUET arm ``b`` gets the recipe's ``duet`` settings with ``budget_fraction = b`` and
  ``full_rollouts`` set (the sweep's own ``duet`` settings over the recipe's), and
  ``slots`` rollout slots per prompt (its cap ``n_max``). Equal prompts per generation batch
  and equal seeds give TRL's sampler the same prompt order in every arm.
- :func:`duet_diagnostics`: the per-step ``duet/*`` values of a run's ``train_metrics`` rows.
- :func:`sweep_rows`: one ``duet_sweep`` row per arm: training wall clock (sum of the logged
  ``seconds_per_step``), rollout tokens (GRPO: every completion token; DUET: allocated
  rollouts only, ``duet/tokens_generated``), accuracy with its CI, and the ratios against the
  GRPO arm (``speedup`` = GRPO wall clock / arm wall clock; ``token_ratio`` likewise), and a
  DUET arm's per-step diagnostics averaged over its steps (``mean_abort_rate``,
  ``mean_marker_rate``, ``mean_k1``, ``mean_k2``, ``mean_budget_used``, ...; NULL for GRPO).
- :func:`plot_sweep`: the two panels of the paper's comparison (speedup against budget,
  accuracy against wall clock) as a PNG.

Not guaranteed: that a short CPU sweep on a 135M model reproduces the paper's GPU figures
(1.62x at full and 2.51x at half budget with vLLM and 3,072-token rollouts); wall clock on a
shared machine varies with its load, so compare arms of one sweep only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training.arms import finite_mean as _mean
from training.arms import metrics_logs as _logs
from training.arms import override_args

if TYPE_CHECKING:
    from training.duet.core import DuetSettings

DEFAULT_BUDGETS = (1.0, 0.5, 0.25)
SWEEP_TABLE = "duet_sweep"
# train_metrics logs_json key -> diagnostic name (training.duet.trainer logs these every step)
DIAGNOSTIC_KEYS: dict[str, str] = {
    "duet/lambda": "lambda",
    "duet/k1": "k1",
    "duet/k2": "k2",
    "duet/n_q_min": "n_q_min",
    "duet/n_q_mean": "n_q_mean",
    "duet/n_q_max": "n_q_max",
    "duet/abort_at": "abort_at",
    "duet/marker_rate": "marker_rate",
    "duet/marker_seen_rate": "marker_seen_rate",
    "duet/abort_rate": "abort_rate",
    "duet/cap_cut_rate": "cap_cut_rate",
    "duet/eps_kept": "eps_kept",
    "duet/is_weight_mean": "is_weight_mean",
    "duet/tokens_generated": "tokens_generated",
    "duet/token_budget": "token_budget",
    "duet/tokens_planned": "tokens_planned",
    "duet/budget_used": "budget_used",
    "duet/calibration_chi2": "calibration_chi2",
    "duet/k_refit": "k_refit",
    "duet/k_window": "k_window",
    "duet/s_floor": "s_floor",
    "duet/overhead_s": "overhead_s",
    "duet/reward_mean": "reward_mean",
}


@dataclass(frozen=True)
class SweepPlan:
    """One sweep. ``slots`` (DUET's rollout slots per prompt, ``n_max``) defaults to
    ``2 * full_rollouts``; ``overrides`` apply to every arm (e.g. a model path)."""

    recipe: str = "duet_grpo.cpu"
    budgets: tuple[float, ...] = DEFAULT_BUDGETS
    full_rollouts: int = 8
    slots: int | None = None
    prompts_per_step: int = 2
    max_steps: int = 4
    dataset_limit: int | None = 64
    max_completion_length: int | None = None
    seed: int = 0
    overrides: Mapping[str, Any] = field(default_factory=dict)
    # DUET settings for every DUET arm, over the recipe's (e.g. {"grace": 16}); the sweep sets
    # budget_fraction and full_rollouts itself
    duet: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        checks = [
            (len(self.budgets) > 0, "budgets", "a non-empty list of fractions in (0, 4]"),
            (all(0 < b <= 4 for b in self.budgets), "budgets", "fractions in (0, 4]"),
            (len(set(self.budgets)) == len(self.budgets), "budgets", "distinct"),
            (self.full_rollouts >= 2, "full_rollouts", ">= 2 (a group needs two rollouts)"),
            (self.slots is None or self.slots >= 2, "slots", ">= 2"),
            (self.prompts_per_step >= 1, "prompts_per_step", ">= 1"),
            (self.max_steps >= 1, "max_steps", ">= 1"),
            (self.dataset_limit is None or self.dataset_limit >= self.prompts_per_step,
             "dataset_limit", ">= prompts_per_step"),
            (self.max_completion_length is None or self.max_completion_length >= 1,
             "max_completion_length", ">= 1"),
        ]
        for ok, name, rule in checks:
            if not ok:
                raise ValueError(f"sweep {name} must be {rule}, got {getattr(self, name)!r}")
        reserved = {"kind", "duet", "num_generations", "per_device_train_batch_size", "seed",
                    "max_steps", "checkpoint_id"} & set(self.overrides)
        if reserved:
            raise ValueError(f"sweep overrides may not set {sorted(reserved)}: the sweep sets "
                             "them per arm (use budgets, full_rollouts, slots, "
                             "prompts_per_step, max_steps, seed and duet instead)")
        own = {"budget_fraction", "full_rollouts"} & set(self.duet)
        if own:
            raise ValueError(f"sweep duet settings may not set {sorted(own)}: use budgets and "
                             "full_rollouts")

    @property
    def duet_slots(self) -> int:
        return self.slots if self.slots is not None else 2 * self.full_rollouts


@dataclass(frozen=True)
class SweepArm:
    """One training run of the sweep: ``method`` is 'grpo' or 'duet'."""

    label: str
    method: str
    budget_fraction: float
    overrides: dict[str, Any]

    def override_args(self) -> list[str]:
        """``key=value`` arguments for ``python -m training.grpo`` (values parse back as YAML)."""
        return override_args(self.overrides)


def plan_arms(plan: SweepPlan,
              recipe_duet: Mapping[str, Any] | DuetSettings | None) -> list[SweepArm]:
    """GRPO at full budget, then one DUET arm per budget fraction (see the module docstring).
    ``recipe_duet`` is the recipe's DUET settings (a ``DuetGRPOConfig``'s ``duet`` or a
    mapping; its settings other than the budget are kept; None: the defaults of
    ``training.duet.DuetSettings``)."""
    from training.duet.core import DuetSettings

    if isinstance(recipe_duet, DuetSettings):
        recipe_duet = asdict(recipe_duet)
    common: dict[str, Any] = {**plan.overrides, "seed": plan.seed, "max_steps": plan.max_steps}
    if plan.dataset_limit is not None:
        common["dataset_limit"] = plan.dataset_limit
    if plan.max_completion_length is not None:
        common["max_completion_length"] = plan.max_completion_length
    full = plan.full_rollouts
    arms = [SweepArm("grpo", "grpo", 1.0, {
        **common, "kind": "grpo", "num_generations": full,
        "per_device_train_batch_size": plan.prompts_per_step * full})]
    slots = plan.duet_slots
    for b in plan.budgets:
        settings = {**dict(recipe_duet or {}), **dict(plan.duet), "budget_fraction": float(b),
                    "full_rollouts": full}
        checked = DuetSettings.from_mapping(settings)  # a bad mapping fails before any run
        if checked.n_min > slots:
            raise ValueError(f"duet.n_min={checked.n_min} exceeds the sweep's slots={slots}")
        arms.append(SweepArm(f"duet-b{b:g}", "duet", float(b), {
            **common, "duet": settings, "num_generations": slots,
            "per_device_train_batch_size": plan.prompts_per_step * slots}))
    return arms


def duet_diagnostics(metrics_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per logged step (ascending): ``step`` and every ``duet/*`` diagnostic it logged, under
    the names of :data:`DIAGNOSTIC_KEYS` (None where a step did not log one). Empty for a run
    without DUET."""
    out = []
    for row in sorted(metrics_rows, key=lambda r: r["step"]):
        logs = _logs(row)
        if not any(k in logs for k in DIAGNOSTIC_KEYS):
            continue
        item: dict[str, Any] = {"step": int(row["step"])}
        for key, name in DIAGNOSTIC_KEYS.items():
            value = logs.get(key)
            item[name] = float(value) if isinstance(value, (int, float)) else None
        out.append(item)
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b not in (None, 0) else None


@dataclass
class ArmOutcome:
    """What one arm produced: its checkpoint, its ``train_metrics`` rows and its evaluation
    (``accuracy`` with a CI over problems; None when the arm was not evaluated)."""

    arm: SweepArm
    checkpoint_id: str
    path: str
    metrics_rows: list[dict[str, Any]]
    accuracy: float | None = None
    accuracy_ci: tuple[float | None, float | None] = (None, None)
    eval_problems: int = 0
    benchmark: str | None = None


def arm_row(outcome: ArmOutcome) -> dict[str, Any]:
    """The arm's figures without the GRPO ratios (see :func:`sweep_rows`)."""
    rows = sorted(outcome.metrics_rows, key=lambda r: r["step"])
    logs = [_logs(r) for r in rows]
    wall = [r.get("seconds_per_step") for r in rows]
    if outcome.arm.method == "duet":
        tokens = [g.get("duet/tokens_generated") for g in logs]
    else:
        tokens = [r.get("tokens_generated") for r in rows]
    diag = duet_diagnostics(rows)
    known_wall = [float(w) for w in wall if w is not None]
    known_tokens = [float(t) for t in tokens if t is not None]
    row = {
        "arm": outcome.arm.label, "method": outcome.arm.method,
        "budget_fraction": outcome.arm.budget_fraction,
        "checkpoint_id": outcome.checkpoint_id, "checkpoint_path": outcome.path,
        "steps": len(rows),
        "train_wall_s": sum(known_wall) if known_wall else None,
        "seconds_per_step": _mean(known_wall),
        "rollout_tokens": sum(known_tokens) if known_tokens else None,
        "tokens_per_step": _mean(known_tokens),
        # TRL's logged reward counts DUET's unallocated placeholder slots as 0: a DUET arm's
        # reward is its mean over the rollouts it generated (``duet/reward_mean``)
        "reward_mean": _mean([g.get("duet/reward_mean") for g in logs]
                             if outcome.arm.method == "duet"
                             else [r.get("reward_mean") for r in rows]),
        "benchmark": outcome.benchmark, "eval_problems": outcome.eval_problems,
        "accuracy": outcome.accuracy,
        "accuracy_ci_low": outcome.accuracy_ci[0], "accuracy_ci_high": outcome.accuracy_ci[1],
    }
    for name in ("lambda", "n_q_mean", "abort_rate", "marker_rate", "is_weight_mean",
                 "token_budget", "budget_used", "overhead_s", "k1", "k2", "cap_cut_rate"):
        row[f"mean_{name}"] = _mean([d[name] for d in diag]) if diag else None
    return row


def sweep_rows(outcomes: Sequence[ArmOutcome]) -> list[dict[str, Any]]:
    """One row per arm; ``speedup`` and ``token_ratio`` are the GRPO arm's training wall clock
    and rollout tokens divided by the arm's (> 1: the arm is cheaper; 1 for GRPO itself)."""
    rows = [arm_row(o) for o in outcomes]
    base = next((r for r in rows if r["method"] == "grpo"), None)
    if base is None:
        raise ValueError("a sweep needs its GRPO arm: speedups are measured against it")
    for r in rows:
        r["speedup"] = _ratio(base["train_wall_s"], r["train_wall_s"])
        r["token_ratio"] = _ratio(base["rollout_tokens"], r["rollout_tokens"])
    return rows


def plot_sweep(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Two panels: speedup over GRPO against the budget fraction (DUET arms; GRPO is 1 at
    b = 1), and accuracy against training wall clock (every arm, CI bars where known)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    duet = sorted((r for r in rows if r["method"] == "duet"), key=lambda r: r["budget_fraction"])
    xs = [r["budget_fraction"] for r in duet if r["speedup"] is not None]
    ys = [r["speedup"] for r in duet if r["speedup"] is not None]
    left.plot(xs, ys, "o-", label="DUET wall clock")
    tx = [r["budget_fraction"] for r in duet if r["token_ratio"] is not None]
    ty = [r["token_ratio"] for r in duet if r["token_ratio"] is not None]
    left.plot(tx, ty, "s--", label="DUET rollout tokens")
    left.axhline(1.0, color="grey", lw=0.8, label="GRPO (full budget)")
    left.set_xlabel("budget fraction b")
    left.set_ylabel("GRPO / DUET")
    left.set_title("speedup vs budget")
    left.legend(fontsize=8)
    for r in rows:
        if r["train_wall_s"] is None or r["accuracy"] is None:
            continue
        lo, hi = r["accuracy_ci_low"], r["accuracy_ci_high"]
        err = None if lo is None or hi is None else [[r["accuracy"] - lo], [hi - r["accuracy"]]]
        right.errorbar([r["train_wall_s"]], [r["accuracy"]], yerr=err, fmt="o", capsize=3,
                       label=r["arm"])
    right.set_xlabel("training wall clock (s)")
    right.set_ylabel(f"accuracy ({next((r['benchmark'] for r in rows if r['benchmark']), '')})")
    right.set_title("accuracy vs wall clock")
    if any(r["accuracy"] is not None for r in rows):
        right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
