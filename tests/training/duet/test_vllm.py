"""DUET's vLLM logits processor (training/duet/vllm.py): the request-argument helpers, the
recipe hook, and the processor inside vLLM's real V1 engine on the embedded model (slow: the
CPU engine takes a minute or more to build). The scripted-stream tests that hold both engines
to Algorithm 1's stop times are parametrized in test_generate.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pipelines.settings import PROJECT_ROOT
from training.config import load_config
from training.duet import GateParams, RolloutGate, answer_marker
from training.duet.generate import (
    GATE_ARGS_KEY,
    VLLM_PROCESSOR,
    gate_from_request_args,
    gate_request_args,
    prefix_coin,
    replay_gate,
    vllm_logits_processors,
)

PARAMS = GateParams(k1=4, k2=8, grace=2, poll_every=2, eps_abort=0.3, tail_tokens=16)


def test_recipe_hook_names_the_processor_only_for_duet_with_abort():
    assert vllm_logits_processors(load_config("duet_grpo.cpu")) == [VLLM_PROCESSOR]
    assert vllm_logits_processors(load_config("rlvr_grpo.cpu")) == []
    no_abort = load_config("duet_grpo.cpu", {"duet": {"abort": False}})
    assert vllm_logits_processors(no_abort) == []
    module, _, name = VLLM_PROCESSOR.partition(":")
    assert module == "training.duet.vllm" and name == "DuetAbortLogitsProcessor"


def test_request_args_round_trip_as_mapping_and_json():
    for as_json in (False, True):
        args = gate_request_args(PARAMS, "boxed", eos_token_id=2, coin=0.25, as_json=as_json)
        gate = gate_from_request_args(args[GATE_ARGS_KEY])
        assert gate.params == PARAMS and gate.u == 0.25
    with pytest.raises(ValueError, match="answer_format must be one of"):
        gate_request_args(PARAMS, "latex", eos_token_id=2)
    with pytest.raises(ValueError, match="lack"):
        gate_from_request_args({"k1": 1})
    with pytest.raises(ValueError, match="coin"):
        gate_request_args(PARAMS, "boxed", eos_token_id=2, coin=1.5)


def test_prefix_coin_is_seeded_uniform_and_drawn_at_k2_plus_grace():
    draws = [prefix_coin(0, 1, [i, i + 1]) for i in range(4000)]
    assert all(0 <= u < 1 for u in draws)
    assert abs(sum(draws) / len(draws) - 0.5) < 0.02  # mean of U(0,1), se ~ 0.005
    assert prefix_coin(0, 1, [1, 2]) == prefix_coin(0, 1, [1, 2]) != prefix_coin(1, 1, [1, 2])
    tokens = list(range(100, 140))
    spec = gate_request_args(PARAMS, "boxed", eos_token_id=2, seed=3, step=5)[GATE_ARGS_KEY]
    gate = replay_gate(gate_from_request_args(spec, prefix=lambda: tokens), tokens, [2], str)
    assert gate.coin_drawn and gate.u == prefix_coin(3, 5, tokens[:10])  # K2 + G = 10


_ENGINE_SCRIPT = r"""
import json, sys
from vllm import LLM, SamplingParams
from training.duet import GateParams
from training.duet.generate import VLLM_PROCESSOR, gate_request_args

def sp(extra, n=1):
    return SamplingParams(max_tokens=24, temperature=0.8, seed=1, n=n, extra_args=extra)

def main():  # the engine core is a spawned process: nothing may run at import
    model, eos = sys.argv[1], int(sys.argv[2])
    params = GateParams(k1=4, k2=8, grace=2, poll_every=2, eps_abort=0.3, tail_tokens=16)
    llm = LLM(model=model, logits_processors=[VLLM_PROCESSOR], enforce_eager=True,
              max_model_len=512, seed=0)
    # A sentence to continue (no chat template): the model writes on instead of stopping.
    prompt = "Once upon a time, in a small village by the sea, there lived an old"
    requests = [
        sp(gate_request_args(params, "boxed", eos_token_id=eos, coin=0.9)),  # abort at K2 + G
        sp(gate_request_args(params, "boxed", eos_token_id=eos, coin=0.1)),  # eps-kept
        sp(None),  # no gate
        sp(gate_request_args(params, "boxed", eos_token_id=eos, seed=7, step=2), n=6),
    ]
    outs = llm.generate([prompt] * len(requests), requests, use_tqdm=False)
    print("RESULT " + json.dumps([[list(c.token_ids) for c in o.outputs] for o in outs]))

if __name__ == "__main__":
    main()
"""


@pytest.mark.slow
def test_processor_inside_the_real_vllm_engine(embedded_model_dir, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(embedded_model_dir)
    eos = tok.eos_token_id
    script = tmp_path / "engine.py"
    script.write_text(_ENGINE_SCRIPT)
    env_cmd = [sys.executable, str(script), str(embedded_model_dir), str(eos)]
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT), VLLM_CPU_KVCACHE_SPACE="1",
               HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", VLLM_LOGGING_LEVEL="WARNING")
    done = subprocess.run(env_cmd, cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=1500, env=env, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    aborted, kept, free, grouped = json.loads(line[len("RESULT "):])

    def decode(ids):
        return tok.decode(ids, skip_special_tokens=False)

    marker = answer_marker("boxed")
    # Coin 0.9 >= eps: no boxed answer by K2 + G = 10 tokens, so EOS is forced as token 11.
    (ids,) = aborted
    (plain,) = free
    gate = replay_gate(RolloutGate(PARAMS, marker, 0.9), ids, [eos], decode)
    if gate.marker_seen:
        pytest.skip("the model wrote a boxed answer within 10 tokens; nothing to abort")
    if eos in plain[:11]:
        pytest.skip("the model stopped naturally within 11 tokens")
    assert gate.aborted and gate.stopped_at == 10
    assert len(ids) == 11 and ids[10] == eos
    ids_aborted = ids
    # Coin 0.1 < eps: kept to natural EOS or the length cap; never forced.
    (ids,) = kept
    gate = replay_gate(RolloutGate(PARAMS, marker, 0.1), ids, [eos], decode)
    assert gate.coin_drawn and not gate.aborted and gate.stopped_at is None
    assert len(ids) == 24 or ids[-1] == eos
    # The same seed without the gate: the same first 10 tokens, then it goes on.
    assert plain[:10] == ids_aborted[:10] and len(plain) > 11
    # n = 6 under one SamplingParams: each rollout's coin comes from its own prefix, and the
    # replay with the same prefix coin predicts exactly where the engine stopped it.
    outcomes = []
    for ids in grouped:
        gate = replay_gate(RolloutGate(PARAMS, marker, lambda t, ids=ids: prefix_coin(
            7, 2, ids[:t])), ids, [eos], decode)
        if gate.aborted:
            assert len(ids) == gate.stopped_at + 1 and ids[-1] == eos
        else:
            assert gate.stopped_at is None and (len(ids) == 24 or ids[-1] == eos)
        outcomes.append(gate.aborted)
    assert len(outcomes) == 6
