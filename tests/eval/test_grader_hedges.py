"""Hedges and relations never score as right; legitimate answers still do.

The math grader is both the evaluation grader and the RL reward. math-verify alone reads
``41 \\lor 42`` as its last part, ``\\ge 42`` as 42, and an equation by its right side, so all of
these used to match the gold 42. The rule: an answer is credited only when it states ONE value
equal to the gold; an equation counts when its left side names the value (``x = 42``) or is
arithmetic (``3 \\times 4 = 12``), unless the gold is itself an equation or relation.

Every expected verdict below was written by hand from that rule, not read off the code. Each
answer is graded boxed and after an answer phrase; rows whose two sides are both plain values are
also graded with prediction and gold swapped (the grader is symmetric there). The last test
grades every row four ways, in this process (``grade_math``), in a ``GradingPool``
(evaluation), with ``grade_many_serial``, and through the RL outcome reward
(``training.rewards`` -> ``training.verdicts`` -> the shared pool), and requires the four to agree
with each other and with the table.
"""

from __future__ import annotations

import pytest

from eval.graders import grade_many_serial, grade_math
from eval.grading_pool import GradingPool
from training import rewards as R

# (answer, gold): each answer states several values, a relation, or a value of something else
HEDGES = [
    ("x = 41 \\lor x = 42", "42"),
    ("41 \\lor 42", "42"),
    ("41 \\land 42", "42"),
    ("41 \\to 42", "42"),
    ("\\ge 42", "42"),
    ("42 \\text{ or more}", "42"),
    ("x + 1 = 41", "41"),  # x = 40
    ("|x - 1| = 41", "41"),
    ("1 \\lor 2", "2"),
    ("1 \\lor 2", "1"),
    ("2 \\lor 1", "1"),
    ("42 = 43", "42"),
    ("42 = 43", "43"),
    ("x = 41 = 42", "42"),
    ("a = b = 42", "42"),
    ("42 \\vee 43", "43"),
    ("42 \\text{ or } 43", "42"),
    ("42 \\text{ or } 43", "43"),
    ("42 \\; \\text{or} \\; 43", "43"),
    ("42 or 43", "42"),
    ("x = 42 \\text{ or } x = 43", "42"),
    ("x \\in \\{41, 42\\}", "42"),
    ("\\pm 42", "42"),
    ("42, 43", "42"),
    ("x^2 = 42", "42"),  # x = sqrt(42)
    ("2x = 42", "42"),  # x = 21
    ("41 \\implies 42", "42"),
    ("41 \\iff 42", "42"),
    ("41 \\Rightarrow 42", "42"),
    ("41 \\longrightarrow 42", "42"),
    ("41 ∨ 42", "42"),
    ("41 \\wedge 42", "42"),
    ("\\lnot 41 \\lor 42", "42"),
    ("x \\geq 42", "42"),
    ("42 \\le x", "42"),
    ("\\leq 42", "42"),
    ("> 41", "41"),
    ("x \\ge 41 \\land x \\le 42", "42"),
    ("42 \\neq 43", "43"),
    ("42 \\lt 43", "42"),
    ("\\text{at least } 42", "42"),
    ("\\text{at most } 42", "42"),
    ("\\text{more than } 41", "41"),
    ("41 \\text{ and } 42", "42"),
    ("\\text{either } 41 \\text{ or } 42", "42"),
    ("\\text{between } 41 \\text{ and } 43", "43"),
    ("41 \\text{ to } 42", "42"),
    ("\\text{not } 41", "41"),
    ("42 \\text{ if } n \\text{ is even}", "42"),
    ("41 \\cup 42", "42"),
    ("42 \\mid 84", "84"),
    ("42 \\approx 43", "42"),
    ("-42 = 42", "42"),
    ("41 \\quad 42", "42"),  # two numbers side by side
    ("41 \\hspace{1em} 42", "42"),
    ("41 \\\\ 42", "42"),
    ("\\begin{cases} 41 \\\\ 42 \\end{cases}", "42"),
    ("41 \\vert 42", "42"),
    ("41 \\; | \\; 42", "42"),
    ("41 \\& 42", "42"),
    ("x_1 = 41, x_2 = 42", "42"),
    ("\\text{Monday or Tuesday}", "\\text{Monday}"),
    ("\\{3\\} \\lor \\{1, 2\\}", "\\{1, 2\\}"),  # a hedge against a set
    ("x = 4 \\lor x = 5", "x = 5"),  # a hedge against an equation
    ("\\frac{1}{2} \\text{ or } \\frac{1}{3}", "\\frac{1}{2}"),  # one alternative is not the gold
    ("41 \\implies \\textbf{(C)} \\text{ or } 42", "42"),
]

# (answer, gold, symmetric): each answer states the gold's one value (or its relation)
LEGITIMATE = [
    ("42", "42", True),
    ("x = 42", "42", True),
    ("n_0 = 42", "42", True),
    ("a_{n+1} = 42", "42", False),
    ("\\theta = \\frac{\\pi}{4}", "\\frac{\\pi}{4}", False),
    ("\\text{Area} = 42", "42", False),
    ("42 \\text{ dollars}", "42", False),
    ("\\dfrac{1}{2}", "0.5", True),
    ("1,000", "1000", True),
    ("-7", "-7", True),
    ("\\frac{\\pi}{2}", "\\frac{\\pi}{2}", True),
    ("2\\pi", "2\\pi", True),
    ("\\sqrt{2}", "\\sqrt{2}", True),
    ("30^\\circ", "30", True),
    ("42\\%", "42\\%", True),
    ("4.5 \\times 10^{33}", "4.5e33", True),
    ("(1, 2)", "(1, 2)", True),
    ("\\{1, 2\\}", "\\{2, 1\\}", True),
    ("1, 2", "2, 1", True),
    ("[1, 2)", "[1, 2)", True),
    ("(-\\infty, 1) \\cup (2, \\infty)", "(-\\infty, 1) \\cup (2, \\infty)", True),
    ("\\text{Monday}", "\\text{Monday}", True),
    ("\\text{(C)}", "C", True),
    ("10{,}000", "10000", True),
    ("|-42|", "42", True),
    ("x \\le 42", "x \\le 42", True),
    ("y = 2x + 1", "y = 2x + 1", True),
    ("x \\in [1, 2]", "[1, 2]", False),
    ("x \\approx 3.14", "3.14", False),
    ("x = \\pm 42", "\\pm 42", False),
    ("(x, y) = (1, 2)", "(1, 2)", False),
    # an equation whose left side names the value, or is arithmetic on numbers
    ("3 \\times 4 = 12", "12", False),
    ("\\frac{84}{2} = 42", "42", False),
    ("\\frac{1}{2} = 0.5", "0.5", False),
    ("5! = 120", "120", False),
    ("\\sum_{k=1}^{3} k = 6", "6", False),
    ("\\lim_{x \\to 0} f(x) = 42", "42", False),
    ("f(3) = 42", "42", False),
    ("P(X = 3) = \\frac{1}{8}", "\\frac{1}{8}", False),
    ("AB = 5", "5", False),
    ("\\angle ABC = 30^\\circ", "30", False),
    # several values, all of them the gold's
    ("\\frac{1}{2} \\text{ or } 0.5", "0.5", False),
    ("x + 11 \\text{ or } 11 + x", "11 + x", False),
    ("42 \\lor 42", "42", False),
    # an option label next to the value
    ("(D) = 143", "143", False),
    ("\\textbf{(B)} = \\frac{35}{72}", "\\frac{35}{72}", False),
    ("\\textbf{(E)}\\ m = -\\frac{1}{2}", "-\\frac{1}{2}", False),
    ("\\frac{11}{27} \\implies \\textbf{(C)}", "\\frac{11}{27}", False),
    # several values for a gold of several values
    ("x = 1 \\text{ or } x = 2", "1, 2", False),
    ("1 \\text{ or } 2", "1, 2", False),
    ("x = 1, x = 2", "1, 2", False),
]

# whole predictions: answer phrases, several boxes
TEXTS = [
    ("the final answer is $41 \\lor 42$", "42", False),
    ("The answer is 42 or 43.", "42", False),
    ("The answer is 42 or more.", "42", False),
    ("The answer is at least 42.", "42", False),
    ("The answer is 41 to 42 apples.", "42", False),
    ("The answer is 42 = 43.", "43", False),
    ("#### 41 or 42", "41", False),
    ("So it is \\boxed{41} or \\boxed{42}.", "42", False),
    ("$\\boxed{41}$ \\lor $\\boxed{42}$", "42", False),
    ("\\boxed{41}, \\boxed{42}", "42", False),
    ("\\boxed{41} \\boxed{42}", "42", False),
    ("\\boxed{42} \\boxed{42}", "42", True),  # the same answer twice is one answer
    ("The answer is 42 dollars.", "42", True),
    ("The answer is 25 + 50 = 75 kilograms.", "75", True),
    ("The answer is 42 more apples than Tom has.", "42", True),
    ("I first got \\boxed{41}. Checking again, the answer is \\boxed{42}.", "42", True),
    ("\\boxed{3}, \\boxed{5}", "3, 5", True),
    ("Answer: 1,000", "1000", True),
    ("The answer is -7.", "-7", True),
    ("The answer is $x = 42$.", "42", True),
]


def boxed(answer: str) -> str:
    return f"So the result is \\boxed{{{answer}}}."


def phrase(answer: str) -> str:
    return f"The final answer is ${answer}$."


WRAPPERS = {"boxed": boxed, "phrase": phrase}


def _rows() -> list[tuple[str, str, bool]]:
    """Every (prediction, gold, expected) the table makes."""
    rows = [(wrap(a), g, False) for a, g in HEDGES for wrap in WRAPPERS.values()]
    rows += [(wrap(a), g, True) for a, g, _ in LEGITIMATE for wrap in WRAPPERS.values()]
    rows += [(boxed(g), a, True) for a, g, symmetric in LEGITIMATE if symmetric]  # swapped
    rows += TEXTS
    return rows


def test_the_table_is_large_and_varied():
    assert len(HEDGES) >= 40 and len(LEGITIMATE) >= 30
    assert sum(symmetric for *_, symmetric in LEGITIMATE) >= 15
    assert len(_rows()) >= 200


@pytest.mark.parametrize("wrap", WRAPPERS)
@pytest.mark.parametrize("answer, gold", HEDGES)
def test_a_hedge_is_wrong(answer, gold, wrap):
    result = grade_math(WRAPPERS[wrap](answer), gold)
    assert not result.correct, result


@pytest.mark.parametrize("wrap", WRAPPERS)
@pytest.mark.parametrize("answer, gold, symmetric", LEGITIMATE)
def test_a_legitimate_answer_is_right(answer, gold, symmetric, wrap):
    result = grade_math(WRAPPERS[wrap](answer), gold)
    assert result.correct, result


@pytest.mark.parametrize("answer, gold", [(a, g) for a, g, symmetric in LEGITIMATE if symmetric])
def test_symmetric_rows_in_both_orders(answer, gold):
    assert grade_math(boxed(answer), gold).correct
    assert grade_math(boxed(gold), answer).correct


@pytest.mark.parametrize("text, gold, expected", TEXTS)
def test_whole_predictions(text, gold, expected):
    assert grade_math(text, gold).correct is expected


def test_a_hedge_says_why():
    result = grade_math(boxed("41 \\lor 42"), "42")
    assert result.extracted == "41 \\lor 42" and result.method == "boxed"
    assert result.error == "not one value: 2 values, not all the gold's"
    assert result.pred_parsed == "41"  # the first alternative already differs
    assert grade_math(boxed("42 \\text{ or more}"), "42").error == "not one value: a hedge ('or more')"
    assert grade_math(boxed("x + 1 = 41"), "41").error.startswith(
        "not one value: an equation whose left side is no name")
    assert grade_math(boxed("41 \\to 42"), "42").error == "not one value: a connective (\\to)"


def test_evaluation_pool_serial_and_reward_agree_on_every_row():
    rows = _rows()
    pairs = [(text, gold) for text, gold, _ in rows]
    expected = [e for *_, e in rows]
    in_process = [grade_math(text, gold).correct for text, gold in pairs]
    serial = [r.correct for r in grade_many_serial(pairs)]
    with GradingPool(processes=2, per_item_timeout_s=60) as pool:
        pooled = [r.correct for r in pool.grade_many(pairs, kind="math")]
        outputs = [r.correct for r in pool.grade_many(pairs, kind="math", answer_format="boxed")]
    reward = R.get_outcome_reward()(completions=[t for t, _ in pairs], answer=[g for _, g in pairs])
    assert reward == [float(e) for e in expected]
    for i, (text, gold) in enumerate(pairs):
        verdicts = (in_process[i], serial[i], pooled[i], outputs[i], reward[i] == 1.0)
        assert verdicts == (expected[i],) * 5, (text, gold, verdicts)
