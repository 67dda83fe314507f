"""Reward functions for GRPO, written to TRL's reward-function contract.

TRL calls every reward function as ``fn(prompts=..., completions=..., completion_ids=...,
**columns)`` where ``columns`` are the dataset's other columns (one value per completion) plus
``trainer_state``, ``log_extra`` and ``log_metric``; it returns one float (or None: "not
scorable", which TRL turns into NaN and leaves out of the group baseline) per completion.
Configurable rewards are made by ``get_<name>_reward(...)`` factories; :data:`REWARDS` maps the
names used in recipes to those factories.

- Outcome (:func:`get_outcome_reward`): 1 when the final answer matches the gold answer by
  ``eval.graders.grade_math`` (the grader evaluation uses), else 0. Where the answer is looked for
  depends on the format: the whole text (``boxed``), the speak projection of a think/speak stream
  (``sxs``, tolerant parse from ``eval.latency``), or the last ``<answer>`` block (``tir``).
  math-verify bounds its work with ``signal.alarm``, which only works on a process's main
  thread; TRL calls reward functions on the trainer's main thread, so timeouts are active there.
  Called from another thread, ``grade_math`` disables them (a pathological answer could then run
  long) and this module logs a warning once.
- Degenerate groups (:func:`degenerate_groups`): groups whose rewards are all equal. The trainer
  in ``training/grpo_trainer.py`` drops them before the backward pass; the functions here are pure.
- Correctness-preserving granularity shaping (:func:`shape_group`, :func:`solve_granularity_qp`):
  the exact solution of a small convex QP per group (see :func:`solve_granularity_qp`).
- Action-centric process reward: the TRL wrapper around ``pipelines.tir.action_process_reward``
  (one implementation, shared with MOSAIC).
- Budget-aware reward: correct AND the completion is within the prompt's token budget; the
  budget instructions are in :data:`URGENCY_LEVELS` (our own wording).
- Format rewards for the three schemas, and a group length penalty (shorter is better within a
  group; wrong answers never gain from being short).

Group-level rewards (shaping, length penalty) need each group's G completions side by side in
one call: TRL passes a process's whole generation batch with the G completions of a prompt
adjacent, so this holds when each process's generation batch is a multiple of G (the configs
check it). A call whose adjacent G prompts differ raises instead of mixing groups.

Not guaranteed: that the grader judges every equivalent answer equal (see ``eval.graders``).
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eval.latency import SPEAK, THINK, parse_tagged

log = logging.getLogger(__name__)

RewardFunc = Callable[..., list]

ANSWER_FORMATS = ("boxed", "sxs", "tir")
DEFAULT_GOLD_KEY = "answer"
DEFAULT_EPSILON = 0.5
DEFAULT_BUDGETS = (1000, 2000, 4000, 8000)

# From most to least urgent; a budget's rank among the configured budgets picks its level.
URGENCY_LEVELS = (
    "Answer immediately: give the result with almost no working, in at most {budget} tokens.",
    "Be quick: keep your working short and finish within {budget} tokens.",
    "Take the time you need to check your steps, but stay within {budget} tokens.",
    "No rush: take plenty of time to think it through carefully; you have up to {budget} tokens.",
)

_ANSWER_BLOCK_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_warned_thread = False


# ---------------------------------------------------------------------------------------------
# Completions and answers


def completion_text(completion: Any) -> str:
    """The text of one completion: a str, or TRL's conversational form (a list of messages,
    whose assistant contents are joined)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence):
        parts = []
        for message in completion:
            if not isinstance(message, Mapping) or "content" not in message:
                raise TypeError("a conversational completion must be a list of {'role', 'content'} "
                                f"messages, got an item of type {type(message).__name__}")
            if message.get("role", "assistant") == "assistant":
                content = message["content"]
                parts.append(content if isinstance(content, str) else str(content))
        return "".join(parts)
    raise TypeError(f"completion must be a str or a list of messages, got {type(completion).__name__}")


def answer_region(text: str, answer_format: str) -> str | None:
    """The part of a completion the final answer is read from (None: there is none).

    ``boxed``: the whole text. ``sxs``: the speak projection (tolerant parse: untagged text is
    speak, an unclosed tag runs to the end). ``tir``: the content of the last complete
    ``<answer>`` block, wrapped in ``\\boxed{}`` when it has no box of its own.
    """
    if answer_format == "boxed":
        return text
    if answer_format == "sxs":
        speak = "\n\n".join(c for kind, c in parse_tagged(text, strict=False) if kind == SPEAK)
        return speak or None
    if answer_format == "tir":
        blocks = _ANSWER_BLOCK_RE.findall(text)
        if not blocks:
            return None
        inner = blocks[-1].strip()
        if not inner:
            return None
        return inner if _BOXED_RE.search(inner) else f"\\boxed{{{inner}}}"
    raise ValueError(f"answer_format must be one of {ANSWER_FORMATS}, got {answer_format!r}")


def is_correct(text: str, gold: str, answer_format: str = "boxed", timeout_s: int = 5) -> bool:
    """True when the answer in ``text`` matches ``gold`` by ``eval.graders.grade_math``."""
    from eval.graders import grade_math

    global _warned_thread
    if not _warned_thread and threading.current_thread() is not threading.main_thread():
        _warned_thread = True
        log.warning("grading rewards off the main thread: math-verify timeouts are disabled there")
    region = answer_region(text, answer_format)
    if region is None:
        return False
    return bool(grade_math(region, gold, timeout_s=timeout_s).correct)


def _column(kwargs: Mapping[str, Any], key: str, n: int, reward: str) -> list:
    if key not in kwargs:
        shown = sorted(k for k in kwargs if k not in ("trainer_state", "log_extra", "log_metric"))
        raise KeyError(f"reward {reward!r} needs the dataset column {key!r}; the batch has "
                       f"{shown}. Add the column or point the reward at another one.")
    values = list(kwargs[key])
    if len(values) != n:
        raise ValueError(f"column {key!r} has {len(values)} values for {n} completions")
    return values


def _named(fn: RewardFunc, name: str, columns: Sequence[str] = ()) -> RewardFunc:
    """TRL logs a reward under ``__name__``; ``required_columns`` lets a run check its data."""
    fn.__name__ = name
    fn.__qualname__ = name
    fn.required_columns = tuple(columns)  # type: ignore[attr-defined]
    return fn


# ---------------------------------------------------------------------------------------------
# Outcome


def get_outcome_reward(answer_format: str = "boxed", gold_key: str = DEFAULT_GOLD_KEY,
                       timeout_s: int = 5) -> RewardFunc:
    """1.0 when the completion's final answer equals the gold answer, 0.0 otherwise; None for a
    row whose gold answer is missing or empty (it cannot be scored)."""
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format must be one of {ANSWER_FORMATS}, got {answer_format!r}")

    def outcome(completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        golds = _column(kwargs, gold_key, len(completions), "outcome")
        out: list[float | None] = []
        for completion, gold in zip(completions, golds):
            if gold is None or not str(gold).strip():
                out.append(None)
                continue
            try:
                out.append(float(is_correct(completion_text(completion), str(gold), answer_format,
                                            timeout_s)))
            except ValueError as exc:  # a gold answer the grader cannot use: unscorable row
                log.warning("outcome reward: cannot grade against gold %r: %s", gold, exc)
                out.append(None)
        return out

    return _named(outcome, f"outcome_{answer_format}", (gold_key,))


# ---------------------------------------------------------------------------------------------
# Format rewards


def has_sxs_format(text: str) -> bool:
    """A clean think/speak stream (strict parse) with at least one of each, ending in speak."""
    try:
        segments = parse_tagged(text.strip(), strict=True)
    except ValueError:
        return False
    kinds = [k for k, c in segments if c.strip()]
    return THINK in kinds and SPEAK in kinds and kinds[-1] == SPEAK


def has_tir_format(text: str) -> bool:
    """One step of the TIR schema: ``<think>`` then ``<code>`` or ``<answer>`` (strict parse)."""
    from pipelines.tir import TIRFormatError, parse_output

    try:
        step = parse_output(text.strip())
    except TIRFormatError:
        return False
    return bool(step.action.strip())


def has_boxed_format(text: str) -> bool:
    from pipelines.text import last_boxed

    return bool(last_boxed(text))


_FORMAT_CHECKS: dict[str, Callable[[str], bool]] = {
    "boxed": has_boxed_format,
    "sxs": has_sxs_format,
    "tir": has_tir_format,
}


def get_format_reward(schema: str = "sxs") -> RewardFunc:
    """1.0 when the completion follows ``schema`` (``boxed``, ``sxs`` or ``tir``), else 0.0."""
    if schema not in _FORMAT_CHECKS:
        raise ValueError(f"schema must be one of {sorted(_FORMAT_CHECKS)}, got {schema!r}")
    check = _FORMAT_CHECKS[schema]

    def format_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
        return [float(check(completion_text(c))) for c in completions]

    return _named(format_reward, f"format_{schema}")


# ---------------------------------------------------------------------------------------------
# Groups


def group_slices(n: int, group_size: int) -> list[slice]:
    if group_size < 1:
        raise ValueError(f"group size must be >= 1, got {group_size}")
    if n % group_size:
        raise ValueError(f"{n} completions do not split into groups of {group_size}; each "
                         "process's generation batch must be a multiple of num_generations")
    return [slice(i, i + group_size) for i in range(0, n, group_size)]


def check_groups(prompts: Sequence[Any] | None, group_size: int) -> list[slice]:
    """The group slices of a batch, after checking that each group shares one prompt."""
    n = len(prompts or [])
    slices = group_slices(n, group_size)
    for s in slices:
        first = prompts[s][0]
        if any(p != first for p in prompts[s]):
            raise ValueError(
                f"completions {s.start}..{s.stop - 1} do not share one prompt: a group-level "
                f"reward needs the {group_size} completions of each prompt side by side. Make "
                "per_device_train_batch_size * steps_per_generation a multiple of num_generations.")
    return slices


def degenerate_groups(rewards: Sequence[float | None], group_size: int,
                      tol: float = 1e-9) -> list[bool]:
    """One flag per group: True when every reward in the group is equal (within ``tol``), so
    the group carries no learning signal. None/NaN rewards are ignored; a group with fewer than
    two scorable rewards is degenerate too."""
    flags = []
    for s in group_slices(len(rewards), group_size):
        values = [float(r) for r in rewards[s] if r is not None and not math.isnan(float(r))]
        flags.append(len(values) < 2 or max(values) - min(values) <= tol)
    return flags


def keep_rows(rewards: Sequence[float | None], group_size: int) -> list[bool]:
    """Per-row keep flags: False for every row of a degenerate group."""
    return [not flag for flag in degenerate_groups(rewards, group_size) for _ in range(group_size)]


# ---------------------------------------------------------------------------------------------
# Correctness-preserving granularity shaping


def longest_think_length(text: str, tokenizer: Any | None = None) -> int:
    """Length of the longest think block (tolerant parse), in tokens of ``tokenizer`` (anything
    with ``encode(text, add_special_tokens=False)``) or in whitespace words without one."""
    best = 0
    for kind, content in parse_tagged(text, strict=False):
        if kind != THINK:
            continue
        n = (len(tokenizer.encode(content, add_special_tokens=False)) if tokenizer is not None
             else len(content.split()))
        best = max(best, n)
    return best


WRONG_SCORES = ("neg_s_min", "s_min")


def structure_scores(correct: Sequence[bool], lengths: Sequence[float],
                     wrong_score: str = "neg_s_min") -> list[float]:
    """S_i = -(l_i - mu)/sigma for correct rollouts (mu, sigma: mean and population std of the
    correct ones' lengths; S_i = 0 when sigma is 0). Wrong rollouts get -S_min (``neg_s_min``,
    as the issue specifies; S_min is the smallest correct score) or S_min (``s_min``).

    With ``neg_s_min`` the wrong targets sit above the correct ones' mean, and the QP often
    pins every correct rollout to the same bound (no granularity signal left in small groups);
    ``s_min`` keeps the correct ones apart. Needs at least one correct rollout.
    """
    if len(correct) != len(lengths):
        raise ValueError(f"{len(correct)} correctness flags for {len(lengths)} lengths")
    if wrong_score not in WRONG_SCORES:
        raise ValueError(f"wrong_score must be one of {WRONG_SCORES}, got {wrong_score!r}")
    ok = [float(l) for c, l in zip(correct, lengths) if c]
    if not ok:
        raise ValueError("structure scores need at least one correct rollout")
    mu = sum(ok) / len(ok)
    sigma = math.sqrt(sum((x - mu) ** 2 for x in ok) / len(ok))
    scores = [(-(float(l) - mu) / sigma if sigma > 0 else 0.0) if c else 0.0
              for c, l in zip(correct, lengths)]
    s_min = min(s for s, c in zip(scores, correct) if c)
    wrong = -s_min if wrong_score == "neg_s_min" else s_min
    return [s if c else wrong for s, c in zip(scores, correct)]


def solve_granularity_qp(scores: Sequence[float], correct: Sequence[bool],
                         epsilon: float = DEFAULT_EPSILON) -> list[float]:
    """The exact minimiser of sum (R_i - S_i)^2 subject to R_i >= mean(R) + eps for correct i
    and R_i <= mean(R) - eps for wrong i.

    Writing R = m + d with sum(d) = 0, the objective splits into G (m - mean(S))^2 plus
    |d - (S - mean(S))|^2 and the constraints only involve d, so m = mean(S) and d is the
    Euclidean projection of s = S - mean(S) onto {sum d = 0, d_i >= eps (correct),
    d_i <= -eps (wrong)}. Its KKT conditions give d_i = clip_i(s_i - lam) for one scalar lam;
    h(lam) = sum clip_i(s_i - lam) is continuous, non-increasing and piecewise linear, so its
    root is found exactly between two consecutive breakpoints. Needs both a correct and a wrong
    rollout (otherwise the constraints cannot all hold).
    """
    if len(scores) != len(correct):
        raise ValueError(f"{len(scores)} scores for {len(correct)} correctness flags")
    if epsilon < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    n_ok = sum(1 for c in correct if c)
    n_bad = len(correct) - n_ok
    if n_ok == 0 or n_bad == 0:
        raise ValueError("the QP needs at least one correct and one wrong rollout; skip "
                         "degenerate groups before shaping")
    mean_s = sum(scores) / len(scores)
    s = [float(x) - mean_s for x in scores]

    def clip(i: int, lam: float) -> float:
        v = s[i] - lam
        return max(epsilon, v) if correct[i] else min(-epsilon, v)

    def h(lam: float) -> float:
        return sum(clip(i, lam) for i in range(len(s)))

    points = sorted({s[i] - epsilon if correct[i] else s[i] + epsilon for i in range(len(s))})
    values = [h(b) for b in points]
    if values[0] <= 0:  # root left of every kink: correct ones free, wrong ones at -eps
        lam = points[0] + values[0] / n_ok
    elif values[-1] >= 0:  # root right of every kink: correct ones at eps, wrong ones free
        lam = points[-1] + values[-1] / n_bad
    else:
        j = next(k for k in range(len(points) - 1) if values[k] >= 0 >= values[k + 1])
        a, b, ha, hb = points[j], points[j + 1], values[j], values[j + 1]
        lam = a if ha == hb else a + (b - a) * ha / (ha - hb)
    return [mean_s + clip(i, lam) for i in range(len(s))]


def shape_group(correct: Sequence[bool], lengths: Sequence[float],
                epsilon: float = DEFAULT_EPSILON, wrong_score: str = "neg_s_min") -> list[float]:
    """Shaped rewards of one group; a degenerate group (all correct or all wrong) keeps its
    plain 1/0 outcome rewards, so the degenerate-group filter can drop it."""
    if all(correct) or not any(correct):
        return [1.0 if c else 0.0 for c in correct]
    return solve_granularity_qp(structure_scores(correct, lengths, wrong_score), correct, epsilon)


def get_granularity_reward(num_generations: int, epsilon: float = DEFAULT_EPSILON,
                           gold_key: str = DEFAULT_GOLD_KEY, tokenizer: Any | None = None,
                           timeout_s: int = 5, wrong_score: str = "neg_s_min") -> RewardFunc:
    """SxS outcome reward with correctness-preserving granularity shaping: within each group,
    correct rollouts whose longest think block is shorter get more, every correct rollout stays
    at least ``epsilon`` above the group mean and every wrong one at least ``epsilon`` below."""
    if num_generations < 2:
        raise ValueError(f"num_generations must be >= 2, got {num_generations}")
    if wrong_score not in WRONG_SCORES:
        raise ValueError(f"wrong_score must be one of {WRONG_SCORES}, got {wrong_score!r}")

    def granularity(prompts: Sequence[Any], completions: Sequence[Any],
                    **kwargs: Any) -> list[float]:
        golds = _column(kwargs, gold_key, len(completions), "granularity")
        texts = [completion_text(c) for c in completions]
        correct = [gold is not None and str(gold).strip() != ""
                   and is_correct(t, str(gold), "sxs", timeout_s) for t, gold in zip(texts, golds)]
        lengths = [longest_think_length(t, tokenizer) for t in texts]
        out: list[float] = []
        for s in check_groups(prompts, num_generations):
            out.extend(shape_group(correct[s], lengths[s], epsilon, wrong_score))
        return out

    return _named(granularity, "granularity_sxs", (gold_key,))


# ---------------------------------------------------------------------------------------------
# Action-centric process reward (MOSAIC step instances)


def get_action_process_reward(action_key: str = "reference_action",
                              kind_key: str = "reference_kind",
                              last_key: str = "is_last_step") -> RewardFunc:
    """format gate x action similarity (``pipelines.tir.action_process_reward``) per step."""
    from pipelines.tir import action_process_reward

    def action_process(completions: Sequence[Any], **kwargs: Any) -> list[float]:
        n = len(completions)
        actions = _column(kwargs, action_key, n, "action_process")
        kinds = _column(kwargs, kind_key, n, "action_process")
        lasts = _column(kwargs, last_key, n, "action_process")
        return [action_process_reward(completion_text(c), a, k, bool(last))
                for c, a, k, last in zip(completions, actions, kinds, lasts)]

    return _named(action_process, "action_process", (action_key, kind_key, last_key))


# ---------------------------------------------------------------------------------------------
# Budget-aware reward


def budget_instruction(budget: int, budgets: Sequence[int] = DEFAULT_BUDGETS) -> str:
    """The urgency instruction for ``budget``: its rank among ``budgets`` picks the wording."""
    ordered = sorted({int(b) for b in budgets})
    if int(budget) not in ordered:
        raise ValueError(f"budget {budget} is not one of the configured budgets {ordered}")
    if len(ordered) == 1:
        level = len(URGENCY_LEVELS) - 1
    else:
        level = round(ordered.index(int(budget)) * (len(URGENCY_LEVELS) - 1) / (len(ordered) - 1))
    return URGENCY_LEVELS[level].format(budget=int(budget))


def _token_counts(completions: Sequence[Any],
                  completion_ids: Sequence[Sequence[int]] | None) -> list[int]:
    """Tokens per completion from TRL's ``completion_ids``; whitespace words without them."""
    if completion_ids is not None:
        return [len(ids) for ids in completion_ids]
    return [len(completion_text(c).split()) for c in completions]


def get_budget_reward(answer_format: str = "boxed", gold_key: str = DEFAULT_GOLD_KEY,
                      budget_key: str = "budget", timeout_s: int = 5) -> RewardFunc:
    """1.0 only when the answer is correct AND the completion used at most its budget in tokens
    (``completion_ids`` from TRL; whitespace words when called without them)."""
    outcome = get_outcome_reward(answer_format, gold_key, timeout_s)

    def budget(completions: Sequence[Any], completion_ids: Sequence[Sequence[int]] | None = None,
               **kwargs: Any) -> list[float | None]:
        budgets = _column(kwargs, budget_key, len(completions), "budget")
        correct = outcome(completions, **kwargs)
        used = _token_counts(completions, completion_ids)
        return [None if c is None else float(c == 1.0 and n <= int(b))
                for c, n, b in zip(correct, used, budgets)]

    return _named(budget, f"budget_{answer_format}", (gold_key, budget_key))


def length_penalties(lengths: Sequence[int], correct: Sequence[bool]) -> list[float]:
    """Group length penalty: lam_i = 0.5 - (l_i - min l)/(max l - min l) (0 when all lengths are
    equal); a correct rollout gets lam_i, a wrong one min(0, lam_i)."""
    lo, hi = min(lengths), max(lengths)
    lams = [0.0 if hi == lo else 0.5 - (l - lo) / (hi - lo) for l in lengths]
    return [lam if c else min(0.0, lam) for lam, c in zip(lams, correct)]


def get_length_penalty_reward(num_generations: int, answer_format: str = "boxed",
                              gold_key: str = DEFAULT_GOLD_KEY, timeout_s: int = 5) -> RewardFunc:
    """Within each group, shorter completions score higher (see :func:`length_penalties`);
    meant as a small-weight companion of an outcome reward."""
    if num_generations < 2:
        raise ValueError(f"num_generations must be >= 2, got {num_generations}")
    outcome = get_outcome_reward(answer_format, gold_key, timeout_s)

    def length_penalty(prompts: Sequence[Any], completions: Sequence[Any],
                       completion_ids: Sequence[Sequence[int]] | None = None,
                       **kwargs: Any) -> list[float]:
        correct = [c == 1.0 for c in outcome(completions, **kwargs)]
        used = _token_counts(completions, completion_ids)
        out: list[float] = []
        for s in check_groups(prompts, num_generations):
            out.extend(length_penalties(used[s], correct[s]))
        return out

    return _named(length_penalty, f"length_penalty_{answer_format}", (gold_key,))


# ---------------------------------------------------------------------------------------------
# Registry: the names recipes use


@dataclass(frozen=True)
class RewardSpec:
    """One entry of a recipe's ``rewards`` list: a registered name, a weight and factory args."""

    name: str
    weight: float = 1.0
    args: Mapping[str, Any] | None = None


class _Registry(dict):
    def __setitem__(self, key: str, value: Callable[..., RewardFunc]) -> None:
        if key in self:
            raise KeyError(f"reward {key!r} is already registered")
        super().__setitem__(key, value)


REWARDS: dict[str, Callable[..., RewardFunc]] = _Registry()
REWARDS["outcome"] = get_outcome_reward
REWARDS["format"] = get_format_reward
REWARDS["granularity"] = get_granularity_reward
REWARDS["action_process"] = get_action_process_reward
REWARDS["budget"] = get_budget_reward
REWARDS["length_penalty"] = get_length_penalty_reward

# Factory arguments filled in by the training script rather than the recipe.
INJECTED_ARGS = ("num_generations", "tokenizer")


def parse_reward_specs(items: Sequence[Any]) -> list[RewardSpec]:
    """Recipe entries (``"name"`` or ``{name, weight, ...factory args}``) as :class:`RewardSpec`.
    Raises ValueError naming the entry for unknown names, bad weights or unknown arguments."""
    import inspect

    if not isinstance(items, Sequence) or isinstance(items, (str, bytes)) or not items:
        raise ValueError("rewards must be a non-empty list of reward names or "
                         "{name: ..., weight: ...} mappings")
    specs = []
    for index, item in enumerate(items):
        where = f"rewards[{index}]"
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, Mapping) or "name" not in item:
            raise ValueError(f"{where}: expected a name or a mapping with 'name', got {item!r}")
        item = dict(item)
        name = item.pop("name")
        if name not in REWARDS:
            raise ValueError(f"{where}: unknown reward {name!r}; known: {sorted(REWARDS)}")
        weight = item.pop("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
            raise ValueError(f"{where}: weight must be a finite number, got {weight!r}")
        params = inspect.signature(REWARDS[name]).parameters
        for key in item:
            if key not in params or key in INJECTED_ARGS:
                allowed = sorted(p for p in params if p not in INJECTED_ARGS)
                raise ValueError(f"{where}: reward {name!r} has no argument {key!r}; its "
                                 f"arguments are {allowed}")
        specs.append(RewardSpec(name, float(weight), item))
    return specs


def build_rewards(specs: Sequence[RewardSpec], *, num_generations: int,
                  tokenizer: Any | None = None) -> tuple[list[RewardFunc], list[float]]:
    """Reward functions and weights for TRL's ``reward_funcs`` / ``reward_weights``."""
    import inspect

    funcs, weights = [], []
    for spec in specs:
        factory = REWARDS[spec.name]
        args = dict(spec.args or {})
        params = inspect.signature(factory).parameters
        if "num_generations" in params:
            args["num_generations"] = num_generations
        if "tokenizer" in params and tokenizer is not None:
            args["tokenizer"] = tokenizer
        funcs.append(factory(**args))
        weights.append(spec.weight)
    return funcs, weights


def combine_rewards(pairs: Sequence[tuple[RewardFunc, float]], name: str = "combined") -> RewardFunc:
    """One reward function returning the weighted sum of several (None where any is None)."""
    if not pairs:
        raise ValueError("combine_rewards needs at least one (function, weight) pair")

    def combined(**kwargs: Any) -> list[float | None]:
        parts = [(fn(**kwargs), w) for fn, w in pairs]
        n = len(kwargs["completions"])
        out: list[float | None] = []
        for i in range(n):
            values = [(vals[i], w) for vals, w in parts]
            out.append(None if any(v is None for v, _ in values)
                       else sum(float(v) * w for v, w in values))
        return out

    columns = sorted({c for fn, _ in pairs for c in getattr(fn, "required_columns", ())})
    return _named(combined, name, columns)
