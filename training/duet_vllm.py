"""DUET's marker-gated abort as a vLLM V1 logits processor (``../shared/papers/duet.txt``:
§3.2, Eq. 5, Algorithm 1 lines 11-33; the paper runs it as a per-request processor inside its
vLLM engine, App. A.1).

:class:`DuetAbortLogitsProcessor` follows vLLM 0.32's V1 interface
(``vllm.v1.sample.logits_processor.AdapterLogitsProcessor``): the engine builds it once with
``(vllm_config, device, is_pin_memory)``; each request that carries
``SamplingParams.extra_args["duet_gate"]`` (made by
``training.duet_generate.gate_request_args``) gets its own :class:`training.duet.RolloutGate`,
the same state machine the transformers processor drives; before each token the gate sees the
request's output so far and, when it says stop, every logit but EOS becomes ``-inf``. Requests
without the key are left alone.

Use it with ``vllm.LLM(model, logits_processors=[DuetAbortLogitsProcessor])`` (colocated
rollouts), or ``vllm serve --logits-processors training.duet_vllm:DuetAbortLogitsProcessor``
(server mode); ``training.duet_generate.vllm_logits_processors`` gives that list for a recipe
without importing vLLM. The engine may run
the processor in another process: the trainer recovers each rollout's outcome (aborted,
eps-kept, stop step) with ``training.duet_generate.replay_gate`` over the returned tokens.

Importing this module imports vLLM; nothing else in ``training`` needs it.
Not guaranteed: speculative decoding (vLLM refuses custom logits processors with it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from training.duet import RolloutGate
from training.duet_generate import GATE_ARGS_KEY, gate_from_request_args


class RequestGate:
    """One request's gate as vLLM's per-request callable ``(output_ids, logits) -> logits``.
    ``output_ids`` is the engine's live list of the request's generated tokens."""

    def __init__(self, gate: RolloutGate, eos_token_id: int, decode: Callable[[list[int]], str]):
        self.gate, self.eos, self.decode = gate, int(eos_token_id), decode

    def __call__(self, output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        t = len(output_ids)
        if t == 0 or output_ids[-1] == self.eos:
            return logits

        def tail(n: int) -> str:
            return self.decode(list(output_ids[-min(n, t):]))

        if self.gate.check(t, tail):
            logits = torch.full_like(logits, float("-inf"))
            logits[self.eos] = 0.0
        return logits


class DuetAbortLogitsProcessor(AdapterLogitsProcessor):
    """The abort rule for every request whose ``extra_args`` hold ``duet_gate``.

    ``decode``/``marker`` default to the served model's tokenizer and the request's answer
    format; tests pass their own, and ``record=True`` keeps every gate built in ``gates`` (vLLM
    itself calls the constructor with three arguments, so a served engine keeps none)."""

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool, *,
                 decode: Callable[[list[int]], str] | None = None,
                 marker: Callable[[str], bool] | None = None, record: bool = False):
        super().__init__(vllm_config, device, is_pin_memory)
        if decode is None:
            from transformers import AutoTokenizer

            model = vllm_config.model_config
            tokenizer = AutoTokenizer.from_pretrained(model.tokenizer,
                                                      revision=model.tokenizer_revision)

            def decode(ids: list[int]) -> str:
                return tokenizer.decode(ids, skip_special_tokens=False)

        self.decode, self.marker, self.record = decode, marker, record
        self.gates: list[RolloutGate] = []

    def is_argmax_invariant(self) -> bool:
        return False  # forcing EOS changes the greedy pick

    def new_req_logits_processor(self, params: SamplingParams) -> Callable | None:
        spec = (params.extra_args or {}).get(GATE_ARGS_KEY)
        if spec is None:
            return None
        prefix: list[Sequence[int]] = []
        gate = gate_from_request_args(spec, self.marker, prefix=lambda: prefix[0])
        if self.record:
            self.gates.append(gate)
        eos = (json.loads(spec) if isinstance(spec, str) else spec)["eos_token_id"]
        request = RequestGate(gate, eos, self.decode)

        def call(output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
            if not prefix:
                prefix.append(output_ids)  # the engine's live list: the coin reads it later
            return request(output_ids, logits)

        return call

