"""Recipes and configs: every recipe loads; bad recipes fail naming the field, before any model."""

import pytest
import yaml

from training.config import build_config, config_class, load_config
from training.config_base import WeftGRPOConfig
from training.config_ranges import CONFIG_RANGES, UNRANGED_FIELDS
from training.config_recipes import (
    RECIPES_DIR,
    RecipeError,
    list_recipes,
    merge_values,
    parse_overrides,
    read_recipe,
)


def test_every_recipe_builds(weft_home):
    names = list_recipes()
    expected = {"sxs_sft", "sxs_grpo", "sxs_grpo_shaped", "tir_sft_preserved", "tir_sft_discarded",
                "process_grpo", "budget_grpo", "rlvr_grpo"}
    assert expected <= set(names)
    for base in expected:
        assert f"{base}.cpu" in names, f"{base} has no CPU variant"
    for name in names:
        recipe = read_recipe(name)
        # GPU recipes ask for bf16, which this CPU machine must refuse; check them without it.
        overrides = {} if name.endswith(".cpu") else {"bf16": False}
        config = load_config(name, overrides)
        assert config.recipe == name
        assert config.checkpoint_id.startswith(name + "-")
        assert config.output_dir == str(weft_home / "checkpoints" / config.checkpoint_id)
        assert type(config) is config_class(recipe.kind)
        if name.endswith(".cpu"):
            assert config.use_cpu and not config.bf16 and not config.gradient_checkpointing
            assert config.torch_threads == 1


def test_gpu_recipe_refused_on_cpu_machine():
    with pytest.raises(RecipeError, match=r"recipe sxs_sft: field `bf16`"):
        load_config("sxs_sft")


def test_cpu_variant_inherits_and_overrides():
    base = read_recipe("sxs_grpo")
    cpu = read_recipe("sxs_grpo.cpu")
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
    (["num_generations=1", "per_device_train_batch_size=1"],
     r"field `num_generations` must be an integer >= 2.*got 1"),
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
    mine.write_text(f"extends: {RECIPES_DIR / 'rlvr_grpo.cpu.yaml'}\nmax_steps: 1\n")
    config = load_config(str(mine))
    assert config.max_steps == 1 and config.recipe == "mine" and config.num_generations == 4


def test_nested_override_changes_only_what_it_names():
    from dataclasses import asdict

    base = asdict(load_config("duet_grpo.cpu").duet)
    halved = load_config("duet_grpo.cpu", ["duet={budget_fraction: 0.5}"])
    assert asdict(halved.duet) == {**base, "budget_fraction": 0.5}
    assert halved.duet.full_rollouts == 4 and halved.duet.grace == 8  # the recipe's
    # a dotted key names the one setting; a mapping passed in Python merges the same way
    dotted = load_config("duet_grpo.cpu", ["duet.budget_fraction=0.5"])
    assert asdict(dotted.duet) == asdict(halved.duet)
    assert asdict(load_config("duet_grpo.cpu", {"duet": {"grace": 4}}).duet) == {**base, "grace": 4}
    assert merge_values({"d": {"a": 1, "b": {"c": 2}}, "l": [1]},
                          {"d": {"b": {"x": 3}}, "l": [2]}) == \
        {"d": {"a": 1, "b": {"c": 2, "x": 3}}, "l": [2]}
    assert merge_values({"d": {"a": 1}}, {"d": None}) == {"d": None}


def test_extends_merges_nested_mappings(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"extends: {RECIPES_DIR / 'duet_grpo.cpu.yaml'}\nduet: {{eps_abort: 0.1}}\n")
    config = load_config(str(mine))
    assert config.duet.eps_abort == 0.1 and config.duet.full_rollouts == 4


def test_parse_overrides():
    assert parse_overrides(["a=1", "--b=x", "c=[1, 2]", "d={k: v}", "e=", "f-g=true"]) == {
        "a": 1, "b": "x", "c": [1, 2], "d": {"k": "v"}, "e": "", "f_g": True}
    with pytest.raises(RecipeError, match="key=value"):
        parse_overrides(["novalue"])
    # dotted keys nest, and several of them under one key merge
    assert parse_overrides(["duet.grace=4", "duet.abort=false", "x=1"]) == {
        "duet": {"grace": 4, "abort": False}, "x": 1}
    assert parse_overrides({"a.b.c": 1}) == {"a": {"b": {"c": 1}}}
    with pytest.raises(RecipeError, match="empty part"):
        parse_overrides(["duet..grace=4"])


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
    printed = yaml.safe_load(capsys.readouterr().out)
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


# ---------------------------------------------------------------------------------------------
# Numeric ranges. The tables below are transcribed by hand from TRL's and
# transformers' field documentation, not read from training.config.

def _numeric_fields(cls) -> set[str]:
    import dataclasses
    import typing

    def numeric(annotation) -> bool:
        return annotation in (int, float) or any(numeric(a) for a in typing.get_args(annotation))

    hints = typing.get_type_hints(cls)
    return {f.name for f in dataclasses.fields(cls) if f.init and numeric(hints.get(f.name))}


@pytest.mark.parametrize("kind", ["sft", "grpo"])
def test_every_numeric_field_has_a_range_or_a_stated_reason(kind):
    fields = _numeric_fields(config_class(kind))
    assert len(fields) > 30  # TRL's and transformers' fields are included
    missing = fields - set(CONFIG_RANGES[kind]) - set(UNRANGED_FIELDS)
    assert not missing, f"numeric fields without a range: {sorted(missing)}"
    assert set(CONFIG_RANGES[kind]) <= fields  # no stale entries


def _no_loading(monkeypatch):
    """Make every way of loading a model, tokenizer or dataset fail loudly."""
    import transformers

    from training import data, run

    def refuse(*args, **kwargs):
        raise AssertionError("nothing may be loaded before the recipe is checked")

    monkeypatch.setattr(run, "resolve_model", refuse)
    monkeypatch.setattr(data, "load_rows", refuse)
    monkeypatch.setattr(data, "load_dataset", refuse)
    for cls in (transformers.AutoTokenizer, transformers.AutoModelForCausalLM):
        monkeypatch.setattr(cls, "from_pretrained", refuse)


# (field, bad value as written on the command line, the value as Python prints it, range words)
COMMON_BAD = [
    ("per_device_train_batch_size", "-4", "-4", "an integer >= 1"),
    ("per_device_train_batch_size", "0", "0", "an integer >= 1"),
    ("gradient_accumulation_steps", "0", "0", "an integer >= 1"),
    ("learning_rate", ".inf", "inf", "a finite number > 0"),
    ("learning_rate", "inf", "inf", "a finite number > 0"),
    ("learning_rate", ".nan", "nan", "a finite number > 0"),
    ("learning_rate", "-1e-5", "-1e-05", "a finite number > 0"),
    ("learning_rate", "0", "0", "a finite number > 0"),
    ("max_steps", "0", "0", "an integer >= 1 or -1"),
    ("max_steps", "-2", "-2", "an integer >= 1 or -1"),
    ("num_train_epochs", "0", "0", "a finite number > 0"),
    ("warmup_steps", "-1", "-1", "a finite number >= 0"),
    ("warmup_steps", "2.5", "2.5", "a finite number >= 0, whole when 1 or more"),
    ("weight_decay", "-0.1", "-0.1", "a finite number >= 0"),
    ("adam_beta1", "1.0", "1.0", "a finite number in [0, 1)"),
    ("adam_beta2", "-0.5", "-0.5", "a finite number in [0, 1)"),
    ("adam_epsilon", "0", "0", "a finite number > 0"),
    ("max_grad_norm", "-1", "-1", "a finite number >= 0"),
    ("logging_steps", "0", "0", "a finite number > 0"),
    ("save_steps", "1.5", "1.5", "a finite number > 0, whole when 1 or more"),
    ("seed", "-1", "-1", "an integer in [0, 4294967295]"),
    ("dataloader_num_workers", "-1", "-1", "an integer >= 0"),
    ("save_total_limit", "0", "0", "an integer >= 1"),
    ("dataset_limit", "0", "0", "an integer >= 1"),
    ("torch_threads", "-2", "-2", "an integer >= 1"),
]
GRPO_BAD = [
    ("num_generations", "1", "1", "an integer >= 2"),
    ("max_completion_length", "0", "0", "an integer >= 1"),
    ("temperature", "0", "0", "a finite number > 0"),
    ("temperature", "-0.7", "-0.7", "a finite number > 0"),
    ("top_p", "0", "0", "a finite number in (0, 1]"),
    ("top_p", "1.01", "1.01", "a finite number in (0, 1]"),
    ("top_k", "-1", "-1", "an integer >= 0"),
    ("min_p", "1.5", "1.5", "a finite number in [0, 1]"),
    ("repetition_penalty", "0", "0", "a finite number > 0"),
    ("beta", "-0.01", "-0.01", "a finite number >= 0"),
    ("beta", ".inf", "inf", "a finite number >= 0"),
    ("epsilon", "0", "0", "a finite number > 0"),
    ("epsilon", "-0.2", "-0.2", "a finite number > 0"),
    ("epsilon_high", "0", "0", "a finite number > 0"),
    ("delta", "1.0", "1.0", "a finite number > 1"),
    ("num_iterations", "0", "0", "an integer >= 1"),
    ("steps_per_generation", "0", "0", "an integer >= 1"),
    ("generation_batch_size", "-8", "-8", "an integer >= 1"),
    ("vllm_gpu_memory_utilization", "1.2", "1.2", "a finite number in (0, 1]"),
    ("vllm_server_port", "70000", "70000", "an integer in [1, 65535]"),
    ("top_entropy_quantile", "1.5", "1.5", "a finite number in [0, 1]"),
    ("ref_model_mixup_alpha", "-0.1", "-0.1", "a finite number in [0, 1]"),
    ("entropy_coef", ".nan", "nan", "a finite number"),
    ("sapo_temperature_pos", "0", "0", "a finite number > 0"),
]
SFT_BAD = [
    ("max_length", "0", "0", "an integer >= 1"),
    ("dataset_num_proc", "0", "0", "an integer >= 1"),
]
BAD_CASES = ([("sft", "sxs_sft.cpu", *row) for row in COMMON_BAD + SFT_BAD]
             + [("grpo", "rlvr_grpo.cpu", *row) for row in COMMON_BAD + GRPO_BAD])


@pytest.mark.parametrize("kind, recipe, name, written, shown, words", BAD_CASES,
                         ids=[f"{c[0]}-{c[2]}={c[3]}" for c in BAD_CASES])
def test_out_of_range_values_fail_print_config_naming_field_value_and_range(
        monkeypatch, capsys, kind, recipe, name, written, shown, words):
    from training import grpo, sft

    _no_loading(monkeypatch)
    main = {"sft": sft.main, "grpo": grpo.main}[kind]
    assert main(["--recipe", recipe, "--print-config", f"{name}={written}"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no config printed
    message = captured.err
    assert f"recipe {recipe}: field `{name}` must be {words}" in message
    assert message.rstrip().endswith(f"got {shown}")


# Values on the edge of each range (and TRL's sentinels) must still pass.
GOOD_EDGES = [
    ("max_steps", -1), ("max_steps", 1), ("learning_rate", 1e-9), ("warmup_steps", 0),
    ("warmup_steps", 0.5), ("warmup_steps", 3), ("logging_steps", 0.25), ("adam_beta1", 0.0),
    ("max_grad_norm", 0.0), ("seed", 0), ("seed", 2**32 - 1), ("dataloader_num_workers", 0),
    ("top_p", 1.0), ("top_k", 0), ("min_p", 0.0), ("min_p", 1.0), ("beta", 0.0),
    ("temperature", 1e-3), ("delta", 1.5), ("top_entropy_quantile", 0.0),
    ("vllm_gpu_memory_utilization", 1.0), ("entropy_coef", -0.01), ("vllm_server_port", 65535),
]


@pytest.mark.parametrize("name, value", GOOD_EDGES)
def test_values_on_the_edge_of_a_range_pass(name, value):
    config = load_config("rlvr_grpo.cpu", {name: value})
    assert getattr(config, name) == value


def test_ordered_bounds_and_directly_built_configs_are_checked():
    with pytest.raises(RecipeError, match=r"field `entropy_coef_min` \(0.5\) must not exceed "
                                          r"`entropy_coef_max` \(0.1\)"):
        load_config("rlvr_grpo.cpu", {"entropy_coef_min": 0.5, "entropy_coef_max": 0.1})
    with pytest.raises(RecipeError, match=r"field `max_steps` must be an integer >= 1 or -1"):
        build_config("sft", {"dataset": "builtin:arith_sft", "use_cpu": True, "max_steps": 0})


def test_print_config_subprocess_refuses_an_infinite_learning_rate(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "WEFT_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-m", "training.grpo", "--recipe", "rlvr_grpo.cpu", "--print-config",
         "learning_rate=.inf"], cwd=root, env=env, capture_output=True, text=True, timeout=300,
        check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "field `learning_rate` must be a finite number > 0, got inf" in done.stderr
    assert done.stdout == ""
    assert not (tmp_path / "home" / "checkpoints").exists()


# ---------------------------------------------------------------------------------------------
# Kinds: the config class a recipe builds (and so its trainer)

# The class each method recipe must build, written out here; every other recipe is plain GRPO
# or, for the *_sft recipes, SFT.
METHOD_RECIPES = {"duet_grpo": "DuetGRPOConfig", "duet_grpo.cpu": "DuetGRPOConfig",
                  "tandem_grpo": "TandemGRPOConfig", "tandem_grpo.cpu": "TandemGRPOConfig"}


def test_every_kind_has_one_registered_config_class():
    from trl import SFTConfig

    from training.config_base import CONFIG_CLASSES
    from training.config_recipes import ENTRY_POINTS, KINDS

    assert set(CONFIG_CLASSES) == set(KINDS)  # training.config imports every kind's class
    for kind in KINDS:
        cls = config_class(kind)
        assert CONFIG_CLASSES[kind] is cls
        if ENTRY_POINTS[kind] == "grpo":  # a GRPO method's kind is its method name
            assert issubclass(cls, WeftGRPOConfig) and cls.method == kind
        else:
            assert issubclass(cls, SFTConfig)
    with pytest.raises(RecipeError, match=r"kind must be one of \('sft', 'grpo', 'duet', "
                                          r"'tandem'\), got 'ppo'"):
        config_class("ppo")


def test_a_kind_is_registered_once():
    from training.config_base import CONFIG_CLASSES, register_kind

    duet = CONFIG_CLASSES["duet"]

    class Other(WeftGRPOConfig):
        method = "duet"

    with pytest.raises(ValueError, match="kind 'duet' is already registered to "
                                         "training.duet.config.DuetGRPOConfig; "
                                         ".*Other cannot take it"):
        register_kind("duet")(Other)
    assert CONFIG_CLASSES["duet"] is duet
    assert register_kind("duet")(duet) is duet  # the same class again (a reload) is fine
    with pytest.raises(ValueError, match="kind 'ppo' is not a recipe kind; add it to "
                                         "training.config_recipes.KINDS first"):
        register_kind("ppo")
    assert "ppo" not in CONFIG_CLASSES


def test_each_recipe_loads_as_its_class():
    from training.grpo_trainer import WeftGRPOTrainer

    assert set(METHOD_RECIPES) <= set(list_recipes())
    for name in list_recipes():
        config = load_config(name, {} if name.endswith(".cpu") else {"bf16": False})
        expected = METHOD_RECIPES.get(name, "WeftSFTConfig" if "_sft" in name else "WeftGRPOConfig")
        assert type(config).__name__ == expected, name
        if expected == "WeftGRPOConfig":
            assert not hasattr(config, "duet") and not hasattr(config, "tandem"), name
            assert config.trainer_class() is WeftGRPOTrainer


def _user_recipe(tmp_path, text: str) -> str:
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    return str(path)


def test_recipes_written_with_kind_grpo_and_a_method_mapping_still_load_as_the_method(tmp_path):
    rlvr = RECIPES_DIR / "rlvr_grpo.cpu.yaml"
    duet = load_config(_user_recipe(tmp_path, f"kind: grpo\nextends: {rlvr}\nloss_type: dapo\n"
                                              "duet: {n_min: 1, full_rollouts: 2, grace: 8}\n"))
    assert type(duet).__name__ == "DuetGRPOConfig"
    assert (duet.duet.n_min, duet.duet.full_rollouts) == (1, 2)
    tandem = load_config(_user_recipe(tmp_path, f"kind: grpo\nextends: {rlvr}\n"
                                                "tandem: {senior_prob: 0.25}\n"))
    assert type(tandem).__name__ == "TandemGRPOConfig" and tandem.tandem.senior_prob == 0.25
    # kind: grpo with the method mapping nulled out is plain GRPO
    plain = load_config(_user_recipe(
        tmp_path, f"kind: grpo\nextends: {RECIPES_DIR / 'duet_grpo.cpu.yaml'}\nduet: null\n"))
    assert type(plain) is WeftGRPOConfig
    # and a file may name the method outright
    named = load_config(_user_recipe(tmp_path, f"kind: duet\nextends: {rlvr}\nloss_type: dapo\n"
                                               "num_generations: 8\nper_device_train_batch_size: 8\n"
                                               "max_completion_length: 256\n"))
    assert type(named).__name__ == "DuetGRPOConfig" and named.duet == type(named.duet)()


def test_kind_grpo_override_gives_plain_grpo_from_a_method_recipe():
    for recipe, key in (("duet_grpo.cpu", "duet"), ("tandem_grpo.cpu", "tandem")):
        method = load_config(recipe)
        plain = load_config(recipe, ["kind=grpo"])
        assert type(plain) is WeftGRPOConfig and not hasattr(plain, key)
        # everything else is the recipe's (DUET's recipe sets dapo and 4 slots per prompt)
        for name in ("loss_type", "num_generations", "max_completion_length", "learning_rate",
                     "dataset", "beta"):
            assert getattr(plain, name) == getattr(method, name), (recipe, name)
        assert plain.checkpoint_id != method.checkpoint_id
    assert load_config("duet_grpo.cpu", ["kind=grpo"]).loss_type == "dapo"


@pytest.mark.parametrize("recipe, overrides", [
    ("duet_grpo.cpu", {"tandem": {"senior_prob": 0.5}}),
    ("tandem_grpo.cpu", ["duet={}"]),
    ("duet_grpo.cpu", ["kind=grpo", "tandem={span_cap: 4}"]),
    ("rlvr_grpo.cpu", ["duet={n_min: 1}", "tandem={span_cap: 4}"]),
])
def test_both_methods_are_refused_first(recipe, overrides):
    with pytest.raises(RecipeError, match=rf"^recipe {recipe}: field `tandem` cannot be combined "
                                          r"with duet \(both replace generation\); keep one"):
        load_config(recipe, overrides)


def test_both_methods_in_a_recipe_file_are_refused(tmp_path):
    mine = _user_recipe(tmp_path, f"extends: {RECIPES_DIR / 'duet_grpo.cpu.yaml'}\n"
                                  "tandem: {span_cap: 4}\n")
    with pytest.raises(RecipeError, match="recipe mine: field `tandem` cannot be combined"):
        load_config(mine)


@pytest.mark.parametrize("recipe, overrides, message", [
    ("tandem_grpo.cpu", ["kind=duet"], (r"field `tandem` does not belong to a duet recipe; set "
                                       r"kind=tandem")),
    ("duet_grpo.cpu", ["kind=sft"], (r"override kind='sft' cannot be used on a duet recipe; "
                                    r"choose one of \['grpo', 'duet', 'tandem'\]")),
    ("sxs_sft.cpu", ["kind=grpo"], r"override kind='grpo' cannot be used on a sft recipe"),
    ("duet_grpo.cpu", ["kind=ppo"], r"override kind='ppo' cannot be used"),
    ("tandem_grpo.cpu", ["tandem=null"], r"field `tandem` is null in a tandem recipe"),
])
def test_kind_mismatches_are_refused_with_what_to_do(recipe, overrides, message):
    with pytest.raises(RecipeError, match=message):
        load_config(recipe, overrides)


def test_kind_override_can_switch_a_plain_recipe_to_a_method():
    config = load_config("rlvr_grpo.cpu", ["kind=tandem", "tandem.span_cap=4"])
    assert type(config).__name__ == "TandemGRPOConfig"
    assert (config.tandem.span_cap, config.tandem.senior_prob, config.tandem.junior) == (4, 0.5, "")


def test_method_recipes_run_under_the_grpo_entry_point_only(capsys):
    from training import grpo, sft

    assert sft.main(["--recipe", "duet_grpo.cpu", "--print-config"]) == 2
    assert "is a duet recipe; this entry point runs sft recipes" in capsys.readouterr().err
    assert grpo.main(["--recipe", "tandem_grpo.cpu", "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["tandem"] == {"senior_prob": 0.5, "span_cap": 8, "junior": ""}
