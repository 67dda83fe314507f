"""The Engagement paper's time-aware training comparison (Engagement Process
§5.3, Table 5; App. F, Table 25) as plain functions: the arms, their shared training data, the
held-out problems, and the table.

The paper trains three GRPO variants from one model on the same data, budget assignments,
steps and configuration: **EP-aware** (reward 1 only if correct AND within the requested token
budget, 8K training cap), **RLVR-8K** (correctness only, same cap) and **RLVR-16K**
(correctness only, twice the cap); then evaluates the base model and all three on one fixed
test set, every budget decoded to the same limit, reporting Budgeted Success (BS@B), Accuracy
(Acc@B) and average tokens (Tok@B) with bootstrap 95% CIs over test examples.

Here (``assets.ep_training`` runs it through the trainer launcher and the evaluation path):

- :func:`plan_arms`: ``ep_aware`` from the budget recipe (``budget_grpo.cpu``), and one RLVR arm
  per cap factor (``rlvr`` at the EP arm's cap, ``rlvr_x2`` at twice it: the RLVR-8K / 16K
  analogues) from the RLVR recipe, with the EP recipe's GRPO settings (:data:`SHARED_FIELDS`),
  seed and steps copied in, so the arms differ only in reward and cap
  (:func:`config_mismatches` checks the resolved configs).
- :func:`training_examples`: the EP arm's prompts exactly as ``training.grpo`` builds them
  (``grpo_examples`` then ``add_budgets`` with the recipe's budgets and seed). The RLVR arms
  train on these stored rows (``warehouse:ep_budget_train/<fingerprint>``), so they see the same
  prompts, urgency instructions and budget assignments ("same training data, ... budget
  assignments", App. F) and only their reward ignores the budget.
- :func:`heldout_problems`: the test problems, from a dataset spec with its own seed, minus any
  problem whose text is in the training data.
- :func:`table_rows`: one row per (arm, budget) with BS@B, Acc@B, Tok@B and their CIs
  (``eval.budget.budget_score_rows``: per-problem means, percentile bootstrap over problems).
- :func:`paired_tests`: EP-aware against every other arm on the smallest budget, paired by
  problem (``eval.compare``), one-sided in the paper's claimed direction: higher BS@B
  (``greater``) and fewer tokens (``less``).
- :func:`wide_rows` / :func:`plot_table`: the Table 5 layout and a picture of BS@B and Tok@B
  against the budget per arm.
- :func:`measure_budgets`: budgets from the start model's own answer lengths (a run-time rule,
  fixed before any run: sample the start once per training prompt, budget words included, at
  the EP recipe's sampling settings, count each answer's tokens as the budget reward does, and take fixed percentiles,
  :func:`percentile_budgets`). The paper's budgets (1K-8K tokens) suit an 8B thinking model; a
  small start's answers are tens of tokens, so fixed numbers either never bind or are never
  met. The percentiles put the smallest budget where the start answers within it sometimes but
  not always, which is where a budget reward has something to teach.

Departures: evaluation prompts are the budgeted mode's (``eval.modes``: one user message, the
benchmark template + problem + urgency words), while training prompts put the boxed instruction
in a system message; :data:`HELDOUT_TEMPLATE` repeats that instruction's words so the two read
alike. Not guaranteed: that a few CPU GRPO steps on the 135M embedded model move any of these
numbers -- the CIs say how much the table can tell.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from training.arms import Arm

ARM_BASE, ARM_EP, ARM_RLVR = "base", "ep_aware", "rlvr"
TABLE = "ep_budget_scores"
TESTS_TABLE = "ep_budget_tests"
TRAIN_TABLE = "ep_budget_train"
HELDOUT_BENCHMARK = "ep_heldout"
# the boxed system prompt's words (pipelines.formats.BOXED_SYSTEM_PROMPT) as a user template
HELDOUT_TEMPLATE = ("Solve the problem. Work through it step by step, then write the final "
                    "answer inside \\boxed{{}}.\n\n{problem}")
# GRPO settings every arm takes from the EP recipe ("same training configuration", App. F)
SHARED_FIELDS = ("model_name_or_path", "answer_format", "learning_rate", "num_generations",
                 "per_device_train_batch_size", "gradient_accumulation_steps", "temperature",
                 "top_p", "top_k", "beta", "loss_type", "scale_rewards",
                 "drop_degenerate_groups", "use_cpu", "bf16", "torch_threads",
                 "gradient_checkpointing")
# fields the plan sets per arm; checked equal across arms after resolution
PLAN_FIELDS = ("seed", "max_steps", "dataset_limit")
# (statistic, per-problem metric of eval.budget.per_problem_at_b, claimed direction for EP)
CLAIMS = (("budgeted_success", "success", "greater"), ("mean_tokens", "tokens", "less"))
# the percentiles of the start's answer lengths that become the budgets (smallest first; the
# claim compares at the smallest): a quarter of the start's answers fit the tightest budget
BUDGET_PERCENTILES = (25.0, 50.0, 75.0)


def arm_label(factor: float) -> str:
    """``rlvr`` for the EP arm's cap, ``rlvr_x<factor>`` otherwise."""
    return ARM_RLVR if factor == 1 else f"{ARM_RLVR}_x{factor:g}"


def arm_order(label: str) -> int:
    """The paper's row order: base model, RLVR arms (largest cap first), EP-aware last."""
    if label == ARM_BASE:
        return 0
    if label == ARM_EP:
        return 1000
    factor = 1.0 if label == ARM_RLVR else float(label.removeprefix(f"{ARM_RLVR}_x"))
    return 500 - int(factor * 10)


@dataclass(frozen=True)
class TablePlan:
    """One Table 5 run. ``rlvr_cap_factors``: one RLVR arm per factor of the EP arm's
    generation cap (default 1 and 2: RLVR-8K and RLVR-16K against an 8K EP cap);
    ``max_completion_length`` None keeps the EP recipe's cap; ``overrides`` go to every arm
    (a ``dataset`` override picks the EP arm's data, which the RLVR arms then read as stored
    rows)."""

    ep_recipe: str = "budget_grpo.cpu"
    rlvr_recipe: str = "rlvr_grpo.cpu"
    rlvr_cap_factors: tuple[float, ...] = (1.0, 2.0)
    max_steps: int = 4
    seed: int = 0
    dataset_limit: int | None = 64
    max_completion_length: int | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    budgets: tuple[int, ...] | None = None  # the EP arm's budgets; None keeps the recipe's

    def __post_init__(self) -> None:
        factors = self.rlvr_cap_factors
        checks = [
            (len(factors) >= 1, "rlvr_cap_factors", "a non-empty list (e.g. [1, 2])"),
            (all(f > 0 for f in factors), "rlvr_cap_factors", "positive"),
            (len(set(factors)) == len(factors), "rlvr_cap_factors", "distinct"),
            (self.max_steps >= 1, "max_steps", ">= 1"),
            (self.dataset_limit is None or self.dataset_limit >= 1, "dataset_limit", ">= 1"),
            (self.max_completion_length is None or self.max_completion_length >= 1,
             "max_completion_length", ">= 1"),
            (self.budgets is None or (len(self.budgets) >= 1 and all(
                isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in self.budgets)),
             "budgets", "None or positive whole token counts"),
        ]
        for ok, name, rule in checks:
            if not ok:
                raise ValueError(f"table plan {name} must be {rule}, got {getattr(self, name)!r}")
        reserved = {"seed", "max_steps", "dataset_limit", "rewards", "budgets",
                    "checkpoint_id", "max_completion_length"} & set(self.overrides)
        if reserved:
            raise ValueError(f"table overrides may not set {sorted(reserved)}: the plan sets them "
                             "per arm (use max_steps, seed, dataset_limit, max_completion_length "
                             "or the recipes instead)")


def _simple(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def plan_arms(plan: TablePlan, ep_config: Any, train_spec: str) -> list[Arm]:
    """The EP-aware arm, then one RLVR arm per cap factor. ``ep_config`` is the EP recipe
    resolved with ``plan.overrides`` (its budgets, cap and GRPO settings); ``train_spec`` is the
    dataset spec of the stored EP examples (:func:`training_examples`) the RLVR arms read."""
    if not getattr(ep_config, "budgets", None):
        raise ValueError(f"recipe {plan.ep_recipe!r} has no budgets: the EP-aware arm needs the "
                         "budget reward and its budgets (e.g. budget_grpo.cpu)")
    cap = int(plan.max_completion_length or ep_config.max_completion_length)
    common: dict[str, Any] = {**plan.overrides, "seed": plan.seed, "max_steps": plan.max_steps}
    if plan.dataset_limit is not None:
        common["dataset_limit"] = plan.dataset_limit
    arms = [with_budgets(Arm(ARM_EP, plan.ep_recipe, {**common, "max_completion_length": cap}),
                         plan.budgets)]
    shared = {name: getattr(ep_config, name) for name in SHARED_FIELDS
              if hasattr(ep_config, name) and _simple(getattr(ep_config, name))}
    for factor in plan.rlvr_cap_factors:
        arms.append(Arm(arm_label(factor), plan.rlvr_recipe, {
            **shared, **common, "dataset": train_spec, "dataset_fallback": "",
            "max_completion_length": max(1, round(cap * factor))}))
    return arms


def with_budgets(arm: Arm, budgets: Sequence[int] | None) -> Arm:
    """``arm`` with ``budgets`` as its ``budgets`` override (the EP recipe's ``budgets``: the
    prompts' budget assignments, urgency words and the budget reward's limits all come from it);
    ``arm`` itself when ``budgets`` is None."""
    if budgets is None:
        return arm
    return Arm(arm.label, arm.recipe, {**arm.overrides, "budgets": [int(b) for b in budgets]})


def config_mismatches(configs: Mapping[str, Any]) -> list[str]:
    """``field: arm=value, ...`` for every shared or plan field on which the resolved configs of
    the arms disagree (empty when they train alike apart from reward, data spec and cap)."""
    out = []
    for name in (*SHARED_FIELDS, *PLAN_FIELDS):
        values = {arm: getattr(cfg, name, None) for arm, cfg in configs.items()}
        if len({repr(v) for v in values.values()}) > 1:
            out.append(f"{name}: " + ", ".join(f"{a}={v!r}" for a, v in values.items()))
    return out


def training_examples(ep_config: Any) -> list[dict[str, Any]]:
    """The EP arm's GRPO rows as ``training.grpo.run_grpo`` builds them: its dataset (limit,
    seed, fallback), ``grpo_examples`` in its answer format, ``add_budgets`` with its budgets
    and seed. Columns: ``prompt`` (messages with the urgency instruction), ``budget`` and the
    data's own columns (gold ``answer``, ``problem``, ...)."""
    from training.data import add_budgets, grpo_examples, load_dataset

    data = load_dataset(ep_config.dataset, fallback=ep_config.dataset_fallback,
                        limit=ep_config.dataset_limit, seed=ep_config.seed)
    examples = grpo_examples(data.rows, ep_config.answer_format)
    return add_budgets(examples, ep_config.budgets, seed=ep_config.seed)


def _problem_text(row: Mapping[str, Any]) -> str:
    if row.get("problem") is not None:
        return str(row["problem"]).strip()
    prompt = row.get("prompt")
    if isinstance(prompt, list):
        users = [m.get("content", "") for m in prompt if m.get("role") == "user"]
        return str(users[-1] if users else "").strip()
    return str(prompt or "").strip()


def heldout_problems(spec: str, n: int, seed: int,
                     train_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``n`` test problems (``problem_id``, ``problem``, ``answer``) from the dataset ``spec``
    loaded with ``seed``, leaving out any problem whose text or id is in ``train_rows``; raises
    when fewer than ``n`` remain or the rows lack those columns."""
    from training.data import load_rows

    if n < 2:
        raise ValueError(f"heldout_n must be >= 2 (a paired test needs two problems), got {n}")
    seen_text = {_problem_text(r) for r in train_rows}
    seen_ids = {str(r["problem_id"]) for r in train_rows if r.get("problem_id") is not None}
    rows = load_rows(spec, limit=n + len(train_rows), seed=seed)
    missing = {"problem_id", "problem", "answer"} - set(rows[0])
    if missing:
        raise ValueError(f"held-out dataset {spec!r} lacks column(s) {sorted(missing)}; it needs "
                         "problem_id, problem and answer (e.g. builtin:arith or problems:gsm8k)")
    kept, ids = [], set()
    for r in rows:
        pid = str(r["problem_id"])
        if pid in seen_ids or pid in ids or str(r["problem"]).strip() in seen_text:
            continue
        ids.add(pid)
        kept.append({"problem_id": pid, "problem": str(r["problem"]), "answer": str(r["answer"])})
        if len(kept) == n:
            return kept
    raise ValueError(f"held-out dataset {spec!r} (seed {seed}) has only {len(kept)} problems that "
                     f"are not in the training data; asked for {n}: lower heldout_n or use "
                     "another spec or seed")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values`` by linear interpolation between the two
    nearest order statistics: rank ``(n - 1) q / 100`` of the sorted values (Hyndman and Fan's
    type 7, the usual default of statistics packages)."""
    if not values:
        raise ValueError("percentile of no values: the start produced no answers to measure")
    if not 0 <= q <= 100:
        raise ValueError(f"a percentile is between 0 and 100, got {q}")
    ordered = sorted(float(v) for v in values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (rank - low) * (ordered[high] - ordered[low])


def percentile_budgets(lengths: Sequence[int], percentiles: Sequence[float]) -> tuple[int, ...]:
    """One budget per percentile of the answer ``lengths`` (tokens), ascending: the percentile
    rounded up to a whole token (at least 1), each budget at least one token above the one
    before (budgets must be distinct: every one has its own prompts and urgency words)."""
    if not percentiles or list(percentiles) != sorted(set(percentiles)):
        raise ValueError(f"budget percentiles must be distinct and ascending, got "
                         f"{list(percentiles)}")
    out: list[int] = []
    for q in percentiles:
        budget = max(1, math.ceil(percentile(lengths, q) - 1e-9))
        out.append(max(budget, out[-1] + 1) if out else budget)
    return tuple(out)


@dataclass(frozen=True)
class BudgetMeasure:
    """What :func:`measure_budgets` measured: the start ``model``, one answer length per
    training prompt (tokens, the end-of-sequence token not counted; an answer cut at ``cap``
    counts ``cap``, ``truncated`` of them), the ``percentiles``, their raw ``values`` and the
    resulting ``budgets``."""

    model: str
    lengths: tuple[int, ...]
    percentiles: tuple[float, ...]
    values: tuple[float, ...]
    budgets: tuple[int, ...]
    cap: int
    truncated: int
    sampling: Mapping[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The figures as plain values (metadata and warehouse columns)."""
        return {"budget_model": self.model, "budget_percentiles": list(self.percentiles),
                "budget_percentile_values": [round(v, 3) for v in self.values],
                "budgets": list(self.budgets), "start_lengths": list(self.lengths),
                "start_length_cap": self.cap, "start_truncated": self.truncated,
                "start_sampling": dict(self.sampling)}


def start_prompts(ep_config: Any, n_budgets: int) -> list[Any]:
    """The EP arm's training prompts as it will train on them, before its budgets are known:
    :func:`training_examples` with the ranks ``1..n_budgets`` standing in for the budgets. A
    prompt's budget words depend only on its budget's rank among the budgets, and
    ``add_budgets`` assigns budgets by position (a seeded shuffle of the list), so any
    ascending budgets give these same prompts."""
    stand_in = SimpleNamespace(**{name: getattr(ep_config, name) for name in (
        "dataset", "dataset_fallback", "dataset_limit", "seed", "answer_format")},
        budgets=list(range(1, n_budgets + 1)))
    return [row["prompt"] for row in training_examples(stand_in)]


def answer_length(ids: Sequence[int], end_ids: Sequence[int]) -> int:
    """Tokens of one sampled answer before its first end id (the budget reward's count)."""
    ends = set(end_ids)
    return next((i for i, tok in enumerate(ids) if tok in ends), len(ids))


def sample_answer_lengths(model: str, prompts: Sequence[Any], *, max_new_tokens: int,
                          temperature: float, top_p: float = 1.0, top_k: int | None = None,
                          seed: int = 0, threads: int | None = None,
                          batch_size: int = 16) -> list[int]:
    """One sampled answer per prompt from ``model`` (a folder or ``embedded``) with
    transformers' ``generate`` as TRL's GRPO samples on CPU (chat template with the generation
    prompt, left padding, temperature / top-p / top-k, ``max_new_tokens``); returns each
    answer's token count (:func:`answer_length`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from training.model_path import resolve_model

    if threads:
        torch.set_num_threads(int(threads))
    path = resolve_model(model)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    lm = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    end_ids = [tokenizer.eos_token_id]
    gen = GenerationConfig(max_new_tokens=int(max_new_tokens), do_sample=True,
                           temperature=float(temperature), top_p=float(top_p),
                           top_k=int(top_k or 0), pad_token_id=tokenizer.pad_token_id,
                           eos_token_id=end_ids)
    torch.manual_seed(seed)
    lengths: list[int] = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start:start + batch_size]
        texts = [p if isinstance(p, str) else tokenizer.apply_chat_template(
            list(p), tokenize=False, add_generation_prompt=True) for p in chunk]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = lm.generate(**enc, generation_config=gen)
        width = enc["input_ids"].shape[1]
        lengths += [answer_length(row[width:].tolist(), end_ids) for row in out]
    return lengths


def measure_budgets(ep_config: Any, percentiles: Sequence[float] = BUDGET_PERCENTILES,
                    sample: Any = None) -> BudgetMeasure:
    """Budgets from the start: sample ``ep_config``'s model once on each of its training prompts
    (:func:`start_prompts`, budget words included) at its sampling settings (temperature,
    top-p, top-k, generation cap
    ``max_completion_length``, seed, threads) and take :func:`percentile_budgets` of the answer
    lengths. ``sample`` replaces :func:`sample_answer_lengths` (tests). ValueError when a budget
    would not be below the cap (the start's answers are cut there: raise the cap)."""
    sample = sample or sample_answer_lengths
    percentile_budgets([1], percentiles)  # bad percentiles fail before any sampling
    settings = {"temperature": float(ep_config.temperature),
                "top_p": float(getattr(ep_config, "top_p", 1.0) or 1.0),
                "top_k": int(getattr(ep_config, "top_k", 0) or 0),
                "max_new_tokens": int(ep_config.max_completion_length),
                "seed": int(ep_config.seed)}
    lengths = [int(n) for n in sample(
        ep_config.model_name_or_path, start_prompts(ep_config, len(percentiles)),
        threads=getattr(ep_config, "torch_threads", None), **settings)]
    budgets = percentile_budgets(lengths, percentiles)
    cap = settings["max_new_tokens"]
    if budgets[-1] >= cap:
        raise ValueError(f"the start's answer lengths put budget {budgets[-1]} (percentile "
                         f"{percentiles[-1]:g}) at or above the generation cap {cap}, so the "
                         "budgets would not bind in training: raise max_completion_length")
    return BudgetMeasure(model=str(ep_config.model_name_or_path), lengths=tuple(lengths),
                         percentiles=tuple(float(q) for q in percentiles),
                         values=tuple(percentile(lengths, q) for q in percentiles),
                         budgets=budgets, cap=cap, truncated=sum(n >= cap for n in lengths),
                         sampling=settings)


BUDGET_RULE_COLUMNS = ("budget_source", "budget_percentile", "budget_percentile_value",
                       "start_model", "start_lengths", "start_truncated")


def budget_rule_columns(table: Any, measure: BudgetMeasure | None) -> Any:
    """The score rows (a pyarrow table with a ``budget`` column) with where their budgets came
    from: ``budget_source`` (``start_percentiles`` or ``recipe``); for measured budgets the
    percentile that gave the row's budget and its raw value, the start model, its answer lengths
    (a JSON list, one per training prompt) and how many were cut at the cap (null for the
    recipe's budgets). Every column typed, so a run of either kind reads back alike."""
    import json

    import pyarrow as pa

    n = table.num_rows
    if measure is None:
        columns = {"budget_source": ["recipe"] * n, "budget_percentile": [None] * n,
                   "budget_percentile_value": [None] * n, "start_model": [None] * n,
                   "start_lengths": [None] * n, "start_truncated": [None] * n}
    else:
        by_budget = {b: (q, v) for b, q, v in
                     zip(measure.budgets, measure.percentiles, measure.values)}
        budgets = table.column("budget").to_pylist()
        unknown = sorted({b for b in budgets if b not in by_budget})
        if unknown:
            raise ValueError(f"score rows at budget(s) {unknown} that the start's percentiles did "
                             f"not give (measured budgets {list(measure.budgets)}): evaluate at "
                             "the measured budgets (leave `budgets` empty)")
        columns = {"budget_source": ["start_percentiles"] * n,
                   "budget_percentile": [by_budget[b][0] for b in budgets],
                   "budget_percentile_value": [by_budget[b][1] for b in budgets],
                   "start_model": [measure.model] * n,
                   "start_lengths": [json.dumps(list(measure.lengths))] * n,
                   "start_truncated": [measure.truncated] * n}
    types = {"budget_source": pa.string(), "budget_percentile": pa.float64(),
             "budget_percentile_value": pa.float64(), "start_model": pa.string(),
             "start_lengths": pa.string(), "start_truncated": pa.int64()}
    for name in BUDGET_RULE_COLUMNS:
        table = table.append_column(pa.field(name, types[name]),
                                    pa.array(columns[name], types[name]))
    return table


@dataclass
class EvaluatedArm:
    """One model of the table: its arm, eval label, training run and its budgeted samples
    (``eval_samples`` rows). ``train`` is ``training.arms.train_summary`` (empty for base)."""

    arm: str
    model: str
    samples: list[dict[str, Any]]
    recipe: str | None = None
    checkpoint_id: str | None = None
    train_cap: int | None = None
    train: dict[str, Any] = field(default_factory=dict)


def table_rows(evaluated: Sequence[EvaluatedArm], n_boot: int = 2000,
               seed: int = 0) -> list[dict[str, Any]]:
    """One row per (arm, budget), arms in :func:`arm_order`, budgets ascending: BS@B, Acc@B and
    Tok@B with their bootstrap CIs over problems (``eval.budget.budget_score_rows``), sample and
    failure counts, and the arm's training figures."""
    from eval.budget import budget_score_rows

    out = []
    for ev in sorted(evaluated, key=lambda e: arm_order(e.arm)):
        samples = [dict(s, model=ev.model) for s in ev.samples]
        scored = budget_score_rows(samples, n_boot=n_boot, seed=seed)
        if not scored:
            raise ValueError(f"arm {ev.arm}: no graded budgeted samples (every generation failed "
                             "or the run was not in budgeted mode)")
        failed: dict[int, int] = {}
        for s in samples:
            if s.get("budget") is not None and s.get("gen_error") is not None:
                failed[int(s["budget"])] = failed.get(int(s["budget"]), 0) + 1
        for r in sorted(scored, key=lambda r: r["budget"]):
            out.append({
                "arm": ev.arm, "arm_order": arm_order(ev.arm), "model": ev.model,
                "recipe": ev.recipe, "checkpoint_id": ev.checkpoint_id,
                "train_cap": ev.train_cap, "benchmark": r["benchmark"],
                "budget": int(r["budget"]), "n_problems": int(r["n_problems"]),
                "n_samples": int(r["n_samples"]), "failed": failed.get(int(r["budget"]), 0),
                **{k: float(r[k]) for k in SCORE_COLUMNS},
                "generation_limit": r["generation_limit"],
                "steps": ev.train.get("steps"), "train_wall_s": ev.train.get("train_wall_s"),
                "train_reward": ev.train.get("reward_mean"),
                "train_completion_length": ev.train.get("completion_length"),
            })
    return out


SCORE_COLUMNS = ("budgeted_success", "budgeted_success_ci_low", "budgeted_success_ci_high",
                 "accuracy", "accuracy_ci_low", "accuracy_ci_high",
                 "mean_tokens", "mean_tokens_ci_low", "mean_tokens_ci_high")


def graded_budget_rows(samples: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
    """``(problem_id, budget, correct, tokens_used)`` of the graded budgeted samples (tokens:
    ``tokens_used``, else ``completion_tokens`` as ``eval.budget`` counts them)."""
    out = []
    for s in samples:
        if s.get("budget") is None or s.get("correct") is None:
            continue
        used = s.get("tokens_used")
        tokens = float(used if used is not None else (s.get("completion_tokens") or 0))
        out.append((s["problem_id"], s["budget"], bool(s["correct"]), tokens))
    return out


def paired_tests(evaluated: Sequence[EvaluatedArm], *, reference: str = ARM_EP,
                 budget: int | None = None, n_boot: int = 5000,
                 seed: int = 0) -> tuple[list[dict[str, Any]], list[str]]:
    """EP-aware (``reference``) against every other arm at ``budget`` (default: the smallest
    budget the reference was evaluated on), per :data:`CLAIMS`: paired t-test and paired
    bootstrap over the problems both have, one-sided in the claimed direction. Returns the rows
    and the comparisons skipped (with why)."""
    from eval.budget import per_problem_at_b
    from eval.compare import paired_bootstrap, paired_t_test

    by_arm = {e.arm: e for e in evaluated}
    if reference not in by_arm:
        raise ValueError(f"no {reference!r} arm to compare against; arms: {sorted(by_arm)}")
    ref_rows = graded_budget_rows(by_arm[reference].samples)
    if not ref_rows:
        raise ValueError(f"arm {reference}: no graded budgeted samples")
    at = budget if budget is not None else min(int(r[1]) for r in ref_rows)
    out, skipped = [], []
    for other in sorted(evaluated, key=lambda e: arm_order(e.arm)):
        if other.arm == reference:
            continue
        rows = graded_budget_rows(other.samples)
        for statistic, metric, alternative in CLAIMS:
            try:
                a = per_problem_at_b(ref_rows, at, metric)
                b = per_problem_at_b(rows, at, metric) if rows else {}
                shared = sorted(set(a) & set(b), key=repr)
                if len(shared) < 2:
                    raise ValueError(f"{len(shared)} shared problem(s); a paired test needs 2")
                sa, sb = {p: a[p] for p in shared}, {p: b[p] for p in shared}
                t = paired_t_test(sa, sb, alternative=alternative)
                boot = paired_bootstrap(sa, sb, n_boot=n_boot, seed=seed, alternative=alternative)
            except ValueError as exc:
                skipped.append(f"{reference} vs {other.arm} {statistic}@{at}: {exc}")
                continue
            out.append({"budget": at, "statistic": statistic, "alternative": alternative,
                        "arm_a": reference, "model_a": by_arm[reference].model,
                        "arm_b": other.arm, "model_b": other.model, "n": t.n,
                        "mean_a": t.mean_a, "mean_b": t.mean_b, "diff": t.diff,
                        "ci_low": t.ci_low, "ci_high": t.ci_high, "t": float(t.statistic),
                        "p_ttest": t.p_value, "p_bootstrap": boot.p_value})
    return out, skipped


def _cell(value: float, low: float, high: float, digits: int) -> str:
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def wide_rows(rows: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Table 5's layout, one row per arm: ``BS@B``, ``Acc@B`` and ``Tok@B`` for every budget as
    ``"value [ci_low, ci_high]"``; returns the rows and their column names."""
    budgets = sorted({int(r["budget"]) for r in rows})
    columns = ["arm", "model", "train_cap", "steps"]
    for name in ("BS", "Acc", "Tok"):
        columns += [f"{name}@{b}" for b in budgets]
    arms: dict[str, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: (r["arm_order"], r["budget"])):
        row = arms.setdefault(r["arm"], {"arm": r["arm"], "model": r["model"],
                                         "train_cap": r["train_cap"], "steps": r["steps"]})
        b = int(r["budget"])
        row[f"BS@{b}"] = _cell(r["budgeted_success"], r["budgeted_success_ci_low"],
                               r["budgeted_success_ci_high"], 3)
        row[f"Acc@{b}"] = _cell(r["accuracy"], r["accuracy_ci_low"], r["accuracy_ci_high"], 3)
        row[f"Tok@{b}"] = _cell(r["mean_tokens"], r["mean_tokens_ci_low"],
                                r["mean_tokens_ci_high"], 1)
    return list(arms.values()), columns


def plot_table(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Two panels against the requested budget, one line per arm with CI bars: BS@B, and Tok@B
    beside the line tokens = budget (points under it stay within the budget on average)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    arms: dict[str, list[Mapping[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: (r["arm_order"], r["budget"])):
        arms.setdefault(r["arm"], []).append(r)
    for arm, points in arms.items():
        xs = [p["budget"] for p in points]
        for ax, key in ((left, "budgeted_success"), (right, "mean_tokens")):
            ys = [p[key] for p in points]
            err = [[y - p[f"{key}_ci_low"] for y, p in zip(ys, points)],
                   [p[f"{key}_ci_high"] - y for y, p in zip(ys, points)]]
            ax.errorbar(xs, ys, yerr=err, fmt="o-", capsize=3, label=arm)
    budgets = sorted({r["budget"] for r in rows})
    right.plot(budgets, budgets, color="grey", lw=0.8, ls="--", label="tokens = budget")
    left.set_xlabel("requested budget B (tokens)")
    left.set_ylabel("budgeted success BS@B")
    left.set_ylim(-0.05, 1.05)
    left.set_title("correct and within budget")
    right.set_xlabel("requested budget B (tokens)")
    right.set_ylabel("mean tokens Tok@B")
    right.set_title("answer length")
    for ax in (left, right):
        ax.set_xticks(budgets)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
