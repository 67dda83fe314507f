"""eval/tandem_metrics.py: legibility (Tandem RL §4.5) against prefix-by-prefix brute force on the
embedded model, and the drift statistics (§4.4) against hand-computed closed forms."""

from __future__ import annotations

import math

import pytest
import torch

from eval.tandem_metrics import legibility, marginal_drift, survival, token_counts


@pytest.fixture(scope="module")
def models(embedded_model_dir, load_model_pair):
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    tok, senior, junior = load_model_pair(embedded_model_dir, seed=2)
    yield tok, senior, junior
    torch.set_num_threads(old)


def next_token_probs(model, prefix):
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prefix])).logits[0, -1].double()
    return torch.softmax(logits, dim=-1)


def test_legibility_matches_prefix_by_prefix_brute_force(models):
    tok, senior, junior = models
    prompt = tok.encode("Question: what is 2 + 3?\nAnswer:")
    completion = tok.encode(" 2 + 3 = 5, so the answer is 5.")
    (got,) = legibility(senior, junior, [prompt], [completion])
    ces, overlaps = [], []
    for t, token in enumerate(completion):
        prefix = prompt + completion[:t]
        p_j, p_s = next_token_probs(junior, prefix), next_token_probs(senior, prefix)
        ces.append(-math.log(float(p_j[token])))
        overlaps.append(float(torch.minimum(p_s, p_j).sum()))
    assert got.tokens == len(completion)
    assert got.junior_ce_nats == pytest.approx(sum(ces) / len(ces), rel=1e-4, abs=1e-4)
    assert got.overlap == pytest.approx(sum(overlaps) / len(overlaps), abs=1e-4)
    assert 0.0 < got.overlap < 1.0

    (same,) = legibility(senior, senior, [prompt], [completion])
    assert same.overlap == pytest.approx(1.0, abs=1e-9)


def test_drift_matches_the_closed_form():
    senior = token_counts([[0, 0, 2], [0, 3, 3]], vocab_size=4)   # counts 3, 0, 1, 2
    junior = token_counts([[1, 1, 2, 2, 0, 3]], vocab_size=4)     # counts 1, 2, 2, 1
    assert senior.tolist() == [3, 0, 1, 2] and junior.tolist() == [1, 2, 2, 1]
    drift = marginal_drift(senior, junior, min_count=2, smoothing=0.5)
    q_s = [(c + 0.5) / (6 + 2.0) for c in (3, 0, 1, 2)]
    q_j = [(c + 0.5) / (6 + 2.0) for c in (1, 2, 2, 1)]
    assert drift.token_ids == [1, 2]
    assert drift.log_ratio == pytest.approx([math.log(q_s[1] / q_j[1]),
                                             math.log(q_s[2] / q_j[2])])
    assert drift.kl == pytest.approx(sum(a * math.log(a / b) for a, b in zip(q_s, q_j)))
    with pytest.raises(ValueError, match="outside"):
        token_counts([[4]], vocab_size=4)


def test_survival_curve_counts_strict_exceedances():
    assert survival([0.1, -0.5, 1.0, -2.0], [0.0, 0.5, 1.5, 3.0]) == [1.0, 0.5, 0.25, 0.0]
