"""Tests for ``python -m eval.engagement toy`` (eval/engagement/__main__.py, tables.py)."""

from __future__ import annotations

import pytest

from eval.engagement.__main__ import main
from eval.engagement.tables import format_table


def test_deliberation_table_has_the_four_cross_evaluation_rows(capsys):
    assert main(["toy", "--env", "deliberation", "--train", "300", "--eval", "60"]) == 0
    out = capsys.readouterr().out
    body = [line.split()[:2] for line in out.splitlines()[3:]]
    assert body == [["EP", "EP"], ["EP", "STEP"], ["STEP", "EP"], ["STEP", "STEP"]]


def test_patrol_state_level_table_lists_every_method(capsys):
    argv = ["toy", "--env", "patrol", "--setting", "state", "--depth", "3", "--train", "30",
            "--eval", "5"]
    assert main(argv) == 0
    methods = [line.split()[0] for line in capsys.readouterr().out.splitlines()[3:]]
    assert methods == ["ep", "loop", "patchpro", "patch"]


def test_unknown_setting_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["toy", "--env", "patrol", "--setting", "single"])
    assert exc.value.code == 2
    assert "module or state" in capsys.readouterr().err


def test_format_table_aligns_columns():
    text = format_table([{"a": "1", "bb": "x"}, {"a": "222", "bb": "y"}], "T")
    assert text.splitlines() == ["T", "a    bb", "---  --", "1    x ", "222  y "]


def test_llm_scripted_assistant_table_lists_every_method(capsys):
    argv = ["llm", "--env", "assistant", "--scripted", "--setting", "single", "--seeds", "2",
            "--episodes", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert "policy scripted" in out[0] and "unusable replies 0" in out[0]
    assert [line.split()[0] for line in out[3:]] == ["agentloop", "poll", "ep"]


def test_llm_kitchen_method_filter_and_bad_method(capsys):
    assert main(["llm", "--env", "kitchen", "--scripted", "--method", "reflexpatch",
                 "--cases", "1"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[3:]] == [
        "reflexpatch"]
    with pytest.raises(SystemExit) as exc:
        main(["llm", "--env", "assistant", "--scripted", "--method", "reflexpatch"])
    assert exc.value.code == 2
    assert "--method for assistant" in capsys.readouterr().err
