"""DUET: the token-budget controller of "DUET: Optimize Token-Budget Allocation for RLVR"
(§3 and Algorithm 1 in App. A.10), as plain functions and
small state objects with no trainer or model imports (numpy only).

What is here, with the part of the paper each piece implements:

- :func:`neyman_allocation` (§3.1, Theorem 1, Eq. 2 and 4; Algorithm 1 lines 6-8): per-prompt
  rollout counts ``n_q = max(n_min, round(s_q / sqrt(lam * L_q)))`` with the dual ``lam``
  found by bisection warm-started from the previous step's value, so that
  ``sum_q n_q L_q`` closes the token budget ``B``. With ``rounding=False`` and ``n_min=0``
  the counts are Theorem 1's continuous optimum ``n*_q = (B/S) s_q / sqrt(L_q)``,
  ``S = sum_q s_q sqrt(L_q)`` (App. A.2.3).
- :func:`stratification_factors` (§3.3, Algorithm 1 line 9): ``s_pre = clip(n_q / n_bar,
  eps_pre, 1)``.
- :class:`PromptState` (§3.1, Eq. 3; Algorithm 1 lines 4, 46-51; App. A.3 "DUET Defaults"):
  per-prompt running means of the within-step ``sigma_obs`` and of generated lengths
  (``L_hat``), the cold-start floor ``s_floor`` (reset once to the 5th percentile of every
  observed ``sigma_obs``, zeros included, after the first epoch, then frozen), and
  ``state_dict``/``load_state_dict`` for resume.
- :class:`LengthQuantiles` (§3.2; Algorithm 1 lines 51-55): K1/K2 as p30/p80 of a sliding
  window of kept lengths, refit every N steps, cold start ``K1 = 0.3 L_max``,
  ``K2 = 0.7 L_max``.
- :class:`RolloutGate` (§3.2, Eq. 5; Algorithm 1 lines 11-33): the per-rollout marker-gated
  abort with the eps-keep coin.
- :func:`answer_marker` (§3.2 and App. A.3 "Marker Patterns"): the marker of each answer format
  of ``pipelines.formats``.
- :func:`is_weight` (§3.3, Eq. 6; Algorithm 1 line 42): ``w = (1 - I_abort) / (s_pre *
  p_abort)``; :func:`group_advantages` and :func:`loss_weights` (lines 35-43): advantages with
  aborted rewards in the baseline, aborted rows out of the loss, the weights of the kept ones.
- :func:`observe_step` (lines 46-52): one batch's updates of ``sigma_obs``, ``L_hat`` and the
  K1/K2 window; :func:`calibration_chi2` (App. A.4): the surrogate-vs-within-step gap.
- :func:`marker_reached` and :func:`step_rates`: what each step logs of its rollouts: the
  marker rate (``p_marker`` of Theorem 3: the text reached the marker by the abort gate), the
  abort rate, the eps-kept count, the share cut by the length cap and the tokens generated.
- :class:`DuetSettings`: a GRPO recipe's ``duet`` mapping (defaults from App. A.3), used by
  ``training.duet.trainer`` and checked by ``training.duet.config``.

Guaranteed: :func:`neyman_allocation` returns counts >= ``n_min``; with ``rounding=False`` it
meets the budget to a relative 1e-9 whenever ``n_min * sum L <= B``; with rounding it returns a
count vector of Eq. 4 (one ``lam`` for all prompts) whose cost is at most ``B`` and within one
rollout (``max L``) of it, unless ``n_min`` alone already exceeds ``B`` (then every count is
``n_min`` and ``feasible`` is False) or several prompts change count at exactly the same ``lam``
(ties; then the gap is the sum of their lengths). The gate's outcome is a function of the
token stream, the parameters and its coin only, so a seeded coin gives the same outcome.

Not guaranteed: variance optimality of the rounded counts (App. A.2.3, "Remark on integer
rounding"); unbiasedness under GRPO's group-normalised advantages (the paper's Theorem 3 covers
an action-independent baseline only; App. A.2.6).

Departures from the paper, and why:

- Bisection runs the paper's 10 steps (log-space, warm-started bracket) and then continues
  (at most 200 steps) only while the budget is not yet closed to the guarantee above: 10 steps
  from a stale warm start (the paper's own Figure 6a shows ``lam`` moving by 1.5-2 orders of
  magnitude) can leave the budget badly missed, and each extra step costs microseconds.
  ``Allocation.iterations`` reports how many steps ran.
- Rounding is half-up (``floor(x + 0.5)``), not Python's round-half-to-even.
- The trim after a marker stops exactly at ``tau + G``; the paper's "next low-entropy token past
  the marker" gives no entropy threshold, so we use its cap only.
- ``tau`` is the poll at which the marker is first seen (a multiple of ``poll_every`` >= K1),
  so detection lags the marker by fewer than ``poll_every`` tokens (the paper's detector has the
  same lag; App. A.3).
- Cold prompts get ``L_hat`` = the mean ``L_hat`` of the observed prompts (or ``l_cold`` when
  none is observed yet): the paper does not say what cost a never-seen prompt has.
- ``L_hat`` is the running mean of the generated length of every allocated rollout, aborted
  ones included (Algorithm 1 line 51 takes kept-not-aborted rollouts only). The budget is a
  cap on the step's expected token count ``sum_q n_q L_q`` with ``L_q`` the realised length
  under the current abort rule (§2; Proposition 1, App. A.2.4); lengths of kept rollouts only
  leave out what aborted rollouts cost, so steps overspend their budget. The
  K1/K2 window still takes kept-not-aborted lengths (natural stopping lengths, line 51).
- ``sigma_obs`` uses the sample standard deviation (ddof=1, as TRL's group std); the paper
  writes ``std_i`` without saying which.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from pipelines.formats import BOXED, SPEAK_CLOSE, SPEAK_OPEN, SXS, TIR, answer_region, check_format
from pipelines.text import boxed_contents

# Defaults from App. A.3 ("DUET Defaults") unless noted.
GRACE = 150  # G
POLL_EVERY = 8  # delta_poll
TAIL_TOKENS = 256  # the marker is checked on the most recent 256 tokens
WINDOW = 1024  # W, kept rollouts in the K1/K2 window
REFIT_EVERY = 10  # N
Q_POLL, Q_ABORT = 0.30, 0.80  # K1 = p30, K2 = p80
COLD_K1, COLD_K2 = 0.3, 0.7  # cold start, as fractions of L_max
EPS_PRE = 0.05
EPS_ABORT = 0.05
S_FLOOR = 0.01  # cold-start floor before the first epoch ends
FLOOR_PERCENTILE = 5.0  # then s_floor = p5 of sigma_obs across prompts, frozen
BISECTION_STEPS = 10
_MAX_BISECTION_STEPS = 200


# ---------------------------------------------------------------------------------------------
# Settings (a recipe's `duet` mapping)


@dataclass(frozen=True)
class DuetSettings:
    """A GRPO recipe's ``duet`` mapping (defaults: paper App. A.3, except where noted); the
    typed ``duet`` field of ``training.duet.config.DuetGRPOConfig``. Every field's ``help`` is what
    ``--print-config`` shows beside it."""

    budget_fraction: float = field(default=1.0, metadata={"help": (
        "b: the step's token budget B = b x full_rollouts x sum of L_hat over the step's "
        "prompts, L_hat the mean generated length of one rollout of the prompt under the "
        "current abort rule (aborted rollouts included; the cap for a prompt never seen "
        "when no prompt has been). B caps the allocation's expected token count sum n_q "
        "L_hat_q (DUET §2, §3.1), not each step's realised count: logged per step as "
        "duet/token_budget beside duet/tokens_generated. The paper sweeps 1, 0.5 and 0.25.")})
    full_rollouts: int = field(default=8, metadata={"help": (
        "Rollouts per prompt of the full GRPO budget the fraction refers to (paper §4.1: 8).")})
    n_min: int = field(default=2, metadata={"help": (
        "Fewest rollouts an allocated prompt gets (Eq. 4's floor; the paper gives no value: 2, "
        "the least a group advantage needs). At most num_generations.")})
    eps_pre: float = field(default=EPS_PRE, metadata={"help": (
        "Lower clip of the stratification factor s_pre = clip(n_q / n_bar, eps_pre, 1) "
        "(§3.3).")})
    eps_abort: float = field(default=EPS_ABORT, metadata={"help": (
        "Chance that a rollout the gate would abort is kept anyway, so the IS weight "
        "1 / p_abort stays finite (§3.2, Eq. 5).")})
    grace: int = field(default=GRACE, metadata={"help": (
        "G, tokens: a rollout is trimmed G tokens past its answer marker, and aborted past "
        "K2 + G tokens without one (§3.2). Below max_completion_length.")})
    poll_every: int = field(default=POLL_EVERY, metadata={"help": (
        "Tokens between checks for the answer marker once past K1 (App. A.3).")})
    tail_tokens: int = field(default=TAIL_TOKENS, metadata={"help": (
        "How many of the most recent tokens each poll searches for the marker (App. A.3).")})
    window: int = field(default=WINDOW, metadata={"help": (
        "W: kept rollouts in the sliding window K1 (p30) and K2 (p80) are fitted on (§3.2).")})
    refit_every: int = field(default=REFIT_EVERY, metadata={"help": (
        "N: steps between refits of K1 and K2 (App. A.3).")})
    s_floor: float = field(default=S_FLOOR, metadata={"help": (
        "Cold-start floor of the surrogate s_hat = max(s_floor, sigma_obs) before the first "
        "epoch ends; then the 5th percentile of every prompt's sigma_obs (zeros of "
        "all-right or all-wrong prompts included), frozen (App. A.3).")})
    bisection_steps: int = field(default=BISECTION_STEPS, metadata={"help": (
        "Bisection steps for the dual lambda before continuing only while the budget is "
        "missed (paper: 10; see training.duet.core).")})
    abort: bool = field(default=True, metadata={"help": (
        "Marker-gated abort on; false: allocator only (paper Table 2 ablation).")})
    allocate: bool = field(default=True, metadata={"help": (
        "Neyman allocation on; false: a uniform b x full_rollouts rollouts per prompt (abort "
        "only).")})

    def __post_init__(self) -> None:
        checks = [
            (0 < self.budget_fraction <= 4, "budget_fraction", "in (0, 4]"),
            (self.full_rollouts >= 1, "full_rollouts", ">= 1"),
            (self.n_min >= 1, "n_min", ">= 1"),
            (0 < self.eps_pre <= 1, "eps_pre", "in (0, 1]"),
            (0 < self.eps_abort <= 1, "eps_abort", "in (0, 1]"),
            (self.grace >= 0, "grace", ">= 0"),
            (self.poll_every >= 1, "poll_every", ">= 1"),
            (self.tail_tokens >= 1, "tail_tokens", ">= 1"),
            (self.window >= 1, "window", ">= 1"),
            (self.refit_every >= 1, "refit_every", ">= 1"),
            (self.s_floor > 0, "s_floor", "> 0"),
            (self.bisection_steps >= 1, "bisection_steps", ">= 1"),
        ]
        for ok, name, rule in checks:
            if not ok:
                raise ValueError(f"duet.{name} must be {rule}, got {getattr(self, name)!r}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | DuetSettings | None) -> DuetSettings:
        """Settings from a recipe's mapping (None: the defaults; an instance: itself);
        ValueError names unknown keys or a value out of range."""
        if isinstance(values, DuetSettings):
            return values
        if values is not None and not isinstance(values, Mapping):
            raise ValueError(f"duet settings must be a mapping such as {{budget_fraction: 0.5}}, "
                             f"got {values!r}")
        values = dict(values or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown duet settings {unknown}; known: {sorted(known)}")
        return cls(**values)



# ---------------------------------------------------------------------------------------------
# Allocate (§3.1)


@dataclass(frozen=True)
class Allocation:
    """Result of :func:`neyman_allocation`: ``counts`` (ints, or floats without rounding), the
    dual ``lam``, the token cost ``sum counts * L``, whether the budget could be met, and the
    number of bisection steps run."""

    counts: list
    lam: float
    cost: float
    feasible: bool
    iterations: int


def _check_allocation_inputs(s_hat: Sequence[float], l_hat: Sequence[float], budget: float,
                             n_min: float) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(s_hat, dtype=float)
    lengths = np.asarray(l_hat, dtype=float)
    if s.ndim != 1 or lengths.shape != s.shape or s.size == 0:
        raise ValueError(f"s_hat and l_hat must be equal-length, non-empty 1-D sequences, got "
                         f"shapes {s.shape} and {lengths.shape}")
    if not (np.all(np.isfinite(s)) and np.all(s >= 0)):
        raise ValueError("every s_hat must be finite and >= 0 (apply the cold-start floor "
                         "s_floor first: s_hat = max(s_floor, sigma_obs)); a prompt with "
                         "s_hat = 0 gets n_min rollouts")
    if not (np.all(np.isfinite(lengths)) and np.all(lengths > 0)):
        raise ValueError("every l_hat (expected rollout length in tokens) must be finite and > 0")
    if not (math.isfinite(budget) and budget > 0):
        raise ValueError(f"budget must be a positive number of tokens, got {budget!r}")
    if not (math.isfinite(n_min) and n_min >= 0):
        raise ValueError(f"n_min must be >= 0, got {n_min!r}")
    return s, lengths


def neyman_allocation(s_hat: Sequence[float], l_hat: Sequence[float], budget: float,
                      n_min: int = 1, lam0: float | None = None, *, rounding: bool = True,
                      steps: int = BISECTION_STEPS, n_max: int | None = None) -> Allocation:
    """Cost-weighted Neyman counts (Eq. 4) and the dual that closes ``budget`` (Theorem 1).

    ``s_hat``: per-prompt surrogate std (>= 0; a prompt with ``s_hat = 0``, e.g. one whose
    groups were always degenerate once the floor is the 5th percentile of all ``sigma_obs``,
    App. A.3, gets ``n_min`` at every ``lam``, Eq. 4); ``l_hat``: per-prompt expected length
    (tokens);
    ``lam0``: the previous step's dual (warm start; None: start from Theorem 1's closed form
    ``(S/B)^2``). ``rounding=False`` gives the continuous relaxation (float counts, no integer
    rounding; ``n_min`` still applies as a lower bound). ``n_max`` (optional) caps every count
    (a trainer's fixed rollout slots); when ``n_max`` everywhere costs no more than ``budget``,
    every count with ``s_hat > 0`` is ``n_max``. See the module docstring for what is guaranteed and why bisection
    may run past ``steps``.
    """
    s, lengths = _check_allocation_inputs(s_hat, l_hat, budget, n_min)
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if lam0 is not None and not (math.isfinite(lam0) and lam0 > 0):
        raise ValueError(f"lam0 (the previous step's dual) must be > 0, got {lam0!r}")
    if n_max is not None and n_max < max(n_min, 1):
        raise ValueError(f"n_max must be >= n_min and >= 1, got n_max={n_max}, n_min={n_min}")
    ratio = s / np.sqrt(lengths)  # n_q(lam) = ratio_q / sqrt(lam)
    cap = math.inf if n_max is None else n_max

    def counts_at(lam: float) -> np.ndarray:
        raw = ratio / math.sqrt(lam)
        if rounding:
            raw = np.floor(raw + 0.5)
        return np.minimum(cap, np.maximum(n_min, raw))

    def cost(lam: float) -> float:
        return float(np.dot(counts_at(lam), lengths))

    floor_cost = float(n_min * lengths.sum())
    if not np.any(s > 0):
        # No prompt carries variance: every count is n_min at any lam (Eq. 4), nothing to
        # solve; the warm start is kept (0.0 without one).
        counts = counts_at(1.0)
        return Allocation(_as_list(counts, rounding), float(lam0 or 0.0),
                          float(np.dot(counts, lengths)), floor_cost <= budget, 0)
    closed_form = (float(np.dot(s, np.sqrt(lengths))) / budget) ** 2
    start = lam0 if lam0 is not None else closed_form
    if floor_cost >= budget:
        # n_min alone spends the budget: every count sits at n_min for any lam above the
        # largest breakpoint; report just above it (nothing smaller keeps them all at n_min).
        top = n_min + 0.5 if rounding else n_min
        lam = float(np.max(ratio) / top) ** 2 * (1 + 1e-9)
        return Allocation(_as_list(counts_at(lam), rounding), lam, cost(lam),
                          floor_cost <= budget, 0)

    top_cost = float(np.dot(np.where(s > 0, cap, max(n_min, 0)), lengths))
    if top_cost <= budget:  # the cap binds everywhere: nothing to solve
        lam = float(np.min(ratio[s > 0]) / cap) ** 2 * (1 - 1e-9)
        return Allocation(_as_list(counts_at(lam), rounding), lam, cost(lam), True, 0)
    # Bracket: cost(lo) > budget >= cost(hi), grown geometrically from the warm start.
    lo = hi = start
    while cost(hi) > budget:
        hi *= 4.0
    while cost(lo) <= budget:
        lo /= 4.0
    slack = float(lengths.max()) if rounding else 1e-9 * budget
    iterations = 0
    while iterations < _MAX_BISECTION_STEPS:
        if iterations >= steps and budget - cost(hi) <= slack:
            break
        if hi / lo - 1.0 < 1e-15:
            break
        mid = math.sqrt(lo * hi)  # bisection in log lam: lam spans orders of magnitude
        if cost(mid) > budget:
            lo = mid
        else:
            hi = mid
        iterations += 1
    return Allocation(_as_list(counts_at(hi), rounding), hi, cost(hi), True, iterations)


def _as_list(counts: np.ndarray, rounding: bool) -> list:
    return [int(c) for c in counts] if rounding else [float(c) for c in counts]


def stratification_factors(counts: Sequence[float], eps_pre: float = EPS_PRE) -> list[float]:
    """``s_pre_q = clip(n_q / n_bar, eps_pre, 1)`` with ``n_bar`` the batch mean (Algorithm 1
    line 9). A stratification factor for aggregation, not a sampling propensity (A5)."""
    n = np.asarray(counts, dtype=float)
    if n.ndim != 1 or n.size == 0 or np.any(n <= 0):
        raise ValueError(f"counts must be a non-empty list of positive rollout counts, got "
                         f"{list(counts)!r}")
    if not 0 < eps_pre <= 1:
        raise ValueError(f"eps_pre must be in (0, 1], got {eps_pre!r}")
    return [float(x) for x in np.clip(n / n.mean(), eps_pre, 1.0)]


def is_weight(aborted: bool, p_abort: float, s_pre: float) -> float:
    """Eq. 6 / Algorithm 1 line 42: ``(1 - I_abort) / (s_pre * p_abort)``; 0 for an aborted
    rollout. ``p_abort`` is the kept-rollout propensity: 1, or eps_abort for an eps-kept one."""
    if not 0 < p_abort <= 1:
        raise ValueError(f"p_abort (kept propensity) must be in (0, 1], got {p_abort!r}")
    if not 0 < s_pre <= 1:
        raise ValueError(f"s_pre must be in (0, 1], got {s_pre!r}")
    return 0.0 if aborted else 1.0 / (s_pre * p_abort)


def calibration_chi2(s_hat: Sequence[float], sigma_step: Sequence[float | None],
                     floor: float = S_FLOOR) -> float | None:
    """The surrogate-vs-within-step gap of App. A.4: ``mean_q (s_hat_q / max(sigma_q, floor)
    - 1)^2`` over the prompts with a within-step ``sigma_q`` (None entries are left out), the
    within-step value "clipped at a small floor to avoid zero denominators on degenerate
    groups" (App. A.4; ``floor`` defaults to the cold-start ``s_floor``); None when no prompt
    has one."""
    if not floor > 0:
        raise ValueError(f"floor must be > 0, got {floor!r}")
    pairs = [(a, b) for a, b in zip(s_hat, sigma_step, strict=True) if b is not None]
    if not pairs:
        return None
    return float(np.mean([(a / max(b, floor) - 1.0) ** 2 for a, b in pairs]))


# ---------------------------------------------------------------------------------------------
# Update (§3.3, Algorithm 1 lines 35-43)


def group_advantages(rewards: Sequence[float], counts: Sequence[int], slots: int,
                     scale: str = "group") -> np.ndarray:
    """Algorithm 1 line 38 over a batch laid out in ``slots`` rows per prompt (prompt ``g``'s
    allocated rollouts are rows ``g*slots .. g*slots + counts[g] - 1``): each allocated row's
    reward minus its prompt's mean over all ``counts[g]`` allocated rollouts, aborted ones
    included (their rewards stay in the baseline); divided by that group's sample std + 1e-4
    (``scale='group'``, TRL's guard), by the std over every allocated reward of the batch
    (``'batch'``) or not at all (``'none'``). Rows outside the allocation, groups with fewer
    than two finite rewards and NaN rewards get 0."""
    r = np.asarray(rewards, dtype=float)
    if r.ndim != 1 or len(r) != slots * len(counts):
        raise ValueError(f"need {slots} reward rows per prompt for {len(counts)} prompts, got "
                         f"{r.shape}")
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale must be 'group', 'batch' or 'none', got {scale!r}")
    adv = np.zeros(len(r))
    allocated = np.array([i % slots < counts[i // slots] for i in range(len(r))], dtype=bool)
    for g, n in enumerate(counts):
        idx = np.arange(g * slots, g * slots + n)
        group = r[idx]
        if (~np.isnan(group)).sum() < 2:
            continue
        centred = group - np.nanmean(group)
        if scale == "group":
            centred = centred / (np.nanstd(group, ddof=1) + 1e-4)
        elif scale == "batch":
            centred = centred / (np.nanstd(r[allocated], ddof=1) + 1e-4)
        adv[idx] = np.nan_to_num(centred, nan=0.0)
    return adv


@dataclass(frozen=True)
class LossWeights:
    """Phase 3 for one batch (global rows): ``advantages`` (line 38, before weighting; Eq. 3
    uses these), ``keep`` (the rows whose tokens enter the loss: allocated, not aborted, not
    filtered), ``weights`` (Eq. 6's ``w``, 0 outside ``keep``). The loss uses
    ``advantages * weights`` with the response mask times ``keep``."""

    advantages: np.ndarray
    keep: np.ndarray
    weights: np.ndarray

    @property
    def loss_advantages(self) -> np.ndarray:
        return self.advantages * self.weights


def loss_weights(rewards: Sequence[float], counts: Sequence[int], slots: int,
                   aborted: Sequence[bool], p_abort: Sequence[float], s_pre: Sequence[float],
                   scale: str = "group",
                   dropped: Sequence[bool] | None = None) -> LossWeights:
    """Algorithm 1 lines 35-43 on one batch: :func:`group_advantages` with aborted rewards in
    the baseline (line 38); aborted rollouts out of the loss (lines 39-41, ``I_abort = 1``);
    ``w = 1 / (s_pre_q * p_abort)`` for the others (line 42, :func:`is_weight`). ``aborted``
    and ``p_abort`` are per row (row ``i``'s propensity: 1, or eps_abort when its coin was
    drawn and kept it); ``s_pre`` per prompt; ``dropped`` (optional, per prompt) takes a whole
    group out of the loss (weft's degenerate-group filter)."""
    n_rows = slots * len(counts)
    if len(aborted) != n_rows or len(p_abort) != n_rows or len(s_pre) != len(counts):
        raise ValueError(f"need aborted and p_abort per row ({n_rows}) and s_pre per prompt "
                         f"({len(counts)}), got {len(aborted)}, {len(p_abort)}, {len(s_pre)}")
    adv = group_advantages(rewards, counts, slots, scale)
    allocated = np.array([i % slots < counts[i // slots] for i in range(n_rows)], dtype=bool)
    keep = allocated & ~np.asarray(aborted, dtype=bool)
    if dropped is not None:
        keep &= ~np.repeat(np.asarray(dropped, dtype=bool), slots)
    weights = np.zeros(n_rows)
    for i in np.flatnonzero(keep):
        weights[i] = is_weight(False, float(p_abort[i]), float(s_pre[i // slots]))
    return LossWeights(adv, keep, weights)


# ---------------------------------------------------------------------------------------------
# Per-prompt online state (Eq. 3, Algorithm 1 lines 4 and 46-51)


def within_step_sigma(advantages: Sequence[float], seq_logps: Sequence[float],
                      kept: Sequence[bool]) -> float | None:
    """Eq. 3: the std over kept-not-aborted rollouts of ``A_i * sum_l log pi(y_il)``; None with
    fewer than two kept rollouts (Algorithm 1 line 46)."""
    values = [a * lp for a, lp, k in zip(advantages, seq_logps, kept, strict=True) if k]
    if len(values) < 2:
        return None
    return float(np.std(values, ddof=1))


@dataclass
class PromptState:
    """Running per-prompt estimates: ``sigma_obs`` (mean of Eq. 3 values, count ``k``) and
    ``L_hat`` (mean generated length per rollout, see :func:`observe_step`), with the
    cold-start floor. Keys are any hashable prompt id (stored as ``str`` so the state
    round-trips through JSON)."""

    s_floor: float = S_FLOOR
    l_cold: float = 256.0
    floor_percentile: float = FLOOR_PERCENTILE
    floor_frozen: bool = False
    sigma: dict[str, list[float]] = field(default_factory=dict)  # key -> [mean, k]
    length: dict[str, list[float]] = field(default_factory=dict)  # key -> [mean, count]

    def __post_init__(self) -> None:
        if not (self.s_floor > 0 and self.l_cold > 0 and 0 <= self.floor_percentile <= 100):
            raise ValueError("PromptState needs s_floor > 0, l_cold > 0 and floor_percentile in "
                             f"[0, 100], got {self.s_floor}, {self.l_cold}, "
                             f"{self.floor_percentile}")

    def s_hat(self, key: Hashable) -> float:
        """``max(s_floor, sigma_obs)``; ``s_floor`` for a prompt never observed (line 4). May
        be 0 once the frozen floor is 0 (see :meth:`refloor`)."""
        entry = self.sigma.get(str(key))
        return self.s_floor if entry is None else max(self.s_floor, entry[0])

    def l_hat(self, key: Hashable) -> float:
        entry = self.length.get(str(key))
        if entry is not None:
            return entry[0]
        if self.length:
            return float(np.mean([v[0] for v in self.length.values()]))
        return self.l_cold

    def observe_sigma(self, key: Hashable, sigma_step: float) -> None:
        """Algorithm 1 line 48: running-mean update of ``sigma_obs`` with one step's value."""
        if not (math.isfinite(sigma_step) and sigma_step >= 0):
            raise ValueError(f"sigma_step must be finite and >= 0, got {sigma_step!r}")
        mean, k = self.sigma.get(str(key), [0.0, 0.0])
        self.sigma[str(key)] = [(k * mean + sigma_step) / (k + 1), k + 1]

    def observe_lengths(self, key: Hashable, lengths: Sequence[int]) -> None:
        """Running mean of ``L_hat`` over the given rollout lengths (which rollouts count is
        :func:`observe_step`'s choice)."""
        mean, count = self.length.get(str(key), [0.0, 0.0])
        for n in lengths:
            if n <= 0:
                raise ValueError(f"kept rollout lengths must be positive, got {n}")
            count += 1
            mean += (n - mean) / count
        if count:
            self.length[str(key)] = [mean, count]

    def refloor(self) -> float:
        """App. A.3: after the first epoch, set ``s_floor`` to the ``floor_percentile``-th
        percentile of ``sigma_obs`` over every observed prompt and freeze it (later calls do
        nothing; nothing happens while no prompt is observed). Zeros count: a prompt whose
        groups were all-right or all-wrong has ``sigma_obs = 0``, and when such prompts are
        more than the percentile the floor is 0, so they get ``n_min`` rollouts (Eq. 4 with
        ``s_hat = 0``) instead of a floor lifted by the informative prompts."""
        if not self.floor_frozen:
            values = [v[0] for v in self.sigma.values()]
            if values:
                self.s_floor = float(np.percentile(values, self.floor_percentile))
                self.floor_frozen = True
        return self.s_floor

    def state_dict(self) -> dict[str, Any]:
        return {"s_floor": self.s_floor, "l_cold": self.l_cold,
                "floor_percentile": self.floor_percentile, "floor_frozen": self.floor_frozen,
                "sigma": {k: list(v) for k, v in self.sigma.items()},
                "length": {k: list(v) for k, v in self.length.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.s_floor = float(state["s_floor"])
        self.l_cold = float(state["l_cold"])
        self.floor_percentile = float(state["floor_percentile"])
        self.floor_frozen = bool(state["floor_frozen"])
        self.sigma = {str(k): [float(v[0]), float(v[1])] for k, v in state["sigma"].items()}
        self.length = {str(k): [float(v[0]), float(v[1])] for k, v in state["length"].items()}


# ---------------------------------------------------------------------------------------------
# K1/K2 (§3.2, Algorithm 1 lines 51-55)


class LengthQuantiles:
    """K1 = p30 and K2 = p80 of a sliding window of kept lengths, refit every ``refit_every``
    steps (at steps that are multiples of it); cold start ``0.3 L_max`` and ``0.7 L_max``.
    Quantiles use numpy's default (linear interpolation), rounded to whole tokens."""

    def __init__(self, max_len: int, window: int = WINDOW, refit_every: int = REFIT_EVERY,
                 q_poll: float = Q_POLL, q_abort: float = Q_ABORT,
                 cold: tuple[float, float] = (COLD_K1, COLD_K2)):
        if max_len < 1 or window < 1 or refit_every < 1:
            raise ValueError("LengthQuantiles needs max_len, window and refit_every >= 1, got "
                             f"{max_len}, {window}, {refit_every}")
        if not 0 <= q_poll <= q_abort <= 1:
            raise ValueError(f"need 0 <= q_poll <= q_abort <= 1, got {q_poll}, {q_abort}")
        self.max_len, self.refit_every = int(max_len), int(refit_every)
        self.q_poll, self.q_abort = q_poll, q_abort
        self.window: deque[int] = deque(maxlen=int(window))
        self.k1 = round(cold[0] * max_len)
        self.k2 = round(cold[1] * max_len)

    def observe(self, lengths: Sequence[int]) -> None:
        self.window.extend(int(n) for n in lengths)

    def end_step(self, step: int) -> bool:
        """Refit when ``step % refit_every == 0`` and the window has data; True if refit."""
        if step % self.refit_every or not self.window:
            return False
        values = np.asarray(self.window, dtype=float)
        self.k1 = round(float(np.quantile(values, self.q_poll)))
        self.k2 = round(float(np.quantile(values, self.q_abort)))
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"k1": self.k1, "k2": self.k2, "window": list(self.window),
                "maxlen": self.window.maxlen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.k1, self.k2 = int(state["k1"]), int(state["k2"])
        self.window = deque((int(n) for n in state["window"]), maxlen=int(state["maxlen"]))


def observe_step(state: PromptState, quantiles: LengthQuantiles, keys: Sequence[Hashable],
                 counts: Sequence[int], slots: int, *, lengths: Sequence[int],
                 aborted: Sequence[bool], keep: Sequence[bool], advantages: Sequence[float],
                 seq_logps: Mapping[int, float], max_len: int) -> dict[str, float]:
    """Phase 4's per-rollout updates (Algorithm 1 lines 46-52) for one batch laid out in
    ``slots`` rows per prompt (prompt ``g``'s allocated rollouts are its first ``counts[g]``
    rows; ``lengths`` are generated tokens per row, 0 for a row that was not generated).

    - ``sigma_obs`` (lines 46-48): Eq. 3 over prompt ``g``'s rows in ``keep`` that have a
      ``seq_logps`` entry (``sum_l log pi``, by row), when there are at least two.
    - ``L_hat``, the allocator's cost per rollout: the running mean of the generated length of
      *every* allocated rollout, aborted ones included at the length they were stopped at.
      The budget caps the per-step token count ``sum_q n_q L_q`` with ``L_q`` the realised
      expected length under the current policy and abort rule (§2; App. A.2.4, Proposition 1);
      a mean over kept rollouts only leaves out the ``K2 + G`` tokens each aborted rollout
      costs, and the step then spends more than its budget. Departure: Algorithm 1 line 51
      updates ``L_hat`` from kept-not-aborted rollouts only.
    - the K1/K2 window (line 51): lengths of allocated rollouts that were not aborted and
      stopped below ``max_len`` (natural stopping lengths: one cut by the cap never stopped).

    Returns the within-step sigma of each prompt that got one (key -> sigma)."""
    n_rows = slots * len(keys)
    if len(counts) != len(keys) or not (len(lengths) == len(aborted) == len(keep)
                                         == len(advantages) == n_rows):
        raise ValueError(f"need one count per prompt ({len(keys)}) and lengths, aborted, keep "
                         f"and advantages per row ({n_rows})")
    sigmas: dict[str, float] = {}
    for g, key in enumerate(keys):
        idx = range(g * slots, g * slots + counts[g])
        kept = [i for i in idx if keep[i] and i in seq_logps]
        sigma = within_step_sigma([advantages[i] for i in kept], [seq_logps[i] for i in kept],
                                  [True] * len(kept))
        if sigma is not None:
            state.observe_sigma(key, sigma)
            sigmas[str(key)] = sigma
        generated = [int(lengths[i]) for i in idx if lengths[i] > 0]
        state.observe_lengths(key, generated)
        quantiles.observe([int(lengths[i]) for i in idx
                           if not aborted[i] and 0 < lengths[i] < max_len])
    return sigmas


# ---------------------------------------------------------------------------------------------
# Markers (§3.2, App. A.3 "Marker Patterns")

_SPEAK_RE = re.compile(re.escape(SPEAK_OPEN) + r"(.*?)" + re.escape(SPEAK_CLOSE), re.DOTALL)


def _boxed_marker(text: str) -> bool:
    return any(c for c in boxed_contents(text))


def _tir_marker(text: str) -> bool:
    return answer_region(text, TIR) is not None


def _sxs_marker(text: str) -> bool:
    return any(_boxed_marker(m.group(1)) for m in _SPEAK_RE.finditer(text))


_MARKERS: dict[str, Callable[[str], bool]] = {BOXED: _boxed_marker, TIR: _tir_marker,
                                              SXS: _sxs_marker}


def answer_marker(answer_format: str) -> Callable[[str], bool]:
    """The marker ``m`` for ``answer_format`` (text -> fired?):

    - ``boxed``: a completed, non-empty ``\\boxed{…}`` (balanced braces) is in the text.
    - ``tir``: a complete, non-empty ``<answer>…</answer>`` block (the region the TIR grader
      reads, ``pipelines.formats.answer_region``).
    - ``sxs``: a closed ``<speak>…</speak>`` block holding a completed ``\\boxed{…}`` (the
      grader reads the speak projection's last box).

    Departure: the paper's math detector also asks for two newlines or an end-of-line colon
    after the box; we fire on the completed box, which already fixes what the grader reads.
    """
    return _MARKERS[check_format(answer_format)]


# ---------------------------------------------------------------------------------------------
# Generate (§3.2, Eq. 5, Algorithm 1 lines 11-33)


@dataclass(frozen=True)
class GateParams:
    """Parameters of the marker-gated abort; see :class:`RolloutGate`."""

    k1: int
    k2: int
    grace: int = GRACE
    poll_every: int = POLL_EVERY
    eps_abort: float = EPS_ABORT
    tail_tokens: int = TAIL_TOKENS

    def __post_init__(self) -> None:
        if not 0 <= self.k1 <= self.k2:
            raise ValueError(f"need 0 <= K1 <= K2, got K1={self.k1}, K2={self.k2}")
        if self.grace < 0 or self.poll_every < 1 or self.tail_tokens < 1:
            raise ValueError(f"need grace >= 0, poll_every >= 1, tail_tokens >= 1, got "
                             f"{self.grace}, {self.poll_every}, {self.tail_tokens}")
        if not 0 < self.eps_abort <= 1:
            raise ValueError(f"eps_abort must be in (0, 1] (A5: every marker-less rollout is "
                             f"kept with positive probability), got {self.eps_abort!r}")


class RolloutGate:
    """One rollout's abort rule (Algorithm 1 lines 14-32), driven token by token.

    Indexing: :meth:`check` is called with ``t`` = tokens generated so far (t >= 1) and returns
    True when the rollout must end now (the caller forces EOS as token t+1). In order, at each t:

    1. poll (line 17): if ``t >= K1`` and ``t % poll_every == 0`` and the marker fires on the
       last ``tail_tokens`` tokens, the marker is seen; the first such ``t`` is ``tau``;
    2. coin (lines 23-29): if ``t >= K2 + G``, no marker seen and no coin drawn yet, the coin is
       drawn: with probability ``eps_abort`` keep to natural EOS (``p_abort = eps``), else abort
       (force EOS now, ``aborted``);
    3. trim (line 20): if the marker was seen, no coin was drawn, and ``t >= tau + G``: end now.

    The coin is the uniform ``u`` (kept iff ``u < eps_abort``): a pre-drawn number, or a
    callable ``t -> u`` called once, when the coin is drawn (the vLLM processor derives ``u``
    from a seeded hash of the prefix there; ``training.duet.generate.prefix_coin``), so outcomes
    are reproducible from a seed. ``tail`` is a callable returning the last ``n`` tokens (or
    text) for the marker, so callers only decode when a poll happens.

    This class is the one state machine of the abort rule: the transformers processor
    (``training.duet.generate.MarkerAbortProcessor``), the vLLM processor
    (``training.duet.vllm.DuetAbortLogitsProcessor``) and the replay of a finished rollout
    (``training.duet.generate.replay_gate``) all drive it.
    """

    def __init__(self, params: GateParams, marker: Callable[[Any], bool],
                 u: float | Callable[[int], float]):
        if not callable(u):
            _check_coin(u)
        self.params, self.marker, self.u = params, marker, u
        self.tau: int | None = None  # first poll at which the marker was seen
        self.coin_drawn = False  # keep_decided
        self.aborted = False
        self.stopped_at: int | None = None  # t at which EOS was forced (None: natural end)

    @property
    def marker_seen(self) -> bool:
        return self.tau is not None

    @property
    def p_abort(self) -> float:
        """Line 32: the kept-rollout propensity, eps_abort if the coin was drawn, else 1."""
        return self.params.eps_abort if self.coin_drawn else 1.0

    def check(self, t: int, tail: Callable[[int], Any]) -> bool:
        if self.stopped_at is not None:
            return True
        p = self.params
        if (t >= p.k1 and t % p.poll_every == 0 and self.tau is None
                and self.marker(tail(p.tail_tokens))):
            self.tau = t
        if t >= p.k2 + p.grace and self.tau is None and not self.coin_drawn:
            self.coin_drawn = True
            if callable(self.u):
                self.u = _check_coin(self.u(t))
            if not self.u < p.eps_abort:
                self.aborted = True
                self.stopped_at = t
                return True
        if self.tau is not None and not self.coin_drawn and t >= self.tau + p.grace:
            self.stopped_at = t
            return True
        return False


def _check_coin(u: Any) -> float:
    if not (isinstance(u, (int, float)) and 0 <= u < 1):
        raise ValueError(f"the coin's uniform draw must be in [0, 1), got {u!r}")
    return float(u)


def coin_draws(seed: int, step: int, count: int) -> list[float]:
    """``count`` uniform draws in [0, 1) for the eps-keep coins of one generation call,
    reproducible from (seed, step)."""
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, int(step) & 0xFFFFFFFF])
    return [float(x) for x in rng.random(count)]


# ---------------------------------------------------------------------------------------------
# Per-step rates (what each step logs; §3.2, Theorem 3's p_marker)


def marker_reached(gate: RolloutGate, text: Callable[[], str],
                   marker: Callable[[str], bool]) -> bool:
    """Whether a finished rollout's text reached the answer marker by the abort gate, the
    ``M_{q,i} = 1{tau_marker <= tau_abort}`` of the paper's Theorem 3 (App. A.2.6), whose rate
    over rollouts is ``p_marker``. A rollout whose coin was drawn had no marker by ``K2 + G``
    as far as the gate saw: not reached, even when it writes one afterwards (eps-kept, run on
    to EOS, where the gate's polls still set ``tau``). Otherwise it is reached when the gate saw
    the marker at a poll, or when its whole text holds the marker: that counts rollouts that
    ended (at their own EOS or the length cap) before the gate polled their marker, before
    ``K1`` or between two polls. ``text`` is called only in that last case (it decodes)."""
    if gate.coin_drawn:
        return False
    return gate.marker_seen or bool(marker(text()))


@dataclass(frozen=True)
class RolloutOutcome:
    """One allocated rollout's outcome, as a step's rates count it: generated tokens, whether
    its text reached the marker (:func:`marker_reached`), the gate saw the marker at a poll
    (``RolloutGate.marker_seen``; before any coin, it may trim ``G`` tokens after it), the
    coin was drawn (no marker by ``K2 + G``), it was aborted (coin drawn and said abort), and
    it was cut by the length cap (ran to ``max_completion_length`` without the gate stopping
    it and without its own EOS)."""

    length: int
    marker: bool
    marker_seen: bool
    coin_drawn: bool
    aborted: bool
    cap_cut: bool


def step_rates(outcomes: Sequence[RolloutOutcome]) -> dict[str, float]:
    """A step's rates over its allocated rollouts (``outcomes``; unallocated slots are not
    rollouts): ``marker_rate`` (text reached the marker, ``p_marker``), ``marker_seen_rate``
    (the gate saw it at a poll before any coin: the rollouts it may trim), ``abort_rate``
    (aborted and masked out), ``eps_kept`` (how many coin-drawn rollouts the coin kept),
    ``cap_cut_rate`` (cut by the length cap) and ``tokens_generated`` (every generated token,
    aborted rollouts included). Rates are 0 for a step without rollouts."""
    n = len(outcomes)
    share = (lambda k: k / n) if n else (lambda k: 0.0)
    return {
        "marker_rate": share(sum(o.marker for o in outcomes)),
        "marker_seen_rate": share(sum(o.marker_seen and not o.coin_drawn for o in outcomes)),
        "abort_rate": share(sum(o.aborted for o in outcomes)),
        "eps_kept": float(sum(o.coin_drawn and not o.aborted for o in outcomes)),
        "cap_cut_rate": share(sum(o.cap_cut for o in outcomes)),
        "tokens_generated": float(sum(o.length for o in outcomes)),
    }
