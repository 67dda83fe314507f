"""DUET rollouts on TRL's vLLM path (training/duet/trainer.py ``_generate_vllm``,
training/duet/vllm.py ``colocate_generate``/``server_generate``): what the trainer hands the
engine, request by request, for colocated and server rollouts.

TRL's vLLM rollouts cannot run on this CPU machine (TRL colocate needs CUDA; see
training/rollouts.py), so the engine here is a test double: a decode loop over scripted token
streams. Everything between the trainer and the engine is real: the DUET trainer on the
embedded model, vLLM's ``SamplingParams`` objects it builds (or, for server mode, the
``vllm_xargs`` a ``vllm serve`` endpoint turns into ``SamplingParams.extra_args``), and the real
``DuetAbortLogitsProcessor`` that the engine double builds a per-request gate with, exactly as
vLLM does (``new_req_logits_processor(params)``, then ``(output_ids, logits) -> logits`` before
each token). The processor inside vLLM's real engine is tests/training/duet/test_vllm.py (slow).
"""

from __future__ import annotations

import json
import threading
from importlib.metadata import EntryPoint
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("vllm")

from vllm import SamplingParams

from training.duet import coin_draws
from training.duet import generate as duet_generate
from training.duet.generate import (
    GATE_ARGS_KEY,
    VLLM_PLUGIN_GROUP,
    VLLM_PROCESSOR,
    engine_outcome,
    gate_request_args,
    processor_plugin_registered,
)
from training.duet.trainer import vllm_problem
from training.duet.vllm import DuetAbortLogitsProcessor, colocate_generate


class ScriptedEngine:
    """A vLLM engine double: request ``j`` emits its scripted stream (EOS when it ends, at most
    ``max_tokens``); with ``processor`` on, the real ``DuetAbortLogitsProcessor`` edits each
    step's logits through the per-request callable it builds from the request's params."""

    def __init__(self, tokenizer, streams: dict[tuple, list[int]], eos: int,
                 processor: bool = True):
        self.vocab, self.streams, self.eos = len(tokenizer), streams, eos
        self.proc = None
        if processor:
            def decode(ids):
                return tokenizer.decode(ids, skip_special_tokens=False)

            self.proc = DuetAbortLogitsProcessor(None, torch.device("cpu"), False,
                                                 decode=decode, record=True)
        self.requests: list[tuple[list[int], SamplingParams]] = []
        self.lock = threading.Lock()

    def run(self, prompt: list[int], params: SamplingParams) -> list[int]:
        assert isinstance(params, SamplingParams) and params.n == 1
        with self.lock:
            self.requests.append((list(prompt), params))
            call = self.proc.new_req_logits_processor(params) if self.proc else None
        stream = self.streams[tuple(prompt)]
        out: list[int] = []
        while len(out) < params.max_tokens:
            logits = torch.full((self.vocab,), -10.0)
            logits[stream[len(out)] if len(out) < len(stream) else self.eos] = 10.0
            if call is not None:
                logits = call(out, logits)
            out.append(int(logits.argmax()))
            if out[-1] == self.eos:
                break
        return out

    def generate(self, prompts, sampling_params, use_tqdm=False):  # vllm.LLM.generate
        assert isinstance(sampling_params, list) and len(sampling_params) == len(prompts)
        return [SimpleNamespace(prompt_token_ids=p["prompt_token_ids"],
                                outputs=[SimpleNamespace(token_ids=self.run(
                                    p["prompt_token_ids"], sp), logprobs=None)])
                for p, sp in zip(prompts, sampling_params, strict=True)]


class ScriptedServer:
    """TRL's ``VLLMClient.generate`` against a ``vllm serve`` double: like vLLM's OpenAI
    completions endpoint, the request's flat ``vllm_xargs`` become ``SamplingParams.extra_args``."""

    def __init__(self, engine: ScriptedEngine):
        self.engine, self.calls = engine, []

    def generate(self, prompts, n, repetition_penalty, temperature, top_p, top_k, min_p,
                 max_tokens, logprobs, generation_kwargs):
        self.calls.append(generation_kwargs)
        assert len(prompts) == 1 and n == 1
        xargs = generation_kwargs["vllm_xargs"]
        assert all(isinstance(v, str | int | float) for v in xargs.values())  # flat, as served
        params = SamplingParams(n=1, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                                repetition_penalty=repetition_penalty, extra_args=dict(xargs))
        return {"prompt_ids": prompts, "completion_ids": [self.engine.run(prompts[0], params)],
                "logprobs": None}


def _duet_trainer(embedded_model_dir):
    from tests.training.duet.test_trainer import _config, _trainer, coin_reward

    # Cold K1 = 0.3 * 24 = 7, K2 = 0.7 * 24 = 17; G = 2: no marker by 19 -> the coin.
    config = _config(embedded_model_dir, "vllm-wiring", max_completion_length=24,
                     duet={"budget_fraction": 1.0, "full_rollouts": 3, "n_min": 1,
                           "eps_abort": 0.3, "grace": 2, "poll_every": 2, "tail_tokens": 32})
    return _trainer(config, coin_reward)


def _setup(trainer, mode: str, processor: bool = True):
    """Two prompts x 4 slots, allocated; each prompt scripted (one answers early)."""
    from training.duet.trainer import prompt_key

    keys = sorted({prompt_key(x["prompt"]) for x in trainer.train_dataset})
    trainer.prompt_state.observe_sigma(keys[0], 0.1)  # n_q = 2 and 4: rows 0-1 and 4-7
    trainer.prompt_state.observe_sigma(keys[1], 1.0)
    examples = sorted(trainer.train_dataset, key=lambda x: prompt_key(x["prompt"]))
    inputs = [x for x in examples for _ in range(4)]
    prompt_ids = trainer._tokenize_prompts([x["prompt"] for x in inputs])[0]
    tok = trainer.processing_class
    eos = trainer.eos_token_ids[0]
    answer = tok.encode(" so <answer>7</answer> and then more words follow here", add_special_tokens=False)
    chatter = tok.encode(" the cat sat on the mat and looked at the sea for a long while",
                         add_special_tokens=False)
    streams = {tuple(prompt_ids[0]): (chatter[:3] + answer + chatter) * 3,
               tuple(prompt_ids[4]): chatter * 3}
    engine = ScriptedEngine(tok, streams, eos, processor=processor)
    trainer.use_vllm, trainer.vllm_mode, trainer._last_loaded_step = True, mode, -1
    synced = []
    trainer.vllm_generation = SimpleNamespace(llm=engine, vllm_client=ScriptedServer(engine),
                                              sync_weights=lambda: synced.append(1))
    trainer.model.train()
    trainer._plan = trainer._allocate(inputs)
    return engine, prompt_ids, synced


@pytest.mark.parametrize("mode", ["colocate", "server"])
def test_trainer_sends_one_request_per_allocated_rollout_with_its_gate(embedded_model_dir,
                                                                        weft_home, mode):
    trainer = _duet_trainer(embedded_model_dir)
    engine, prompt_ids, synced = _setup(trainer, mode)
    plan = trainer._plan
    assert plan["counts"] == [2, 4]
    completions, _ = trainer._generate_single_turn(prompt_ids, None, {}, 4)
    rows = [i for i, a in enumerate(plan["allocated"]) if a]
    assert rows == [0, 1, 4, 5, 6, 7] and synced == [1]
    # Unallocated slots are not sent: one request per allocated rollout, each with its coin.
    assert len(engine.requests) == len(rows)
    specs = [r[1].extra_args[GATE_ARGS_KEY] for r in engine.requests]
    specs = [json.loads(s) if isinstance(s, str) else s for s in specs]
    coins = coin_draws(trainer.args.seed, trainer.state.global_step, 8)
    by_coin = {s["coin"]: (r[0], s) for r, s in zip(engine.requests, specs, strict=True)}
    assert sorted(by_coin) == sorted(coins[i] for i in rows)  # distinct, one per rollout
    for i in rows:
        prompt, spec = by_coin[coins[i]]
        assert prompt == list(prompt_ids[i])
        assert (spec["k1"], spec["k2"], spec["grace"], spec["eps_abort"]) == (7, 17, 2, 0.3)
        assert spec["answer_format"] == "tir" and spec["eos_token_id"] == trainer.eos_token_ids[0]
    for _, params in engine.requests:
        assert params.max_tokens == 24 and params.temperature == trainer.temperature
    # Unallocated rows get the one-token placeholder; allocated rows what the engine made.
    eos = trainer.eos_token_ids[0]
    assert [completions[i] for i in (2, 3)] == [[eos], [eos]]
    # The trainer's outcomes (replayed) equal those of the gates the engine's processor ran.
    engine_gates = {g.u: g for g in engine.proc.gates}
    outcomes = [(g.aborted, g.coin_drawn, g.tau, g.stopped_at) for g in plan["gates"].values()]
    assert outcomes == [(engine_gates[coins[i]].aborted, engine_gates[coins[i]].coin_drawn,
                         engine_gates[coins[i]].tau, engine_gates[coins[i]].stopped_at)
                        for i in rows]
    assert sorted(plan["gates"]) == rows
    first = [plan["gates"][i] for i in (0, 1)]  # prompt 0 answers early: trimmed at tau + G
    assert all(g.marker_seen and g.stopped_at == g.tau + 2 for g in first)
    assert all(len(completions[i]) == plan["gates"][i].stopped_at + 1 for i in (0, 1))
    second = [plan["gates"][i] for i in (4, 5, 6, 7)]  # prompt 1 never answers: coin at K2 + G
    assert all(g.coin_drawn for g in second)
    for i in (4, 5, 6, 7):
        g = plan["gates"][i]
        expect_kept = coins[i] < 0.3
        assert g.aborted is not expect_kept
        assert len(completions[i]) == (24 if expect_kept else 20)  # kept to the cap, or cut
    if mode == "server":
        assert len(trainer.vllm_generation.vllm_client.calls) == len(rows)


def test_engine_without_the_processor_is_detected(embedded_model_dir, weft_home):
    trainer = _duet_trainer(embedded_model_dir)
    _, prompt_ids, _ = _setup(trainer, "colocate", processor=False)
    with pytest.raises(RuntimeError, match="did not apply DUET's abort rule"):
        trainer._generate_single_turn(prompt_ids, None, {}, 4)


def test_colocate_generate_builds_real_sampling_params_per_request():
    from training.duet import GateParams

    params = GateParams(k1=2, k2=4, grace=1, poll_every=1, eps_abort=0.5)
    specs = [gate_request_args(params, "boxed", eos_token_id=9, coin=c)[GATE_ARGS_KEY]
             for c in (0.1, 0.9)]
    seen = []

    class Recorder:
        def generate(self, prompts, sampling_params, use_tqdm=False):
            seen.extend(zip(prompts, sampling_params, strict=True))
            return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=[1, 9], logprobs=None)])
                    for _ in prompts]

    base = {"temperature": 0.7, "max_tokens": 5, "logprobs": 0, "extra_args": {"other": 1}}
    completions, logprobs = colocate_generate(Recorder(), [[1, 2], [3]], base, specs)
    assert completions == [[1, 9], [1, 9]] and logprobs is None
    assert [p["prompt_token_ids"] for p, _ in seen] == [[1, 2], [3]]
    for (_, sp), spec in zip(seen, specs, strict=True):
        assert isinstance(sp, SamplingParams) and sp.n == 1 and sp.temperature == 0.7
        assert sp.extra_args == {"other": 1, GATE_ARGS_KEY: spec}
    assert colocate_generate(Recorder(), [], base, []) == ([], [])
    with pytest.raises(ValueError, match="one gate spec per prompt row"):
        colocate_generate(Recorder(), [[1]], base, [])


def test_engine_outcome_replays_and_checks_the_forced_stop():
    from training.duet import GateParams

    params = GateParams(k1=2, k2=3, grace=1, poll_every=1, eps_abort=0.5)
    spec = gate_request_args(params, "boxed", eos_token_id=9, coin=0.9)[GATE_ARGS_KEY]
    cut = engine_outcome(spec, [1, 1, 1, 1, 9], [9], lambda ids: "x" * len(ids))
    assert cut.aborted and cut.stopped_at == 4  # no marker by K2 + G = 4, coin 0.9: abort
    with pytest.raises(RuntimeError, match="did not apply"):
        engine_outcome(spec, [1, 1, 1, 1, 1, 1, 9], [9], lambda ids: "x" * len(ids))
    kept = engine_outcome({**spec, "coin": 0.1}, [1] * 7 + [9], [9], lambda ids: "")
    assert kept.coin_drawn and not kept.aborted and kept.p_abort == 0.5


def test_vllm_settings_duet_refuses_say_why(monkeypatch):
    def args(**kw):
        base = {"use_vllm": True, "vllm_mode": "colocate", "vllm_tensor_parallel_size": 1,
                "vllm_enable_sleep_mode": False, "vllm_structured_outputs_regex": None}
        return SimpleNamespace(**{**base, **kw})

    monkeypatch.setattr("training.duet.trainer.processor_plugin_registered", lambda: True)
    assert vllm_problem(args()) is None
    assert vllm_problem(args(vllm_mode="server")) is None
    assert vllm_problem(args(use_vllm=False)) is None
    assert "tensor" in vllm_problem(args(vllm_tensor_parallel_size=2))
    assert "sleep" in vllm_problem(args(vllm_enable_sleep_mode=True))
    assert "structured" in vllm_problem(args(vllm_structured_outputs_regex="a+"))
    monkeypatch.setattr("training.duet.trainer.processor_plugin_registered", lambda: False)
    problem = vllm_problem(args())
    assert VLLM_PLUGIN_GROUP in problem and VLLM_PROCESSOR in problem and "server" in problem
    assert vllm_problem(args(vllm_mode="server")) is None  # weft's server loads it by flag


def test_plugin_registration_is_read_from_entry_points(monkeypatch):
    def entry_points(group):
        assert group == VLLM_PLUGIN_GROUP
        return found

    monkeypatch.setattr(duet_generate.importlib.metadata, "entry_points", entry_points)
    found = [EntryPoint(name="other", value="pkg.mod:Other", group=VLLM_PLUGIN_GROUP)]
    assert not processor_plugin_registered()
    found.append(EntryPoint(name="duet_abort", value=VLLM_PROCESSOR, group=VLLM_PLUGIN_GROUP))
    assert processor_plugin_registered()


_PLUGIN_ENGINE_SCRIPT = r"""
import json, sys
from transformers import AutoTokenizer
from vllm import LLM
from training.duet import GateParams
from training.duet.generate import (GATE_ARGS_KEY, engine_outcome, gate_request_args,
                                    processor_plugin_registered)
from training.duet.vllm import colocate_generate

def main():  # the engine core is a spawned process: nothing may run at import
    model = sys.argv[1]
    tok = AutoTokenizer.from_pretrained(model)
    eos = tok.eos_token_id
    # As TRL's VLLMGeneration builds it: no logits_processors argument.
    llm = LLM(model=model, enforce_eager=True, max_model_len=512, seed=0)
    params = GateParams(k1=4, k2=8, grace=2, poll_every=2, eps_abort=0.3, tail_tokens=16)
    prompt = tok.encode("Once upon a time, in a small village by the sea, there lived an old")
    specs = [gate_request_args(params, "boxed", eos_token_id=eos, coin=c)[GATE_ARGS_KEY]
             for c in (0.9, 0.1)]
    base = {"temperature": 0.8, "max_tokens": 24, "logprobs": 0, "seed": 1}
    completions, logprobs = colocate_generate(llm, [prompt, prompt], base, specs)
    decode = lambda ids: tok.decode(ids, skip_special_tokens=False)
    gates = [engine_outcome(s, c, [eos], decode) for s, c in zip(specs, completions)]
    print("RESULT " + json.dumps({
        "registered": processor_plugin_registered(), "completions": completions,
        "logprob_lengths": [len(x) for x in logprobs],
        "gates": [[g.aborted, g.coin_drawn, g.marker_seen, g.stopped_at] for g in gates]}))

if __name__ == "__main__":
    main()
"""


@pytest.mark.slow
def test_plugin_processor_reaches_an_engine_built_without_logits_processors(
        embedded_model_dir, tmp_path):
    """Colocated rollouts' premise, on vLLM's real engine: an engine built as TRL builds it (no
    ``logits_processors``) runs DUET's processor once it is registered as a vLLM plugin (here a
    throwaway dist-info on this subprocess's PYTHONPATH), and ``colocate_generate`` with
    ``engine_outcome`` gets the forced stops back. Slow: the CPU engine takes minutes."""
    import os
    import subprocess
    import sys

    from pipelines.settings import PROJECT_ROOT

    plugin = tmp_path / "plugin"
    info = plugin / "weft_duet_test_plugin-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: weft-duet-test-plugin\n"
                                   "Version: 0.0\n")
    (info / "entry_points.txt").write_text(f"[{VLLM_PLUGIN_GROUP}]\n"
                                           f"duet_abort = {VLLM_PROCESSOR}\n")
    script = tmp_path / "engine.py"
    script.write_text(_PLUGIN_ENGINE_SCRIPT)
    env = dict(os.environ, PYTHONPATH=f"{plugin}{os.pathsep}{PROJECT_ROOT}",
               VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               VLLM_LOGGING_LEVEL="WARNING")
    done = subprocess.run([sys.executable, str(script), str(embedded_model_dir)],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=1500,
                          env=env, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    assert result["registered"]
    (aborted, kept) = result["gates"]
    first, second = result["completions"]
    if aborted[2]:
        pytest.skip("the model wrote a boxed answer within 10 tokens; nothing to abort")
    # Coin 0.9 >= eps: EOS forced after K2 + G = 10 tokens (engine_outcome checked it).
    assert aborted[:2] == [True, True] and aborted[3] == 10 and len(first) == 11
    assert kept[:2] == [False, True] and kept[3] is None  # coin 0.1 < eps: kept
    assert result["logprob_lengths"] == [len(first), len(second)]


def test_weft_registers_the_processor_as_a_vllm_plugin():
    """The installed weft (pyproject's entry point) registers DUET's processor under vLLM's
    plugin group, and the entry point loads the class vLLM's engine will instantiate."""
    from importlib.metadata import entry_points

    from training.duet.vllm import DuetAbortLogitsProcessor

    assert processor_plugin_registered()
    (ep,) = [e for e in entry_points(group=VLLM_PLUGIN_GROUP) if e.value == VLLM_PROCESSOR]
    assert ep.load() is DuetAbortLogitsProcessor
