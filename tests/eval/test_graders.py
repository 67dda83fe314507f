"""Tests for eval/graders.py and eval/grading_pool.py.

Table tests run the real math-verify on REAL gold answers read from every shared benchmark file
(gsm8k "#### N", MATH-500, Minerva boxed solutions, AMC "27.0" floats, AIME, OlympiadBench
lists, GPQA letters): the gold as a boxed prediction must be correct, a perturbed gold wrong.
Pool tests start real worker processes: results equal serial grading, a pathological answer is
killed by the outer wall-clock limit, a killed worker is replaced, and the pool works from a
thread and inside a real Dagster op.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import re
import signal
import threading
from pathlib import Path

import pytest

from eval import graders
from eval.extraction import (
    BOXED_ONLY,
    DEFAULT_POLICY,
    LENIENT_POLICY,
    ExtractionPolicy,
    extract_answer,
    to_latex,
)
from eval.graders import (
    GRADERS,
    GradeResult,
    extract_choice,
    grade,
    grade_choice,
    grade_many_serial,
    grade_math,
    register_grader,
)
from eval.grading_pool import NOT_GRADED, TIMED_OUT, GradingPool
from pipelines.text import last_boxed

N_ROWS = 25  # real rows per benchmark in the table tests


# ------------------------------------------------------------------ real gold answers


def _jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _golds(bench: Path, name: str) -> list[str]:
    """Gold answers of one benchmark file, extracted here (not with the ingestion code)."""
    if name == "gsm8k":
        return [r["answer"].split("####")[-1].strip() for r in _jsonl(bench / "gsm8k_test.jsonl")]
    if name == "minerva_math":
        return [last_boxed(r["solution"]) for r in _jsonl(bench / "minerva_math.jsonl")]
    if name == "olympiadbench":
        return [", ".join(r["final_answer"]) for r in _jsonl(bench / "olympiadbench.jsonl")]
    if name == "gpqa_diamond":
        return [r["answer"] for r in _jsonl(bench / "gpqa_diamond.jsonl.gz")]
    return [str(r["answer"]) for r in _jsonl(bench / f"{name}.jsonl")]


MATH_BENCHES = ["gsm8k", "math500", "minerva_math", "amc23", "aime24", "aime25", "olympiadbench"]


@pytest.fixture(scope="module")
def bench(shared_data) -> Path:
    return shared_data / "benchmarks"


def _bump_first_integer(answer: str) -> str | None:
    """A wrong answer: the first integer in the gold plus one ("\\frac{14}{3}" -> "\\frac{15}{3}")."""
    m = re.search(r"\d+", answer)
    return None if m is None else answer[: m.start()] + str(int(m.group()) + 1) + answer[m.end():]


@pytest.mark.parametrize("name", MATH_BENCHES)
def test_gold_boxed_is_correct_on_real_rows(bench, name):
    golds = _golds(bench, name)[:N_ROWS]
    assert len(golds) == min(N_ROWS, len(golds)) > 0
    for gold in golds:
        result = grade_math(f"Reasoning... so the final answer is \\boxed{{{gold}}}.", gold)
        assert result.correct, (name, gold, result)
        assert result.method == "boxed" and result.error is None


@pytest.mark.parametrize("name", MATH_BENCHES)
def test_perturbed_gold_is_wrong_on_real_rows(bench, name):
    checked = 0
    for gold in _golds(bench, name)[:N_ROWS]:
        wrong = _bump_first_integer(gold)
        if wrong is None:
            continue
        result = grade_math(f"\\boxed{{{wrong}}}", gold)
        assert not result.correct, (name, gold, wrong, result)
        checked += 1
    assert checked >= 5


def test_benchmark_answer_formats(bench):
    """Each format's own spelling: gsm8k commas, AMC floats, MATH tuples, Minerva e-notation."""
    gsm = _golds(bench, "gsm8k")
    with_comma = next(g for g in gsm if "," in g)  # e.g. "1,875"
    assert grade_math(f"#### {with_comma}", with_comma).correct
    assert grade_math(f"\\boxed{{{with_comma.replace(',', '')}}}", with_comma).correct

    amc = _golds(bench, "amc23")
    assert amc[0] == "27.0"
    assert grade_math("\\boxed{27}", amc[0]).correct
    assert not grade_math("\\boxed{28}", amc[0]).correct

    math500 = _golds(bench, "math500")
    polar = next(g for g in math500 if "\\pi}{2}" in g and g.startswith("\\left("))
    assert grade_math("\\boxed{(3, \\frac{\\pi}{2})}", polar).correct
    assert not grade_math("\\boxed{(3, \\frac{\\pi}{3})}", polar).correct
    assert grade_math("\\boxed{\\dfrac{14}{3}}", "\\frac{14}{3}").correct and "\\frac{14}{3}" in math500

    minerva = _golds(bench, "minerva_math")
    assert "4.5e33" in minerva
    assert grade_math("\\boxed{4.5 \\times 10^{33}}", "4.5e33").correct
    assert not grade_math("\\boxed{4.6 \\times 10^{33}}", "4.5e33").correct
    tiny = next(g for g in _minerva_tiny(minerva))
    assert grade_math(f"\\boxed{{{tiny}}}", tiny).correct
    assert not grade_math(f"\\boxed{{{_bump_first_integer(tiny)}}}", tiny).correct

    olympiad = _golds(bench, "olympiadbench")
    pair = next(g for g in olympiad if g == "$69$,$84$")
    assert grade_math("\\boxed{84, 69}", pair).correct
    assert not grade_math("\\boxed{69}", pair).correct


def _minerva_tiny(golds: list[str]) -> list[str]:
    """Minerva golds in e-notation below 1e-3 (math-verify alone rounds them to zero)."""
    return [g for g in golds if re.fullmatch(r"\d+(\.\d+)?e-\d+", g) and float(g) < 1e-3]


def test_gpqa_letters_on_real_rows(bench):
    letters = _golds(bench, "gpqa_diamond")[:N_ROWS]
    assert set(letters) <= set("ABCD")
    for gold in letters:
        wrong = "ABCD"[("ABCD".index(gold) + 1) % 4]
        assert grade("choice", f"So the answer is \\boxed{{{gold}}}", gold).correct
        assert grade_choice(f"The answer is ({gold}).", gold).correct
        assert not grade_choice(f"\\boxed{{{wrong}}}", gold).correct


# ------------------------------------------------------------------ both argument orders

EQUIVALENT = [
    ("27.0", "27"),
    ("\\frac{1}{2}", "0.5"),
    ("\\frac{14}{3}", "\\dfrac{14}{3}"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\frac{\\pi}{2})"),
    ("4.5e33", "4.5\\times10^{33}"),
    ("$69$,$84$", "84, 69"),
    ("\\text{(C)}", "C"),
    ("x^2+1", "1+x^2"),
    ("1,875", "1875"),
]
DIFFERENT = [
    ("\\frac{1}{2}", "\\frac{1}{3}"),
    ("18", "19"),
    ("\\text{(C)}", "\\text{(D)}"),
    ("p - q", "q - p"),
    ("2.88e-19", "3.88e-19"),
    ("(3, \\frac{\\pi}{2})", "(3, \\frac{\\pi}{3})"),
]


@pytest.mark.parametrize("a,b", EQUIVALENT)
def test_equivalent_answers_in_both_orders(a, b):
    assert grade_math(f"\\boxed{{{b}}}", a).correct
    assert grade_math(f"\\boxed{{{a}}}", b).correct


@pytest.mark.parametrize("a,b", DIFFERENT)
def test_different_answers_in_both_orders(a, b):
    assert not grade_math(f"\\boxed{{{b}}}", a).correct
    assert not grade_math(f"\\boxed{{{a}}}", b).correct


# ------------------------------------------------------------------ extraction policy


def test_last_number_fallback_is_an_explicit_choice():
    off = grade_math("3 + 4 = 7", "7")
    assert not off.correct and off.method == "none" and off.extracted is None
    on = grade_math("3 + 4 = 7", "7", policy=LENIENT_POLICY)
    assert on.correct and on.method == "last_number" and on.extracted == "7"
    assert DEFAULT_POLICY.last_number is False
    assert LENIENT_POLICY.describe() == "boxed+answer_phrase+last_number"


@pytest.mark.parametrize("text,answer,method", [
    ("so \\boxed{5} hmm wait \\boxed{7}", "7", "boxed"),
    ("The answer is 5. Double-check: \\boxed{7}", "7", "boxed"),
    ("Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.", "\\frac{3}{4}", "answer_phrase"),
    ("She makes 9 * 2 = 18 dollars.\n#### 1,875", "1,875", "answer_phrase"),
    ("**Final Answer**: 42", "42", "answer_phrase"),
    ("The answer is 18 dollars.", "18", "answer_phrase"),
    ("Answer: $x = 5$", "x = 5", "answer_phrase"),
    ("The answer is 3.14.", "3.14", "answer_phrase"),
    ("The answer is: $-2$", "-2", "answer_phrase"),
    ("I computed 12 then 13", None, "none"),
    ("", None, "none"),
])
def test_extract_answer_table(text, answer, method):
    assert extract_answer(text, DEFAULT_POLICY) == (answer, method)


def test_boxed_only_policy_ignores_phrases():
    assert extract_answer("The answer is 7.", BOXED_ONLY) == (None, "none")
    assert not grade_math("The answer is 7.", "7", policy=BOXED_ONLY).correct
    assert grade_math("The answer is 7.", "7").correct


def test_policy_must_allow_something():
    with pytest.raises(ValueError, match="at least one"):
        ExtractionPolicy(boxed=False, answer_phrase=False, last_number=False)


def test_to_latex_normalises_golds():
    assert to_latex("$69$,$84$") == "69,84"
    assert to_latex("\\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert to_latex("4.5e33") == "4.5\\times10^{33}"
    assert to_latex("1e-5") == "1\\times10^{-5}"
    assert to_latex("\\$18") == "\\$18"  # an escaped dollar is text, not a delimiter


# ------------------------------------------------------------------ bad input and threads


def test_bad_input_raises_clear_errors():
    with pytest.raises(TypeError, match="must be str"):
        grade_math(None, "5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="gold answer is empty"):
        grade_math("\\boxed{5}", "  ")
    with pytest.raises(ValueError, match="whole number of seconds"):
        grade_math("\\boxed{5}", "5", timeout_s=0.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not one of the option letters"):
        grade_choice("\\boxed{E}", "E")
    with pytest.raises(ValueError, match="unknown grader kind 'nope'.*math"):
        grade("nope", "a", "b")


def test_grade_from_a_thread_runs_without_math_verify_timeouts():
    import math_verify

    out: dict[str, object] = {}

    def work() -> None:
        try:
            math_verify.parse("\\boxed{1}", parsing_timeout=5)
        except ValueError as exc:  # math-verify's own behaviour off the main thread
            out["raw_error"] = str(exc)
        out["result"] = grade_math("\\boxed{\\frac{2}{4}}", "0.5")

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(60)
    assert "signal" in str(out.get("raw_error", "")) or "thread" in str(out.get("raw_error", ""))
    result = out["result"]
    assert isinstance(result, GradeResult) and result.correct and result.error is None


def test_timeout_inside_math_verify_is_recorded():
    result = grade_math("\\boxed{(10^{7})!}", "5", timeout_s=1)
    assert not result.correct
    assert result.error is not None and "timed out after 1s" in result.error


# ------------------------------------------------------------------ multiple choice


@pytest.mark.parametrize("text,letter", [
    ("(B)", "B"),
    ("B)", "B"),
    ("Answer: B", "B"),
    ("**B**", "B"),
    ("\\boxed{B}", "B"),
    ("\\boxed{\\text{(B)}}", "B"),
    ("The answer is (B).", "B"),
    ("answer: b", "B"),
    ("The correct answer is: **C**", "C"),
    ("**Answer:** D", "D"),
    ("I first liked (A), but the answer is (C).", "C"),
    ("A) one\nB) two\n\nB", "B"),
    ("Because both are wrong", None),
    ("Answer: a detailed look is needed", None),
    ("The answer is a tricky one", None),
    ("No letter here at all", None),
])
def test_extract_choice_table(text, letter):
    assert extract_choice(text) == letter


def test_extract_choice_other_letters():
    assert extract_choice("The answer is (E).", letters="ABCDE") == "E"
    assert extract_choice("The answer is (E).", letters="ABCD") is None
    with pytest.raises(ValueError, match="letters"):
        extract_choice("x", letters="")


def test_grade_choice_records_method():
    assert grade_choice("\\boxed{B}", "B").method == "boxed"
    assert grade_choice("Answer: B", "(B)").method == "answer_phrase"
    assert grade_choice("I go with **B**", "b").method == "choice_marker"
    none = grade_choice("no idea", "B")
    assert (none.correct, none.extracted, none.method) == (False, None, "none")


# ------------------------------------------------------------------ registry


def _fake_code_grader(prediction: str, gold: str, **kw) -> GradeResult:
    return GradeResult(prediction == gold, prediction, "none")


def test_register_grader_is_one_call_and_refuses_duplicates(monkeypatch):
    monkeypatch.setattr(graders, "GRADERS", dict(GRADERS))
    register_grader("code", _fake_code_grader)
    assert grade("code", "x", "x").correct and not grade("code", "x", "y").correct
    with pytest.raises(ValueError, match="already registered"):
        register_grader("code", _fake_code_grader)
    with pytest.raises(TypeError, match="callable"):
        register_grader("other", "not a function")  # type: ignore[arg-type]
    assert set(GRADERS) >= {"math", "choice"}


def test_serial_records_errors_per_item():
    results = grade_many_serial([("\\boxed{5}", "5"), ("\\boxed{5}", "")])
    assert results[0].correct
    assert not results[1].correct and "gold answer is empty" in (results[1].error or "")
    with pytest.raises(TypeError, match="item 1"):
        grade_many_serial([("a", "b"), (None, "b")])  # type: ignore[list-item]


def _spin(prediction: str, gold: str) -> GradeResult:
    """A grader that never returns: only an outer limit can stop it."""
    if prediction == "spin":
        while True:
            pass
    return GradeResult(prediction == gold, prediction, "none")


def test_serial_grading_has_a_per_item_limit(monkeypatch):
    monkeypatch.setitem(GRADERS, "spin", _spin)
    handler = signal.getsignal(signal.SIGALRM)
    results = grade_many_serial([("a", "a"), ("spin", "a"), ("b", "b")], kind="spin",
                                item_limit_s=0.3)
    assert [r.correct for r in results] == [True, False, True]
    assert results[1].error == TIMED_OUT
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # no timer left behind
    assert signal.getsignal(signal.SIGALRM) is handler


def test_serial_grading_gives_back_a_callers_timer(monkeypatch):
    monkeypatch.setitem(GRADERS, "spin", _spin)
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(True))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30.0)
        grade_many_serial([("spin", "a")], kind="spin", item_limit_s=0.2)
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 0 < left < 30.0 and not fired  # re-armed with what it had left, not fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_serial_grading_refuses_to_run_unbounded_off_the_main_thread():
    out: dict = {}

    def run() -> None:
        try:
            grade_many_serial([("\\boxed{5}", "5")])
        except RuntimeError as exc:
            out["error"] = str(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert "main thread" in out["error"] and "GradingPool" in out["error"]
    with pytest.raises(ValueError, match="item_limit_s"):
        grade_many_serial([("\\boxed{5}", "5")], item_limit_s=0)


def test_rewards_in_a_daemonic_process_grade_in_process_under_the_limit(monkeypatch):
    import multiprocessing
    from types import SimpleNamespace

    from training.verdicts import Verdicts

    calls = []
    real = graders.grade_many_serial

    def spy(items, kind="math", **kw):
        calls.append(kw)
        return real(items, kind, **kw)

    monkeypatch.setattr(multiprocessing, "current_process", lambda: SimpleNamespace(daemon=True))
    monkeypatch.setattr(graders, "grade_many_serial", spy)
    verdicts = Verdicts(processes=1).verdicts(["\\boxed{4}", "\\boxed{41 \\lor 4}"], ["4", "4"],
                                              answer_format="boxed", timeout_s=3)
    assert verdicts == [True, False]
    assert calls == [{"answer_format": "boxed", "item_limit_s": 6.0, "timeout_s": 3}]


def test_serial_grading_of_whole_outputs_matches_the_pool(pool):
    items = [("<think>so 4</think><speak>\\boxed{4}</speak>", "4"), ("<speak>5</speak>", "4")]
    serial = grade_many_serial(items, answer_format="sxs")
    assert serial == pool.grade_many(items, answer_format="sxs")
    assert [r.correct for r in serial] == [True, False]


# ------------------------------------------------------------------ pool


def _mixed_items(bench: Path) -> list[tuple[str, str]]:
    items: list[tuple[str, str]] = []
    for name in MATH_BENCHES:
        for gold in _golds(bench, name)[:6]:
            items.append((f"The final answer is \\boxed{{{gold}}}.", gold))
            wrong = _bump_first_integer(gold)
            if wrong:
                items.append((f"\\boxed{{{wrong}}}", gold))
            items.append((f"I think it is {gold} but I am not sure", gold))
    return items


@pytest.fixture(scope="module")
def pool():
    with GradingPool(processes=2, per_item_timeout_s=60) as p:
        yield p


def test_pool_equals_serial(bench, pool):
    items = _mixed_items(bench)
    serial = grade_many_serial(items)
    pooled = pool.grade_many(items)
    assert pooled == serial
    assert sum(r.correct for r in serial) >= len(items) // 3  # the mix really has correct items
    assert any(not r.correct for r in serial)


def test_pool_choice_kind_and_kwargs(pool):
    items = [("\\boxed{E}", "E"), ("The answer is (A).", "A"), ("\\boxed{C}", "D")]
    results = pool.grade_many(items, kind="choice", letters="ABCDE")
    assert [r.correct for r in results] == [True, True, False]
    math_kw = pool.grade_many([("3 + 4 = 7", "7")], policy=LENIENT_POLICY)
    assert math_kw[0].correct and math_kw[0].method == "last_number"
    assert pool.grade_many([]) == []


def test_pool_kills_a_slow_item_and_keeps_working():
    # (10^7)! keeps sympy busy until math-verify's own alarm (60 s here); the outer limit wins.
    # Batches are grouped by gold ("1" < "2" < "3" < "4"): the slow item is second of four, so
    # the two after it must be re-queued to the replacement worker.
    slow = ("\\boxed{(10^{7})!}", "2")
    items = [("\\boxed{1}", "1"), slow, ("\\boxed{3}", "3"), ("\\boxed{5}", "4")]
    with GradingPool(processes=1, per_item_timeout_s=2, batch_size=4) as p:
        first_pid = p.worker_pids()[0]
        results = p.grade_many(items, timeout_s=60)
        assert [r.correct for r in results] == [True, False, True, False]
        # the outer kill's error, not math-verify's "timed out after 60s while comparing"
        assert results[1].error == "grading timed out"
        assert results[3].error is None
        assert p.timeouts == 1
        assert p.worker_pids()[0] != first_pid  # the stuck worker was replaced
        again = p.grade_many([("\\boxed{\\frac{1}{2}}", "0.5")])
        assert again[0].correct


def test_pool_replaces_a_worker_killed_from_outside(pool):
    victim = pool.worker_pids()[0]
    os.kill(victim, signal.SIGKILL)
    items = [(f"\\boxed{{{i}}}", str(i)) for i in range(20)]
    results = pool.grade_many(items)
    assert all(r.correct for r in results), [r for r in results if not r.correct]
    assert victim not in pool.worker_pids()
    assert pool.deaths == 1


def test_a_worker_killed_while_it_starts_is_replaced_not_taken_for_an_import_error():
    # SIGKILL (the OOM killer, an operator) can reach a worker before it has imported the
    # graders; that says nothing about the import, so the pool starts another worker
    with GradingPool(processes=2, per_item_timeout_s=60) as fresh:
        os.kill(fresh.worker_pids()[0], signal.SIGKILL)
        results = fresh.grade_many([(f"\\boxed{{{i}}}", str(i)) for i in range(6)])
        assert all(r.correct for r in results)
        assert fresh.deaths == 1


def _exits_on_start(conn):
    os._exit(3)  # as an import error would, before the worker says it is ready


def _killed_on_start(conn):
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize(("target", "message"), [
    (_exits_on_start, "exit code 3"),  # an error of its own: raised at once
    (_killed_on_start, "exit code -9"),  # killed at every start: raised after the tolerated few
])
def test_a_worker_that_cannot_start_is_still_an_error(monkeypatch, target, message):
    from eval import grading_pool

    monkeypatch.setattr(grading_pool, "_worker_main", target)  # "fork" runs it as set here
    with GradingPool(processes=1, start_method="fork") as broken:
        with pytest.raises(RuntimeError, match=f"exited during start-up \\({message}\\)"):
            broken.grade_many([("\\boxed{1}", "1")])
        kills = grading_pool.START_KILLS_TOLERATED if target is _killed_on_start else 0
        assert broken.start_kills == kills


def test_pool_works_from_a_non_main_thread(pool):
    out: list = []
    thread = threading.Thread(target=lambda: out.extend(pool.grade_many([("\\boxed{9}", "9")])))
    thread.start()
    thread.join(120)
    assert out and out[0].correct


def test_pool_rejects_unpicklable_grader(monkeypatch, pool):
    monkeypatch.setitem(GRADERS, "closure", lambda p, g, **kw: GradeResult(True, p, "none"))
    with pytest.raises(TypeError, match="module-level function"):
        pool.grade_many([("a", "b")], kind="closure")


def _worker_pid_grader(prediction: str, gold: str, **kw) -> GradeResult:
    """Says which process graded the item (module level, so workers can unpickle it)."""
    return GradeResult(True, str(os.getpid()), "none")


def test_pool_grades_each_gold_in_the_same_worker_in_every_call(monkeypatch):
    # A worker keeps the golds it parsed: the pool must send a gold to the same worker in
    # every call (whatever the order and the predictions), and still use every worker. One
    # batch per worker (batch_size above the call's size), so no worker runs out and steals.
    monkeypatch.setitem(GRADERS, "whose", _worker_pid_grader)
    golds = [f"\\frac{{{i}}}{{7}}" for i in range(60)]
    with GradingPool(processes=2, per_item_timeout_s=60, batch_size=1000) as p:
        p.start(wait=True)
        first = p.grade_many([(f"a{i}", g) for i, g in enumerate(golds)], kind="whose")
        worker_of = {g: r.extracted for g, r in zip(golds, first)}
        assert set(worker_of.values()) == {str(pid) for pid in p.worker_pids()}
        again = [g for g in reversed(golds) for _ in range(2)][:90]
        second = p.grade_many([(f"b{i}", g) for i, g in enumerate(again)], kind="whose")
        assert [r.extracted for r in second] == [worker_of[g] for g in again]


_GRADED_SO_FAR = itertools.count()


def _arrival_grader(prediction: str, gold: str, **kw) -> GradeResult:
    """Says in which order its worker graded the item (module level, so workers unpickle it)."""
    return GradeResult(True, str(next(_GRADED_SO_FAR)), "none")


def test_pool_grades_the_longest_golds_first(monkeypatch):
    # A long gold is the likeliest to be slow: graded first, it overlaps the rest of the call
    # instead of running alone at its end. One worker, so its order is the whole order.
    monkeypatch.setitem(GRADERS, "arrival", _arrival_grader)
    golds = [("x" * (1 + (i * 37) % 50)) + str(i % 3) for i in range(200)]
    with GradingPool(processes=1, per_item_timeout_s=60) as p:
        results = p.grade_many([(f"a{i}", g) for i, g in enumerate(golds)], kind="arrival")
    order = sorted(range(len(golds)), key=lambda i: int(results[i].extracted))
    lengths = [len(golds[i]) for i in order]
    assert lengths == sorted(lengths, reverse=True)


def test_pool_that_cannot_start_leaves_no_worker_running(monkeypatch):
    # a worker that is not ready in time fails start(wait=True); the workers already started
    # are stopped with it (no one else holds them: `with` never entered the pool)
    import eval.grading_pool as gp

    monkeypatch.setattr(gp, "START_TIMEOUT_S", 0.0)  # workers take far longer to import
    pool = GradingPool(processes=2, per_item_timeout_s=60)
    started: list[int] = []
    real_start = gp._Worker.__init__

    def recording_init(self, ctx, with_main):
        real_start(self, ctx, with_main)
        started.append(self.process.pid)

    monkeypatch.setattr(gp._Worker, "__init__", recording_init)
    with pytest.raises(RuntimeError, match="did not start"):
        pool.start(wait=True)
    assert len(started) == 2 and pool.worker_pids() == []
    for pid in started:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_pool_bad_arguments():
    with pytest.raises(ValueError, match="per_item_timeout_s"):
        GradingPool(per_item_timeout_s=0)
    with pytest.raises(ValueError, match="processes"):
        GradingPool(processes=0)
    with pytest.raises(ValueError, match="start_method"):
        GradingPool(start_method="teleport")


def test_pool_inside_a_dagster_op():
    dg = pytest.importorskip("dagster")

    @dg.asset
    def graded() -> list[bool]:
        with GradingPool(processes=2, per_item_timeout_s=60) as p:
            return [r.correct for r in p.grade_many([("\\boxed{18}", "18"), ("\\boxed{3}", "4")])]

    result = dg.materialize([graded])
    assert result.success
    assert result.output_for_node("graded") == [True, False]


def test_pool_grades_whole_outputs_finding_the_answer_region_in_the_worker(pool):
    items = [("<think>\\boxed{5}</think><speak>so \\boxed{4}</speak>", "4"),
             ("<think>it is \\boxed{4}</think>", "4"),  # no speak block: no answer region
             ("<think>t</think><speak>The answer is (B).</speak>", "B")]
    results = pool.grade_many(items[:2], answer_format="sxs")
    assert [r.correct for r in results] == [True, False]
    assert results[1].method == "none"
    choice = pool.grade_many(items[2:], kind="choice", answer_format="sxs")
    assert choice[0].correct and choice[0].extracted == "B"
    assert graders.grade_output(items[2][0], "B", kind="choice", answer_format="sxs") == choice[0]
    unusable = pool.grade_many([("<think>x</think>", "$$")], answer_format="sxs")
    assert graders.is_input_error(unusable[0])  # a bad gold is reported even without a region
    with pytest.raises(ValueError, match="answer_format"):
        pool.grade_many(items, answer_format="json")


def test_pool_call_timeout_ends_the_call_and_records_what_was_left():
    # (10^7)! outlives math-verify's own 60 s alarm; the per-item limit (60 s) is not reached
    # either: the call's limit (3 s) ends it. Gold order puts the slow item second of four in
    # one batch: the first is graded, the slow one times out, the last two never start.
    slow = ("\\boxed{(10^{7})!}", "2")
    items = [("\\boxed{1}", "1"), slow, ("\\boxed{3}", "3"), ("\\boxed{4}", "4")]
    with GradingPool(processes=1, per_item_timeout_s=60, batch_size=4) as p:
        first_pid = p.worker_pids()[0]
        results = p.grade_many(items, timeout_s=60, call_timeout_s=3)
        assert [r.correct for r in results] == [True, False, False, False]
        assert [r.error for r in results] == [None, TIMED_OUT, NOT_GRADED, NOT_GRADED]
        assert p.worker_pids()[0] != first_pid  # the busy worker was killed and replaced
        again = p.grade_many(items[2:], call_timeout_s=30)
        assert [r.correct for r in again] == [True, True]
    with pytest.raises(ValueError, match="call_timeout_s"):
        GradingPool().grade_many(items, call_timeout_s=0)
