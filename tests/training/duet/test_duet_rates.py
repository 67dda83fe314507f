"""Each DUET step's rollout rates (training.duet.core.marker_reached / step_rates, logged by
training/duet/trainer.py as duet/marker_rate, duet/abort_rate, duet/cap_cut_rate, ...): on a
constructed batch whose outcome is known by construction, and on a real trainer step, recounted
from the step's own completions."""

from __future__ import annotations

from collections import Counter

import pytest

from training.duet import (
    GateParams,
    RolloutGate,
    RolloutOutcome,
    answer_marker,
    marker_reached,
    step_rates,
)
from training.duet.generate import replay_gate

EOS = 0
CAP = 20
# K1 = 6: no poll before token 6; polls every 2 tokens; a rollout without a marker by
# K2 + G = 8 + 2 = 10 tokens draws its coin (kept iff u < 0.5)
PARAMS = GateParams(k1=6, k2=8, grace=2, poll_every=2, eps_abort=0.5, tail_tokens=64)
VOCAB = {1: "x", 2: " \\boxed{", 3: "7", 4: "}", EOS: ""}


def _decode(ids):
    return "".join(VOCAB[i] for i in ids)


BOX = [2, 3, 4]  # the marker fires once "}" closes the box


def _rollouts():
    """(name, token ids as the gated generation produced them, coin u, expected outcome by
    construction: marker reached, seen at a poll, coin drawn, aborted, cut by the cap)."""
    return [
        # a short answer: box closed at token 4, EOS at 5, before K1's first poll at 6: the gate
        # never saw it, the text reached it
        ("early", [1, *BOX, EOS], 0.9, (True, False, False, False, False)),
        # box closed at token 6: seen at the poll t = 6, trimmed at tau + G = 8 (forced EOS)
        ("trimmed", [1, 1, 1, *BOX, 1, 1, EOS], 0.9, (True, True, False, False, False)),
        # no marker by K2 + G = 10, coin 0.9 >= 0.5: aborted there (forced EOS)
        ("aborted", [1] * 10 + [EOS], 0.9, (False, False, True, True, False)),
        # no marker by 10, coin 0.1 < 0.5: eps-kept, writes a box at 13 (after the gate: does
        # not count, though the gate's poll at 14 sees it) and runs to the cap with no EOS
        ("eps_kept", [1] * 10 + BOX + [1] * (CAP - 13), 0.1, (False, True, True, False, True)),
        # no marker, its own EOS at 8, before K2 + G: nothing drawn, nothing reached
        ("plain_end", [1] * 7 + [EOS], 0.9, (False, False, False, False, False)),
        # box closed at token 9 (between the polls at 8 and 10), EOS at 10: the poll at t = 10
        # never runs (the replay stops after an EOS), yet the text reached the marker
        ("between_polls", [1] * 6 + BOX + [EOS], 0.9, (True, False, False, False, False)),
    ]


def _outcome(ids, u):
    marker = answer_marker("boxed")
    gate = replay_gate(RolloutGate(PARAMS, marker, u), ids, [EOS], _decode)
    cut = gate.stopped_at is None and len(ids) >= CAP and ids[-1] != EOS
    return gate, RolloutOutcome(
        length=len(ids), marker=marker_reached(gate, lambda: _decode(ids), marker),
        marker_seen=gate.marker_seen, coin_drawn=gate.coin_drawn, aborted=gate.aborted,
        cap_cut=cut)


def test_each_constructed_rollout_has_the_outcome_it_was_built_with():
    for name, ids, u, expected in _rollouts():
        _, out = _outcome(ids, u)
        assert (out.marker, out.marker_seen, out.coin_drawn, out.aborted, out.cap_cut) == \
            expected, name
    # where the gate forced EOS: after the trim and at the abort point
    stops = {name: _outcome(ids, u)[0].stopped_at for name, ids, u, _ in _rollouts()}
    assert stops["trimmed"] == 8 and stops["aborted"] == 10
    assert stops["early"] is stops["eps_kept"] is stops["plain_end"] is None


def test_step_rates_count_the_constructed_batch():
    rollouts = _rollouts()
    outcomes = [_outcome(ids, u)[1] for _, ids, u, _ in rollouts]
    rates = step_rates(outcomes)
    # by construction: markers in early, trimmed, between_polls; seen in trimmed; aborted:
    # aborted; eps-kept: eps_kept, also the one cut by the cap; tokens: every id incl. EOS
    n = len(rollouts)
    assert rates["marker_rate"] == pytest.approx(3 / n)
    assert rates["marker_seen_rate"] == pytest.approx(1 / n)
    assert rates["abort_rate"] == pytest.approx(1 / n)
    assert rates["eps_kept"] == 1.0
    assert rates["cap_cut_rate"] == pytest.approx(1 / n)
    assert rates["tokens_generated"] == 5 + 9 + 11 + 20 + 8 + 10
    assert step_rates([]) == dict.fromkeys(rates, 0.0)


def test_a_coin_drawn_rollout_never_counts_as_reaching_the_marker():
    gate = RolloutGate(PARAMS, answer_marker("boxed"), 0.1)
    gate.coin_drawn = True  # no marker by K2 + G as the gate saw it
    assert not marker_reached(gate, lambda: "\\boxed{7}", answer_marker("boxed"))
    fresh = RolloutGate(PARAMS, answer_marker("boxed"), 0.1)
    called = []
    fresh.tau = 6
    assert marker_reached(fresh, lambda: called.append(1) or "", answer_marker("boxed"))
    assert not called  # seen by the gate: nothing decoded


# -- a real trainer step ---------------------------------------------------------------------


def zero_reward(completions, **kwargs):
    return [0.0] * len(completions)


@pytest.fixture(scope="module")
def tiny_model_dir(embedded_model_dir, tmp_path_factory):
    """A one-layer random model with the embedded model's tokenizer: real TRL steps in
    seconds."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(embedded_model_dir)
    config.num_hidden_layers, config.hidden_size, config.intermediate_size = 1, 64, 128
    config.num_attention_heads, config.num_key_value_heads = 2, 1
    config.head_dim = 32
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-duet-rates")
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    AutoTokenizer.from_pretrained(embedded_model_dir).save_pretrained(path)
    return path


def test_a_trainer_step_logs_the_rates_of_its_own_rollouts(weft_home, tiny_model_dir,
                                                           monkeypatch):
    """A random model writes no boxed answer, so the marker here fires on any "e" in the text,
    and the gate polls from token 1 and aborts at token 2: some rollouts are seen and trimmed,
    some aborted. The step's logged rates are recounted from the completions and gates the
    step produced (allocated rollouts only: unallocated slots are not rollouts)."""
    from datasets import Dataset
    from transformers import AutoTokenizer

    from training.config import build_config
    from training.data import grpo_examples, load_dataset
    from training.duet import core
    from training.duet.trainer import DuetGRPOTrainer

    def e_marker(fmt):
        return lambda text: "e" in text

    monkeypatch.setattr(core, "answer_marker", e_marker)
    cap = 12
    config = build_config("grpo", {
        "model_name_or_path": str(tiny_model_dir), "dataset": "builtin:arith",
        "dataset_limit": 2, "answer_format": "boxed",
        "rewards": [{"name": "outcome", "answer_format": "boxed"}], "loss_type": "dapo",
        "num_generations": 4, "per_device_train_batch_size": 8, "max_completion_length": cap,
        "max_steps": 1, "learning_rate": 1e-4, "use_cpu": True, "bf16": False,
        "gradient_checkpointing": False, "torch_threads": 1, "logging_steps": 1,
        "save_strategy": "no", "report_to": "none", "recipe": "duet-rates",
        "duet": {"budget_fraction": 1.0, "full_rollouts": 3, "n_min": 1, "eps_abort": 0.3,
                 "grace": 1, "poll_every": 1, "tail_tokens": 8, "window": 64,
                 "refit_every": 1}})
    data = load_dataset(config.dataset, limit=config.dataset_limit, seed=config.seed)
    tokenizer = AutoTokenizer.from_pretrained(config.model_name_or_path)
    trainer = DuetGRPOTrainer(model=config.model_name_or_path,
                              reward_funcs=[zero_reward],
                              args=config,
                              train_dataset=Dataset.from_list(grpo_examples(data.rows)),
                              processing_class=tokenizer,
                              **config.trainer_kwargs(config.model_name_or_path))
    # poll from token 1; abort a rollout without a marker at K2 + G = 2 tokens (eps 0.3)
    trainer.quantiles.k1, trainer.quantiles.k2 = 1, 1
    seen = {}
    inner = trainer._generate_and_score_completions

    def recording(inputs):
        out = inner(inputs)
        seen["plan"] = trainer._pending["plan"]
        seen["ids"] = out["completion_ids"].tolist()
        return out

    monkeypatch.setattr(trainer, "_generate_and_score_completions", recording)
    trainer.train()
    (log,) = [h for h in trainer.state.log_history if "duet/lambda" in h]
    plan, ids = seen["plan"], seen["ids"]
    gates = plan["gates"]
    eos = set(trainer.eos_token_ids)
    assert len(gates) == sum(plan["counts"]) < len(ids)  # some slots unallocated

    counts = Counter()
    for row, gate in gates.items():
        toks = ids[row]
        end = next((i + 1 for i, t in enumerate(toks) if t in eos), len(toks))
        text = tokenizer.decode(toks[:end], skip_special_tokens=False)
        reached = gate.marker_seen or (not gate.coin_drawn and "e" in text)
        counts["marker"] += reached
        counts["seen"] += gate.marker_seen and not gate.coin_drawn
        counts["aborted"] += gate.aborted
        counts["kept"] += gate.coin_drawn and not gate.aborted
        counts["cut"] += (gate.stopped_at is None and end == cap and toks[end - 1] not in eos)
        counts["tokens"] += end
    n = len(gates)
    assert log["duet/marker_rate"] == pytest.approx(counts["marker"] / n)
    assert log["duet/marker_seen_rate"] == pytest.approx(counts["seen"] / n)
    assert log["duet/abort_rate"] == pytest.approx(counts["aborted"] / n)
    assert log["duet/eps_kept"] == counts["kept"]
    assert log["duet/cap_cut_rate"] == pytest.approx(counts["cut"] / n)
    assert log["duet/tokens_generated"] == counts["tokens"]
    assert log["duet/k1"] == 1 and log["duet/k2"] == 1 and log["duet/abort_at"] == 2
    assert log["duet/budget_used"] == pytest.approx(
        log["duet/tokens_generated"] / log["duet/token_budget"])
    # the batch exercised more than one outcome: markers seen and an abort
    assert 0 < counts["seen"] < n and counts["aborted"] > 0
