"""SxS reinforcement learning against the paper (SxS §3.2 Eq. 12-19, App. C).

Independent references used here: a literal transcription of App. C.1 (Eq. 20-21, with the
documented conventions for the undefined cases) for the target scores, and a KKT certificate
(stationarity with non-negative multipliers on the active constraints, which is sufficient for
a convex QP) for the optimality of the shaped rewards; the QP's constraints (Eq. 16-17) are
checked on the weighted total a TRL trainer sums, for the real recipe's rewards.
"""

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from training import rewards as R
from training.config import build_config
from training.config_recipes import read_recipe

TOL = 1e-7


# ---------------------------------------------------------------------------------------------
# independent references


def paper_scores(correct, lengths, interleaved):
    """App. C.1 literally: wrong rollouts (and, our rule, correct ones without a think block)
    take the largest l observed in the group, l being Eq. 20's longest reasoning block, so
    only rollouts with a think block have one; S = -(l - mu)/sigma with mu, sigma over the
    correct rollouts. sigma = 0: correct 0, wrong -1 (documented convention)."""
    l_max = max([l for l, f in zip(lengths, interleaved) if f], default=0)
    eff = np.array([l if (c and f) else l_max for c, l, f in zip(correct, lengths, interleaved)],
                   dtype=float)
    ok = eff[np.array(correct)]
    mu, sd = ok.mean(), ok.std()
    if sd == 0:
        return np.array([0.0 if c else -1.0 for c in correct])
    return -(eff - mu) / sd


def assert_qp_optimal(r, s, correct, eps):
    """Eq. 15-17: r is feasible and satisfies the KKT conditions for targets s."""
    r, s = np.asarray(r, float), np.asarray(s, float)
    g = len(r)
    scale = max(1.0, float(np.abs(s).max()))
    sign = np.array([1.0 if c else -1.0 for c in correct])
    slack = sign * (r - r.mean()) - eps  # >= 0 for every constraint
    assert slack.min() >= -TOL * scale, f"constraint violated by {-slack.min()}"
    active = np.flatnonzero(slack <= 1e-6 * scale)
    grad = 2 * (r - s)
    if len(active) == 0:
        assert np.abs(grad).max() <= 1e-6 * scale
        return
    rows = np.stack([sign[i] * (np.eye(g)[i] - 1.0 / g) for i in active])
    mu, *_ = np.linalg.lstsq(rows.T, grad, rcond=None)
    assert np.abs(rows.T @ mu - grad).max() <= 1e-6 * scale, "not stationary"
    if len(active) < g:  # any proper subset of the constraint gradients is independent
        assert mu.min() >= -1e-6 * scale, f"negative multiplier {mu.min()}"
    else:  # all active: the multipliers are mu + t * sign (sum_i sign_i * row_i = 0); some t
        lo = -mu[sign > 0].min()  # must make every one of them non-negative
        hi = mu[sign < 0].min()
        assert lo <= hi + 1e-6 * scale, "no non-negative multipliers"


def think(n_words):
    return "<think>" + " ".join(["w"] * n_words) + "</think>"


def rollout(n_words, right, gold=7):
    """An interleaved completion whose longest think block has ``n_words`` words."""
    answer = gold if right else gold + 1
    return f"{think(n_words)}<speak>so</speak>{think(1)}<speak>\\boxed{{{answer}}}</speak>"


# ---------------------------------------------------------------------------------------------
# wrong rollouts get the worst case (App. C.1)


def test_worked_example_orders_correct_by_longest_think_and_wrong_last():
    shaped = R.shape_group([True, True, True, False], [10, 20, 30, 99], epsilon=0.5)
    assert shaped[0] > shaped[1] > shaped[2] > shaped[3]
    sigma = math.sqrt(200 / 3)
    expected_s = [10 / sigma, 0.0, -10 / sigma, -79 / sigma]
    assert R.structure_scores([True, True, True, False], [10, 20, 30, 99]) == \
        pytest.approx(expected_s)
    # these targets already satisfy Eq. 16-17 (mean -2.42: correct >= mean + 0.5, wrong below),
    # so the QP leaves them unchanged
    assert shaped == pytest.approx(expected_s)
    mean = sum(shaped) / 4
    assert min(shaped[:3]) >= mean + 0.5 and shaped[3] <= mean - 0.5


def test_worst_case_is_the_longest_observed_reasoning_block_not_a_whole_reply():
    # Correct rollouts with think blocks of 10 and 20 words, a correct one without a think
    # block and a wrong one without a think block whose whole reply is 1,000 words. Eq. 20
    # gives no value to replies without a think block, so the worst case is 20 (C.1: "the
    # maximum observed length"): effective lengths 10, 20, 20, 20; over the correct ones
    # mu = 50/3 and sigma = sqrt(((10 - 50/3)^2 + 2 (20 - 50/3)^2) / 3) = sqrt(200) / 3.
    sigma = math.sqrt(200) / 3
    s = R.structure_scores([True, True, True, False], [10, 20, 500, 1000],
                           [True, True, False, False])
    expected = [(50 / 3 - 10) / sigma, (50 / 3 - 20) / sigma, (50 / 3 - 20) / sigma,
                (50 / 3 - 20) / sigma]
    assert s == pytest.approx(expected)
    # the two interleaved correct rollouts stay 3/sqrt(2) = 2.12 apart; with the whole reply
    # as the worst case (1,000) they were 0.02 apart, about 100 times less
    assert s[0] - s[1] == pytest.approx(10 / sigma)
    shaped = R.shape_group([True, True, True, False], [10, 20, 500, 1000], 0.5,
                           [True, True, False, False])
    assert_qp_optimal(shaped, expected, [True, True, True, False], 0.5)
    assert shaped[0] > shaped[1] and min(shaped[:3]) > shaped[3]


def test_no_think_block_in_the_group_ties_every_rollout_at_the_worst_case():
    # nothing observed: every rollout is at the same worst case, sigma = 0 (correct 0,
    # wrong -1), however long the replies are
    assert R.structure_scores([True, True, False], [3, 700, 40], [False, False, False]) == \
        [0.0, 0.0, -1.0]


def test_worst_case_wrong_rollout_ranks_correct_ones_where_neg_s_min_did_not():
    # Under the removed rule (wrong target = -(smallest correct score)), this wrong rollout got
    # target +1, above both correct ones, and the QP tied them at the bound.
    shaped = R.shape_group([True, True, False], [1, 6, 2], epsilon=0.5)
    assert shaped[0] > shaped[1] > shaped[2]


groups = st.integers(2, 12).flatmap(lambda g: st.tuples(
    st.lists(st.booleans(), min_size=g, max_size=g).filter(lambda c: any(c) and not all(c)),
    st.lists(st.integers(1, 400), min_size=g, max_size=g),
    st.lists(st.booleans(), min_size=g, max_size=g),
))


@settings(max_examples=300, deadline=None)
@given(group=groups, eps=st.sampled_from([0.05, 0.5, 2.0]))
def test_shaped_rewards_rank_correct_rollouts_and_keep_the_margin(group, eps):
    correct, lengths, interleaved = group
    shaped = np.array(R.shape_group(correct, lengths, eps, interleaved))
    targets = paper_scores(correct, lengths, interleaved)
    assert R.structure_scores(correct, lengths, interleaved) == pytest.approx(targets, abs=1e-9)
    assert_qp_optimal(shaped, targets, correct, eps)
    mean = shaped.mean()
    ok = [i for i, c in enumerate(correct) if c]
    bad = [i for i, c in enumerate(correct) if not c]
    assert shaped[ok].min() >= shaped[bad].max() + 2 * eps - 1e-6
    # strict ranking of interleaved correct rollouts by longest think block, except where the
    # QP's correctness constraint (Eq. 16) is active for both: there they tie at mean + eps
    top = max(1.0, float(np.abs(targets).max()))
    for i in ok:
        for k in ok:
            if interleaved[i] and interleaved[k] and lengths[i] < lengths[k]:
                assert shaped[i] >= shaped[k] - 1e-9 * top
                if shaped[i] - shaped[k] <= 1e-9 * top:
                    assert shaped[k] == pytest.approx(mean + eps, abs=1e-7 * top)
                    assert shaped[i] == pytest.approx(mean + eps, abs=1e-7 * top)
    # a correct rollout without a think block never beats an interleaved correct one
    for i in ok:
        for k in ok:
            if interleaved[i] and not interleaved[k]:
                assert shaped[k] <= shaped[i] + 1e-9 * top


SHAPED = read_recipe("sxs_grpo_shaped.cpu").values["rewards"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=st.integers(2, 6), data=st.data(), extra_outcome=st.sampled_from([0.0, 0.5, 2.0]))
def test_margin_holds_on_the_total_reward_of_the_shaped_recipe(g, data, extra_outcome):
    specs = R.parse_reward_specs(SHAPED)
    funcs, weights = R.build_rewards(specs, num_generations=g)
    eps = next(s.args["epsilon"] for s in specs if s.name == "granularity")
    w_g = next(s.weight for s in specs if s.name == "granularity")
    # the recipe's outcome (weight 0) plus, to check the claim in the docstring, extra outcome
    weights = [w + (extra_outcome if s.name == "outcome" else 0.0) for s, w in zip(specs, weights)]
    correct = data.draw(st.lists(st.booleans(), min_size=g, max_size=g))
    words = data.draw(st.lists(st.integers(1, 40), min_size=g, max_size=g))
    texts = [rollout(n, c) for n, c in zip(words, correct)]
    columns = {"prompts": ["p"] * g, "completions": texts, "answer": ["7"] * g}
    total = np.sum([w * np.array(fn(**columns), float) for fn, w in zip(funcs, weights)], axis=0)
    if all(correct) or not any(correct):
        assert R.degenerate_groups(correct, g) == [True]
        return
    mean = total.mean()
    for t, c in zip(total, correct):
        if c:
            assert t >= mean + w_g * eps - 1e-9  # Eq. 16 on the total
        else:
            assert t <= mean - w_g * eps + 1e-9  # Eq. 17 on the total


# ---------------------------------------------------------------------------------------------
# no think block cannot win the granularity reward


def test_no_reasoning_or_all_visible_is_not_rewarded_over_interleaving():
    fn = R.get_granularity_reward(num_generations=4, epsilon=0.5)
    interleaved = rollout(3, True)  # longest think block: 3 words
    no_reasoning = "<speak>\\boxed{7}</speak>"  # 1 word, no think block
    all_visible = "<speak>" + " ".join(["w"] * 12) + " \\boxed{7}</speak>"
    wrong = rollout(2, False)
    out = fn(prompts=["p"] * 4, completions=[interleaved, no_reasoning, all_visible, wrong],
             answer=["7"] * 4)
    # the 3-word block is the longest observed, so it IS the worst case (C.1): the replies
    # without a think block tie with it, whatever their own length, and never beat it
    assert out[0] == pytest.approx(out[1]) == pytest.approx(out[2])
    assert min(out[:3]) > out[3]
    out = fn(prompts=["p"] * 4,
             completions=[interleaved, no_reasoning, all_visible, rollout(4, False)],
             answer=["7"] * 4)
    assert out[0] > out[1] == pytest.approx(out[2]) and out[2] > out[3]
    # untagged text is speak too (tolerant parse): still no think block. It is put at the
    # group's worst case: level with the longest interleaved think block, below shorter ones
    out = fn(prompts=["p"] * 4, completions=[interleaved, "\\boxed{7}", rollout(5, True), wrong],
             answer=["7"] * 4)
    assert out[0] > out[1] == pytest.approx(out[2]) and out[2] > out[3]


def test_no_reasoning_ties_at_worst_with_the_longest_interleaved():
    fn = R.get_granularity_reward(num_generations=3, epsilon=0.5)
    out = fn(prompts=["p"] * 3, completions=[rollout(9, True), "\\boxed{7}", rollout(1, False)],
             answer=["7"] * 3)
    assert out[1] <= out[0]


def test_granularity_epsilon_must_be_positive():
    with pytest.raises(ValueError, match="epsilon must be a number > 0"):
        R.get_granularity_reward(num_generations=2, epsilon=0.0)


# ---------------------------------------------------------------------------------------------
# outcome-only recipes


@pytest.mark.parametrize("recipe", ["sxs_grpo", "sxs_grpo.cpu", "sxs_grpo_shaped",
                                    "sxs_grpo_shaped.cpu"])
def test_sxs_recipes_have_no_structural_reward(recipe, weft_home):
    overrides = {} if recipe.endswith(".cpu") else {"bf16": False, "use_cpu": True}
    from training.config import load_config

    config = load_config(recipe, overrides)
    used = {s.name: s.weight for s in config.reward_specs()}
    assert "format" not in used
    if "shaped" in recipe:  # Eq. 15: the QP's R is the reward; outcome only as the verifier
        assert used == {"granularity": 1.0, "outcome": 0.0}
        assert config.scale_rewards == "group"  # Eq. 19 divides by the group std
    else:  # Eq. 12: R_i = g_i
        assert used == {"outcome": 1.0}
    assert config.drop_degenerate_groups
    assert config.correctness_reward in (None, "outcome")


# ---------------------------------------------------------------------------------------------
# the degenerate-group filter is about correctness


def test_filter_follows_correctness_not_the_combined_reward():
    g = 2
    outcome = R.get_outcome_reward("boxed")
    penalty = R.get_length_penalty_reward(g, "boxed")
    # group 1: a long correct and a short wrong rollout; group 2: two correct of unequal length
    texts = ["a b c d e f \\boxed{4}", "\\boxed{5}", "\\boxed{4}", "x y z \\boxed{4}"]
    columns = {"prompts": ["p", "p", "q", "q"], "completions": texts, "answer": ["4"] * 4}
    o = np.array(outcome(**columns))
    total = o + 2.0 * np.array(penalty(**columns))  # outcome + length penalty (weight 2)
    assert total[0] == total[1] and total[2] != total[3]  # the case the old rule got wrong
    correct = R.verdicts(o.tolist())
    assert correct == [True, False, True, True]
    assert R.degenerate_groups(correct, g) == [False, True]
    assert R.keep_rows(correct, g) == [True, True, False, False]


def test_verdicts_and_choice_of_correctness_reward():
    assert R.verdicts([1.0, 0.0, None, float("nan")]) == [True, False, None, None]
    with pytest.raises(ValueError, match="1/0 verdict"):
        R.verdicts([0.5])
    specs = R.parse_reward_specs([{"name": "granularity"}, {"name": "outcome", "weight": 0.0}])
    assert R.correctness_reward_index(specs) == 1
    assert R.correctness_reward_index(specs, "outcome") == 1
    with pytest.raises(ValueError, match="must name a verifier"):
        R.correctness_reward_index(specs, "granularity")
    with pytest.raises(ValueError, match="no reward in .* tells correct from wrong"):
        R.correctness_reward_index(R.parse_reward_specs(["format"]))
    both = R.parse_reward_specs(["outcome", "budget"])
    with pytest.raises(ValueError, match="set correctness_reward"):
        R.correctness_reward_index(both)
    assert R.correctness_reward_index(both, "budget") == 1


@pytest.mark.parametrize("values, message", [
    ({"rewards": ["format"], "drop_degenerate_groups": True},
     r"field `drop_degenerate_groups`: no reward in \['format'\] tells correct"),
    ({"rewards": ["outcome"], "correctness_reward": "format"},
     r"field `correctness_reward`: correctness_reward must name a verifier"),
])
def test_config_rejects_a_filter_without_a_verifier(values, message, weft_home):
    from training.config import load_config
    from training.config_recipes import RecipeError

    with pytest.raises(RecipeError, match=message):
        load_config("rlvr_grpo.cpu", values)


def _verdict(completions, kind, **kwargs):
    # group "mixed": first correct, second wrong; group "all_correct": both correct
    return [float(k == "all_correct" or i % 2 == 0) for i, k in enumerate(kind)]


def _shaping(completions, kind, **kwargs):
    # makes the mixed group's totals tie (1, 1) and the all-correct group's differ (1, 1.5)
    return [(0.5 * (i % 2)) if k == "all_correct" else float(i % 2) for i, k in enumerate(kind)]


def _trainer(model_dir, **extra):
    from datasets import Dataset

    from training.grpo_trainer import WeftGRPOTrainer

    config = build_config("grpo", {
        "model_name_or_path": str(model_dir), "dataset": "builtin:arith",
        "rewards": ["outcome", "length_penalty"], "drop_degenerate_groups": True,
        "num_generations": 2, "per_device_train_batch_size": 4, "max_completion_length": 4,
        "max_steps": 1, "use_cpu": True, "bf16": False, "gradient_checkpointing": False,
        "torch_threads": 1, "save_strategy": "no", "report_to": "none", "recipe": "test-filter"})
    data = Dataset.from_list([{"prompt": "2+2=", "kind": "mixed"},
                              {"prompt": "3+3=", "kind": "all_correct"}])
    return WeftGRPOTrainer(model=str(model_dir), reward_funcs=[_verdict, _shaping], args=config,
                           train_dataset=data, **extra)


def test_trainer_filter_drops_by_the_named_verifier(weft_home, embedded_model_dir):
    with pytest.raises(ValueError, match="needs correctness_reward"):
        _trainer(embedded_model_dir, drop_degenerate_groups=True)
    with pytest.raises(ValueError, match="must name exactly one of the reward functions"):
        _trainer(embedded_model_dir, drop_degenerate_groups=True, correctness_reward="outcome")
    trainer = _trainer(embedded_model_dir, drop_degenerate_groups=True,
                       correctness_reward="_verdict")
    trainer.model.train()
    inputs = ([{"prompt": "2+2=", "kind": "mixed"}] * 2
              + [{"prompt": "3+3=", "kind": "all_correct"}] * 2)
    out = trainer._generate_and_score_completions(inputs)
    tokens = out["completion_mask"].sum(dim=1).tolist()
    assert tokens[0] > 0 and tokens[1] > 0  # mixed correctness, tied totals: kept
    assert tokens[2] == 0 and tokens[3] == 0  # all correct, different totals: dropped
    assert out["num_items_in_batch"].item() == tokens[0] + tokens[1]
    assert trainer._metrics["train"]["filtered_group_share"][-1] == 0.5
    # the setup is the case a rule on the weighted total gets wrong: the kept group's totals tie
    # and the dropped group's differ
    kinds = [row["kind"] for row in inputs]
    per_func = torch.tensor([_verdict(None, kinds), _shaping(None, kinds)]).T
    total = (per_func * trainer.reward_weights).sum(dim=1).tolist()
    assert total[0] == total[1] and total[2] != total[3]
