"""The result vocabulary: limits validation, the observation rendering, traceback parsing."""

import pytest

from pipelines.sandbox.result import (
    ExecError,
    ExecResult,
    Limits,
    parse_traceback_tail,
    render_observation,
    strip_ansi,
    truncate_middle,
)


@pytest.mark.parametrize("field,value", [
    ("timeout_s", 0), ("timeout_s", -1), ("memory_mb", 32), ("processes", 2),
    ("open_files", 8), ("max_output_bytes", 0), ("cpu_s", 0), ("disk_mb", "64"),
    ("disk_files", 0), ("disk_files", 8),
])
def test_limits_reject_bad_values_with_the_field_name(field, value):
    with pytest.raises(ValueError, match=field):
        Limits(**{field: value})


def test_limits_cpu_defaults_to_the_timeout_rounded_up():
    assert Limits(timeout_s=2.5).cpu_seconds == 3
    assert Limits(timeout_s=2.5, cpu_s=1).cpu_seconds == 1
    assert Limits().with_(timeout_s=1).timeout_s == 1


def test_observation_order_stdout_stderr_value_then_error():
    result = ExecResult(stdout="out\n", stderr="warn\n", value="42",
                        error=ExecError("ValueError", "bad", "Traceback (most recent call last):\n"
                                        "  File \"<cell-1>\", line 1, in <module>\n"
                                        "ValueError: bad\n"), exit_code=None)
    text = render_observation(result)
    assert text.index("out") < text.index("warn") < text.index("42") < text.index("ValueError")
    assert text.count("ValueError: bad") == 1
    assert render_observation(result) == text  # deterministic


def test_observation_of_an_error_without_traceback_is_name_and_value():
    result = ExecResult(error=ExecError("TimeoutError", "execution exceeded the limit"),
                        timed_out=True)
    assert render_observation(result) == "TimeoutError: execution exceeded the limit"


def test_observation_truncates_long_output_keeping_head_and_tail():
    result = ExecResult(stdout="A" * 5000 + "MIDDLE" + "Z" * 5000,
                        error=ExecError("KeyError", "'k'"))
    text = render_observation(result, max_chars=1000)
    assert text.startswith("AAAA")
    assert text.endswith("KeyError: 'k'")
    assert "characters truncated" in text
    assert "MIDDLE" not in text
    assert len(text) <= 1000


def test_observation_notes_truncation_and_restart():
    result = ExecResult(stdout="x", output_truncated=True, restarted=True, exit_code=None)
    text = render_observation(result)
    assert "[output truncated" in text and "restarted" in text


def test_observation_of_a_silent_failure_says_so():
    assert render_observation(ExecResult(exit_code=3)) == "[process exited with status 3]"
    assert render_observation(ExecResult()) == ""


def test_truncate_middle_leaves_short_text_alone():
    assert truncate_middle("abc", 10) == "abc"


def test_parse_traceback_tail_recovers_name_and_value():
    stderr = ("some warning\nTraceback (most recent call last):\n  File \"main.py\", line 3, in "
              "<module>\n    f()\nZeroDivisionError: division by zero\n")
    err = parse_traceback_tail(stderr)
    assert err == ExecError("ZeroDivisionError", "division by zero", stderr[13:].rstrip())
    assert parse_traceback_tail("no traceback here") is None
    syntax = '  File "main.py", line 1\n    x =\n       ^\nSyntaxError: invalid syntax\n'
    assert parse_traceback_tail(syntax).name == "SyntaxError"


def test_strip_ansi_removes_colour_codes():
    assert strip_ansi("\x1b[0;31mValueError\x1b[0m: x") == "ValueError: x"


def test_ok_needs_no_error_no_limit_and_a_zero_status():
    assert ExecResult().ok
    assert ExecResult(exit_code=None).ok
    assert not ExecResult(exit_code=1).ok
    assert not ExecResult(timed_out=True).ok
    assert not ExecResult(error=ExecError("E", "")).ok


_DEEP_TB = ('Traceback (most recent call last):\n  ... [3481234 outer frames omitted] ...\n'
            + '  File "main.py", line 4, in f\n    return f(n + 1) + 1\n' * 3
            + '  [Previous line repeated 97 more times]\n')
_SHALLOW_TB = 'Traceback (most recent call last):\n  File "main.py", line 2, in <module>\n'


@pytest.mark.parametrize(("error", "limit"), [
    (ExecError("RecursionError", "maximum recursion depth exceeded", _SHALLOW_TB), "recursion"),
    # CPython 3.11, when recursion fills the frame stack: thousands of frames deep
    (ExecError("SystemError", "error return without exception set", _DEEP_TB), "recursion"),
    # a SystemError near the top of the stack is not a runaway recursion
    (ExecError("SystemError", "error return without exception set", _SHALLOW_TB), None),
    (ExecError("MemoryError", "", _DEEP_TB), "memory"),
    (ExecError("ValueError", "bad", _DEEP_TB), None),
])
def test_runaway_recursion_is_classified_as_its_own_limit(error, limit):
    from pipelines.sandbox.streams import classify

    assert classify(error, 1)[0] == limit
