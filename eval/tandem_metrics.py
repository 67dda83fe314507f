"""Per-sample statistics of Tandem RL's legibility and drift axes (tandem.txt §4.4, §4.5).

Pure functions over models and token ids (torch/transformers; no dagster, no warehouse):

- :func:`legibility` (§4.5): for each (prompt, senior completion), the junior's per-token
  cross-entropy on the senior's completion, mean over completion tokens of
  ``-log p_junior(y_t | prompt, y_<t)`` in nats, and the token-level distribution overlap
  ``sum_v min(p_senior(v | ctx), p_junior(v | ctx))`` averaged over the same positions (0 =
  disjoint, 1 = identical). Both models are read with one full forward of the sequence each,
  at temperature 1.
- :func:`token_counts`, :func:`marginal_drift` and :func:`survival` (§4.4): marginal token
  distributions estimated from all of a model's generations, the signed log-ratio
  ``log q_senior(v) - log q_junior(v)`` of every token that is frequent in the junior's own
  outputs (count >= ``min_count``), the full-vocabulary ``KL(q_senior || q_junior)``, and the
  survival curve of ``|log-ratio|`` (share of those tokens whose deviation exceeds each
  threshold).

Choices (the paper's values are not legible in our copy): marginals use add-``smoothing``
(default 0.5) counts over the whole vocabulary so that log-ratios and the KL stay finite;
"frequent" is ``min_count`` (default 20) occurrences in the junior's outputs.
Not guaranteed: anything about the warehouse rows or plots these feed (not built yet).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Legibility:
    """One (prompt, completion) pair's §4.5 statistics."""

    tokens: int
    junior_ce_nats: float     # mean over completion tokens
    overlap: float            # mean over completion positions of sum_v min(p_s, p_j)


@dataclass(frozen=True)
class Drift:
    """§4.4 marginal-token deviation of a senior from the junior."""

    token_ids: list[int]        # tokens frequent in the junior's outputs
    log_ratio: list[float]      # log q_senior - log q_junior, same order
    kl: float                   # KL(q_senior || q_junior), full vocabulary, nats


@torch.no_grad()
def _log_probs(model, ids: list[int], start: int, stop: int) -> torch.Tensor:
    """(stop - start, V) log-probabilities of the tokens at positions start..stop-1."""
    device = next(model.parameters()).device
    logits = model(input_ids=torch.tensor([ids], device=device)).logits[0]
    return torch.log_softmax(logits[start - 1:stop - 1].double(), dim=-1).cpu()


def legibility(senior, junior, prompt_ids: Sequence[Sequence[int]],
               completion_ids: Sequence[Sequence[int]]) -> list[Legibility]:
    """§4.5 cross-entropy and overlap for each (prompt, senior completion) pair."""
    if len(prompt_ids) != len(completion_ids):
        raise ValueError(f"one completion per prompt: {len(prompt_ids)} prompts, "
                         f"{len(completion_ids)} completions")
    out = []
    for prompt, completion in zip(prompt_ids, completion_ids):
        if not prompt:
            raise ValueError("every prompt needs at least one token (the first completion "
                             "token is predicted from it)")
        if not completion:
            out.append(Legibility(0, math.nan, math.nan))
            continue
        ids = list(prompt) + list(completion)
        start, stop = len(prompt), len(ids)
        lp_j = _log_probs(junior, ids, start, stop)
        lp_s = _log_probs(senior, ids, start, stop)
        target = torch.tensor(list(completion)).unsqueeze(-1)
        ce = -lp_j.gather(-1, target).squeeze(-1)
        overlap = torch.minimum(lp_s.exp(), lp_j.exp()).sum(-1)
        out.append(Legibility(len(completion), float(ce.mean()), float(overlap.mean())))
    return out


def token_counts(completions: Iterable[Sequence[int]], vocab_size: int) -> torch.Tensor:
    """(vocab_size,) occurrence counts of token ids over all completions."""
    counts = torch.zeros(vocab_size, dtype=torch.float64)
    for ids in completions:
        if ids:
            t = torch.tensor(list(ids), dtype=torch.long)
            if int(t.min()) < 0 or int(t.max()) >= vocab_size:
                raise ValueError(f"token id outside [0, {vocab_size}): wrong vocabulary size?")
            counts += torch.bincount(t, minlength=vocab_size).double()
    return counts


def marginal_drift(senior_counts: torch.Tensor, junior_counts: torch.Tensor, *,
                   min_count: int = 20, smoothing: float = 0.5) -> Drift:
    """§4.4 signed log-ratios on the junior's frequent tokens, and the full-vocabulary KL."""
    if senior_counts.shape != junior_counts.shape:
        raise ValueError(f"count vectors differ in size: {tuple(senior_counts.shape)} vs "
                         f"{tuple(junior_counts.shape)}")
    if smoothing <= 0:
        raise ValueError(f"smoothing must be > 0 (keeps log-ratios finite), got {smoothing}")
    q_s = senior_counts.double() + smoothing
    q_j = junior_counts.double() + smoothing
    q_s, q_j = q_s / q_s.sum(), q_j / q_j.sum()
    ratio = q_s.log() - q_j.log()
    frequent = (junior_counts >= min_count).nonzero().flatten()
    return Drift(token_ids=frequent.tolist(), log_ratio=ratio[frequent].tolist(),
                 kl=float((q_s * ratio).sum()))


def survival(deviations: Sequence[float], thresholds: Sequence[float]) -> list[float]:
    """Share of ``|deviation|`` strictly above each threshold (the survival curve of §4.4)."""
    if not deviations:
        return [math.nan for _ in thresholds]
    dev = torch.tensor([abs(d) for d in deviations], dtype=torch.float64)
    return [float((dev > t).double().mean()) for t in thresholds]
