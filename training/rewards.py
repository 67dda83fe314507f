"""Reward functions for GRPO, written to TRL's reward-function contract.

TRL calls every reward function as ``fn(prompts=..., completions=..., completion_ids=...,
**columns)`` where ``columns`` are the dataset's other columns (one value per completion) plus
``trainer_state``, ``log_extra`` and ``log_metric``; it returns one float (or None: "not
scorable", which TRL turns into NaN and leaves out of the group baseline) per completion.
Configurable rewards are made by ``get_<name>_reward(...)`` factories, each registered under the
name recipes use by the decorator :func:`register_reward` (:data:`REWARDS` maps the names to
the factories), as evaluation modes (``eval.modes.register_mode``) and recipe kinds
(``training.config_base.register_kind``) register theirs.

- Outcome (:func:`get_outcome_reward`): 1 when the final answer matches the gold answer by the
  benchmark's grader (``grader``: ``"math"``, ``eval.graders.grade_math``, by default;
  ``"choice"`` for multiple choice; the registry evaluation uses; or ``benchmark``: a registered
  benchmark's own grader and answer normaliser, exactly as its evaluation applies them, e.g.
  GSM8K's thousands separators), else 0. The answer is read
  from the format's answer region, ``pipelines.formats.answer_region`` (the call evaluation
  makes too): the whole text (``boxed``), the speak projection of a think/speak stream (``sxs``,
  SxS Eq. 11-12), or the last ``<answer>`` block (``tir``).
  Grading goes through ``training.verdicts``: in worker processes, region-finding, extraction
  and verification under one time limit per completion, a stated bound per reward call in any
  thread, and one verdict per completion per step shared by the outcome, budget, length-penalty
  and granularity rewards of one :func:`build_rewards` call.
- Degenerate groups (:func:`degenerate_groups`, SxS §3.2 "GRPO update and group filtering",
  App. C.3): groups whose rollouts are all correct or all wrong by the verifier, whatever the
  combined reward says (shaping or a length penalty can make an all-correct group's rewards
  differ, and a mixed group's combined rewards can tie). Correctness is read from ONE verifier
  reward's per-completion output (:data:`VERIFIER_REWARDS`, chosen by
  :func:`correctness_reward_index`: the only verifier in the recipe, or the one the recipe
  names); a recipe that asks for the filter without a verifier is rejected. The trainer in
  ``training/grpo_trainer.py`` drops the flagged groups before the backward pass; the functions
  here are pure.
- Correctness-preserving granularity shaping (SxS §3.2 Eq. 13-17, App. C.1-C.2):
  :func:`structure_scores` (Eq. 14 with C.1's rule for wrong rollouts: they take the largest
  longest-think length observed in the group, then are z-scored with the correct rollouts' mean
  and std, so S_wrong = -S_min with S_min > 0), then :func:`solve_granularity_qp` (the exact
  solution of the convex QP of Eq. 15-17 per group). The shaped reward IS the final reward R of
  Eq. 15 (not outcome + shaping): the paper feeds R to GRPO's Eq. 18-19. Adding a non-negative
  multiple of the outcome on top keeps the margins (correct: >= mean + eps, wrong: <= mean -
  eps), since the outcome is itself higher for correct rollouts.
  Deliberate choices where the paper is silent or undefined:
  (a) a rollout with no non-empty think block has no Eq. 13 maximum: when correct it is
  scored at the group's worst case (as a wrong rollout), so answering without reasoning, or
  with all reasoning spoken, never beats interleaving; the worst case itself is the longest
  reasoning block observed in the group (C.1), never a reply without one; (b) when the correct rollouts' lengths have zero spread (one correct rollout,
  or equal lengths) the z-score is undefined: every correct rollout scores 0 and every wrong
  one -1 (S_min = 1); (c) a degenerate group (all correct or all wrong, where
  Eq. 16-17 cannot both hold) keeps plain 1/0 rewards and is left to the filter (App. C.3);
  (d) epsilon must be > 0 (Eq. 17: a fixed margin eps > 0; C.2 uses 0.5, our default).
  Not guaranteed: a strong ranking signal among correct rollouts when a wrong rollout's length
  is far above theirs: its z-score then dominates the group's reward spread, as in the paper.
- Action-centric process reward: the TRL wrapper around ``pipelines.tir.action_process_reward``
  (one implementation, shared with MOSAIC).
- Budget-aware reward: correct AND the completion is within the prompt's token budget; the
  budget instructions are ``pipelines.formats.budget_instruction`` (Engagement App. F).
- Code reward (:func:`get_code_reward`): the completion's code run against its problem's tests
  in the sandbox by ``eval.code_grader`` (as in code evaluation), the group's programs at once
  on a warm jail pool, each under a time limit; 1 when all tests pass, else 0
  (``code_tests``: the share of tests passed).
- Format rewards for the three schemas (``pipelines.formats.follows_format``; an SxS stream
  may end in a trailing think block, SxS Algorithm 1 lines 28-30), and a group length penalty
  (shorter is better within a group; wrong answers never gain from being short).

Group-level rewards (shaping, length penalty) need each group's G completions side by side in
one call: TRL passes a process's whole generation batch with the G completions of a prompt
adjacent, so this holds when each process's generation batch is a multiple of G (the configs
check it). A call whose adjacent G prompts differ raises instead of mixing groups.

Not guaranteed: that the grader judges every equivalent answer equal (see ``eval.graders``).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipelines.formats import (  # ANSWER_FORMATS: training.config_base reads it from here
    ANSWER_FORMATS,  # noqa: F401
    FORMAT_CHECKS,
    THINK,
    check_format,
    parse_tagged,
)
from training.verdicts import Verdicts, check_grader, default_verdicts

log = logging.getLogger(__name__)

RewardFunc = Callable[..., list]

DEFAULT_GOLD_KEY = "answer"
DEFAULT_EPSILON = 0.5


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


def is_correct(text: str, gold: str, answer_format: str = "boxed", timeout_s: int = 5,
               grader: str = "math") -> bool:
    """True when the answer region of ``text`` (``pipelines.formats.answer_region``, as in
    evaluation) matches ``gold`` by the registered grader ``grader`` (the one evaluation uses),
    graded through ``training.verdicts`` (worker processes, one time limit). ValueError for a
    gold the grader cannot use."""
    verdict = default_verdicts().verdicts([text], [gold], answer_format=check_format(answer_format),
                                          grader=check_grader(grader), timeout_s=timeout_s)[0]
    if verdict is None:
        raise ValueError(f"the {grader} grader cannot use the gold answer {gold!r}")
    return verdict


def _graded(verdicts: Verdicts | None, completions: Sequence[Any], golds: Sequence[Any],
            answer_format: str, grader: str, timeout_s: int, kwargs: Mapping[str, Any],
            normalize: Callable[[str], str] | None = None) -> list[bool | None]:
    """Verdicts of a batch from the shared ``verdicts`` (the process default without one);
    ``normalize`` is a benchmark's answer normaliser, applied to each text first."""
    texts = [completion_text(c) for c in completions]
    if normalize is not None:
        texts = [normalize(t) for t in texts]
    return (verdicts or default_verdicts()).verdicts(
        texts, golds, answer_format=answer_format, grader=grader, timeout_s=timeout_s,
        trainer_state=kwargs.get("trainer_state"))


def benchmark_grading(grader: str, benchmark: str | None
                      ) -> tuple[str, Callable[[str], str] | None, str]:
    """(grader kind, answer normaliser, name suffix) for a reward: ``grader`` alone, or the
    registered ``benchmark``'s own grader and normaliser (``eval.benchmarks``), so the reward
    and that benchmark's evaluation read and grade an answer the same way."""
    if benchmark is None:
        check_grader(grader)
        return grader, None, "" if grader == "math" else f"_{grader}"
    from eval.benchmarks import get as get_benchmark

    try:
        bench = get_benchmark(benchmark)
    except KeyError as exc:
        raise ValueError(exc.args[0]) from None
    if bench.grader == "code":
        raise ValueError(f"benchmark {benchmark!r} is graded by running code; use the `code` "
                         "reward (a code_problem column) instead of an answer-matching reward")
    if grader not in ("math", bench.grader):
        raise ValueError(f"grader {grader!r} contradicts benchmark {benchmark!r}, whose grader "
                         f"is {bench.grader!r}; give one of the two")
    return check_grader(bench.grader), bench.normalizer, f"_{benchmark}"


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



# name -> reward factory, filled by register_reward where each factory is defined.
REWARDS: dict[str, Callable[..., RewardFunc]] = {}


def register_reward(name: str) -> Callable[[Callable[..., RewardFunc]], Callable[..., RewardFunc]]:
    """Decorator: the decorated ``get_<name>_reward`` factory is the reward a recipe names
    ``name``. A name another factory already holds is refused (registering the same function
    again, as a reloaded module does, replaces it)."""

    def register(factory: Callable[..., RewardFunc]) -> Callable[..., RewardFunc]:
        taken = REWARDS.get(name)
        if taken is not None and (taken.__module__, taken.__qualname__) != (
                factory.__module__, factory.__qualname__):
            raise KeyError(f"reward {name!r} is already registered (by {taken.__qualname__})")
        REWARDS[name] = factory
        return factory

    return register

@register_reward("outcome")
def get_outcome_reward(answer_format: str = "boxed", gold_key: str = DEFAULT_GOLD_KEY,
                       timeout_s: int = 5, grader: str = "math",
                       verdicts: Verdicts | None = None,
                       benchmark: str | None = None) -> RewardFunc:
    """1.0 when the completion's final answer equals the gold answer by the benchmark's grader
    ``grader`` (``"math"``, ``"choice"``: ``eval.graders.get_grader``, as evaluation grades) or,
    with ``benchmark``, by that registered benchmark's grader after its answer normaliser (as
    its evaluation does), 0.0 otherwise; None for a row whose gold answer is missing, empty or
    unusable by the grader (it cannot be scored). ``verdicts`` (injected by
    :func:`build_rewards`) is shared with the other rewards of the run, so a completion is
    graded once per step; a call over n completions returns within
    ``training.verdicts.call_bound_s`` in any thread."""
    check_format(answer_format)
    kind, normalize, suffix = benchmark_grading(grader, benchmark)

    def outcome(completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        golds = _column(kwargs, gold_key, len(completions), "outcome")
        graded = _graded(verdicts, completions, golds, answer_format, kind, timeout_s, kwargs,
                         normalize)
        return [None if v is None else float(v) for v in graded]

    return _named(outcome, f"outcome_{answer_format}{suffix}", (gold_key,))


# ---------------------------------------------------------------------------------------------
# Format rewards


@register_reward("format")
def get_format_reward(schema: str = "sxs") -> RewardFunc:
    """1.0 when the completion follows ``schema`` (``boxed``, ``sxs`` or ``tir``; the checks of
    ``pipelines.formats``), else 0.0."""
    if schema not in FORMAT_CHECKS:
        raise ValueError(f"schema must be one of {sorted(FORMAT_CHECKS)}, got {schema!r}")
    check = FORMAT_CHECKS[schema]

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


# Rewards whose per-completion output is a verifier's verdict: 1.0 correct, 0.0 wrong, None (NaN
# in TRL) unscorable. ``budget``'s verdict is "correct and within budget", the success that
# budget-aware RL verifies; ``code``'s is "every test passes" (``code_tests`` is a share: no
# verdict).
VERIFIER_REWARDS = ("outcome", "budget", "code")


def verdicts(values: Sequence[float | None],
             source: str = "the verifier reward") -> list[bool | None]:
    """Correctness flags from a verifier reward's outputs: 1 -> True, 0 -> False, None/NaN ->
    None (unscorable). Any other value raises: it is not a verdict."""
    out: list[bool | None] = []
    for i, v in enumerate(values):
        if v is None or math.isnan(float(v)):
            out.append(None)
        elif float(v) in (0.0, 1.0):
            out.append(float(v) == 1.0)
        else:
            raise ValueError(f"{source} returned {v!r} for completion {i}; correctness needs a "
                             "1/0 verdict. Point correctness_reward at an outcome-style reward.")
    return out


def degenerate_groups(correct: Sequence[bool | None], group_size: int) -> list[bool]:
    """One flag per group: True when the group's scorable rollouts are all correct or all wrong
    (SxS §3.2, App. C.3), so it has no correctness signal to learn from. ``correct`` holds one
    verifier verdict per rollout (None: unscorable, ignored); a group with fewer than two
    scorable rollouts is degenerate too. The other rewards play no part."""
    flags = []
    for s in group_slices(len(correct), group_size):
        known = {bool(c) for c in correct[s] if c is not None}
        scorable = sum(1 for c in correct[s] if c is not None)
        flags.append(scorable < 2 or len(known) < 2)
    return flags


def keep_rows(correct: Sequence[bool | None], group_size: int) -> list[bool]:
    """Per-row keep flags: False for every row of a degenerate group."""
    return [not flag for flag in degenerate_groups(correct, group_size) for _ in range(group_size)]


def correctness_reward_index(specs: Sequence[RewardSpec], requested: str | None = None) -> int:
    """Index in ``specs`` of the reward whose outputs say which rollouts are correct: the one
    named ``requested`` (a registered name from :data:`VERIFIER_REWARDS`), else the recipe's only
    verifier reward. Raises ValueError saying what to change when none or several qualify."""
    names = [s.name for s in specs]
    if requested is not None:
        if requested not in VERIFIER_REWARDS:
            raise ValueError(f"correctness_reward must name a verifier reward "
                             f"{list(VERIFIER_REWARDS)}, got {requested!r}: only their outputs "
                             "are 1/0 correctness verdicts")
        hits = [i for i, n in enumerate(names) if n == requested]
        if len(hits) != 1:
            raise ValueError(f"correctness_reward {requested!r} must appear exactly once in "
                             f"rewards, found {len(hits)} in {names}")
        return hits[0]
    hits = [i for i, n in enumerate(names) if n in VERIFIER_REWARDS]
    if not hits:
        raise ValueError(
            f"no reward in {names} tells correct from wrong rollouts, which the degenerate-group "
            "filter needs; add a verifier with weight 0 (it grades without changing the total), "
            "e.g. {name: outcome, answer_format: sxs, weight: 0.0}, or turn the filter off")
    if len(hits) > 1:
        raise ValueError(f"several rewards can define correctness ({[names[i] for i in hits]}); "
                         "set correctness_reward to the one the filter should use")
    return hits[0]


# ---------------------------------------------------------------------------------------------
# Correctness-preserving granularity shaping


def text_length(text: str, tokenizer: Any | None = None) -> int:
    """Length of ``text`` in tokens of ``tokenizer`` (anything with ``encode(text,
    add_special_tokens=False)``), or in whitespace words without one."""
    return (len(tokenizer.encode(text, add_special_tokens=False)) if tokenizer is not None
            else len(text.split()))


def longest_think_length(text: str, tokenizer: Any | None = None) -> int | None:
    """l_i of Eq. 13: the length of the longest think block (tolerant parse; see
    :func:`text_length` for the unit). None when the text has no non-empty think block: the
    maximum over no blocks is undefined (see :func:`granularity_length`)."""
    blocks = [text_length(c, tokenizer) for kind, c in parse_tagged(text, strict=False)
              if kind == THINK and c.strip()]
    return max(blocks) if blocks else None


def granularity_length(text: str, tokenizer: Any | None = None) -> tuple[int, bool]:
    """(l, interleaved): the longest think block, or the whole completion's length when there is
    no think block (everything the model wrote is then one visible block), and whether a think
    block exists. :func:`structure_scores` puts rollouts without one at the worst case."""
    longest = longest_think_length(text, tokenizer)
    return (longest, True) if longest is not None else (text_length(text, tokenizer), False)


def structure_scores(correct: Sequence[bool], lengths: Sequence[float],
                     interleaved: Sequence[bool] | None = None) -> list[float]:
    """Target scores S_i of one group (SxS Eq. 14, App. C.1 Eq. 20-21).

    Each rollout's effective length is its own l_i when it is correct and interleaved (has a
    think block; ``interleaved`` defaults to all True); otherwise (wrong, or correct without a
    think block) it is the worst case: "the maximum observed length" (C.1), i.e. the largest
    Eq. 20 value l_i, the longest reasoning block, over the rollouts of the group that have a
    think block, wrong ones included. A rollout without a think block has no Eq. 20 value, so
    its ``lengths`` entry (its whole reply's length) never sets the worst case: a long
    unreasoned reply must not stretch the scale on which correct rollouts are ranked. When no
    rollout of the group has a think block, every rollout sits at the same (undefined) worst
    case, the correct rollouts' spread is 0 and the sigma = 0 rule below applies.
    mu and sigma are the mean and population std of the correct rollouts' effective lengths,
    and S_i = -(l_eff_i - mu)/sigma for every rollout: shorter longest-think scores higher, and
    a worst-case rollout scores -S_min with S_min = (l_max - mu)/sigma > 0, at or below every
    correct score. With sigma = 0 (undefined z-score) every correct rollout scores 0 and every
    wrong one -1. Needs at least one correct rollout.
    """
    if len(correct) != len(lengths):
        raise ValueError(f"{len(correct)} correctness flags for {len(lengths)} lengths")
    flags = [True] * len(correct) if interleaved is None else list(interleaved)
    if len(flags) != len(correct):
        raise ValueError(f"{len(flags)} interleaved flags for {len(correct)} rollouts")
    if not any(correct):
        raise ValueError("structure scores need at least one correct rollout")
    observed = [float(l) for l, f in zip(lengths, flags) if f]
    worst = max(observed) if observed else 0.0  # no think block anywhere: all tie at worst
    at_worst = [not (c and f) for c, f in zip(correct, flags)]
    eff = [worst if w else float(l) for l, w in zip(lengths, at_worst)]
    ok = [e for e, c in zip(eff, correct) if c]
    mu = sum(ok) / len(ok)
    sigma = math.sqrt(sum((x - mu) ** 2 for x in ok) / len(ok))
    if sigma > 0:
        return [-(e - mu) / sigma for e in eff]
    return [0.0 if c else -1.0 for c in correct]


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
                epsilon: float = DEFAULT_EPSILON,
                interleaved: Sequence[bool] | None = None) -> list[float]:
    """Shaped rewards R of one group (Eq. 14-17: :func:`structure_scores`, then the QP); a
    degenerate group (all correct or all wrong) keeps its plain 1/0 outcome rewards, so the
    degenerate-group filter can drop it (App. C.3)."""
    if all(correct) or not any(correct):
        return [1.0 if c else 0.0 for c in correct]
    return solve_granularity_qp(structure_scores(correct, lengths, interleaved), correct, epsilon)


@register_reward("granularity")
def get_granularity_reward(num_generations: int, epsilon: float = DEFAULT_EPSILON,
                           gold_key: str = DEFAULT_GOLD_KEY, tokenizer: Any | None = None,
                           timeout_s: int = 5, verdicts: Verdicts | None = None) -> RewardFunc:
    """SxS outcome reward with correctness-preserving granularity shaping (the final reward R of
    Eq. 15-17): within each group, correct rollouts whose longest think block is shorter get
    more, every correct rollout stays at least ``epsilon`` above the group mean and every wrong
    one at least ``epsilon`` below. Rollouts without a think block are scored at the worst case
    (:func:`structure_scores`). A group whose gold answer is missing, empty or unusable by the
    grader is not scorable: None for each of its rollouts, as the outcome reward gives."""
    if num_generations < 2:
        raise ValueError(f"num_generations must be >= 2, got {num_generations}")
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not epsilon > 0:
        raise ValueError(f"epsilon must be a number > 0 (Eq. 17's margin; the paper uses 0.5), "
                         f"got {epsilon!r}")

    def granularity(prompts: Sequence[Any], completions: Sequence[Any],
                    **kwargs: Any) -> list[float | None]:
        golds = _column(kwargs, gold_key, len(completions), "granularity")
        texts = [completion_text(c) for c in completions]
        # one verdict per completion per step, shared with the outcome reward (None: unusable gold)
        correct = _graded(verdicts, texts, golds, "sxs", "math", timeout_s, kwargs)
        measured = [granularity_length(t, tokenizer) for t in texts]
        lengths = [m[0] for m in measured]
        interleaved = [m[1] for m in measured]
        out: list[float | None] = []
        for s in check_groups(prompts, num_generations):
            group = correct[s]
            if any(c is None for c in group):  # the group shares one unusable gold
                out.extend([None] * len(group))
            else:
                out.extend(shape_group(group, lengths[s], epsilon, interleaved[s]))
        return out

    return _named(granularity, "granularity_sxs", (gold_key,))


# ---------------------------------------------------------------------------------------------
# Action-centric process reward (MOSAIC step instances)


@register_reward("action_process")
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


def end_token_ids(tokenizer: Any | None = None, extra: Sequence[int] = ()) -> frozenset[int]:
    """Ids that end a completion: ``extra`` plus the tokenizer's EOS and pad ids (TRL stops on
    the tokenizer's EOS and the generation config's, which for Qwen-style chat models is the
    pad token ``<|endoftext|>``)."""
    ids = {int(i) for i in extra}
    for name in ("eos_token_id", "pad_token_id"):
        value = getattr(tokenizer, name, None) if tokenizer is not None else None
        if isinstance(value, int) and not isinstance(value, bool):
            ids.add(value)
    return frozenset(ids)


def _token_counts(completions: Sequence[Any], completion_ids: Sequence[Sequence[int]] | None,
                  end_ids: frozenset[int] = frozenset()) -> list[int]:
    """Tokens per completion from TRL's ``completion_ids``, not counting trailing ``end_ids``
    (TRL keeps the EOS that stopped a completion; it is not part of the solution); whitespace
    words without ids."""
    if completion_ids is not None:
        counts = []
        for ids in completion_ids:
            n = len(ids)
            while n and int(ids[n - 1]) in end_ids:
                n -= 1
            counts.append(n)
        return counts
    return [len(completion_text(c).split()) for c in completions]


_warned_no_end_ids = threading.Event()


@register_reward("budget")
def get_budget_reward(answer_format: str = "boxed", gold_key: str = DEFAULT_GOLD_KEY,
                      budget_key: str = "budget", timeout_s: int = 5,
                      eos_token_ids: Sequence[int] = (),
                      tokenizer: Any | None = None, grader: str = "math",
                      verdicts: Verdicts | None = None,
                      benchmark: str | None = None) -> RewardFunc:
    """1.0 only when the answer is correct AND the completion used at most its budget in tokens
    (Engagement Process §5.3 / App. F: "the generated solution length does not exceed the
    requested budget"). Tokens come from TRL's ``completion_ids`` without the end-of-sequence
    token that stopped the completion (ids from ``tokenizer``, injected by ``build_rewards``,
    plus ``eos_token_ids``); whitespace words when called without ids. Correctness is the
    outcome reward's verdict (``grader`` or ``benchmark``, shared ``verdicts``: graded once per
    step)."""
    outcome = get_outcome_reward(answer_format, gold_key, timeout_s, grader, verdicts, benchmark)
    suffix = benchmark_grading(grader, benchmark)[2]
    end_ids = end_token_ids(tokenizer, eos_token_ids)

    def budget(completions: Sequence[Any], completion_ids: Sequence[Sequence[int]] | None = None,
               **kwargs: Any) -> list[float | None]:
        budgets = _column(kwargs, budget_key, len(completions), "budget")
        correct = outcome(completions, **kwargs)
        if completion_ids is not None and not end_ids and not _warned_no_end_ids.is_set():
            _warned_no_end_ids.set()
            log.warning("budget reward: no end-of-sequence ids known, so a stopping EOS counts "
                        "against the budget; pass tokenizer (build_rewards does) or "
                        "eos_token_ids")
        used = _token_counts(completions, completion_ids, end_ids)
        return [None if c is None else float(c == 1.0 and n <= int(b))
                for c, n, b in zip(correct, used, budgets)]

    return _named(budget, f"budget_{answer_format}{suffix}", (gold_key, budget_key))


def length_penalties(lengths: Sequence[int], correct: Sequence[bool]) -> list[float]:
    """Group length penalty: lam_i = 0.5 - (l_i - min l)/(max l - min l) (0 when all lengths are
    equal); a correct rollout gets lam_i, a wrong one min(0, lam_i)."""
    lo, hi = min(lengths), max(lengths)
    lams = [0.0 if hi == lo else 0.5 - (l - lo) / (hi - lo) for l in lengths]
    return [lam if c else min(0.0, lam) for lam, c in zip(lams, correct)]


@register_reward("length_penalty")
def get_length_penalty_reward(num_generations: int, answer_format: str = "boxed",
                              gold_key: str = DEFAULT_GOLD_KEY, timeout_s: int = 5,
                              grader: str = "math",
                              verdicts: Verdicts | None = None,
                              benchmark: str | None = None) -> RewardFunc:
    """Within each group, shorter completions score higher (see :func:`length_penalties`);
    meant as a small-weight companion of an outcome reward, whose verdicts it shares (same
    ``grader`` or ``benchmark``; one grading per completion per step through ``verdicts``)."""
    if num_generations < 2:
        raise ValueError(f"num_generations must be >= 2, got {num_generations}")
    outcome = get_outcome_reward(answer_format, gold_key, timeout_s, grader, verdicts, benchmark)

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
# Code reward: model-written programs graded in the sandbox (the grader evaluation uses)

CODE_PROBLEM_KEY = "code_problem"
CODE_RUN_OVERHEAD_S = 2.0  # per program on top of its limit: harness, jail restart after a kill


class WarmSandboxPool:
    """A :class:`pipelines.sandbox.SandboxPool` made on first use, kept warm across reward
    calls, and closed by :meth:`close` (the GRPO script calls it when training ends) or at
    interpreter exit, whichever comes first. A closed holder makes a new pool if used again."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: Any = None
        self._lock = threading.Lock()
        self._exit_hook = False
        self.created = 0  # pools made so far (1 while the same pool serves every call)

    def get(self) -> Any:
        with self._lock:
            if self._pool is None:
                import atexit

                from pipelines.sandbox import SandboxPool

                pool = SandboxPool(workers=self.workers)
                pool.warm_up()  # a machine without a working jail fails here, loudly
                self._pool = pool
                self.created += 1
                if not self._exit_hook:
                    atexit.register(self.close)
                    self._exit_hook = True
            return self._pool

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


def parse_code_problem(value: Any) -> tuple[dict | None, str]:
    """(problem, "") for a ``code_problem`` value (a JSON object or its text) the code grader
    can run, else (None, why not)."""
    import json

    from eval.code_grader import HUMANEVAL, MBPPPLUS, detect_benchmark

    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            return None, f"not JSON ({exc})"
    if not isinstance(value, Mapping):
        return None, f"expected a JSON object, got {type(value).__name__}"
    problem = dict(value)
    try:
        kind = detect_benchmark(problem)
    except (TypeError, ValueError) as exc:
        return None, str(exc)
    if kind == MBPPPLUS:
        needed = ["entry_point"] + ([] if problem.get("expected_outputs") is not None
                                    else ["canonical_solution"])
        for key in ("base_input", "plus_input"):
            if not isinstance(problem.get(key) or [], list):
                return None, f"{key!r} must be a list of argument lists"
    elif kind == HUMANEVAL:
        needed = ["prompt", "test", "entry_point"]
    else:
        needed = ["tests"]
    missing = [k for k in needed if not isinstance(problem.get(k), (str, list)) or not problem[k]]
    if missing:
        return None, f"a {kind} problem needs {missing}"
    return problem, ""


def code_call_bound_s(n: int, workers: int, timeout_s: float) -> float:
    """Seconds within which one code-reward call over ``n`` completions returns, once its
    problems' reference outputs are known: ceil(n / workers) waves of at most ``timeout_s`` +
    :data:`CODE_RUN_OVERHEAD_S` each."""
    return math.ceil(n / max(1, workers)) * (timeout_s + CODE_RUN_OVERHEAD_S)


@register_reward("code")
def get_code_reward(problem_key: str = CODE_PROBLEM_KEY, timeout_s: float = 5.0,
                    workers: int = 2) -> RewardFunc:
    """Runs each completion's code against its problem's tests in the sandbox, through
    ``eval.code_grader.grade_code_many`` (the grader code evaluation uses, after the same
    ``extract_code`` step): 1.0 when every test passes, else 0.0 (a verifier: it can define
    correctness for the degenerate-group filter). None for a row whose problem cannot be graded
    (missing or malformed ``problem_key`` column, a reference solution that does not run),
    with the reason logged. A bad completion (no code, a syntax error, an endless loop, a
    hostile program) is never an exception: it scores 0.

    ``problem_key`` names a dataset column holding one problem per row in a code benchmark's
    file shape (``training.code_tasks`` writes MBPP+-shaped JSON text there). The whole batch
    is graded at once on a warm pool of ``workers`` jails that lives across calls
    (:class:`WarmSandboxPool`, exposed as the function's ``pool``; ``close()`` ends it), each
    program under ``timeout_s`` seconds of wall clock (the grader raises it to 3x + 1 s for a
    task whose reference solution is that slow). A call over n completions returns within
    :func:`code_call_bound_s` (ceil(n / workers) x (timeout_s + 2 s)), plus, the first time a
    process sees a problem, one run of its reference solution (milliseconds for generated
    tasks; the grader caps it at 120 s) and, on the first call, the pool's start.
    """
    return _code_reward(problem_key, timeout_s, workers, share=False)


@register_reward("code_tests")
def get_code_tests_reward(problem_key: str = CODE_PROBLEM_KEY, timeout_s: float = 5.0,
                          workers: int = 2) -> RewardFunc:
    """Like :func:`get_code_reward`, but the share of the problem's tests that pass (0 for a
    program that does not run): a denser signal for a model that rarely passes everything.
    It is no verdict, so it is not a verifier; pair it with a ``code`` reward (weight 0 is
    enough) where correctness matters."""
    return _code_reward(problem_key, timeout_s, workers, share=True)


def _code_reward(problem_key: str, timeout_s: float, workers: int, share: bool) -> RewardFunc:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
            or not 0 < timeout_s <= 600:
        raise ValueError(f"timeout_s must be a number of seconds in (0, 600], got {timeout_s!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    holder = WarmSandboxPool(workers)

    def score(result: Any) -> float:
        if share and result.tests_total:
            return result.tests_passed / result.tests_total
        return float(result.passed)

    def code(completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        import time

        from eval.code_grader import extract_code, grade_code_many

        n = len(completions)
        values = _column(kwargs, problem_key, n, "code")
        out: list[float | None] = [None] * n
        index, candidates, problems, unscorable = [], [], [], []
        for i, (completion, value) in enumerate(zip(completions, values)):
            problem, why = parse_code_problem(value)
            if problem is None:
                unscorable.append(why)
                continue
            try:
                text = completion_text(completion)
            except TypeError as exc:  # not a completion at all: nothing to run, so it fails
                log.warning("code reward: completion %d is unreadable (%s); scored 0", i, exc)
                out[i] = 0.0
                continue
            index.append(i)
            candidates.append(extract_code(text, problem.get("entry_point")))
            problems.append(problem)
        if unscorable:
            log.warning("code reward: %d of %d rows have no gradable %r (first: %s); scored None",
                        len(unscorable), n, problem_key, unscorable[0])
        if not candidates:
            return out
        pool = holder.get()
        start = time.monotonic()
        # every item gets a result (a problem the grader cannot use is ``ungradable``); only a
        # missing sandbox raises
        results = grade_code_many(candidates, problems, pool=pool, timeout_s=timeout_s)
        elapsed = time.monotonic() - start
        bound = code_call_bound_s(len(candidates), workers, timeout_s)
        if elapsed > bound:
            log.info("code reward: %d programs took %.1fs (bound %.1fs without reference runs)",
                     len(candidates), elapsed, bound)
        ungraded = []
        for i, result in zip(index, results):
            if result.ungradable or not result.tests_total:
                # the grader could not use the problem, or no test was left to run: a program
                # that is never checked must not score
                why = result.reason if result.ungradable else "no test was run"
                ungraded.append(f"{result.task_id}: {why}")
                continue
            out[i] = score(result)
        if ungraded:
            log.warning("code reward: %d of %d rows could not be graded (first: %s); scored None",
                        len(ungraded), n, ungraded[0])
        return out

    fn = _named(code, "code_tests" if share else "code", (problem_key,))
    fn.pool = holder  # type: ignore[attr-defined]
    fn.close = holder.close  # type: ignore[attr-defined]
    return fn


# ---------------------------------------------------------------------------------------------
# Registry: the names recipes use


@dataclass(frozen=True)
class RewardSpec:
    """One entry of a recipe's ``rewards`` list: a registered name, a weight and factory args."""

    name: str
    weight: float = 1.0
    args: Mapping[str, Any] | None = None


# Factory arguments filled in by the training script rather than the recipe.
INJECTED_ARGS = ("num_generations", "tokenizer", "verdicts")


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
    """Reward functions and weights for TRL's ``reward_funcs`` / ``reward_weights``. The rewards
    that grade answers share one ``training.verdicts.Verdicts``: each completion is graded once
    per training step however many of them read its verdict."""
    import inspect

    shared = Verdicts()
    funcs, weights = [], []
    for spec in specs:
        factory = REWARDS[spec.name]
        args = dict(spec.args or {})
        params = inspect.signature(factory).parameters
        if "num_generations" in params:
            args["num_generations"] = num_generations
        if "tokenizer" in params and tokenizer is not None:
            args["tokenizer"] = tokenizer
        if "verdicts" in params:
            args["verdicts"] = shared
        fn = factory(**args)
        if "verdicts" in params:
            fn.verdicts = shared  # type: ignore[attr-defined]  (warm_rewards starts its pool)
        funcs.append(fn)
        weights.append(spec.weight)
    return funcs, weights


def warm_rewards(funcs: Sequence[RewardFunc]) -> list[str]:
    """Start, in the background, what the rewards need on their first call: the grading pool
    of rewards that grade answers and the jail pool of a code reward, so that they start while
    the model loads and the first training step costs what a later one does. Returns what was
    started. A pool that cannot start fails where the reward first uses it, as before."""
    started: list[str] = []
    seen: set[int] = set()
    for fn in funcs:
        verdicts = getattr(fn, "verdicts", None)
        if verdicts is not None and id(verdicts) not in seen:
            seen.add(id(verdicts))
            if verdicts.warm_up():
                started.append("grading pool")
        holder = getattr(fn, "pool", None)
        if isinstance(holder, WarmSandboxPool) and id(holder) not in seen:
            seen.add(id(holder))

            def start(h: WarmSandboxPool = holder) -> None:
                try:
                    h.get()
                except Exception as exc:  # noqa: BLE001 - the first reward call raises it
                    log.warning("the code reward's sandbox pool did not start early: %s", exc)

            threading.Thread(target=start, name="weft-sandbox-warm", daemon=True).start()
            started.append("sandbox pool")
    return started


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
