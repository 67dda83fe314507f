"""DUET's marker-gated abort as a vLLM V1 logits processor (DUET paper,
§3.2, Eq. 5, Algorithm 1 lines 11-33; the paper runs it as a per-request processor inside its
vLLM engine, App. A.1).

:class:`DuetAbortLogitsProcessor` follows vLLM 0.32's V1 interface
(``vllm.v1.sample.logits_processor.AdapterLogitsProcessor``): the engine builds it once with
``(vllm_config, device, is_pin_memory)``; each request that carries
``SamplingParams.extra_args["duet_gate"]`` (made by
``training.duet.generate.gate_request_args``) gets its own :class:`training.duet.RolloutGate`,
the same state machine the transformers processor drives; before each token the gate sees the
request's output so far and, when it says stop, every logit but EOS becomes ``-inf``. Requests
without the key are left alone.

Use it with ``vllm.LLM(model, logits_processors=[DuetAbortLogitsProcessor])``, or
``vllm serve --logits-processors training.duet.vllm:DuetAbortLogitsProcessor`` (server mode;
weft's rollout server passes it), or as a vLLM plugin (entry point group
``vllm.logits_processors``), which is the only way into the engine TRL 1.16 builds for
colocated rollouts: its ``VLLMGeneration`` calls ``vllm.LLM(...)`` with a fixed argument list
and no ``logits_processors``. As a plugin the processor sits in every engine of the
environment, so it does nothing for requests without ``duet_gate`` and loads the tokenizer only
at the first request that has one. ``training.duet.generate.vllm_logits_processors`` gives the
class list for a recipe without importing vLLM.

Rollouts for the DUET trainer (``training.duet.trainer``): :func:`colocate_generate` sends one
request per allocated rollout to an in-process ``vllm.LLM``, each with its own
``SamplingParams(n=1, extra_args={"duet_gate": ...})`` (its own pre-drawn coin);
:func:`server_generate` does the same against a ``vllm serve`` endpoint through TRL's
``VLLMClient`` (one ``/v1/completions`` request per rollout, the gate as the flat
``vllm_xargs`` JSON string, requests sent concurrently as TRL's client does for image prompts).
The engine may run the processor in another process: the trainer recovers each rollout's
outcome (aborted, eps-kept, stop step) with ``training.duet.generate.engine_outcome``.

Importing this module imports vLLM; nothing else in ``training`` needs it.
Not guaranteed: speculative decoding (vLLM refuses custom logits processors with it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from training.duet.core import RolloutGate
from training.duet.generate import GATE_ARGS_KEY, gate_from_request_args


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
        self._model_config = None if vllm_config is None else vllm_config.model_config
        self._decode, self.marker, self.record = decode, marker, record
        self.gates: list[RolloutGate] = []

    def decode(self, ids: list[int]) -> str:
        if self._decode is None:  # first DUET request: load the served model's tokenizer
            from transformers import AutoTokenizer

            if self._model_config is None:
                raise ValueError("DuetAbortLogitsProcessor needs a vllm_config with a "
                                 "model_config (for its tokenizer), or a decode function")

            model = self._model_config
            tokenizer = AutoTokenizer.from_pretrained(model.tokenizer,
                                                      revision=model.tokenizer_revision)

            def decode(ids: list[int]) -> str:
                return tokenizer.decode(ids, skip_special_tokens=False)

            self._decode = decode
        return self._decode(ids)

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



# ---------------------------------------------------------------------------------------------
# Rollouts for the DUET trainer: one request per allocated rollout, each with its own gate


def sampling_params(base: dict[str, Any], spec: dict[str, Any]) -> SamplingParams:
    """One rollout's ``SamplingParams``: the trainer's sampling settings ``base`` (TRL's
    colocate kwargs plus ``generation_kwargs``), ``n=1`` and the gate ``spec`` (a
    ``gate_request_args(...)[GATE_ARGS_KEY]`` mapping) under ``extra_args``."""
    extra = {**(base.get("extra_args") or {}), GATE_ARGS_KEY: dict(spec)}
    return SamplingParams(**{**base, "n": 1, "extra_args": extra})


def _top1(logprobs: list | None) -> list[list[float]] | None:
    if logprobs is None:
        return None
    return [[(lp[0] if lp[0] is not None else float("nan")) for lp in seq] for seq in logprobs]


def colocate_generate(llm: Any, prompt_ids: Sequence[Sequence[int]], base: dict[str, Any],
                      specs: Sequence[dict[str, Any]]):
    """Generate one rollout per prompt row on an in-process ``vllm.LLM`` (TRL's colocate
    engine), request ``j`` under ``specs[j]``; returns ``(completion_ids, logprobs)`` with the
    sampled tokens' log-probs (None when the engine returned none)."""
    if len(prompt_ids) != len(specs):
        raise ValueError(f"need one gate spec per prompt row, got {len(prompt_ids)} rows and "
                         f"{len(specs)} specs")
    if not prompt_ids:
        return [], []
    from trl.generation.vllm_generation import extract_logprobs

    params = [sampling_params(base, spec) for spec in specs]
    outputs = llm.generate([{"prompt_token_ids": list(ids)} for ids in prompt_ids],
                           sampling_params=params, use_tqdm=False)
    completions = [list(out.outputs[0].token_ids) for out in outputs]
    logprobs, _ = extract_logprobs(outputs)
    return completions, _top1(logprobs)


def server_generate(client: Any, prompt_ids: Sequence[Sequence[int]], base: dict[str, Any],
                    generation_kwargs: dict[str, Any] | None, specs: Sequence[dict[str, Any]],
                    max_workers: int = 32):
    """The same through TRL's ``VLLMClient`` (server mode, main process): one ``n=1`` request
    per rollout, ``base`` holding ``VLLMClient.generate``'s sampling arguments, the gate in
    ``vllm_xargs`` as a JSON string (the server's ``vllm_xargs`` values must be flat)."""
    if len(prompt_ids) != len(specs):
        raise ValueError(f"need one gate spec per prompt row, got {len(prompt_ids)} rows and "
                         f"{len(specs)} specs")
    if not prompt_ids:
        return [], []

    def send(j: int) -> dict[str, Any]:
        xargs = {GATE_ARGS_KEY: json.dumps(dict(specs[j]))}
        extra = {**(generation_kwargs or {}), "vllm_xargs": xargs}
        return client.generate(prompts=[list(prompt_ids[j])], n=1, **base,
                               generation_kwargs=extra)

    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(prompt_ids)))) as pool:
        results = list(pool.map(send, range(len(prompt_ids))))
    completions = [list(r["completion_ids"][0]) for r in results]
    if any(r.get("logprobs") is None for r in results):
        return completions, None
    return completions, _top1([r["logprobs"][0] for r in results])
