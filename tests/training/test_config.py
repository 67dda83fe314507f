"""Recipes and configs: every recipe loads; bad recipes fail naming the field, before any model."""

import json

import pytest

from training import config as C
from training.config import RecipeError, build_config, load_config


def test_every_recipe_builds(weft_home):
    names = C.list_recipes()
    expected = {"sxs_sft", "sxs_grpo", "sxs_grpo_shaped", "tir_sft_preserved", "tir_sft_discarded",
                "process_grpo", "budget_grpo", "rlvr_grpo"}
    assert expected <= set(names)
    for base in expected:
        assert f"{base}.cpu" in names, f"{base} has no CPU variant"
    for name in names:
        recipe = C.read_recipe(name)
        # GPU recipes ask for bf16, which this CPU machine must refuse; check them without it.
        overrides = {} if name.endswith(".cpu") else {"bf16": False}
        config = load_config(name, overrides)
        assert config.recipe == name
        assert config.checkpoint_id.startswith(name + "-")
        assert config.output_dir == str(weft_home / "checkpoints" / config.checkpoint_id)
        assert type(config) is C.CONFIG_CLASSES[recipe.kind]
        if name.endswith(".cpu"):
            assert config.use_cpu and not config.bf16 and not config.gradient_checkpointing
            assert config.torch_threads == 1


def test_gpu_recipe_refused_on_cpu_machine():
    with pytest.raises(RecipeError, match=r"recipe sxs_sft: field `bf16`"):
        load_config("sxs_sft")


def test_cpu_variant_inherits_and_overrides():
    base = C.read_recipe("sxs_grpo")
    cpu = C.read_recipe("sxs_grpo.cpu")
    assert cpu.values["rewards"] == base.values["rewards"]
    assert cpu.values["num_generations"] == 4 and base.values["num_generations"] == 8
    assert cpu.kind == "grpo"


def test_same_config_same_id_and_changes_change_it():
    a = load_config("rlvr_grpo.cpu")
    b = load_config("rlvr_grpo.cpu", ["logging_steps=5"])  # volatile: same run
    c = load_config("rlvr_grpo.cpu", ["learning_rate=2e-5"])
    assert a.checkpoint_id == b.checkpoint_id != c.checkpoint_id
    assert c.learning_rate == 2e-5  # YAML reads "2e-5" as text; the float field converts it
    assert load_config("rlvr_grpo.cpu", ["checkpoint_id=mine"]).checkpoint_id == "mine"


@pytest.mark.parametrize("overrides, message", [
    (["learning_rat=1e-5"], r"unknown field `learning_rat`; did you mean learning_rate"),
    (["max_steps=ten"], r"field `max_steps` expects int, got 'ten'"),
    (["use_cpu=maybe"], r"field `use_cpu` expects bool"),
    (["save_strategy=no"], r"field `save_strategy` expects .* got False \(bool\) \(YAML reads no"),
    (["num_generations=3"], r"field `per_device_train_batch_size`.*num_generations=3"),
    (["num_generations=1", "per_device_train_batch_size=1"], r"field `num_generations` must be >= 2"),
    (["rewards=[outcom]"], r"field `rewards`: rewards\[0\]: unknown reward 'outcom'"),
    (["rewards=[{name: outcome, schema: sxs}]"], r"has no argument 'schema'"),
    (["answer_format=json"], r"field `answer_format` must be one of"),
    (["rewards=[{name: granularity}]"], r"granularity reward shapes think/speak"),
    (["rewards=[budget]"], r"field `budgets`: the budget reward needs token budgets"),
    (["budgets=[10, 20]"], r"field `budgets` is set but no `budget` reward"),
    (["reward_weights=[1.0]"], r"field `reward_weights`"),
    (["use_vllm=true"], r"field `use_vllm`"),
    (["bf16=true"], r"field `bf16`"),
    (["dataset=builtin:nope"], r"field `dataset`.*no built-in set 'nope'"),
    (["dataset=somefile.csv"], r"field `dataset`.*has no kind"),
    (["dataset="], r"field `dataset` is required"),
    (["model_name_or_path=/no/such/model"], r"field `model_name_or_path`: no model folder"),
    (["torch_threads=0"], r"field `torch_threads`"),
    (["checkpoint_id=a/b"], r"field `checkpoint_id`"),
    (["loss_type=nonsense"], r"field `loss_type` must be one of"),
    (["scale_rewards=always"], r"field `scale_rewards` must be one of"),
])
def test_bad_grpo_overrides_name_the_field(overrides, message):
    with pytest.raises(RecipeError, match=message):
        load_config("rlvr_grpo.cpu", overrides)


@pytest.mark.parametrize("overrides, message", [
    (["assistant_only_loss=true"], r"field `assistant_only_loss` cannot be used"),
    (["max_length=0"], r"field `max_length`"),
    (["dataset_limit=-1"], r"field `dataset_limit`"),
])
def test_bad_sft_overrides_name_the_field(overrides, message):
    with pytest.raises(RecipeError, match=message):
        load_config("sxs_sft.cpu", overrides)


def test_recipe_file_errors(tmp_path):
    with pytest.raises(RecipeError, match="no recipe 'sxs_sf'; did you mean sxs_sft"):
        load_config("sxs_sf")
    bad_kind = tmp_path / "bad.yaml"
    bad_kind.write_text("kind: dpo\ndataset: builtin:arith\n")
    with pytest.raises(RecipeError, match="field `kind` must be one of"):
        load_config(str(bad_kind))
    not_mapping = tmp_path / "list.yaml"
    not_mapping.write_text("- a\n- b\n")
    with pytest.raises(RecipeError, match="mapping"):
        load_config(str(not_mapping))
    loop_a, loop_b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    loop_a.write_text("extends: b.yaml\nkind: sft\n")
    loop_b.write_text("extends: a.yaml\n")
    with pytest.raises(RecipeError, match="loops back"):
        load_config(str(loop_a))
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: sft\ndataset: [unclosed\n")
    with pytest.raises(RecipeError, match="not valid YAML"):
        load_config(str(broken))
    with pytest.raises(RecipeError, match="this entry point runs sft"):
        load_config("rlvr_grpo.cpu", expect_kind="sft")


def test_user_recipe_can_extend_a_builtin_one(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"extends: {C.RECIPES_DIR / 'rlvr_grpo.cpu.yaml'}\nmax_steps: 1\n")
    config = load_config(str(mine))
    assert config.max_steps == 1 and config.recipe == "mine" and config.num_generations == 4


def test_parse_overrides():
    assert C.parse_overrides(["a=1", "--b=x", "c=[1, 2]", "d={k: v}", "e=", "f-g=true"]) == {
        "a": 1, "b": "x", "c": [1, 2], "d": {"k": "v"}, "e": "", "f_g": True}
    with pytest.raises(RecipeError, match="key=value"):
        C.parse_overrides(["novalue"])


def test_build_config_directly_derives_id():
    config = build_config("sft", {"dataset": "builtin:arith_sft", "use_cpu": True})
    assert config.checkpoint_id.startswith("sft-") and not config.bf16
    assert config.report_to == [] or config.report_to == "none"


def test_cli_print_config_and_bad_recipe_exit_before_model(monkeypatch, capsys):
    from training import run, sft

    def no_model(*args, **kwargs):
        raise AssertionError("the model must not be loaded for a bad or print-only recipe")

    monkeypatch.setattr(run, "resolve_model", no_model)
    assert sft.main(["--recipe", "sxs_sft.cpu", "--print-config", "max_steps=3"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["max_steps"] == 3 and printed["recipe"] == "sxs_sft.cpu"
    assert sft.main(["--recipe", "sxs_sft.cpu", "learning_rat=1"]) == 2
    assert "unknown field `learning_rat`" in capsys.readouterr().err
    assert sft.main(["--recipe", "rlvr_grpo.cpu"]) == 2
    assert "grpo recipe" in capsys.readouterr().err


def test_data_fingerprint_joins_a_derived_id_only(weft_home):
    config = load_config("sxs_sft.cpu")
    before = config.checkpoint_id
    config.bind_data({"train": "aaaa"})
    first = config.checkpoint_id
    assert first != before and first.startswith("sxs_sft.cpu-")
    assert config.output_dir == str(weft_home / "checkpoints" / first)
    other = load_config("sxs_sft.cpu")
    other.bind_data({"train": "bbbb"})  # same config, new data: a new run, never a resume
    assert other.checkpoint_id != first
    same = load_config("sxs_sft.cpu")
    same.bind_data({"train": "aaaa"})
    assert same.checkpoint_id == first
    fixed = load_config("sxs_sft.cpu", ["checkpoint_id=mine", "output_dir=/tmp/x"])
    fixed.bind_data({"train": "aaaa"})
    assert fixed.checkpoint_id == "mine" and fixed.output_dir == "/tmp/x"
