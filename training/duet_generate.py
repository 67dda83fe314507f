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

Also here, for both generation engines (the vLLM processor is ``training.duet_vllm``):
:func:`gate_request_args` (the gate's settings for one vLLM request, in
``SamplingParams.extra_args``), :func:`prefix_coin` (a coin derived from a seeded hash of the
rollout's prefix when no pre-drawn coin travels with the request) and :func:`replay_gate`,
which re-runs the gate over a finished rollout's tokens and so recovers its outcome (aborted,
eps-kept, the stop step) wherever the processor ran, e.g. inside vLLM's engine process.

Not guaranteed: the DUET trainer generates with transformers (vLLM rollouts are refused by
the DUET trainer until TRL's vLLM path passes the processor and the request arguments). The
forced EOS token was not sampled from the policy: the DUET trainer masks it out of the loss
(see ``training.duet_trainer``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import torch
from transformers import LogitsProcessor

from training.duet import GateParams, RolloutGate, answer_marker

GATE_ARGS_KEY = "duet_gate"  # SamplingParams.extra_args key read by the vLLM processor
VLLM_PROCESSOR = "training.duet_vllm:DuetAbortLogitsProcessor"  # vLLM's FQCN syntax


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


# ---------------------------------------------------------------------------------------------
# Shared by both engines: request arguments, the prefix coin, the replay


def prefix_coin(seed: int, step: int, token_ids: Sequence[int]) -> float:
    """A uniform in [0, 1) from a keyed hash of ``(seed, step, token_ids)``: the eps-keep coin
    of a rollout whose request carries no pre-drawn coin (vLLM requests with ``n > 1`` share
    one ``SamplingParams``). Drawn at ``K2 + G`` from the prefix so far, so a replay of the
    finished rollout draws the same number. Departure: the paper draws an independent coin;
    a seeded hash of the prefix acts as one except for rollouts with identical prefixes."""
    text = f"{int(seed)}:{int(step)}:" + ",".join(str(int(t)) for t in token_ids)
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def gate_request_args(params: GateParams, answer_format: str, *, eos_token_id: int,
                      coin: float | None = None, seed: int = 0, step: int = 0,
                      as_json: bool = False) -> dict[str, Any]:
    """``SamplingParams(extra_args=...)`` for one vLLM request (or one ``n > 1`` group) under
    :class:`training.duet_vllm.DuetAbortLogitsProcessor`: the gate parameters, the answer
    format whose marker is polled, the EOS id to force, and either a pre-drawn ``coin`` or the
    ``seed``/``step`` of :func:`prefix_coin`. ``as_json``: the settings as one JSON string
    (for the OpenAI server's flat ``vllm_xargs``)."""
    answer_marker(answer_format)  # unknown formats fail here, not inside the engine
    if coin is not None and not 0 <= coin < 1:
        raise ValueError(f"coin must be in [0, 1), got {coin!r}")
    spec = {**asdict(params), "answer_format": answer_format, "eos_token_id": int(eos_token_id),
            "coin": coin, "seed": int(seed), "step": int(step)}
    return {GATE_ARGS_KEY: json.dumps(spec) if as_json else spec}


def gate_from_request_args(spec: dict[str, Any] | str,
                           marker: Callable[[str], bool] | None = None,
                           prefix: Callable[[], Sequence[int]] | None = None) -> RolloutGate:
    """The :class:`RolloutGate` a request's ``extra_args[GATE_ARGS_KEY]`` describes (a mapping,
    or the same as a JSON string: vLLM's OpenAI server passes only flat ``vllm_xargs``).
    Without a pre-drawn coin, ``prefix()`` gives the rollout's tokens when the coin is drawn."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except ValueError as exc:
            raise ValueError(f"{GATE_ARGS_KEY} is not valid JSON: {exc}") from exc
    if not isinstance(spec, dict):
        raise TypeError(f"{GATE_ARGS_KEY} must be a mapping (or its JSON), got {spec!r}")
    names = {"k1", "k2", "grace", "poll_every", "eps_abort", "tail_tokens"}
    missing = names - set(spec)
    if missing:
        raise ValueError(f"{GATE_ARGS_KEY} request arguments lack {sorted(missing)}; build them "
                         "with training.duet_generate.gate_request_args")
    params = GateParams(**{k: spec[k] for k in names})
    marker = marker or answer_marker(spec["answer_format"])
    if spec.get("coin") is not None:
        return RolloutGate(params, marker, float(spec["coin"]))
    if prefix is None:
        raise ValueError("a request without a pre-drawn coin needs its token prefix")
    seed, step = int(spec.get("seed", 0)), int(spec.get("step", 0))
    return RolloutGate(params, marker, lambda t: prefix_coin(seed, step, list(prefix())[:t]))


def replay_gate(gate: RolloutGate, completion_ids: Sequence[int], eos_token_ids: Sequence[int],
                decode: Callable[[list[int]], str]) -> RolloutGate:
    """Drive a fresh ``gate`` over a finished rollout exactly as the processors did (a check
    with ``t`` tokens before token ``t + 1``; none after an EOS or at the length cap) and
    return it holding the outcome: ``aborted``, ``coin_drawn``, ``p_abort``, ``tau`` and
    ``stopped_at``. The processors' outcome is a function of the tokens, the parameters and
    the coin only, so the replay agrees with them."""
    ids = [int(i) for i in completion_ids]
    eos = {int(e) for e in eos_token_ids}
    for t in range(1, len(ids)):
        if ids[t - 1] in eos:
            break

        def tail(n: int, t: int = t) -> str:
            return decode(ids[max(0, t - n):t])

        if gate.check(t, tail):
            break
    return gate


def vllm_logits_processors(config: Any) -> list[str]:
    """What a GRPO recipe needs vLLM to load, as vLLM's fully qualified class names
    (``vllm.LLM(logits_processors=...)`` or ``vllm serve --logits-processors ...``): DUET's
    abort processor when the recipe has a ``duet`` mapping with the abort rule on, else none.
    Each rollout request then carries :func:`gate_request_args` in ``extra_args``."""
    duet = getattr(config, "duet", None)
    if not duet or duet.get("abort", True) is False:
        return []
    return [VLLM_PROCESSOR]
