"""The DUET abort rule as a batched transformers LogitsProcessor (training/duet/generate.py):
a scripted logits source checked against Algorithm 1's stop times, and real ``generate`` on a
small random model built from the embedded model's config and tokenizer."""

from __future__ import annotations

import pytest
import torch

from training.duet import GateParams, RolloutGate, coin_draws
from training.duet.generate import MarkerAbortProcessor, gate_request_args, replay_gate

VOCAB, EOS, MARK, FILL = 12, 11, 5, 1


def _decode(ids):
    return "".join("M" if i == MARK else "." for i in ids)


def _marker(text):
    return "M" in text


def _scripted_generate(streams, processor, prompt_len=3, max_new=200):
    """A decode loop whose 'model' puts all mass on each row's scripted next token (EOS once
    the script ends); the processor runs before each pick, as in ``model.generate``."""
    rows = len(streams)
    ids = torch.zeros((rows, prompt_len), dtype=torch.long)
    done = [False] * rows
    for t in range(max_new):
        scores = torch.full((rows, VOCAB), -10.0)
        for r, stream in enumerate(streams):
            scores[r, stream[t] if t < len(stream) else EOS] = 10.0
        scores = processor(ids, scores)
        nxt = scores.argmax(dim=1)
        nxt[torch.tensor(done)] = EOS  # finished rows are padded, as generate does
        ids = torch.cat([ids, nxt[:, None]], dim=1)
        done = [d or int(n) == EOS for d, n in zip(done, nxt, strict=True)]
        if all(done):
            break
    out = []
    for r in range(rows):
        gen = ids[r, prompt_len:].tolist()
        out.append(gen.index(EOS))  # tokens before the first EOS
    return out


def _vllm_scripted_generate(streams, processor, params, coins, prompt_len=3, max_new=200):
    """The same scripted model under vLLM's V1 persistent-batch protocol: requests are added
    with their SamplingParams (the gate in ``extra_args``) and live output lists, finished
    ones are removed (and the last request moved into the hole, as vLLM condenses the batch);
    ``update_state`` then ``apply`` run before each token."""
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

    outputs = [[] for _ in streams]
    slot_of = {}  # batch index -> request
    added = []
    for r, coin in enumerate(coins):
        extra = gate_request_args(params, "boxed", eos_token_id=EOS, coin=coin)
        added.append((r, SamplingParams(max_tokens=max_new, extra_args=extra),
                      [0] * prompt_len, outputs[r]))
        slot_of[r] = r
    update = BatchUpdate(batch_size=len(streams), removed=[], added=added, moved=[])
    for _ in range(max_new):
        processor.update_state(update)
        update = None
        logits = torch.full((len(slot_of), VOCAB), -10.0)
        for slot, r in slot_of.items():
            t = len(outputs[r])
            logits[slot, streams[r][t] if t < len(streams[r]) else EOS] = 10.0
        logits = processor.apply(logits)
        finished = []
        for slot, r in slot_of.items():
            outputs[r].append(int(logits[slot].argmax()))
            if outputs[r][-1] == EOS:
                finished.append(slot)
        if finished:
            removed, moved = [], []
            for slot in sorted(finished, reverse=True):
                last = len(slot_of) - 1
                slot_of.pop(slot)
                removed.append(slot)
                if slot != last:
                    slot_of[slot] = slot_of.pop(last)
                    moved.append((last, slot, MoveDirectionality.UNIDIRECTIONAL))
            update = BatchUpdate(batch_size=len(slot_of), removed=removed, added=[], moved=moved)
        if not slot_of:
            break
    return [out.index(EOS) for out in outputs]


def _run_engine(engine, streams, params, coins):
    """(lengths, gates) from the transformers or the vLLM processor over scripted streams."""
    if engine == "transformers":
        proc = MarkerAbortProcessor.for_batch(params, [_marker] * len(coins), coins, 3, EOS,
                                              _decode)
        return _scripted_generate(streams, proc), proc.gates
    pytest.importorskip("vllm")
    from training.duet.vllm import DuetAbortLogitsProcessor

    proc = DuetAbortLogitsProcessor(None, torch.device("cpu"), False, decode=_decode,
                                    marker=_marker, record=True)
    return _vllm_scripted_generate(streams, proc, params, coins), proc.gates


ENGINES = ["transformers", "vllm"]


@pytest.mark.parametrize("engine", ENGINES)
def test_batched_processor_matches_algorithm1_stop_times(engine):
    params = GateParams(k1=16, k2=64, grace=10, poll_every=8, eps_abort=0.1)

    def stream(length, marker_at=None):
        s = [FILL] * length
        if marker_at is not None:
            s[marker_at - 1] = MARK
        return s

    streams = [
        stream(300, marker_at=24),  # marker at 24 -> EOS after 24 + G
        stream(300, marker_at=21),  # seen at the next poll, 24 -> 34
        stream(300),  # no marker, coin says abort -> K2 + G
        stream(120),  # no marker, coin says keep -> natural end at 120
        stream(40),  # ends naturally before any gate
        stream(300, marker_at=3),  # marker before K1: seen at the first poll, 16 -> 26
    ]
    coins = [0.5, 0.5, 0.5, 0.01, 0.5, 0.5]
    lengths, gates = _run_engine(engine, streams, params, coins)
    assert lengths == [34, 34, 74, 120, 40, 26]
    assert [g.aborted for g in gates] == [False, False, True, False, False, False]
    assert [g.coin_drawn for g in gates] == [False, False, True, True, False, False]
    assert [g.p_abort for g in gates] == [1.0, 1.0, 0.1, 0.1, 1.0, 1.0]
    assert [g.stopped_at for g in gates] == [34, 34, 74, None, None, 26]
    # The replay of each finished rollout recovers the processor's outcome.
    for s, n, g, u in zip(streams, lengths, gates, coins, strict=True):
        tokens = s[:n] + [EOS]
        again = replay_gate(RolloutGate(params, _marker, u), tokens, [EOS], _decode)
        assert (again.aborted, again.coin_drawn, again.tau, again.stopped_at) == \
            (g.aborted, g.coin_drawn, g.tau, g.stopped_at)


@pytest.mark.parametrize("engine", ENGINES)
def test_processor_is_reproducible_from_a_seed(engine):
    params = GateParams(k1=4, k2=8, grace=2, poll_every=2, eps_abort=0.5)

    def run(seed):
        coins = coin_draws(seed, step=1, count=32)
        return _run_engine(engine, [[FILL] * 40] * 32, params, coins)[0]

    first = run(5)
    assert first == run(5)
    assert set(first) == {10, 40}  # aborted at K2 + G, or kept to the natural end
    assert first != run(6)


def test_processor_time_includes_its_marker_checks():
    """The processor's ``seconds`` (what the trainer logs as the gate's share of
    ``duet/overhead_s``) covers the marker polls: a marker that takes 20 ms per call, polled
    at t = 4, 8, 12 (K1 = 4, every 4 tokens, no marker so no trim; K2 + G past the stream),
    must show at least 3 x 20 ms."""
    import time

    calls = []

    def slow_marker(text):
        calls.append(text)
        time.sleep(0.02)
        return False

    params = GateParams(k1=4, k2=100, grace=10, poll_every=4, eps_abort=0.5)
    proc = MarkerAbortProcessor.for_batch(params, [slow_marker], [0.5], 3, EOS, _decode)
    lengths = _scripted_generate([[FILL] * 14], proc)
    assert lengths == [14] and len(calls) == 3
    assert proc.seconds >= 3 * 0.02


def test_processor_checks_batch_size():
    params = GateParams(k1=4, k2=8)
    proc = MarkerAbortProcessor.for_batch(params, [_marker], [0.5], 3, EOS, _decode)
    with pytest.raises(ValueError, match="one per generated sequence"):
        proc(torch.zeros((2, 5), dtype=torch.long), torch.zeros((2, VOCAB)))


@pytest.fixture(scope="module")
def tiny_model(embedded_model_dir):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(embedded_model_dir)
    config.num_hidden_layers, config.hidden_size, config.intermediate_size = 1, 64, 128
    config.num_attention_heads, config.num_key_value_heads = 2, 1
    config.head_dim = 32
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir)
    tokenizer.padding_side = "left"
    return model, tokenizer


def test_processor_inside_real_generate_forces_eos_per_row(tiny_model):
    model, tokenizer = tiny_model
    eos = tokenizer.eos_token_id
    prompts = ["Tell a long story.", "Count to a hundred.", "Describe the sea at length."]
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    width = batch["input_ids"].shape[1]
    params = GateParams(k1=4, k2=8, grace=2, poll_every=2, eps_abort=0.5)
    # Row 0: the marker fires at the first poll (t = 4) -> EOS after 6 tokens. Rows 1-2: never
    # fires; row 1's coin aborts at K2 + G = 10, row 2's keeps it to the length cap.
    markers = [lambda text: True, lambda text: False, lambda text: False]
    proc = MarkerAbortProcessor.for_batch(params, markers, [0.9, 0.9, 0.1], width, eos,
                                          tokenizer.decode)
    torch.manual_seed(1)
    out = model.generate(**batch, max_new_tokens=24, do_sample=True, logits_processor=[proc],
                         pad_token_id=eos)
    gen = out[:, width:].tolist()

    def first_eos(row):
        return row.index(eos) if eos in row else len(row)

    assert first_eos(gen[0]) == 6 and first_eos(gen[1]) == 10
    assert first_eos(gen[2]) in (24, *range(11, 24))  # natural end or the cap, never forced
    assert [g.stopped_at for g in proc.gates][:2] == [6, 10]
    assert proc.gates[2].stopped_at is None and proc.gates[2].p_abort == 0.5
    assert proc.gates[1].aborted and not proc.gates[0].aborted
