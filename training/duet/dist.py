"""DUET across data-parallel processes: one allocation over the whole generation batch.

The allocation of Eq. 4 (DUET paper, §3.1, Algorithm 1 lines
2-10) is over all of a step's prompts with one dual ``lam*`` closing one token budget ``B``.
Under data parallelism each process holds only a share of the generation batch (TRL's sampler
repeats each prompt ``num_generations`` times in consecutive rows, and the process with index
``r`` takes rows ``r*n .. (r+1)*n - 1`` of the global batch, so a prompt's slots may straddle
two processes). This module makes the controller global:

- :func:`global_plan`: every process contributes ``(key, s_hat, L_hat)`` for each of its rows;
  the gathered list (global row order) is grouped by prompt, checked, allocated once by
  :func:`training.duet.neyman_allocation` on the main process and broadcast, so every process
  holds the same ``lam*``, ``n_q`` vector and per-row ``allocated`` flags, and knows which
  global rows are its own (``offset``).
- :func:`gather_rows`: per-row values of the local rows (rollout outcomes, kept lengths, the
  loss pass's ``sum log pi``), gathered into one global list, so Phase 4 (lines 45-56) updates
  the same per-prompt state and K1/K2 window on every process, and the main process's
  ``duet_state.json`` resumes all of them.

:class:`Collective` is the interface: :class:`TorchGroup` wraps ``torch.distributed`` (any
backend: gloo on CPU, NCCL on GPUs; a single process when no group is initialised); tests may
pass their own.

Guaranteed: all processes return equal plans (the main process's, broadcast); the plan equals
the single-process allocation of the gathered list (same inputs, same function); a mismatch
between processes' estimates for the same prompt (a controller state that diverged) is an error,
not silently averaged. Not guaranteed: anything when processes call these functions in a
different order (they are collectives: every process must call each one, in the same order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from training.duet import core as duet
from training.duet.core import DuetSettings


class Collective(Protocol):
    """A process group: ``rank`` of ``world``; ``all_gather(obj)`` returns every process's
    ``obj`` in rank order; ``broadcast(obj)`` returns the main process's ``obj`` everywhere."""

    rank: int
    world: int

    def all_gather(self, obj: Any) -> list[Any]: ...

    def broadcast(self, obj: Any) -> Any: ...


@dataclass(frozen=True)
class TorchGroup:
    """:class:`Collective` over ``torch.distributed``'s default group (object collectives)."""

    rank: int = 0
    world: int = 1

    @classmethod
    def current(cls) -> TorchGroup:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return cls(dist.get_rank(), dist.get_world_size())
        return cls()

    def all_gather(self, obj: Any) -> list[Any]:
        if self.world == 1:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: Any) -> Any:
        if self.world == 1:
            return obj
        import torch.distributed as dist

        box = [obj if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]


def gather_rows(group: Collective, local: Sequence[Any]) -> list[Any]:
    """The local rows' values from every process, concatenated in global row order."""
    return [x for part in group.all_gather(list(local)) for x in part]


def _group_prompts(rows: list[tuple[str, float, float]], slots: int):
    """Global rows ``(key, s_hat, L_hat)`` -> per-prompt keys, s_hat, L_hat (checked)."""
    if len(rows) % slots:
        raise ValueError(f"DUET expects the generation batch ({len(rows)} rows over all "
                         f"processes) to be a multiple of num_generations={slots}")
    keys, s_hat, l_hat = [], [], []
    for g in range(len(rows) // slots):
        group = rows[g * slots:(g + 1) * slots]
        key, s, lh = group[0]
        if any(k != key for k, _, _ in group):
            raise ValueError(f"DUET expects each prompt's {slots} slots (num_generations) to be "
                             "consecutive rows of the generation batch, as TRL's sampler gives "
                             "them; this batch is not grouped that way")
        if any(abs(s2 - s) > 1e-12 * max(1.0, s) or abs(l2 - lh) > 1e-9 * max(1.0, lh)
               for _, s2, l2 in group):
            raise RuntimeError(f"processes disagree on the DUET estimates of prompt {key} "
                               "(s_hat, L_hat): their controller states diverged")
        keys.append(key)
        s_hat.append(float(s))
        l_hat.append(float(lh))
    return keys, s_hat, l_hat


def allocate(keys: list[str], s_hat: list[float], l_hat: list[float], slots: int,
             settings: DuetSettings, lam0: float | None) -> dict[str, Any]:
    """Phase 1 on the global prompt list: budget ``B = b * full_rollouts * sum_q L_hat_q``,
    ``n_q`` and ``lam*`` of Eq. 4 (or uniform ``b * full`` with ``allocate: false``),
    ``s_pre`` (Algorithm 1 line 9), and ``planned = sum_q n_q L_hat_q``, the step's expected
    token count under the allocation (at most ``budget`` plus one rollout, see
    :func:`training.duet.neyman_allocation`). ``L_hat_q`` is the expected generated length of
    one rollout of ``q`` under the current abort rule (see :func:`training.duet.observe_step`),
    so ``B`` is the expected token cost of ``b x full_rollouts`` rollouts per prompt."""
    b = settings
    budget = b.budget_fraction * b.full_rollouts * float(sum(l_hat))
    if b.allocate:
        alloc = duet.neyman_allocation(s_hat, l_hat, budget, n_min=b.n_min, lam0=lam0,
                                       steps=b.bisection_steps, n_max=slots)
        counts, lam = alloc.counts, alloc.lam
    else:
        uniform = int(min(slots, max(b.n_min, round(b.budget_fraction * b.full_rollouts))))
        counts, lam = [uniform] * len(keys), lam0 or 0.0
    planned = float(sum(n * lh for n, lh in zip(counts, l_hat, strict=True)))
    return {"keys": keys, "s_hat": s_hat, "l_hat": l_hat, "counts": counts, "lam": lam,
            "budget": budget, "planned": planned, "s_pre": duet.stratification_factors(counts, b.eps_pre),
            "allocated": [i % slots < counts[i // slots] for i in range(len(keys) * slots)]}


def global_plan(group: Collective, local_rows: Sequence[tuple[str, float, float]], slots: int,
                settings: DuetSettings, lam0: float | None) -> dict[str, Any]:
    """The step's allocation over all processes' rows (see the module docstring).

    ``local_rows``: ``(prompt key, s_hat, L_hat)`` for each row this process holds, in order.
    Returns the plan of :func:`allocate` over the global batch plus ``offset`` (this process's
    first global row), ``local_rows`` (how many it holds) and ``world``.
    """
    parts = group.all_gather([(str(k), float(s), float(lh)) for k, s, lh in local_rows])
    sizes = [len(p) for p in parts]
    if len(set(sizes)) != 1:
        raise ValueError(f"processes hold different numbers of rows {sizes}; TRL gives each "
                         "the same share of the generation batch")
    # Every process checks the grouping (so all raise together); the main one allocates.
    grouped = _group_prompts([r for p in parts for r in p], slots)
    plan = allocate(*grouped, slots, settings, lam0) if group.rank == 0 else None
    plan = dict(group.broadcast(plan))
    plan.update(offset=group.rank * sizes[0], local_rows=sizes[0], world=group.world)
    return plan
