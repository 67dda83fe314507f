"""DUET's marker-gated abort inside transformers generation: a batched ``LogitsProcessor``.

Implements Algorithm 1 lines 11-33 of the DUET paper (``../shared/papers/duet.txt``, App. A.10;
§3.2, Eq. 5) for ``model.generate``: one :class:`training.duet.RolloutGate` per row of the
batch; before each new token the processor asks every unfinished row's gate whether the rollout
must end now and, for those rows, sets every logit but EOS to ``-inf`` so the next token is EOS
(under any sampling settings: temperature, top-p and top-k keep the only finite logit). The
paper's vLLM engine runs the same rule as a per-request logits processor (its §A.1); this is the
transformers counterpart used by weft's CPU/TRL generation path.

Guaranteed: a row whose gate says "stop" after ``t`` generated tokens gets EOS as token
``t + 1``; rows are independent (each has its own gate, coin and marker state); a row that
already emitted EOS is never touched again; the marker is decoded only at poll steps (every
``poll_every`` tokens from K1), on the row's last ``tail_tokens`` generated tokens.

Not guaranteed: the vLLM path (weft's DUET runs generate with transformers; vLLM rollouts are
refused by the DUET trainer). The forced EOS token was not sampled from the policy: the DUET
trainer masks it out of the loss (see ``training.duet_trainer``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from transformers import LogitsProcessor

from training.duet import GateParams, RolloutGate


class MarkerAbortProcessor(LogitsProcessor):
    """Forces EOS on the rows whose :class:`RolloutGate` says stop (see module docstring).

    ``gates``: one gate per row, in batch order; ``prompt_length``: the padded prompt width
    (``input_ids`` columns before generation starts); ``eos_token_ids``: the ids that end a
    row (the first one is the id forced); ``decode``: token ids -> text for the marker.
    """

    def __init__(self, gates: Sequence[RolloutGate], prompt_length: int,
                 eos_token_ids: int | Sequence[int], decode: Callable[[list[int]], str]):
        eos = [eos_token_ids] if isinstance(eos_token_ids, int) else list(eos_token_ids)
        if not eos:
            raise ValueError("eos_token_ids is empty: the processor needs an EOS id to force")
        self.gates = list(gates)
        self.prompt_length = int(prompt_length)
        self.eos = eos
        self.decode = decode
        self.finished = [False] * len(self.gates)

    @classmethod
    def for_batch(cls, params: GateParams, markers: Sequence[Callable[[str], bool]],
                  coins: Sequence[float], prompt_length: int, eos_token_ids: int | Sequence[int],
                  decode: Callable[[list[int]], str]) -> MarkerAbortProcessor:
        """One gate per row from shared parameters, per-row markers and per-row coin draws."""
        if len(markers) != len(coins):
            raise ValueError(f"need one marker and one coin per row, got {len(markers)} markers "
                             f"and {len(coins)} coins")
        gates = [RolloutGate(params, m, u) for m, u in zip(markers, coins, strict=True)]
        return cls(gates, prompt_length, eos_token_ids, decode)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[0] != len(self.gates):
            raise ValueError(f"batch has {input_ids.shape[0]} rows but the processor has "
                             f"{len(self.gates)} gates (one per generated sequence is needed)")
        t = input_ids.shape[1] - self.prompt_length
        if t <= 0:
            return scores
        eos_set = set(self.eos)
        force: list[int] = []
        for row, gate in enumerate(self.gates):
            if self.finished[row]:
                continue
            if int(input_ids[row, -1]) in eos_set:
                self.finished[row] = True
                continue

            def tail(n: int, row: int = row) -> str:
                return self.decode(input_ids[row, -min(n, t):].tolist())

            if gate.check(t, tail):
                force.append(row)
        if force:
            rows = torch.tensor(force, device=scores.device)
            scores[rows] = float("-inf")
            scores[rows, self.eos[0]] = 0.0
        return scores
