"""TandemGRPOConfig (training/tandem/config.py): a Tandem recipe builds it with typed settings,
its checks refuse what the dual decoder cannot do, ``--print-config`` shows every setting with
its help, and the class picks the Tandem trainer with the junior resolved."""

from __future__ import annotations

from dataclasses import fields

import pytest
import yaml

from training.config import load_config
from training.config_base import WeftGRPOConfig
from training.config_recipes import RecipeError
from training.tandem.config import TandemGRPOConfig
from training.tandem.core import TandemSettings

TANDEM_FIELDS = ["senior_prob", "span_cap", "junior"]  # written out, not read from the class


def test_tandem_recipe_builds_tandem_config_with_typed_settings():
    config = load_config("tandem_grpo.cpu")
    assert type(config) is TandemGRPOConfig and isinstance(config, WeftGRPOConfig)
    assert config.tandem == TandemSettings(senior_prob=0.5, span_cap=8, junior="")
    changed = load_config("tandem_grpo.cpu", ["tandem.senior_prob=0.75"])
    assert changed.tandem == TandemSettings(senior_prob=0.75, span_cap=8, junior="")
    assert changed.checkpoint_id != config.checkpoint_id
    # null span_cap (no cap) stays allowed, as the handoff schedule allows it
    assert load_config("tandem_grpo.cpu", ["tandem.span_cap=null"]).tandem.span_cap is None


def test_print_config_shows_every_tandem_setting_with_help(capsys):
    from training import grpo

    assert [f.name for f in fields(TandemSettings)] == TANDEM_FIELDS
    assert grpo.main(["--recipe", "tandem_grpo.cpu", "--print-config", "tandem.span_cap=4"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "# trainer: training.tandem.trainer.TandemGRPOTrainer" in lines
    for f in fields(TandemSettings):
        help_text = " ".join(f.metadata["help"].split())
        assert len(help_text) > 20
        assert any(line.startswith(f"  {f.name}: ") and line.endswith(f"  # {help_text}")
                   for line in lines), f.name
    assert yaml.safe_load(out)["tandem"] == {"senior_prob": 0.5, "span_cap": 4, "junior": ""}


def test_tandem_config_picks_the_tandem_trainer_with_the_junior(tmp_path):
    from training.tandem.trainer import TandemGRPOTrainer

    config = load_config("tandem_grpo.cpu", ["tandem.span_cap=3"])
    assert config.trainer_class() is TandemGRPOTrainer
    # no junior: the senior's own starting checkpoint (self-pairing)
    assert config.trainer_kwargs("/base") == {"junior_model": "/base", "senior_prob": 0.5,
                                              "span_cap": 3}
    own = load_config("tandem_grpo.cpu", [f"tandem.junior={tmp_path}"])
    assert own.trainer_kwargs("/base")["junior_model"] == str(tmp_path)
    hub = load_config("tandem_grpo.cpu", ["tandem.junior=org/some-model"])
    assert hub.trainer_kwargs("/base")["junior_model"] == "org/some-model"


@pytest.mark.parametrize("overrides, message", [
    (["tandem.junior=3"], r"field `tandem`: field `junior` expects str, got 3"),
    (["tandem.senior_prob=1.5"], r"field `tandem`: senior_prob must be a probability"),
    (["use_vllm=true"], r"field `use_vllm`"),
])
def test_bad_tandem_settings_are_refused_naming_the_field(overrides, message):
    with pytest.raises(RecipeError, match=rf"recipe tandem_grpo.cpu: {message}"):
        load_config("tandem_grpo.cpu", overrides)
