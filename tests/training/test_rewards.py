"""Table tests for every reward, and property tests of the granularity-shaping QP against an
independent brute-force (active-set enumeration) solver."""

import itertools
import math

import numpy as np
import pytest

from training import rewards as R

CHAT = lambda text: [{"role": "assistant", "content": text}]


# ---------------------------------------------------------------------------------------------
# completion text (answer regions: tests/pipelines/test_formats.py)


@pytest.mark.parametrize("completion, expected", [
    ("plain", "plain"),
    (CHAT("chat text"), "chat text"),
    ([{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}], "ab"),
])
def test_completion_text(completion, expected):
    assert R.completion_text(completion) == expected


def test_completion_text_rejects_garbage():
    with pytest.raises(TypeError, match="completion must be"):
        R.completion_text(42)
    with pytest.raises(TypeError, match="messages"):
        R.completion_text(["not a message"])


# ---------------------------------------------------------------------------------------------
# outcome


@pytest.mark.parametrize("fmt, completion, gold, expected", [
    ("boxed", "so the result is \\boxed{42}", "42", 1.0),
    ("boxed", "so the result is \\boxed{41}", "42", 0.0),
    ("boxed", "no final answer here", "42", 0.0),
    ("boxed", "\\boxed{\\frac{1}{2}}", "0.5", 1.0),
    ("boxed", CHAT("The answer is \\boxed{12}."), "12", 1.0),
    ("sxs", "<think>maybe \\boxed{41}</think><speak>It is \\boxed{42}.</speak>", "42", 1.0),
    ("sxs", "<think>it is \\boxed{42}</think><speak>It is \\boxed{41}.</speak>", "42", 0.0),
    ("sxs", "<think>it is \\boxed{42}</think>", "42", 0.0),
    ("tir", "<think>done</think><answer>\\boxed{42}</answer>", "42", 1.0),
    ("tir", "<think>done</think><answer>42</answer>", "42", 1.0),
    ("tir", "<think>t</think><code>print(42)</code>", "42", 0.0),
    ("boxed", "\\boxed{42}", None, None),
    ("boxed", "\\boxed{42}", "  ", None),
])
def test_outcome_reward(fmt, completion, gold, expected):
    fn = R.get_outcome_reward(fmt)
    assert fn(completions=[completion], answer=[gold]) == [expected]
    assert fn.__name__ == f"outcome_{fmt}"
    assert fn.required_columns == ("answer",)


def test_outcome_reward_reads_named_gold_column_and_says_when_missing():
    fn = R.get_outcome_reward("boxed", gold_key="gold")
    assert fn(completions=["\\boxed{3}"], gold=["3"], prompts=["p"]) == [1.0]
    with pytest.raises(KeyError, match="'gold'"):
        fn(completions=["\\boxed{3}"], answer=["3"])


def test_outcome_reward_rejects_unknown_format():
    with pytest.raises(ValueError, match="answer_format"):
        R.get_outcome_reward("json")


# ---------------------------------------------------------------------------------------------
# format rewards


@pytest.mark.parametrize("schema, text, expected", [
    ("sxs", "<think>a</think><speak>b</speak>", 1.0),
    ("sxs", "  <think>a</think><speak>b</speak><think>c</think><speak>d</speak>\n", 1.0),
    # SxS Algorithm 1 lines 28-30: an optional trailing think block after the last speak
    ("sxs", "<think>a</think><speak>b</speak><think>c</think>", 1.0),
    ("sxs", "<think>a</think>\n<speak>b</speak>\n\n<think>c</think>\n", 1.0),  # whitespace
    ("sxs", "<think>a</think>", 0.0),  # nothing said
    ("sxs", "<speak>b</speak>", 0.0),  # no thinking
    ("sxs", "<think>a</think>stray<speak>b</speak>", 0.0),
    ("sxs", "<think>a<speak>b</speak>", 0.0),
    ("tir", "<think>\nplan\n</think>\n<code>\nprint(1)\n</code>", 1.0),
    ("tir", "<think>\ndone\n</think>\n<answer>\n\\boxed{1}\n</answer>", 1.0),
    ("tir", "<think>x</think><code>print(1)</code><interpreter>1</interpreter>", 0.0),
    ("tir", "<think>x</think><code> </code>", 0.0),
    ("tir", "just text", 0.0),
    ("boxed", "answer \\boxed{x}", 1.0),
    ("boxed", "answer x", 0.0),
])
def test_format_reward(schema, text, expected):
    fn = R.get_format_reward(schema)
    assert fn(completions=[text, CHAT(text)]) == [expected, expected]


def test_format_reward_rejects_unknown_schema():
    with pytest.raises(ValueError, match="schema"):
        R.get_format_reward("yaml")


# ---------------------------------------------------------------------------------------------
# groups


T, F = True, False


@pytest.mark.parametrize("correct, g, expected", [
    ([T, T, F, F], 2, [True, True]),  # all correct, all wrong
    ([T, F, T, T], 2, [False, True]),
    ([T, T, T, F], 4, [False]),  # one wrong among four is signal
    ([None, T, F, T], 2, [True, False]),  # one scorable rollout: no signal
    ([None, None, F, F], 2, [True, True]),
    ([None, T, F, None], 4, [False]),  # unscorable rows ignored, the rest is mixed
])
def test_degenerate_groups_by_correctness(correct, g, expected):
    assert R.degenerate_groups(correct, g) == expected


def test_keep_rows_and_group_errors():
    assert R.keep_rows([T, F, T, T], 2) == [True, True, False, False]
    with pytest.raises(ValueError, match="multiple of num_generations"):
        R.degenerate_groups([T, F, T], 2)
    assert R.check_groups(["a", "a", "b", "b"], 2) == [slice(0, 2), slice(2, 4)]
    with pytest.raises(ValueError, match="do not share one prompt"):
        R.check_groups(["a", "b", "b", "b"], 2)


# ---------------------------------------------------------------------------------------------
# granularity shaping


def test_structure_scores_table():
    # App. C.1: a wrong rollout takes the group's largest length, z-scored with the correct
    # rollouts' mean 20 and population std sqrt(200/3).
    sigma = math.sqrt(200 / 3)
    s = R.structure_scores([True, True, True, False], [10, 20, 30, 99])
    assert s == pytest.approx([10 / sigma, 0.0, -10 / sigma, -79 / sigma])
    # the wrong rollout's own l is short, but it still gets the group maximum (30)
    assert R.structure_scores([True, True, False], [10, 30, 1]) == pytest.approx([1, -1, -1])
    # sigma = 0: correct 0, wrong -1
    assert R.structure_scores([True, False], [5, 1]) == [0.0, -1.0]
    assert R.structure_scores([True, True, False], [4, 4, 9]) == [0.0, 0.0, -1.0]
    # a correct rollout without a think block is put at the worst case: effective lengths
    # 9, 3, 9, mean 7, population std sqrt((4 + 16 + 4) / 3) = sqrt(8)
    assert R.structure_scores([True, True, True], [1, 3, 9], [False, True, True]) == \
        pytest.approx([-2 / math.sqrt(8), 4 / math.sqrt(8), -2 / math.sqrt(8)])
    with pytest.raises(ValueError, match="interleaved flags"):
        R.structure_scores([True], [1], [True, False])
    with pytest.raises(ValueError, match="at least one correct"):
        R.structure_scores([False, False], [1, 2])


def test_longest_think_length():
    text = "<think>one two three</think><speak>x</speak><think>a b</think>"
    assert R.longest_think_length(text) == 3

    class Chars:
        def encode(self, text, add_special_tokens=False):
            return list(text)

    assert R.longest_think_length(text, Chars()) == len("one two three")
    assert R.longest_think_length("no tags") is None
    assert R.longest_think_length("<think> </think><speak>x</speak>") is None  # empty block
    assert R.granularity_length("no tags at all") == (4, False)
    assert R.granularity_length(text) == (3, True)


def _objective(r, s):
    return float(np.sum((np.asarray(r) - np.asarray(s)) ** 2))


def _constraint_matrix(correct, eps):
    """Rows a with a.R >= b for the QP's constraints (mean written out)."""
    g = len(correct)
    rows, rhs = [], []
    for i, c in enumerate(correct):
        e = np.zeros(g)
        e[i] = 1.0
        row = e - np.full(g, 1.0 / g)  # R_i - mean(R)
        rows.append(row if c else -row)
        rhs.append(eps)
    return np.array(rows), np.array(rhs)


def brute_force_qp(scores, correct, eps):
    """Independent exact solver: try every active set, solve its equality-constrained
    least-squares problem by pseudo-inverse, keep feasible candidates, return the best."""
    s = np.asarray(scores, dtype=float)
    a, b = _constraint_matrix(correct, eps)
    best, best_val = None, math.inf
    for k in range(len(correct) + 1):
        for active in itertools.combinations(range(len(correct)), k):
            if active:
                aa, bb = a[list(active)], b[list(active)]
                r = s - aa.T @ np.linalg.pinv(aa @ aa.T) @ (aa @ s - bb)
                if np.max(np.abs(aa @ r - bb)) > 1e-8:
                    continue
            else:
                r = s.copy()
            if np.all(a @ r - b >= -1e-9):
                val = _objective(r, s)
                if val < best_val - 1e-12:
                    best, best_val = r, val
    return best


def _random_group(rng, g):
    correct = [bool(x) for x in rng.integers(0, 2, size=g)]
    if all(correct):
        correct[rng.integers(g)] = False
    if not any(correct):
        correct[rng.integers(g)] = True
    return correct


@pytest.mark.parametrize("seed", range(40))
def test_qp_matches_independent_solver_and_satisfies_constraints(seed):
    rng = np.random.default_rng(seed)
    g = int(rng.integers(2, 9))
    correct = _random_group(rng, g)
    eps = float(rng.choice([0.0, 0.1, 0.5, 2.0]))
    scores = list(rng.normal(0, 2, size=g))
    ours = np.array(R.solve_granularity_qp(scores, correct, eps))
    mean = ours.mean()
    for r, c in zip(ours, correct):
        if c:
            assert r >= mean + eps - 1e-9
        else:
            assert r <= mean - eps + 1e-9
    reference = brute_force_qp(scores, correct, eps)
    assert ours == pytest.approx(reference, abs=1e-7)
    # optimality against random feasible points, too
    a, b = _constraint_matrix(correct, eps)
    for _ in range(50):
        candidate = ours + rng.normal(0, 0.5, size=g)
        if np.all(a @ candidate - b >= 0):
            assert _objective(ours, scores) <= _objective(candidate, scores) + 1e-9


def test_qp_keeps_targets_that_already_satisfy_constraints():
    scores = [3.0, 2.0, -3.0]
    assert R.solve_granularity_qp(scores, [True, True, False], 0.5) == pytest.approx(scores)


def test_qp_needs_both_kinds():
    with pytest.raises(ValueError, match="one correct and one wrong"):
        R.solve_granularity_qp([1, 2], [True, True])
    with pytest.raises(ValueError, match="epsilon"):
        R.solve_granularity_qp([1, 2], [True, False], -1)


@pytest.mark.parametrize("seed", range(10))
def test_shaping_prefers_shorter_thinking_among_correct(seed):
    rng = np.random.default_rng(100 + seed)
    g = 8
    correct = _random_group(rng, g)
    lengths = [int(x) for x in rng.integers(1, 200, size=g)]
    shaped = R.shape_group(correct, lengths, 0.5)
    ok = [(l, r) for l, r, c in zip(lengths, shaped, correct) if c]
    for (l1, r1), (l2, r2) in itertools.combinations(ok, 2):
        if l1 < l2:
            assert r1 >= r2 - 1e-9
    assert (min(r for r, c in zip(shaped, correct) if c)
            > max(r for r, c in zip(shaped, correct) if not c))


def test_shape_group_leaves_degenerate_groups_plain():
    assert R.shape_group([True, True], [3, 9]) == [1.0, 1.0]
    assert R.shape_group([False, False], [3, 9]) == [0.0, 0.0]


def test_worst_case_wrong_score_keeps_the_granularity_signal():
    # The old "-S_min = minus the smallest correct score" rule put this wrong rollout ABOVE the
    # correct mean and tied both correct rollouts; C.1's worst case keeps them apart.
    shaped = R.shape_group([True, True, False], [1, 6, 2])
    assert shaped[0] > shaped[1] > shaped[2]


def test_granularity_reward_end_to_end():
    fn = R.get_granularity_reward(num_generations=3, epsilon=0.5)
    good_short = "<think>a</think><speak>\\boxed{4}</speak>"
    good_long = "<think>a b c d e f</think><speak>\\boxed{4}</speak>"
    bad = "<think>a b</think><speak>\\boxed{5}</speak>"
    out = fn(prompts=["p"] * 3 + ["q"] * 3,
             completions=[good_short, good_long, bad, good_short, good_short, good_short],
             answer=["4"] * 6)
    mean = sum(out[:3]) / 3
    assert out[0] > out[1] >= mean + 0.5 - 1e-9 and out[2] <= mean - 0.5 + 1e-9
    assert out[3:] == [1.0, 1.0, 1.0]  # all correct: left for the degenerate filter
    with pytest.raises(ValueError, match="do not share one prompt"):
        fn(prompts=["p", "q", "p"], completions=[good_short] * 3, answer=["4"] * 3)


@pytest.mark.parametrize("gold", ["$$", "", "   ", None])
def test_granularity_and_outcome_agree_on_an_unusable_gold(gold):
    # a gold the grader cannot use is "not scorable" for every verifier-based reward: the
    # outcome reward's None, never an exception from one and a number from the other
    texts = ["<think>a</think><speak>\\boxed{4}</speak>", "<think>a b</think><speak>x</speak>"]
    outcome = R.get_outcome_reward("sxs")(completions=texts, answer=[gold] * 2)
    shaped = R.get_granularity_reward(num_generations=2)(prompts=["p"] * 2, completions=texts,
                                                         answer=[gold] * 2)
    assert outcome == [None, None]
    assert shaped == [None, None]


def test_granularity_marks_only_the_group_with_an_unusable_gold():
    good = "<think>a</think><speak>\\boxed{4}</speak>"
    bad = "<think>a b</think><speak>\\boxed{5}</speak>"
    out = R.get_granularity_reward(num_generations=2)(
        prompts=["p", "p", "q", "q"], completions=[good, bad, good, bad],
        answer=["$$", "$$", "4", "4"])
    assert out[:2] == [None, None]
    assert out[2] > out[3]


# ---------------------------------------------------------------------------------------------
# action-centric process reward


STEP_CODE = "<think>\nplan\n</think>\n<code>\nprint(6 * 7)\n</code>"
STEP_ANSWER = "<think>\ndone\n</think>\n<answer>\n\\boxed{42}\n</answer>"


@pytest.mark.parametrize("completion, ref, kind, last, expected", [
    (STEP_CODE, "print(6 * 7)", "code", False, 1.0),
    (STEP_ANSWER, "\\boxed{42}", "answer", True, 1.0),
    (STEP_ANSWER, "print(6 * 7)", "code", False, 0.0),  # wrong form for the position
    (STEP_CODE, "\\boxed{42}", "answer", True, 0.0),
    ("print(6 * 7)", "print(6 * 7)", "code", False, 0.0),  # no tags: gate closed
    (STEP_CODE, "print(6 * 8)", "code", False, 2 * 11 / 24),
])
def test_action_process_reward(completion, ref, kind, last, expected):
    fn = R.get_action_process_reward()
    out = fn(completions=[CHAT(completion)], reference_action=[ref], reference_kind=[kind],
             is_last_step=[last])
    assert out == [pytest.approx(expected)]


def test_action_process_reward_names_missing_column():
    fn = R.get_action_process_reward()
    with pytest.raises(KeyError, match="reference_kind"):
        fn(completions=[STEP_CODE], reference_action=["x"], is_last_step=[False])


# ---------------------------------------------------------------------------------------------
# budgets and length


@pytest.mark.parametrize("completion, ids, budget, expected", [
    ("\\boxed{9}", [1, 2, 3], 3, 1.0),
    ("\\boxed{9}", [1, 2, 3, 4], 3, 0.0),  # correct but over budget
    ("\\boxed{8}", [1], 3, 0.0),  # within budget but wrong
])
def test_budget_reward(completion, ids, budget, expected):
    fn = R.get_budget_reward("boxed")
    assert fn(completions=[completion], completion_ids=[ids], answer=["9"], budget=[budget]) == [expected]


def test_budget_reward_counts_words_without_ids():
    fn = R.get_budget_reward("boxed")
    assert fn(completions=["so \\boxed{9}"], answer=["9"], budget=[2]) == [1.0]
    assert fn(completions=["so it is \\boxed{9}"], answer=["9"], budget=[2]) == [0.0]


@pytest.mark.parametrize("lengths, correct, expected", [
    ([10, 20, 30], [True, True, True], [0.5, 0.0, -0.5]),
    ([10, 20, 30], [False, False, False], [0.0, 0.0, -0.5]),
    ([5, 5], [True, False], [0.0, 0.0]),
])
def test_length_penalties(lengths, correct, expected):
    assert R.length_penalties(lengths, correct) == pytest.approx(expected)


def test_length_penalty_reward_groups():
    fn = R.get_length_penalty_reward(num_generations=2)
    out = fn(prompts=["p", "p", "q", "q"], completions=["\\boxed{1}"] * 4,
             completion_ids=[[1], [1, 2, 3], [1, 2], [1, 2]], answer=["1"] * 4)
    assert out == [0.5, -0.5, 0.0, 0.0]


# ---------------------------------------------------------------------------------------------
# registry


def test_parse_reward_specs_and_build():
    specs = R.parse_reward_specs(["outcome", {"name": "format", "schema": "sxs", "weight": 0.25},
                                  {"name": "length_penalty"}])
    assert [(s.name, s.weight) for s in specs] == [("outcome", 1.0), ("format", 0.25),
                                                  ("length_penalty", 1.0)]
    funcs, weights = R.build_rewards(specs, num_generations=4)
    assert [f.__name__ for f in funcs] == ["outcome_boxed", "format_sxs", "length_penalty_boxed"]
    assert weights == [1.0, 0.25, 1.0]


@pytest.mark.parametrize("items, message", [
    ([], "non-empty list"),
    (["nope"], "unknown reward 'nope'"),
    ([{"weight": 1}], "mapping with 'name'"),
    ([{"name": "outcome", "weight": "big"}], "weight must be a finite number"),
    ([{"name": "outcome", "schema": "sxs"}], "has no argument 'schema'"),
    ([{"name": "granularity", "num_generations": 4}], "has no argument 'num_generations'"),
])
def test_parse_reward_specs_errors(items, message):
    with pytest.raises(ValueError, match=message):
        R.parse_reward_specs(items)


def test_registry_refuses_a_second_factory_for_a_name():
    assert R.REWARDS["outcome"] is R.get_outcome_reward
    assert R.register_reward("outcome")(R.get_outcome_reward) is R.get_outcome_reward  # reload

    def get_other_reward():
        return None

    with pytest.raises(KeyError, match="already registered"):
        R.register_reward("outcome")(get_other_reward)
    assert R.REWARDS["outcome"] is R.get_outcome_reward
    assert set(R.REWARDS) == {"outcome", "format", "granularity", "action_process", "budget",
                              "length_penalty", "code", "code_tests"}


def test_combine_rewards_weighted_sum():
    outcome = R.get_outcome_reward("boxed")
    fmt = R.get_format_reward("boxed")
    both = R.combine_rewards([(outcome, 1.0), (fmt, 0.5)])
    out = both(completions=["\\boxed{2}", "\\boxed{3}", "none"], answer=["2", "2", None])
    assert out == [1.5, 0.5, None]
    assert both.required_columns == ("answer",)
    with pytest.raises(ValueError):
        R.combine_rewards([])
