"""The training commands report a mistake in their command line before importing TRL: the
fast check gives the full check's own message, and the process never loads torch, transformers
or TRL to give it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from training.config import load_config
from training.config_recipes import RecipeError
from training.precheck import field_index, index_path, precheck, write_field_index

ROOT = Path(__file__).resolve().parents[2]

MISTAKES = [
    ("sft", "demo_sft", ["max_stepz=3"]),
    ("sft", "demo_sft", ["learning_rat=1e-4"]),
    ("grpo", "demo_grpo", ["num_generation=4"]),
    ("grpo", "duet_grpo.cpu", ["kind=tandem", "max_steps=2", "beat=0.1"]),
    ("grpo", "demo_sft", []),                       # an SFT recipe under the GRPO entry point
    ("sft", "demo_sft", ["kind=grpo"]),
    ("sft", "no_such_recipe", []),
    ("sft", "demo_sft", ["max_steps"]),             # not key=value
]


@pytest.mark.parametrize(("entry", "recipe", "overrides"), MISTAKES)
def test_the_fast_check_says_what_the_full_check_says(weft_home, entry, recipe, overrides):
    write_field_index()
    with pytest.raises(RecipeError) as full:
        load_config(recipe, overrides, expect_kind=entry)
    with pytest.raises(RecipeError) as fast:
        precheck(entry, recipe, overrides)
    assert str(fast.value) == str(full.value)


def test_valid_command_lines_pass_and_no_index_leaves_fields_to_the_full_check(weft_home):
    assert field_index() is None
    precheck("sft", "demo_sft", ["max_stepz=3"])  # no index: field names not checked here
    path = write_field_index()
    assert path == index_path() and set(json.loads(path.read_text())) >= {"sft", "grpo", "duet"}
    for entry, recipe, overrides in (("sft", "demo_sft", ["max_steps=3"]),
                                     ("grpo", "duet_grpo.cpu", ["learning_rate=1e-5"]),
                                     ("grpo", "tandem_grpo.cpu", [])):
        precheck(entry, recipe, overrides)
        load_config(recipe, overrides, expect_kind=entry)


def test_the_index_key_follows_the_installed_trl(weft_home, monkeypatch):
    from training import precheck as P

    before = P.index_key()
    real = P.metadata.version
    monkeypatch.setattr(P.metadata, "version",
                        lambda d: "0.0.1" if d == "trl" else real(d))
    assert P.index_key() != before


def test_a_misspelled_field_exits_2_without_importing_trl(weft_home):
    write_field_index()
    probe = ("import sys\nfrom training.sft import main\n"
             "code = main(['--recipe', 'demo_sft', 'max_stepz=3'])\n"
             "heavy = sorted(m for m in ('torch', 'transformers', 'trl') if m in sys.modules)\n"
             "print('RESULT', code, heavy)\n")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=False)
    assert "RESULT 2 []" in out.stdout, out.stdout + out.stderr
    assert "unknown field `max_stepz`; did you mean max_steps" in out.stderr
