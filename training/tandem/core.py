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
- **Handoff schedule** (§3.3, A.1.2): the author of every word-initial token is drawn for that
  token (senior with probability ``senior_prob``); a token that does not begin a word is
  written by the author of the token before it. So a word is never split between authors: an
  author change falls only on a word-initial token (or where the span cap forces a draw).
  Which token comes next decides whether a word begins, so each step goes: the current author
  samples a candidate; if it is not word-initial it is emitted; if it is, the coin of that
  position picks the word's author, and an author other than the current one writes the token
  from its own distribution restricted to word-initial tokens (the same temperature/top-k/top-p
  applied to that restriction), i.e. the incoming model starts the new word. The first token's
  author is the coin's. The span cap (A.1.2 backstop): after ``span_cap`` consecutive
  non-boundary tokens since the last draw, the next token's author is drawn by its coin and
  samples from its full distribution. Every draw resets the span counter.
- **Step schedule** (``unit="step"``, §4.3 / App. B.3): the boundary ids are step-ending tokens
  (:func:`step_boundary_ids`, tokens holding a blank line); the author that writes a step also
  writes its closing token, and the draw (or, with ``alternate``, the switch) applies to the
  token after it: "each producing one reasoning step before yielding control".
- **Seeded draws, exactly reproducible.** Rollout ``b`` with seed ``s`` uses
  ``draws = torch.rand(3, max_new_tokens, generator=torch.Generator().manual_seed(s))``:
  ``draws[0, t]`` is the uniform that picks token ``t`` from the current (or, at a span-cap
  draw, the drawn) author, ``draws[1, t]`` the coin of a draw taken for token ``t`` (senior iff
  ``draws[1, t] < senior_prob``) and ``draws[2, t]`` the uniform of the incoming author's
  word-initial token. A token is picked by inverse-CDF sampling: the first vocabulary id (in id
  order) whose cumulative probability exceeds the uniform times the total mass, under the
  author's temperature/top-k/top-p distribution. When the coin keeps the current author, its
  candidate stands, so with ``senior_prob = 1`` a rollout is token for token the solo senior
  rollout with the same seed, and with ``0`` the solo junior's. Same seed, same models and same
  length: same tokens and same authorship, whatever else is in the batch. Per-step rollout
  seeds of a training run come from :func:`rollout_seeds`.
- **Lockstep** (A.1.1): both caches hold exactly the shared prompt + response; each generated
  token costs one forward of each model (the prompt one batched prefill each).
- Stats per rollout: tokens, senior tokens and share, handoffs (author changes), boundary
  draws and span-cap redraws.
- **Evaluation schedule** (§4.3): ``HandoffParams(unit="step", alternate=True, span_cap=None,
  senior_first=...)`` with the ids of :func:`step_boundary_ids` hands over to the other model
  after every step-ending token, no coin, with the senior or the junior starting. Same lockstep
  decoder, same draws.

Deliberate departures / choices (with reasons):

- The paper's span-cap value is illegible in our copy (A.1.2, Table 4): default 8, set by
  ``span_cap``. The span counter resets at every draw (whether or not the author changes):
  A.1.2 counts "since the last handoff" and a draw is the handoff opportunity.
- The incoming author's word-initial token is sampled from its distribution restricted to
  word-initial tokens: the current author's candidate decides that a word ends (the rule of
  §3.3 needs the word-initial status of a token before its author is known, and the outgoing
  author is the one finishing its word). Should the incoming model give no probability to any
  word-initial token (only possible with top-k/top-p cut-offs or -inf logits), the current
  author's candidate stands and the author does not change.
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
HANDOFF_UNITS = ("word", "step")
# rollout_seeds: the sizes of the call, process and row fields of a rollout seed
SEED_CALLS, SEED_PROCESSES, SEED_ROWS = 64, 256, 65_536


class TandemError(ValueError):
    """Bad tandem input (parameters, tokenizer, models); the message says what to change."""


@dataclass(frozen=True)
class HandoffParams:
    """A handoff schedule: by default the word-level coin schedule of §3.3 / A.1.2.

    ``unit`` says what the boundary ids mark: ``"word"`` (word-initial tokens; the author of
    each such token is drawn for that token, §3.3) or ``"step"`` (step-ending tokens, the ids
    of :func:`step_boundary_ids`; the draw applies to the token after one, §4.3 / App. B.3).
    ``alternate=True`` switches to the other model at each boundary instead of drawing (the
    strict round-robin of §4.3), and ``span_cap=None`` turns the cap off. ``senior_first``
    fixes the first author (None: the coin draws it).
    """

    senior_prob: float = DEFAULT_SENIOR_PROB
    span_cap: int | None = DEFAULT_SPAN_CAP
    alternate: bool = False
    senior_first: bool | None = None
    unit: str = "word"

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
        if self.unit not in HANDOFF_UNITS:
            raise TandemError(f"unit must be one of {HANDOFF_UNITS} (word: boundary ids are "
                              f"word-initial tokens; step: step-ending tokens), got "
                              f"{self.unit!r}")


@dataclass(frozen=True)
class TandemSettings:
    """A recipe's ``tandem:`` mapping: the handoff schedule and the junior; the typed
    ``tandem`` field of ``training.tandem.config.TandemGRPOConfig``. Every field's ``help`` is
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
    # With keep_logits: per model, the (B, T, V) logits each model gave for position t (senior
    # first, then junior when present), float32 (float64 for float64 models); rows past their
    # end hold the pad step's logits.
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
    """(3, steps) uniforms of one rollout: row 0 picks tokens, row 1 is the handoff coin, row 2
    picks an incoming author's word-initial token (see the module docstring)."""
    return torch.rand(3, steps, generator=torch.Generator().manual_seed(int(seed)))


def rollout_seeds(seed: int, step: int, call: int, process: int, n: int) -> list[int]:
    """The ``n`` rollout seeds of one generation call of a training run.

    ``seed`` is the run's seed, ``step`` the optimizer step, ``call`` the number of earlier
    generation calls at that step, ``process`` the data-parallel rank. The seed is
    ``(((seed * 1_000_003 + step) * 64 + call) * 256 + process) * 65_536 + row``: call, process
    and row each have their own field (sizes refused beyond it), so within a run (fewer than
    1,000,003 steps) two calls that differ in step, call or process, or two rows of one call,
    never share a seed and so never share their draws: every training step gets fresh rollouts,
    reproducible from the run's seed.
    """
    for name, value, size in (("call", call, SEED_CALLS), ("process", process, SEED_PROCESSES),
                              ("n", n, SEED_ROWS + 1)):
        if not 0 <= int(value) < size:
            raise TandemError(f"rollout_seeds: {name} must be in [0, {size}), got {value}; "
                              "more would make seeds collide")
    if step < 0:
        raise TandemError(f"rollout_seeds: step must be >= 0, got {step}")
    base = ((int(seed) * 1_000_003 + int(step)) * SEED_CALLS + int(call)) * SEED_PROCESSES
    base = (base + int(process)) * SEED_ROWS
    return [base + row for row in range(int(n))]


class RolloutSeeder:
    """Numbers the generation calls of a training run and gives each its seeds: the calls at
    one optimizer step are numbered 0, 1, ... (a step may generate more than once), and the
    count restarts when the step changes; seeds come from :func:`rollout_seeds`."""

    def __init__(self, seed: int, process: int = 0):
        self.seed, self.process = int(seed), int(process)
        self._step, self._calls = -1, 0

    def seeds(self, step: int, n: int) -> list[int]:
        """The seeds of the next generation call at optimizer step ``step``."""
        self._calls = self._calls + 1 if step == self._step else 0
        self._step = step
        return rollout_seeds(self.seed, step, self._calls, self.process, n)


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
    logits = out.logits[:, -1, :]
    if logits.dtype != torch.float64:
        logits = logits.float()
    return logits.to(ids.device)


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
    word = tandem and handoff.unit == "word"
    cap = handoff.span_cap or max_new_tokens + 1
    none = torch.zeros(batch, dtype=torch.bool, device=device)
    since = torch.zeros(batch, dtype=torch.long, device=device)
    done = none.clone()
    redraw = none.clone()
    by_cap = none.clone()
    n_boundary = torch.zeros(batch, dtype=torch.long, device=device)
    n_cap = torch.zeros(batch, dtype=torch.long, device=device)
    tokens, authors, alive_steps, kept = [], [], [], [[] for _ in models]
    for step in range(max_new_tokens):
        alive = ~done
        coin = none
        if tandem and step > 0:
            coin = ~senior if handoff.alternate else draws[:, 1, step] < handoff.senior_prob
        if not word:
            # step unit (and solo): the state left by the last emitted token decides its author
            if tandem and step > 0:
                senior = torch.where(redraw, coin, senior)
                n_cap += redraw & by_cap
                n_boundary += redraw & ~by_cap
            mixed = (torch.where(senior.unsqueeze(-1), logits[0], logits[-1]) if tandem
                     else logits[0])
            token = sample_tokens(mixed, draws[:, 0, step], sampling)
        else:
            # word unit (§3.3): the author of a word-initial token is drawn for that token
            cap_due = (since >= cap) & alive if step > 0 else none
            senior = torch.where(cap_due, coin, senior)
            current = torch.where(senior.unsqueeze(-1), logits[0], logits[-1])
            token = sample_tokens(current, draws[:, 0, step], sampling)
            starts = boundary[token] & ~cap_due & alive if step > 0 else none
            incoming = starts & (coin != senior)
            if bool(incoming.any()):
                other = torch.where(senior.unsqueeze(-1), logits[-1], logits[0])
                restricted = other.masked_fill(~boundary, -math.inf)
                possible = torch.isfinite(restricted).any(dim=-1)
                restricted = torch.where(possible.unsqueeze(-1), restricted, other)
                first = sample_tokens(restricted, draws[:, 2, step], sampling)
                incoming = incoming & possible
                token = torch.where(incoming, first, token)
                senior = torch.where(incoming, ~senior, senior)
            n_boundary += starts
            n_cap += cap_due
            since = torch.where(cap_due | starts, torch.zeros_like(since), since + 1)
            if step == 0:
                since = torch.zeros_like(since)
        token = torch.where(alive, token, torch.full_like(token, pad_token_id))
        tokens.append(token)
        authors.append(senior.clone())
        alive_steps.append(alive)
        if keep_logits:
            for store, lg in zip(kept, logits):
                store.append(lg.cpu())
        done = done | torch.isin(token, eos)
        if not word:
            # step unit: a step-ending token or a full span -> the next token is drawn
            is_boundary = boundary[token]
            since = torch.where(is_boundary, torch.zeros_like(since), since + 1)
            by_cap = ~is_boundary & (since >= cap)
            since = torch.where(by_cap, torch.zeros_like(since), since)
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
