"""Tandem rollouts: a senior and a frozen junior co-write each response in lockstep.

Implements the rollout of the Tandem RL paper ("Tandem Reinforcement Learning with Verifiable Rewards"): §3.3 (both
models see the same context; the active model samples the next token, which is appended for
both), App. A.1.1 (one forward of each model per generated token, each model keeping its own
KV cache over the identical sequence, a per-token authorship stream returned with the tokens)
and App. A.1.2 (word-level handoffs with a subword-span cap and per-request seeded draws).
Plain torch/transformers; no vLLM, no TRL, no dagster.

Guarantees:

- **Boundary set** (A.1.2): resolved from the tokenizer at start-up, never hard-coded. The
  word-initial marker is found by tokenizing a probe phrase and seeing which known marker
  (byte-level BPE ``Ġ``, SentencePiece ``▁``) starts its word tokens; the boundary set is
  exactly the vocabulary ids whose surface form begins with that marker. A tokenizer with
  neither marker is refused with a message saying to pass the ids explicitly.
- **Handoff schedule** (§3.3, A.1.2). Whether a token begins a new word is known only once it
  has been sampled, so, as in A.1.2 (a per-request state of "active model, tokens since the
  last handoff, last-seen response length" updated from the emitted response), the schedule
  is driven by the tokens already emitted: the active model of the first response token is
  drawn by the coin; after each emitted token the active model is redrawn (senior with
  probability ``senior_prob``) if that token is word-initial, or if ``span_cap`` consecutive
  non-boundary tokens have been emitted since the last draw (the backstop of A.1.2); otherwise
  it keeps writing. Every draw resets the span counter. So an author change between
  positions ``t`` and ``t+1`` only ever happens where token ``t`` is word-initial or closes a
  capped span.
- **Seeded draws, exactly reproducible.** Rollout ``b`` with seed ``s`` uses
  ``draws = torch.rand(2, max_new_tokens, generator=torch.Generator().manual_seed(s))``:
  ``draws[0, t]`` is the uniform that picks token ``t`` and ``draws[1, t]`` the coin of a draw
  taken before token ``t`` (senior iff ``draws[1, t] < senior_prob``). A token is picked by
  inverse-CDF sampling: the first vocabulary id (in id order) whose cumulative probability
  exceeds ``draws[0, t]`` times the total mass, under the author's temperature/top-k/top-p
  distribution. The coin and token streams are separate, so with ``senior_prob = 1`` a rollout
  is token for token the solo senior rollout with the same seed, and with ``0`` the solo
  junior's. Same seed, same models and same length: same tokens and same authorship, whatever
  else is in the batch.
- **Lockstep** (A.1.1): both caches hold exactly the shared prompt + response; each generated
  token costs one forward of each model (the prompt one batched prefill each).
- Stats per rollout: tokens, senior tokens and share, handoffs (author changes), boundary
  draws and span-cap redraws.
- **Evaluation schedule** (§4.3): ``HandoffParams(alternate=True, span_cap=None,
  senior_first=...)`` with the ids of :func:`step_boundary_ids` (tokens whose text contains a
  blank line, "\\n\\n") hands over to the other model after every such token, no coin, with
  the senior or the junior starting. Same lockstep decoder, same draws.

Deliberate departures / choices (with reasons):

- The paper's span-cap value is illegible in our copy (A.1.2, Table 4): default 8, set by
  ``span_cap``. The span counter resets at every draw (whether or not the author changes):
  A.1.2 counts "since the last handoff" and a draw is the handoff opportunity.
- Because boundaries are recognised after emission (see above), the word-initial token is
  written by the outgoing author and the redrawn author continues from the next token; for a
  word split into several pieces the change falls after its first piece. This is the reading
  of A.1.2's emitted-response state; sampling the incoming model's token conditioned on being
  word-initial would need a second, restricted sampler and break the p=1/p=0 identities.
- Draws use their own seeded CPU generator per rollout rather than vLLM's per-request
  generator; the sampler is inverse-CDF (one uniform per token) so that solo and tandem runs
  can share draws exactly. ``min_p`` and repetition penalties are not supported (refused).

Not guaranteed: speed. This is the "naive" HF dual-decoder of A.1 (a Python loop, dynamic
caches); it is exact and batched, but far from the paper's vLLM backend (see bench/tandem.py).
Rows that end early keep being fed a pad token (masked out) until the whole batch ends.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

# Word-initial markers of the tokenizer families we can resolve (A.1.2), and a probe phrase
# whose later words must each start with the marker.
WORD_MARKERS = {"Ġ": "byte-level BPE", "▁": "SentencePiece"}
_PROBE = "the cat sat on the mat"
DEFAULT_SENIOR_PROB = 0.5   # §3.3: a fair coin
DEFAULT_SPAN_CAP = 8        # A.1.2: value illegible in our copy; configurable
SENIOR, JUNIOR = 1, 0       # authorship stream values


class TandemError(ValueError):
    """Bad tandem input (parameters, tokenizer, models); the message says what to change."""


@dataclass(frozen=True)
class HandoffParams:
    """A handoff schedule: by default the word-level coin schedule of §3.3 / A.1.2.

    ``alternate=True`` is the evaluation schedule of §4.3: at every boundary token (there, the
    ids of :func:`step_boundary_ids`) the author switches to the other model, no coin, and
    ``span_cap=None`` turns the cap off. ``senior_first`` fixes the first author (None: the
    coin draws it).
    """

    senior_prob: float = DEFAULT_SENIOR_PROB
    span_cap: int | None = DEFAULT_SPAN_CAP
    alternate: bool = False
    senior_first: bool | None = None

    def __post_init__(self):
        if not (isinstance(self.senior_prob, int | float) and 0.0 <= self.senior_prob <= 1.0):
            raise TandemError(f"senior_prob must be a probability in [0, 1], got "
                              f"{self.senior_prob!r}")
        if self.span_cap is not None and (isinstance(self.span_cap, bool)
                                          or not isinstance(self.span_cap, int)
                                          or self.span_cap < 1):
            raise TandemError(f"span_cap must be a whole number >= 1 (tokens between forced "
                              f"redraws) or null (no cap), got {self.span_cap!r}")
        if self.senior_first not in (None, True, False):
            raise TandemError(f"senior_first must be true, false or null (coin), got "
                              f"{self.senior_first!r}")


@dataclass(frozen=True)
class TandemSettings:
    """A recipe's ``tandem:`` mapping: the handoff schedule and the junior; the typed
    ``tandem`` field of ``training.tandem_config.TandemGRPOConfig``. Every field's ``help`` is
    what ``--print-config`` shows beside it.

    ``junior`` is a model folder, hub id or ``embedded``; empty (the default) means the senior's
    own starting checkpoint, frozen (§3.2 self-pairing).
    """

    senior_prob: float = field(default=DEFAULT_SENIOR_PROB, metadata={"help": (
        "Chance that the senior writes the next word at each handoff draw (§3.3: a fair "
        "coin, 0.5).")})
    span_cap: int | None = field(default=DEFAULT_SPAN_CAP, metadata={"help": (
        "Most consecutive non-boundary tokens one author writes before a forced redraw "
        "(App. A.1.2; the paper's value is illegible in our copy: 8); null: no cap.")})
    junior: str = field(default="", metadata={"help": (
        "The frozen junior: a model folder, hub id or 'embedded'; empty: the senior's own "
        "starting checkpoint (§3.2 self-pairing).")})

    def __post_init__(self):
        HandoffParams(self.senior_prob, self.span_cap)   # same checks, same messages
        if not isinstance(self.junior, str):
            raise TandemError(f"junior must be a model path, hub id or 'embedded' (empty: the "
                              f"starting checkpoint), got {self.junior!r}")

    @classmethod
    def from_mapping(cls, mapping) -> TandemSettings:
        if not isinstance(mapping, dict):
            raise TandemError(f"tandem settings must be a mapping such as {{senior_prob: 0.5, "
                              f"span_cap: 8}}, got {mapping!r}")
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(mapping) - known)
        if unknown:
            raise TandemError(f"unknown tandem settings {unknown}; known: {sorted(known)}")
        return cls(**mapping)

    @property
    def handoff(self) -> HandoffParams:
        return HandoffParams(self.senior_prob, self.span_cap)


@dataclass(frozen=True)
class SamplingParams:
    """Per-token sampling: temperature (0 = greedy), top-k (0 = off), top-p (1 = off)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise TandemError(f"temperature must be >= 0 (0 = greedy), got {self.temperature!r}")
        if self.top_k is None or self.top_k < 0:
            raise TandemError(f"top_k must be >= 0 (0 = no top-k filter), got {self.top_k!r}")
        if not (0.0 < self.top_p <= 1.0):
            raise TandemError(f"top_p must be in (0, 1] (1 = no nucleus filter), got "
                              f"{self.top_p!r}")


@dataclass(frozen=True)
class RolloutStats:
    """One rollout's authorship figures (stored with the rollout, logged per step)."""

    seed: int
    tokens: int
    senior_tokens: int
    handoffs: int          # author changes between consecutive response tokens
    boundary_draws: int    # redraws triggered by a word-initial token
    cap_redraws: int       # redraws forced by the span cap

    @property
    def senior_share(self) -> float:
        return self.senior_tokens / self.tokens if self.tokens else 0.0


@dataclass
class TandemRollouts:
    """Completions (EOS included when emitted, no padding), authorship and stats, per row."""

    completion_ids: list[list[int]]
    authorship: list[list[int]]   # SENIOR (1) / JUNIOR (0) per completion token
    stats: list[RolloutStats]
    # With keep_logits: per model, the (B, T, V) float32 logits each token was sampled from
    # (senior first, then junior when present); rows past their end hold the pad step's logits.
    logits: tuple[torch.Tensor, ...] | None = field(default=None, repr=False)


# ---------------------------------------------------------------------------------------------
# boundary set (A.1.2)


def word_marker(tokenizer) -> str:
    """The word-initial marker of ``tokenizer`` (a key of :data:`WORD_MARKERS`)."""
    ids = tokenizer.encode(_PROBE, add_special_tokens=False)
    pieces = tokenizer.convert_ids_to_tokens(ids)
    later = [p for p in pieces[1:] if isinstance(p, str)]
    for marker in WORD_MARKERS:
        if later and all(p.startswith(marker) for p in later):
            return marker
    raise TandemError(f"cannot resolve the word-initial marker of {type(tokenizer).__name__}: "
                      f"{_PROBE!r} tokenizes as {pieces}, and not every later word starts with "
                      f"one of {list(WORD_MARKERS)}; pass boundary ids explicitly")


def boundary_ids(tokenizer) -> frozenset[int]:
    """Vocabulary ids whose surface form begins with the tokenizer's word-initial marker."""
    marker = word_marker(tokenizer)
    return frozenset(i for piece, i in tokenizer.get_vocab().items() if piece.startswith(marker))


def step_boundary_ids(tokenizer, marker: str = "\n\n") -> frozenset[int]:
    """Ids whose decoded text contains ``marker``: the reasoning-step boundaries of §4.3."""
    found = frozenset(i for i in range(len(tokenizer)) if marker in tokenizer.decode([i]))
    if not found:
        raise TandemError(f"no token of {type(tokenizer).__name__} decodes to text containing "
                          f"{marker!r}; pick another step marker")
    return found


def boundary_mask(ids: frozenset[int] | Sequence[int], vocab_size: int,
                  device: torch.device | str = "cpu") -> torch.Tensor:
    """A (vocab_size,) bool tensor, True at the given ids."""
    ids = sorted(ids)
    if ids and (ids[0] < 0 or ids[-1] >= vocab_size):
        raise TandemError(f"boundary ids must lie in [0, {vocab_size}) (the models' vocabulary); "
                          f"got ids from {ids[0]} to {ids[-1]}: wrong tokenizer for these models?")
    mask = torch.zeros(vocab_size, dtype=torch.bool, device=device)
    mask[torch.tensor(ids, dtype=torch.long, device=device)] = True
    return mask


# ---------------------------------------------------------------------------------------------
# sampling


def rollout_draws(seed: int, steps: int) -> torch.Tensor:
    """(2, steps) uniforms of one rollout: row 0 picks tokens, row 1 is the handoff coin."""
    return torch.rand(2, steps, generator=torch.Generator().manual_seed(int(seed)))


def sample_tokens(logits: torch.Tensor, draws: torch.Tensor, params: SamplingParams
                  ) -> torch.Tensor:
    """Inverse-CDF sample one token per row of ``logits`` (B, V) with ``draws`` (B,) uniforms."""
    logits = logits.float()
    if params.temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / params.temperature, dim=-1)
    if params.top_k and params.top_k < probs.size(-1):
        kth = probs.topk(params.top_k, dim=-1).values[:, -1:]
        probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
    if params.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        before = sorted_p.cumsum(-1) - sorted_p   # mass strictly above each token
        keep_sorted = before < params.top_p * sorted_p.sum(-1, keepdim=True)
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = torch.where(keep, probs, torch.zeros_like(probs))
    cdf = probs.double().cumsum(dim=-1)
    target = draws.to(cdf.device, torch.float64).unsqueeze(-1) * cdf[:, -1:]
    picked = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return picked.clamp(max=probs.size(-1) - 1)


# ---------------------------------------------------------------------------------------------
# lockstep decoding


def _forward(model, ids, attention, positions, cache) -> torch.Tensor:
    """Next-token logits (float32, on ``ids``' device); the model may sit on another device
    (App. A.1.1 puts senior and junior on separate GPUs), its cache stays there."""
    dev = next(model.parameters()).device
    out = model(input_ids=ids.to(dev), attention_mask=attention.to(dev),
                position_ids=positions.to(dev), past_key_values=cache, use_cache=True,
                logits_to_keep=1)
    return out.logits[:, -1, :].float().to(ids.device)


def cache_bytes(cache) -> int:
    """Bytes held by the key/value tensors of a transformers cache."""
    total = 0
    for layer in getattr(cache, "layers", ()):
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor):
                total += tensor.numel() * tensor.element_size()
    return total


def _check_models(models: Sequence, boundary: torch.Tensor) -> int:
    sizes = {int(m.get_output_embeddings().weight.shape[0]) for m in models}
    if len(sizes) != 1:
        raise TandemError(f"senior and junior must share a tokenizer and vocabulary; their output "
                          f"sizes differ: {sorted(sizes)}")
    size = sizes.pop()
    if boundary.shape != (size,):
        raise TandemError(f"the boundary mask has shape {tuple(boundary.shape)} but the models' "
                          f"vocabulary has {size} entries; build it with boundary_mask(ids, "
                          f"{size})")
    return size


@torch.no_grad()
def decode(models: Sequence, prompt_ids: Sequence[Sequence[int]], *, seeds: Sequence[int],
           boundary: torch.Tensor, max_new_tokens: int, eos_token_ids: Sequence[int],
           pad_token_id: int, handoff: HandoffParams = HandoffParams(),
           sampling: SamplingParams = SamplingParams(), keep_logits: bool = False,
           caches: list | None = None) -> TandemRollouts:
    """Batched lockstep decoding with ``models = (senior, junior)``, or ``(model,)`` for solo.

    A solo run samples every token from its one model (all authorship ``SENIOR``) with the same
    draws a tandem run would use, and costs one forward per token. ``caches``, when given a
    list, receives the models' caches (for measuring their memory).
    """
    if len(models) not in (1, 2):
        raise TandemError(f"decode takes (senior, junior) or (model,), got {len(models)} models")
    if len(prompt_ids) != len(seeds):
        raise TandemError(f"one seed per rollout: {len(prompt_ids)} prompts, {len(seeds)} seeds")
    if not prompt_ids or any(len(p) == 0 for p in prompt_ids):
        raise TandemError("every rollout needs a non-empty prompt (token ids)")
    if max_new_tokens < 1:
        raise TandemError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    _check_models(models, boundary)
    device = next(models[0].parameters()).device
    boundary = boundary.to(device)
    batch, width = len(prompt_ids), max(len(p) for p in prompt_ids)
    ids = torch.full((batch, width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((batch, width), dtype=torch.long)
    for row, prompt in enumerate(prompt_ids):   # left padding: every row ends at column width-1
        ids[row, width - len(prompt):] = torch.tensor(list(prompt), dtype=torch.long)
        attention[row, width - len(prompt):] = 1
    ids, attention = ids.to(device), attention.to(device)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    draws = torch.stack([rollout_draws(s, max_new_tokens) for s in seeds]).to(device)  # B,2,T
    eos = torch.tensor(sorted(set(eos_token_ids)), dtype=torch.long, device=device)

    from transformers import DynamicCache

    model_caches = [DynamicCache() for _ in models]
    if caches is not None:
        caches.extend(model_caches)
    logits = [_forward(m, ids, attention, positions, c) for m, c in zip(models, model_caches)]
    next_pos = positions[:, -1] + 1
    tandem = len(models) == 2
    if tandem and handoff.senior_first is None:
        senior = draws[:, 1, 0] < handoff.senior_prob
    else:
        senior = torch.full((batch,), handoff.senior_first is not False or not tandem,
                            dtype=torch.bool, device=device)
    since = torch.zeros(batch, dtype=torch.long, device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    redraw = torch.zeros(batch, dtype=torch.bool, device=device)
    by_cap = torch.zeros(batch, dtype=torch.bool, device=device)
    n_boundary = torch.zeros(batch, dtype=torch.long, device=device)
    n_cap = torch.zeros(batch, dtype=torch.long, device=device)
    tokens, authors, alive_steps, kept = [], [], [], [[] for _ in models]
    for step in range(max_new_tokens):
        if tandem and step > 0:   # A.1.2: redraw from the state left by the last emitted token
            coin = ~senior if handoff.alternate else draws[:, 1, step] < handoff.senior_prob
            senior = torch.where(redraw, coin, senior)
            n_cap += redraw & by_cap
            n_boundary += redraw & ~by_cap
        mixed = torch.where(senior.unsqueeze(-1), logits[0], logits[-1]) if tandem else logits[0]
        token = sample_tokens(mixed, draws[:, 0, step], sampling)
        alive = ~done
        token = torch.where(alive, token, torch.full_like(token, pad_token_id))
        tokens.append(token)
        authors.append(senior.clone())
        alive_steps.append(alive)
        if keep_logits:
            for store, lg in zip(kept, logits):
                store.append(lg.cpu())
        # handoff state after emitting `token` (A.1.2): boundary token or span cap -> redraw
        is_boundary = boundary[token]
        since = torch.where(is_boundary, torch.zeros_like(since), since + 1)
        by_cap = ~is_boundary & (since >= (handoff.span_cap or max_new_tokens + 1))
        since = torch.where(by_cap, torch.zeros_like(since), since)
        done = done | torch.isin(token, eos)
        redraw = (is_boundary | by_cap) & ~done   # a finished row draws no more
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        attention = torch.cat([attention, alive.long().unsqueeze(-1)], dim=-1)
        step_ids, step_pos = token.unsqueeze(-1), next_pos.unsqueeze(-1)
        logits = [_forward(m, step_ids, attention, step_pos, c)
                  for m, c in zip(models, model_caches)]
        next_pos = next_pos + 1

    token_mat = torch.stack(tokens, dim=1).cpu()
    author_mat = torch.stack(authors, dim=1).cpu()
    alive_mat = torch.stack(alive_steps, dim=1).cpu()
    n_boundary, n_cap = n_boundary.cpu(), n_cap.cpu()
    completions, authorship, stats = [], [], []
    for row in range(batch):
        length = int(alive_mat[row].sum())
        row_tokens = token_mat[row, :length].tolist()
        row_authors = [SENIOR if a else JUNIOR for a in author_mat[row, :length].tolist()]
        completions.append(row_tokens)
        authorship.append(row_authors)
        stats.append(RolloutStats(
            seed=int(seeds[row]), tokens=length, senior_tokens=sum(row_authors),
            handoffs=sum(1 for a, b in itertools.pairwise(row_authors) if a != b),
            boundary_draws=int(n_boundary[row]), cap_redraws=int(n_cap[row])))
    stacked = tuple(torch.stack(store, dim=1) for store in kept) if keep_logits else None
    return TandemRollouts(completions, authorship, stats, stacked)


def tandem_generate(senior, junior, prompt_ids: Sequence[Sequence[int]], **kwargs
                    ) -> TandemRollouts:
    """A batch of tandem rollouts (§3.3): see :func:`decode` for the arguments."""
    return decode((senior, junior), prompt_ids, **kwargs)


def solo_generate(model, prompt_ids: Sequence[Sequence[int]], **kwargs) -> TandemRollouts:
    """The solo rollouts a tandem run is compared with (same sampler, same draws)."""
    kwargs.pop("handoff", None)
    return decode((model,), prompt_ids, **kwargs)


def summarize(stats: Sequence[RolloutStats]) -> dict[str, float]:
    """Per-step metrics over a batch: mean senior share, handoffs and span-cap redraws."""
    n = max(1, len(stats))
    return {
        "tandem/senior_share": sum(s.senior_share for s in stats) / n,
        "tandem/handoffs_per_rollout": sum(s.handoffs for s in stats) / n,
        "tandem/span_cap_redraws_per_rollout": sum(s.cap_redraws for s in stats) / n,
        "tandem/boundary_draws_per_rollout": sum(s.boundary_draws for s in stats) / n,
    }
