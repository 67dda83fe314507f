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


# ---------------------------------------------------------------------------------------------
# generate_compacting: ended rows leave the batch, the tokens stay those of the plain call


@pytest.fixture
def one_thread():
    """Single-threaded BLAS, as weft's CPU recipes run (``torch_threads: 1``): the condition
    under which a row's logits do not depend on the batch size (``generate_compacting``)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _first_eos(row, eos):
    return next((n for n, tok in enumerate(row) if tok == eos), len(row))


def _expected_row_steps(generated, eos, floor):
    """Rows a compacting decode computes, counted from the output alone: decode call s
    (s = 1 .. length - 1) feeds generated token s - 1, so the rows still decoding are those
    whose first EOS comes later, and the batch never shrinks below ``floor`` rows."""
    ends = [_first_eos(row, eos) for row in generated]
    length = len(generated[0])
    return sum(max(sum(1 for e in ends if e > s - 1), floor) for s in range(1, length))


def _plain_and_compacting(model, tokenizer, prompts, params, markers, coins, config, seed,
                          min_rows=4):
    from training.duet.generate import generate_compacting

    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    width = batch["input_ids"].shape[1]
    eos = tokenizer.eos_token_id
    runs = []
    for compact in (False, True):
        proc = MarkerAbortProcessor.for_batch(params, markers, coins, width, eos,
                                              tokenizer.decode)
        torch.manual_seed(seed)
        with torch.no_grad():
            if compact:
                out, stats = generate_compacting(model, batch["input_ids"],
                                                 batch["attention_mask"], config, [proc],
                                                 min_rows=min_rows)
            else:
                out = model.generate(**batch, generation_config=config,
                                     logits_processor=[proc])
                stats = None
        after = torch.rand(4)  # the random generator's state after generation
        runs.append((out, proc.gates, after, stats))
    return width, runs


def test_compacting_generate_matches_plain_generate_on_the_embedded_model(
        embedded_model_dir, one_thread):
    """The plain ``generate`` with the abort processor is the reference: same seed, same token
    ids per row, same gate outcomes, same random state afterwards, while the compacting call
    computes fewer decode rows (counted independently from the tokens)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(embedded_model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir)
    tokenizer.padding_side = "left"
    eos = tokenizer.eos_token_id
    config = GenerationConfig(max_new_tokens=24, do_sample=True, temperature=0.9, top_p=0.95,
                              top_k=0, pad_token_id=tokenizer.pad_token_id, eos_token_id=[eos],
                              disable_compile=True)
    prompts = ["Write a long story about a lighthouse keeper.", "Count from one to fifty.",
               "Describe the sea in great detail.", "List every month of the year.",
               "Explain how bread is made, step by step.", "Tell me about the moon.",
               "Name many animals that live in the forest.", "Describe a busy market."]
    # Rows 0-1: the marker fires at the first poll (t = 4) -> EOS as token 7. Rows 2-4: no
    # marker, the coin aborts at K2 + G = 14. Rows 5-7: no marker, the coin keeps them.
    params = GateParams(k1=4, k2=12, grace=2, poll_every=2, eps_abort=0.5)
    markers = [lambda text: True] * 2 + [lambda text: False] * 6
    coins = [0.9] * 5 + [0.1] * 3
    width, runs = _plain_and_compacting(model, tokenizer, prompts, params, markers, coins,
                                        config, seed=3)
    (plain, plain_gates, plain_after, _), (compact, gates, after, stats) = runs
    assert torch.equal(plain, compact)
    assert [g.stopped_at for g in gates] == [g.stopped_at for g in plain_gates]
    assert [g.aborted for g in gates] == [g.aborted for g in plain_gates]
    assert torch.equal(plain_after, after)
    assert "forward" not in model.__dict__  # the model's own forward is back
    generated = plain[:, width:].tolist()
    ends = [_first_eos(row, eos) for row in generated]
    # the scenario the test is about: rows end at different steps, some by the forced EOS
    assert sum(g.aborted for g in gates) >= 1 and len(set(ends)) >= 3
    assert stats.rows == 8 and stats.steps == len(generated[0]) - 1
    assert stats.row_steps == _expected_row_steps(generated, eos, 4)
    assert stats.row_steps < stats.rows * stats.steps


@pytest.fixture(scope="module")
def tiny_generation(tiny_model):
    from transformers import GenerationConfig

    model, tokenizer = tiny_model
    eos = tokenizer.eos_token_id

    def config(**extra):
        return GenerationConfig(max_new_tokens=20, do_sample=True, temperature=1.0, top_k=0,
                                pad_token_id=eos, eos_token_id=[eos], disable_compile=True,
                                **extra)
    return model, tokenizer, config


def test_compacting_generate_keeps_min_rows_and_matches_on_a_small_model(tiny_generation,
                                                                        one_thread):
    model, tokenizer, config = tiny_generation
    eos = tokenizer.eos_token_id
    prompts = [f"Prompt number {i} " * (1 + i % 3) for i in range(6)]
    params = GateParams(k1=2, k2=4, grace=1, poll_every=1, eps_abort=0.5)
    markers = [lambda text: True] * 3 + [lambda text: False] * 3
    coins = [0.9, 0.9, 0.9, 0.9, 0.1, 0.1]
    width, runs = _plain_and_compacting(model, tokenizer, prompts, params, markers, coins,
                                        config(), seed=0)
    (plain, plain_gates, plain_after, _), (compact, gates, after, stats) = runs
    assert torch.equal(plain, compact) and torch.equal(plain_after, after)
    assert [g.stopped_at for g in gates] == [g.stopped_at for g in plain_gates]
    generated = plain[:, width:].tolist()
    # marker rows end as token 4 (t = 2 + G), the aborted one as token 6, two run on
    assert [_first_eos(r, eos) for r in generated][:4] == [3, 3, 3, 5]
    assert stats.row_steps == _expected_row_steps(generated, eos, 4)
    assert stats.row_steps < stats.rows * stats.steps


def test_compacting_generate_falls_back_to_the_plain_call_on_a_static_cache(tiny_generation,
                                                                            one_thread):
    model, tokenizer, config = tiny_generation
    params = GateParams(k1=2, k2=4, grace=1, poll_every=1, eps_abort=0.5)
    markers = [lambda text: True] * 2 + [lambda text: False] * 3
    _, runs = _plain_and_compacting(
        model, tokenizer, [f"Prompt {i}" for i in range(5)], params, markers,
        [0.9, 0.9, 0.9, 0.1, 0.1], config(cache_implementation="static"), seed=1)
    (plain, *_), (compact, _, _, stats) = runs
    assert torch.equal(plain, compact)
    assert stats.steps > 0 and stats.row_share == 1.0  # every row of every step computed


def test_compacting_generate_decodes_every_row_when_the_prompt_is_prefilled_in_chunks(
        tiny_generation, one_thread):
    # with prefill_chunk_size the model's second call is another prompt chunk, not a decode
    # step: its last ids are prompt tokens (an EOS among them is padding), so nothing may
    # leave the batch there; the call then runs as the plain one
    model, tokenizer, config = tiny_generation
    params = GateParams(k1=2, k2=4, grace=1, poll_every=1, eps_abort=0.5)
    markers = [lambda text: True] * 2 + [lambda text: False] * 3
    prompts = [f"Prompt {i} " * (1 + 3 * i) for i in range(5)]  # left padding of many widths
    _, runs = _plain_and_compacting(model, tokenizer, prompts, params, markers,
                                    [0.9, 0.9, 0.9, 0.1, 0.1], config(prefill_chunk_size=4),
                                    seed=2)
    (plain, *_), (compact, _, _, stats) = runs
    assert torch.equal(plain, compact)
    assert stats.row_share == 1.0


def test_compacting_generate_refuses_bad_settings(tiny_generation):
    from transformers import GenerationConfig

    from training.duet.generate import generate_compacting

    model, tokenizer, config = tiny_generation
    ids = tokenizer(["a"], return_tensors="pt")["input_ids"]
    with pytest.raises(ValueError, match="eos_token_id"):
        generate_compacting(model, ids, None, GenerationConfig(max_new_tokens=2))
    with pytest.raises(ValueError, match="min_rows must be at least 1"):
        generate_compacting(model, ids, None, config(), min_rows=0)
