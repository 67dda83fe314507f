"""The pieces of the one-value rule: left sides that name a value, computations, and how an
answer is read into the value(s) math-verify compares. Expected results written by hand from
the rule in ``eval.answer_relations``; the graded end-to-end table is test_grader_hedges.py."""

from __future__ import annotations

import pytest

from eval.answer_relations import gold_shape, is_computation, is_name, read_answer, scan

PLAIN = gold_shape("42")
SEVERAL = gold_shape("1, 2", several=True)


@pytest.mark.parametrize("text, expected", [
    ("x", True), ("n_0", True), ("a_{n+1}", True), ("\\theta'", True), ("x^*", True),
    ("AB", True), ("\\angle ABC", True), ("\\overline{AB}", True), ("f(3)", True),
    ("P(X = 3)", True), ("(x, y)", True), ("\\text{Area}", True), ("(D)", True),
    ("\\textbf{(E)}\\ m", True), ("\\hat{x}", True),
    ("x + 1", False), ("2x", False), ("x^2", False), ("|x - 1|", False), ("42", False),
    ("-42", False), ("\\frac{R}{r}", False), ("xy", False), ("\\sin x", False), ("", False),
])
def test_names(text, expected):
    assert is_name(text) is expected


@pytest.mark.parametrize("text, expected", [
    ("3 \\times 4", True), ("25 + 50", True), ("\\frac{84}{2}", True), ("5!", True),
    ("1,000 + 250", True), ("2\\pi", True), ("\\sum_{k=1}^{3} k", True), ("2^{10}", True),
    ("42", False), ("-42", False), ("x + 1", False), ("2x", False), ("", False), ("(42)", False),
])
def test_computations(text, expected):
    assert is_computation(text) is expected


@pytest.mark.parametrize("latex, problem, values", [
    ("42", None, ("42",)),
    ("x = 42", None, ("x = 42",)),
    ("41 \\lor 42", None, ("41", "42")),  # each must equal the gold
    ("\\frac{1}{2} \\text{ or } 0.5", None, ("\\frac{1}{2}", "0.5")),
    ("\\boxed{41} , 42", None, ("\\boxed{41}", "42")),
    ("41 \\quad 42", None, ("41", "42")),
    ("1,000", None, ("1,000",)),
    ("1 \\lor 2 \\lor 3 \\lor 4 \\lor 5", "more than 4 values (\\lor)", ()),
    ("\\frac{11}{27} \\implies \\textbf{(C)}", None, ("\\frac{11}{27}",)),
    ("41 \\implies 42", "a connective (\\implies)", ()),
    ("42 \\text{ or more}", "a hedge ('or more')", ()),
    ("x \\ge 42", "a relation (\\ge)", ()),
    ("41 | 42", "a relation (|)", ()),
    ("|-42|", None, ("|-42|",)),
    ("x = 41 = 42", "a chain of equations (x = 41 = 42)", ()),
    ("(41 = 42)", "a relation inside the answer (=)", ()),
    ("\\lim_{x \\to 0} f(x) = 42", None, ("\\lim_{x \\to 0} f(x) = 42",)),
])
def test_reading_against_a_plain_gold(latex, problem, values):
    reading = read_answer(latex, PLAIN)
    assert (reading.problem, reading.values) == (problem, values)


def test_reading_against_golds_of_other_shapes():
    # several values in the gold: its list is compared as a whole
    assert read_answer("x = 1 \\text{ or } x = 2", SEVERAL).values == ("x = 1 \\text{ or } x = 2",)
    assert read_answer("x = 1, x = 2", SEVERAL).problem is None
    # a relation as the gold: relations are compared by math-verify
    relation = gold_shape("x \\le 42")
    assert relation.relational and read_answer("x \\le 42", relation).problem is None
    # connectives still need one in the gold
    assert read_answer("x = 4 \\lor x = 5", gold_shape("x = 5")).values == ("x = 4", "x = 5")
    # set operators need a set
    assert read_answer("(0, 1) \\cup (2, 3)", gold_shape("(0,1)\\cup(2,3)")).problem is None
    assert read_answer("41 \\cup 42", PLAIN).problem == "a set operation (\\cup)"


def test_scripts_and_text_groups():
    kinds = [(t.kind, t.text) for t in scan("\\sum_{k=1}^{n} k + x_{a \\lor b}")]
    assert kinds == []  # what sub- and superscripts hold is no part of the answer's shape
    assert [(t.kind, t.text) for t in scan("1 \\text{ or } 2")] == [("word", "or"), ("sep", "or")]
    assert [t.kind for t in scan("\\text{Monday or Tuesday}")] == ["word"]  # part of the text
