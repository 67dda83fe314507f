"""Per-sample statistics of Tandem RL's legibility and drift axes (Tandem RL §4.4, §4.5).

Pure functions over models and token ids (torch/transformers; no dagster, no warehouse):

- :func:`legibility` (§4.5): for each (prompt, senior completion), the junior's per-token
  cross-entropy on the senior's completion, mean over completion tokens of
  ``-log p_junior(y_t | prompt, y_<t)`` in nats, and the token-level distribution overlap
  ``sum_v min(p_senior(v | ctx), p_junior(v | ctx))`` averaged over the same positions (0 =
  disjoint, 1 = identical). Both models are read with one full forward of the sequence each,
  at temperature 1.
- :func:`pooled_legibility` (§4.5): the corpus figures, averaged over every completion position
  of every sample (a long answer weighs by its length), not over per-sample means.
- :func:`token_counts`, :func:`marginal_drift` and :func:`survival` (§4.4): marginal token
  distributions estimated from all of a model's generations, the signed log-ratio
  ``log q_senior(v) - log q_junior(v)`` of every token that is frequent in the junior's own
  outputs (count >= ``min_count``), and the survival curve of ``|log-ratio|`` (share of those
  tokens whose deviation exceeds each threshold): the primary drift figure. Beside it, a KL
  ``KL(q_senior || q_junior)`` restricted to the shared support, with how much it covers.

Choices (the paper's values are not legible in our copy):

- Marginals are the plain relative frequencies ``c(v) / N``. A log-ratio adds ``smoothing``
  (default 0.5) to both counts of that token only, ``log((c_s + a) / N_s) - log((c_j + a) /
  N_j)``, so a frequent junior token the senior never wrote stays finite; it adds no mass to
  the rest of the vocabulary, so the totals ``N`` stay the corpus sizes and two corpora with
  the same frequencies give ratios near 0 whatever their sizes. (Spreading add-0.5 over a
  49k-token vocabulary adds more pseudo-counts than an evaluation corpus has tokens, which
  both biases the ratios by the corpora's size ratio and makes the KL a function of the
  constant: 0.086 nats at 0.5 against 0.60 at 0.001 on 14k tokens.)
- The KL is smoothing-free: on the tokens both models wrote (the shared support ``S``), the
  two marginals renormalised to ``S``, ``sum_S p_s log(p_s / p_j)``, reported with ``|S|``
  and the share of each corpus's tokens that lie in ``S`` (``kl_tokens``,
  ``kl_senior_mass``, ``kl_junior_mass``). The paper's full-vocabulary KL is not estimable
  from evaluation-sized corpora without a smoothing constant that dominates it; compare KLs
  only at similar coverage and corpus sizes (the plug-in estimate grows as corpora shrink).
- "frequent" is ``min_count`` (default 20) occurrences in the junior's own outputs.

Warehouse-facing helpers (plain rows; ``assets/tandem.py`` writes them and draws the plots):

- :func:`legibility_rows` / :func:`drift_rows` / :func:`drift_summary`: per-sample §4.5 rows,
  per-token §4.4 rows (counts, signed log-ratio) and one summary row (survival curve at
  :data:`SURVIVAL_THRESHOLDS`, shared-support KL with its coverage, cross-entropy and overlap
  over all positions).
- :func:`per_problem` and :func:`paired_tandem_tests` (§5.3): per-problem statistics (the
  unbiased pass@k of Chen et al. for handoff samples; for cross-entropy and overlap the mean
  over the problem's positions, i.e. sample means weighted by their ``tokens`` when the rows
  carry it) compared between two trained models with ``eval.compare``'s paired one-sided
  t-test and paired bootstrap, each in the paper's claimed direction (handoff pass@k and
  overlap: A greater; cross-entropy: A less).

Not guaranteed: the rows say nothing about samples that failed to generate (left out).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from eval.claims import ClaimError
from eval.modes import Job, build_mode, messages_for
from pipelines.progress import report

# |log-ratio| thresholds of the §4.4 survival curve (nats): 0 to 3 in steps of 0.25.
SURVIVAL_THRESHOLDS = tuple(i / 4 for i in range(13))
# The direction each §5.3 claim is tested in (alternative of eval.compare, about A - B).
CLAIMED_DIRECTION = {"handoff_pass@k": "greater", "junior_ce_nats": "less", "overlap": "greater"}


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
    kl: float                   # KL on the shared support, nats (NaN when nothing is shared)
    kl_tokens: int              # |S|: tokens both corpora contain
    kl_senior_mass: float       # share of the senior's tokens that lie in S
    kl_junior_mass: float       # share of the junior's tokens that lie in S


@torch.no_grad()
def _log_probs(model, ids: list[int], start: int, stop: int) -> torch.Tensor:
    """(stop - start, V) log-probabilities of the tokens at positions start..stop-1."""
    device = next(model.parameters()).device
    logits = model(input_ids=torch.tensor([ids], device=device)).logits[0]
    return torch.log_softmax(logits[start - 1:stop - 1].double(), dim=-1).cpu()


def legibility(senior, junior, prompt_ids: Sequence[Sequence[int]],
               completion_ids: Sequence[Sequence[int]]) -> list[Legibility]:
    """§4.5 cross-entropy and overlap for each (prompt, senior completion) pair. Two forward
    passes a pair, so it says how far it is to an enclosing ``pipelines.progress.heartbeat``."""
    if len(prompt_ids) != len(completion_ids):
        raise ValueError(f"one completion per prompt: {len(prompt_ids)} prompts, "
                         f"{len(completion_ids)} completions")
    out: list[Legibility] = []
    total = len(prompt_ids)
    for prompt, completion in zip(prompt_ids, completion_ids):
        report("junior cross-entropy of the senior's outputs", len(out), total)
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
    report(done=len(out), total=total)
    return out


def pooled_legibility(stats: Sequence[Legibility]) -> tuple[float, float]:
    """§4.5's corpus figures: (junior cross-entropy, overlap) averaged over every completion
    position of every sample, i.e. the per-sample means weighted by their token counts; NaN
    for both when no sample has a token."""
    scored = [s for s in stats if s.tokens > 0]
    total = sum(s.tokens for s in scored)
    if not total:
        return math.nan, math.nan
    return (sum(s.junior_ce_nats * s.tokens for s in scored) / total,
            sum(s.overlap * s.tokens for s in scored) / total)


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
                   min_count: int = 20, smoothing: float = 0.5,
                   tokens: Sequence[int] | None = None) -> Drift:
    """§4.4 signed log-ratios on the junior's frequent tokens (``smoothing`` added to the two
    counts of each token, the totals left as the corpus sizes) and the smoothing-free KL on the
    shared support with its coverage (see the module docstring). ``tokens``: compute the
    log-ratios on these token ids instead (a fixed set, e.g. the full corpus's frequent tokens
    when the counts are recomputed with part of the corpus left out); ``min_count`` is then
    unused."""
    if senior_counts.shape != junior_counts.shape:
        raise ValueError(f"count vectors differ in size: {tuple(senior_counts.shape)} vs "
                         f"{tuple(junior_counts.shape)}")
    if not smoothing > 0:
        raise ValueError(f"smoothing must be > 0 (the count added to each token's two counts "
                         f"so that a token the senior never wrote keeps a finite log-ratio), "
                         f"got {smoothing}")
    c_s, c_j = senior_counts.double(), junior_counts.double()
    n_s, n_j = float(c_s.sum()), float(c_j.sum())
    if n_s <= 0 or n_j <= 0:
        raise ValueError(f"marginal drift needs tokens from both models: the senior's outputs "
                         f"hold {n_s:g} tokens and the junior's {n_j:g}; evaluate both first")
    frequent = ((c_j >= min_count).nonzero().flatten() if tokens is None
                else torch.tensor(list(tokens), dtype=torch.long))
    ratio = ((c_s[frequent] + smoothing) / n_s).log() - ((c_j[frequent] + smoothing) / n_j).log()
    shared = (c_s > 0) & (c_j > 0)
    p_s, p_j = c_s[shared], c_j[shared]
    kl = math.nan
    if p_s.numel():
        p_s, p_j = p_s / p_s.sum(), p_j / p_j.sum()
        kl = float((p_s * (p_s / p_j).log()).sum())
    return Drift(token_ids=frequent.tolist(), log_ratio=ratio.tolist(), kl=kl,
                 kl_tokens=int(shared.sum()), kl_senior_mass=float(c_s[shared].sum()) / n_s,
                 kl_junior_mass=float(c_j[shared].sum()) / n_j)


def survival(deviations: Sequence[float], thresholds: Sequence[float]) -> list[float]:
    """Share of ``|deviation|`` strictly above each threshold (the survival curve of §4.4)."""
    if not deviations:
        return [math.nan for _ in thresholds]
    dev = torch.tensor([abs(d) for d in deviations], dtype=torch.float64)
    return [float((dev > t).double().mean()) for t in thresholds]


# ------------------------------------------------------------------ warehouse rows (§4.4, §4.5)


def legibility_rows(samples: Sequence[Mapping[str, Any]], stats: Sequence[Legibility], *,
                    model: str, junior: str) -> list[dict[str, Any]]:
    """One ``tandem_legibility`` row per scored sample (``stats[i]`` belongs to ``samples[i]``)."""
    if len(samples) != len(stats):
        raise ValueError(f"one Legibility per sample: {len(samples)} samples, {len(stats)} stats")
    return [{"model": model, "junior": junior, "benchmark": s["benchmark"],
             "problem_id": s["problem_id"], "sample_index": int(s["sample_index"]),
             "tokens": st.tokens, "junior_ce_nats": st.junior_ce_nats, "overlap": st.overlap,
             "checkpoint_id": s.get("checkpoint_id")}
            for s, st in zip(samples, stats)]


def drift_rows(drift: Drift, senior_counts: torch.Tensor, junior_counts: torch.Tensor, *,
               model: str, junior: str, benchmark: str,
               decode: Callable[[int], str] | None = None) -> list[dict[str, Any]]:
    """One ``tandem_drift`` row per token frequent in the junior's outputs."""
    return [{"model": model, "junior": junior, "benchmark": benchmark, "token_id": int(t),
             "token": decode(int(t)) if decode else None,
             "senior_count": int(senior_counts[t]), "junior_count": int(junior_counts[t]),
             "log_ratio": float(r), "abs_log_ratio": abs(float(r))}
            for t, r in zip(drift.token_ids, drift.log_ratio)]


def drift_summary(drift: Drift, legibility_stats: Sequence[Legibility], *, model: str,
                  junior: str, benchmark: str, min_count: int,
                  thresholds: Sequence[float] = SURVIVAL_THRESHOLDS) -> dict[str, Any]:
    """The ``tandem_summary`` row: §4.4 survival curve (the primary drift figure) and the
    shared-support KL with its coverage; §4.5 cross-entropy and overlap over all positions."""
    ce, overlap = pooled_legibility(legibility_stats)
    return {"model": model, "junior": junior, "benchmark": benchmark,
            "frequent_tokens": len(drift.token_ids), "min_count": min_count,
            "survival_thresholds": [float(t) for t in thresholds],
            "survival": survival(drift.log_ratio, thresholds),
            "kl": drift.kl, "kl_tokens": drift.kl_tokens,
            "kl_senior_mass": drift.kl_senior_mass, "kl_junior_mass": drift.kl_junior_mass,
            "samples": sum(1 for s in legibility_stats if s.tokens > 0),
            "tokens": sum(s.tokens for s in legibility_stats),
            "junior_ce_nats": ce, "overlap": overlap}


# ------------------------------------------------------------------ paired tests (§5.3)


def per_problem(rows: Iterable[Mapping[str, Any]], statistic: str,
                k: int | None = None) -> dict[str, float]:
    """Per-problem statistic: ``pass@k`` (unbiased estimator from the ``correct`` column, for
    problems with at least k answered samples) or a per-position column (``junior_ce_nats``,
    ``overlap``) averaged over the problem's positions: the sample means weighted by their
    ``tokens`` where rows carry it (§4.5 averages positions), else a plain mean over samples;
    failed generations and NaN values are left out."""
    from eval.metrics import pass_at_k

    groups: dict[str, list[Any]] = {}
    for r in rows:
        if statistic == "pass@k":
            if r.get("gen_error") is None and r.get("correct") is not None:
                groups.setdefault(r["problem_id"], []).append(bool(r["correct"]))
        else:
            value = r.get(statistic)
            if value is not None and not math.isnan(float(value)):
                weight = r.get("tokens")
                weight = 1.0 if weight is None else float(weight)
                groups.setdefault(r["problem_id"], []).append((float(value), weight))
    if statistic == "pass@k":
        if not k or k < 1:
            raise ValueError("pass@k needs k >= 1")
        return {p: pass_at_k(len(c), sum(c), k) for p, c in groups.items() if len(c) >= k}
    return {p: sum(v * w for v, w in vw) / sum(w for _, w in vw)
            for p, vw in groups.items() if sum(w for _, w in vw) > 0}


def paired_tandem_tests(a: Mapping[str, float], b: Mapping[str, float], *, statistic: str,
                        n_boot: int = 5000, seed: int = 0) -> dict[str, Any]:
    """§5.3's paired one-sided tests of model A against model B on one per-problem statistic
    (``handoff_pass@k``, ``junior_ce_nats`` or ``overlap``), on the problems both have, in the
    claimed direction (:data:`CLAIMED_DIRECTION`)."""
    from eval.compare import paired_bootstrap, paired_t_test

    if statistic not in CLAIMED_DIRECTION:
        raise ValueError(f"statistic must be one of {sorted(CLAIMED_DIRECTION)}, got {statistic!r}")
    alternative = CLAIMED_DIRECTION[statistic]
    shared = sorted(set(a) & set(b))
    if len(shared) < 2:
        raise ValueError(f"{statistic}: the two models share {len(shared)} problem(s); a paired "
                         "test needs at least 2 (evaluate both on the same benchmark slice)")
    sa, sb = {p: a[p] for p in shared}, {p: b[p] for p in shared}
    t = paired_t_test(sa, sb, alternative=alternative)
    boot = paired_bootstrap(sa, sb, n_boot=n_boot, seed=seed, alternative=alternative)
    return {"statistic": statistic, "alternative": alternative, "n": t.n, "mean_a": t.mean_a,
            "mean_b": t.mean_b, "diff": t.diff, "ci_low": t.ci_low, "ci_high": t.ci_high,
            "t": t.statistic, "p_ttest": t.p_value, "p_bootstrap": boot.p_value}


def drift_by_problem(senior: Mapping[str, Any], junior: Mapping[str, Any], *,
                     problems: Sequence[str], min_count: int = 20,
                     smoothing: float = 0.5) -> tuple[dict[str, float], float, int]:
    """(per-problem jackknife pseudo-values of θ, θ, frequent tokens): θ is the mean
    ``|log-ratio|`` of :func:`marginal_drift` over the tokens frequent in
    the junior's outputs on ``problems`` (``senior`` and ``junior``: token counts per
    problem); pseudo-value ``i`` is ``n·θ − (n−1)·θ₋ᵢ`` with problem ``i`` left out of both
    corpora and the token set kept."""
    missing = [p for p in problems if p not in senior or p not in junior]
    if missing or len(problems) < 2:
        raise ClaimError(f"drift: need token counts of at least 2 problems from both models; "
                         f"{len(problems)} given, {len(missing)} without samples of one model")
    c_s = torch.stack([senior[p] for p in problems]).double()
    c_j = torch.stack([junior[p] for p in problems]).double()
    total_s, total_j = c_s.sum(0), c_j.sum(0)
    full = marginal_drift(total_s, total_j, min_count=min_count, smoothing=smoothing)
    if not full.token_ids:
        raise ClaimError(f"drift: no token occurs {min_count}+ times in the junior's outputs; "
                         "lower min_count or evaluate more problems or samples")
    n = len(problems)
    theta = sum(abs(r) for r in full.log_ratio) / len(full.log_ratio)
    out = {}
    for i, p in enumerate(problems):
        left = marginal_drift(total_s - c_s[i], total_j - c_j[i], min_count=min_count,
                              smoothing=smoothing, tokens=full.token_ids)
        theta_i = sum(abs(r) for r in left.log_ratio) / len(left.log_ratio)
        out[p] = n * theta - (n - 1) * theta_i
    return out, theta, len(full.token_ids)


def summary_figures(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of a ``tandem_summary`` row shown on ``tandem_legibility``'s page: frequent
    tokens, samples and tokens scored, junior cross-entropy, overlap, and the shared-support
    KL with its coverage."""
    return {"frequent_tokens": summary["frequent_tokens"], "samples": summary["samples"],
            "tokens": summary["tokens"], "junior_ce_nats": float(summary["junior_ce_nats"]),
            "overlap": float(summary["overlap"]), "kl_shared_support": float(summary["kl"]),
            "kl_tokens": summary["kl_tokens"],
            "kl_senior_mass": float(summary["kl_senior_mass"]),
            "kl_junior_mass": float(summary["kl_junior_mass"])}


def legibility_and_drift(pair: tuple[Any, Any, Any], bench: Any, problems: dict[str, Any],
                         senior_samples: list[dict[str, Any]],
                         junior_samples: list[dict[str, Any]], *, model: str, junior: str,
                         max_samples: int | None, min_count: int, smoothing: float
                         ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """Tandem RL §4.4-4.5 for one senior against its junior, from their solo samples:
    (``tandem_legibility`` rows, ``tandem_drift`` rows, the ``tandem_summary`` row).

    ``pair`` is (tokenizer, senior model, junior model); legibility scores the senior's first
    ``max_samples`` samples by (problem, index) (None: all), each under the prompt it answered
    (``problems`` by id); drift compares the token marginals of all of both models' samples
    (``eval.tandem_metrics``)."""
    tok, senior, junior_model = pair
    scored = sorted(senior_samples, key=lambda r: (r["problem_id"], r["sample_index"]))
    if max_samples is not None:
        scored = scored[:max_samples]
    prompts = [prompt_ids(tok, bench, problems, r) for r in scored]
    completions = [tok.encode(r["output"] or "", add_special_tokens=False) for r in scored]
    stats = legibility(senior, junior_model, prompts, completions)
    vocab = int(senior.config.vocab_size)
    counts = {name: token_counts([tok.encode(r["output"] or "", add_special_tokens=False)
                                  for r in rows], vocab)
              for name, rows in (("senior", senior_samples), ("junior", junior_samples))}
    drift = marginal_drift(counts["senior"], counts["junior"], min_count=min_count,
                           smoothing=smoothing)
    leg_rows = legibility_rows(scored, stats, model=model, junior=junior)
    d_rows = drift_rows(drift, counts["senior"], counts["junior"], model=model, junior=junior,
                        benchmark=bench.name, decode=lambda t: tok.decode([t]))
    summary = drift_summary(drift, stats, model=model, junior=junior, benchmark=bench.name,
                            min_count=min_count)
    return leg_rows, d_rows, summary


def prompt_ids(tok, bench, problems: dict, row: dict) -> list[int]:
    """The prompt the senior answered (chat template, generation prompt), as token ids."""
    problem = problems.get(row["problem_id"])
    messages = (messages_for(bench, Job(problem, 0), build_mode()) if problem is not None
                else [{"role": "user", "content": row.get("prompt") or ""}])
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)


def load_pair(senior_path: str, junior_path: str) -> tuple[Any, Any, Any]:
    """(tokenizer, senior, junior): the senior's tokenizer and both models in float32, in eval
    mode, for the legibility and drift statistics."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(senior_path)
    load = {"dtype": torch.float32}
    senior = AutoModelForCausalLM.from_pretrained(senior_path, **load).eval()
    junior = AutoModelForCausalLM.from_pretrained(junior_path, **load).eval()
    return tok, senior, junior
