"""eval/tandem_metrics.py: legibility (Tandem RL §4.5) against prefix-by-prefix brute force on the
embedded model, its corpus summary and per-problem figures against hand computations over
positions, and the drift statistics (§4.4) against hand-computed closed forms."""

from __future__ import annotations

import math

import pytest
import torch

from eval.tandem_metrics import (
    Legibility,
    drift_summary,
    legibility,
    marginal_drift,
    per_problem,
    pooled_legibility,
    survival,
    token_counts,
)


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


def test_legibility_says_how_far_it_is_to_an_enclosing_heartbeat(models):
    """Scoring takes two forward passes a sample (minutes on CPU), so a claim's beat must say
    what it is doing and how many samples are done, not only that it is still running."""
    from pipelines.progress import heartbeat

    tok, senior, junior = models
    prompts = [tok.encode(f"Question: what is {i} + 1?\nAnswer:") for i in range(3)]
    completions = [tok.encode(f" {i + 1}") for i in range(2)] + [[]]
    lines: list[str] = []
    with heartbeat("legibility", lines.append, every_s=0.005) as info:
        stats = legibility(senior, junior, prompts, completions)
    assert [s.tokens for s in stats] == [len(c) for c in completions]
    assert info["done"] == 3 and info["total"] == 3
    assert info["doing"] == "junior cross-entropy of the senior's outputs"
    # every beat after the first report carries the count (how many beats fire is timing)
    told = [b for b in lines[1:-1] if "junior cross-entropy" in b]
    assert all("/3 (" in b for b in told), told


def test_drift_matches_the_closed_form():
    senior = token_counts([[0, 0, 2], [0, 3, 3]], vocab_size=5)   # counts 3, 0, 1, 2, 0
    junior = token_counts([[1, 1, 2, 2, 0, 3]], vocab_size=5)     # counts 1, 2, 2, 1, 0
    assert senior.tolist() == [3, 0, 1, 2, 0] and junior.tolist() == [1, 2, 2, 1, 0]
    drift = marginal_drift(senior, junior, min_count=2, smoothing=0.5)
    # log-ratios: half a count added to the token's two counts, totals 6 and 6
    assert drift.token_ids == [1, 2]
    assert drift.log_ratio == pytest.approx([math.log(0.5 / 6) - math.log(2.5 / 6),
                                             math.log(1.5 / 6) - math.log(2.5 / 6)])
    # KL on the tokens both wrote, {0, 2, 3}: senior 3, 1, 2 of 6; junior 1, 2, 1 of 4
    p, q = [3 / 6, 1 / 6, 2 / 6], [1 / 4, 2 / 4, 1 / 4]
    assert drift.kl == pytest.approx(sum(a * math.log(a / b) for a, b in zip(p, q)))
    assert (drift.kl_tokens, drift.kl_senior_mass, drift.kl_junior_mass) == (3, 1.0, 4 / 6)
    with pytest.raises(ValueError, match="outside"):
        token_counts([[4]], vocab_size=4)
    with pytest.raises(ValueError, match="tokens from both models"):
        marginal_drift(torch.zeros(5), junior)


def test_drift_does_not_depend_on_vocabulary_size_or_smoothing_scale():
    # the senior wrote exactly the junior's text, three times over: every frequency is the same,
    # so every log-ratio is ~0 and the KL is 0, in a 49,152-token vocabulary as in a 10-token
    # one. (Add-0.5 smoothing spread over the whole 49,152-token vocabulary put these log-ratios
    # near +1, the log of the corpora's size ratio, and a KL that moved with the constant.)
    text = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4] * 30
    for vocab in (10, 49_152):
        junior = token_counts([text], vocab_size=vocab)
        senior = token_counts([text] * 3, vocab_size=vocab)
        for smoothing in (0.5, 0.001):
            drift = marginal_drift(senior, junior, min_count=20, smoothing=smoothing)
            assert drift.token_ids == sorted(set(text))
            # by hand: log((3c + a) / 1800) - log((c + a) / 600) for each token count c
            expected = [math.log((3 * text.count(t) + smoothing) / (3 * len(text)))
                        - math.log((text.count(t) + smoothing) / len(text))
                        for t in drift.token_ids]
            assert drift.log_ratio == pytest.approx(expected, abs=1e-12)
            assert max(abs(r) for r in drift.log_ratio) < 0.02
            assert drift.kl == pytest.approx(0.0, abs=1e-12)
            assert drift.kl_tokens == len(set(text)) and drift.kl_senior_mass == 1.0


def test_legibility_summary_averages_every_position_not_sample_means():
    # §4.5: the mean over all positions. Sample A: 1 token at 4.0 nats; sample B: 3 tokens at
    # 1.0, 1.0 and 1.0 nats -> (4 + 3) / 4 = 1.75 (the mean of sample means would be 2.5).
    stats = [Legibility(1, 4.0, 0.2), Legibility(3, 1.0, 0.9), Legibility(0, math.nan, math.nan)]
    ce, overlap = pooled_legibility(stats)
    assert ce == pytest.approx((4.0 + 1.0 * 3) / 4)
    assert overlap == pytest.approx((0.2 + 0.9 * 3) / 4)
    drift = marginal_drift(torch.tensor([5.0, 5.0]), torch.tensor([5.0, 5.0]), min_count=1)
    row = drift_summary(drift, stats, model="m", junior="j", benchmark="b", min_count=1)
    assert row["junior_ce_nats"] == pytest.approx(1.75) and row["overlap"] == pytest.approx(0.725)
    assert (row["samples"], row["tokens"]) == (2, 4)
    assert all(math.isnan(x) for x in pooled_legibility([Legibility(0, math.nan, math.nan)]))
    # per problem (§5.3 pairs problems): the same position average within each problem
    rows = [{"problem_id": "p", "junior_ce_nats": 4.0, "tokens": 1},
            {"problem_id": "p", "junior_ce_nats": 1.0, "tokens": 3},
            {"problem_id": "q", "junior_ce_nats": 2.0, "tokens": 5}]
    assert per_problem(rows, "junior_ce_nats") == pytest.approx({"p": 1.75, "q": 2.0})


def test_survival_curve_counts_strict_exceedances():
    assert survival([0.1, -0.5, 1.0, -2.0], [0.0, 0.5, 1.5, 3.0]) == [1.0, 0.5, 0.25, 0.0]
