"""DuetGRPOConfig (training/duet/config.py): a DUET recipe builds it, its settings merge deeply,
settings that cannot take effect are refused with the numbers, ``--print-config`` shows every
setting with its help, and the class picks DUET's trainer."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import asdict, fields
from pathlib import Path

import pytest
import yaml

from training.config import load_config
from training.config_base import WeftGRPOConfig
from training.config_recipes import RecipeError
from training.duet import DuetSettings
from training.duet.config import DuetGRPOConfig

ROOT = Path(__file__).resolve().parents[3]
# DuetSettings' fields, written out here (not read from the class): the print-config test
# must notice a setting that was added without help or dropped from the output.
DUET_FIELDS = ["budget_fraction", "full_rollouts", "n_min", "eps_pre", "eps_abort", "grace",
               "poll_every", "tail_tokens", "window", "refit_every", "s_floor",
               "bisection_steps", "abort", "allocate"]


def _recipe_duet(name: str) -> dict:
    """The ``duet`` mapping a recipe file writes, read with yaml alone."""
    return yaml.safe_load((ROOT / "training" / "recipes" / f"{name}.yaml").read_text())["duet"]


def test_duet_recipe_builds_duet_config_with_typed_settings():
    config = load_config("duet_grpo.cpu")
    assert type(config) is DuetGRPOConfig and isinstance(config, WeftGRPOConfig)
    assert isinstance(config.duet, DuetSettings)
    written = _recipe_duet("duet_grpo.cpu")
    assert {k: getattr(config.duet, k) for k in written} == written
    # settings the recipe leaves out keep DuetSettings' defaults (App. A.3)
    assert (config.duet.bisection_steps, config.duet.abort, config.duet.allocate) == (10, True, True)


def test_a_deep_override_changes_only_the_named_setting():
    base = asdict(load_config("duet_grpo.cpu").duet)
    for overrides in (["duet.budget_fraction=0.5"], ["duet={budget_fraction: 0.5}"],
                      {"duet": {"budget_fraction": 0.5}}):
        changed = load_config("duet_grpo.cpu", overrides)
        got = asdict(changed.duet)
        assert got.pop("budget_fraction") == 0.5
        assert got == {k: v for k, v in base.items() if k != "budget_fraction"}
    two = asdict(load_config("duet_grpo.cpu", ["duet.grace=4", "duet.abort=false"]).duet)
    assert two == {**base, "grace": 4, "abort": False}


def test_settings_change_the_checkpoint_id():
    assert (load_config("duet_grpo.cpu").checkpoint_id
            != load_config("duet_grpo.cpu", ["duet.eps_pre=0.1"]).checkpoint_id)


@pytest.mark.parametrize("overrides, message", [
    (["duet.budgit=0.5"], r"field `duet`: unknown duet settings \['budgit'\]"),
    (["duet.grace=ten"], r"field `duet`: field `grace` expects int, got 'ten'"),
    (["duet.budget_fraction=0"], r"field `duet`: duet.budget_fraction must be in \(0, 4\]"),
    (["duet=[1, 2]"], r"field `duet` expects a mapping of DuetSettings, got \[1, 2\]"),
    (["duet=null"], r"field `duet` is null in a duet recipe; .* set kind=grpo for plain GRPO"),
    (["max_steps=ten"], r"field `max_steps` expects int"),  # the GRPO fields' types still checked
])
def test_bad_duet_values_are_refused_naming_the_field(overrides, message):
    with pytest.raises(RecipeError, match=rf"recipe duet_grpo.cpu: {message}"):
        load_config("duet_grpo.cpu", overrides)


@pytest.mark.parametrize("overrides, message", [
    (["duet={n_min: 9}"], r"n_min=9 exceeds num_generations=8"),
    (["duet={full_rollouts: 12}"], "1 x 12 = 12 rollouts per prompt on average, but num_gen"),
    (["duet={budget_fraction: 2.5}"], r"2.5 x 4 = 10 rollouts per prompt"),
    (["duet={grace: 150}"], r"grace=150 is not below max_completion_length=48"),
])
def test_duet_settings_that_cannot_take_effect_are_refused_with_the_numbers(overrides, message):
    with pytest.raises(RecipeError, match=message):
        load_config("duet_grpo.cpu", overrides)
    # the same settings where they can take effect pass
    load_config("duet_grpo.cpu", [*overrides, "num_generations=12",
                                  "per_device_train_batch_size=12", "max_completion_length=256"])


def test_duet_abort_threshold_past_the_cap_is_warned_with_the_numbers(caplog):
    with caplog.at_level("WARNING", logger="training.duet.config"):
        load_config("duet_grpo.cpu", ["duet={grace: 20}"])  # 0.7 x 48 = 34, 34 + 20 = 54 > 48
    assert "K2 + grace = 34 + 20 = 54 tokens, past max_completion_length=48" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="training.duet.config"):
        load_config("duet_grpo.cpu", ["duet={grace: 20, abort: false}"])
    assert "K2 + grace" not in caplog.text


def test_print_config_shows_every_duet_setting_with_help_and_value(capsys):
    from training import grpo

    assert [f.name for f in fields(DuetSettings)] == DUET_FIELDS
    assert grpo.main(["--recipe", "duet_grpo.cpu", "--print-config",
                      "duet.budget_fraction=0.5"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "# DuetGRPOConfig (recipe duet_grpo.cpu)" in lines
    assert "# trainer: training.duet.trainer.DuetGRPOTrainer" in lines
    block = lines.index(next(line for line in lines if line.startswith("duet:")))
    assert "DUET token-budget controller settings" in lines[block]
    shown = lines[block + 1: block + 1 + len(DUET_FIELDS)]
    for name, line, f in zip(DUET_FIELDS, shown, fields(DuetSettings), strict=True):
        help_text = " ".join(f.metadata["help"].split())
        assert len(help_text) > 20, name
        assert line.startswith(f"  {name}: ") and line.endswith(f"  # {help_text}"), line
    # the values read back: the file's settings, the override, and the defaults for the rest
    printed = yaml.safe_load(out)
    expected = {**_recipe_duet("duet_grpo.cpu"), "budget_fraction": 0.5,
                "bisection_steps": 10, "abort": True, "allocate": True}
    assert printed["duet"] == expected
    assert printed["num_generations"] == 8 and printed["loss_type"] == "dapo"


def test_duet_config_picks_duets_trainer_and_passes_its_settings():
    from training.duet.trainer import DuetGRPOTrainer
    from training.grpo_trainer import WeftGRPOTrainer

    config = load_config("duet_grpo.cpu")
    assert config.trainer_class() is DuetGRPOTrainer
    assert issubclass(DuetGRPOTrainer, WeftGRPOTrainer)
    assert config.trainer_kwargs("/some/model") == {"duet_settings": config.duet}
    plain = load_config("duet_grpo.cpu", ["kind=grpo"])
    assert plain.trainer_class() is WeftGRPOTrainer and plain.trainer_kwargs("/m") == {}


def test_importing_the_package_stays_light():
    """vLLM imports ``training.duet`` for the abort processor's entry point: the package must
    not pull in TRL or the config machinery, and has one import path for the config class
    (its own module; no lazy attribute on the package)."""
    code = ("import sys, training.duet as d; light = 'trl' not in sys.modules and not any("
            "m.startswith('training.config') for m in sys.modules); from training.duet.config "
            "import DuetGRPOConfig as C; print(light, hasattr(d, 'DuetGRPOConfig'))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "False"]


def test_cpu_recipe_gives_eq4_room_to_move_and_revisits_its_prompts():
    """The CPU recipe's counts are not pinned: two prompts of equal length whose surrogates
    are 3:1 get Eq. 4's 3:1 split of the budget b x full x sum L (continuous optimum
    n_q = (B / S) s_q / sqrt(L_q), App. A.2.3, with S = sum s sqrt(L): here 6 and 2), equal
    surrogates get b x full each; and the run sees every prompt at least twice, so running
    sigma_obs (Eq. 3), the floor reset after epoch 1 (App. A.3), the K1/K2 refit and the
    calibration chi2 on warm prompts (App. A.4) all happen within max_steps."""
    from training.duet.dist import allocate

    config = load_config("duet_grpo.cpu")
    b, slots = config.duet, config.num_generations
    prompts = config.per_device_train_batch_size * config.gradient_accumulation_steps // slots
    assert prompts == 2
    length = 24.0
    budget = b.budget_fraction * b.full_rollouts * 2 * length
    s_norm = (3.0 + 1.0) * length ** 0.5
    expect = [round(budget / s_norm * s / length ** 0.5) for s in (3.0, 1.0)]
    assert expect == [6, 2]
    plan = allocate(["a", "b"], [3.0, 1.0], [length, length], slots, b, None)
    assert plan["counts"] == expect and plan["budget"] == budget
    assert plan["planned"] == pytest.approx(sum(expect) * length)
    even = allocate(["a", "b"], [1.0, 1.0], [length, length], slots, b, None)
    assert even["counts"] == [round(b.budget_fraction * b.full_rollouts)] * 2
    steps_per_epoch = config.dataset_limit / prompts
    assert config.max_steps >= 2 * steps_per_epoch  # two epochs at least
    assert config.max_steps >= b.refit_every and b.window >= slots * prompts
