"""Each paper claim's setup as its paper states it, in a form a test can hold weft's ``paper``
run configs to: model, training data, steps, rollouts per prompt, generation length and the
evaluation's samples, temperature and length (``None``: the paper has no such setting for the
claim, e.g. a simulation). ``section`` says where the paper states them.

:func:`configured_setup` reads the same settings out of an experiment's ``paper`` run config
(a training recipe's values resolved with the run's overrides, without building the trainer's
config, which needs a GPU for bf16), so a config that drifts from the paper fails
``tests/assets/test_paper_scale.py``. The table "Paper setup vs weft's configs" in
docs/results.md names the same models.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# the LLM the Engagement Process paper's §5.2 and DeepTool's App. A.1 run as controller /
# synthesizer: the `llm` resource must serve it for those claims at paper scale
DEEPSEEK = "DeepSeek-V3.2"
NO_MODEL = "no LLM"  # the §5.1 toys: learned tabular policies, no language model

PAPER_SETUPS: dict[str, dict[str, Any]] = {
    "sxs_latency_claim": {
        "section": "SxS §4.1-4.2, App. A Table 3",
        "model": "Qwen/Qwen3-4B", "dataset": "warehouse:sxs_sft_dataset?variant=sxs",
        "steps": None,  # one epoch of the corpus (the step count is not stated)
        "max_tokens": 32768,  # SFT sequence length
        "eval_benchmark": "aime25", "eval_k": 16, "eval_temperature": 1.0,
        "eval_max_tokens": 39000},
    "mosaic_synthesis_claim": {
        "section": "DeepTool §3.1, App. A.1",
        "model": DEEPSEEK, "limit": 8000},
    "mosaic_recovery_claim": {
        "section": "DeepTool §3.1, App. A.1 Table 3",
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "dataset": "warehouse:tir_sft_dataset?rendering=state_preserved",
        "synthesizer": DEEPSEEK, "steps": 2500, "max_tokens": 15000,
        "eval_benchmark": "math500", "eval_k": 8, "eval_max_tokens": 6000},
    "duet_budget_claim": {
        "section": "DUET §4.1, App. A.3",
        "model": "Qwen/Qwen3-1.7B-Base", "dataset": "problems:math_train",
        "steps": 232, "prompts_per_step": 128, "rollouts": 8, "max_tokens": 3072,
        "temperature": 0.9, "top_p": 0.95,
        "eval_benchmark": "math500", "eval_k": 4, "eval_temperature": 0.9,
        "eval_max_tokens": 3072},
    "ep_deliberation_claim": {"section": "Engagement Process §5.1, App. C", "model": NO_MODEL},
    "ep_patrol_claim": {"section": "Engagement Process §5.1, App. C", "model": NO_MODEL},
    "ep_assistant_claim": {
        "section": "Engagement Process §5.2, App. D",
        "model": DEEPSEEK, "seeds": 200, "episodes_per_seed": 5},
    "ep_kitchen_claim": {"section": "Engagement Process §5.2, App. E", "model": DEEPSEEK},
    "ep_budget_claim": {
        "section": "Engagement Process §5.3, App. F",
        "model": "Qwen/Qwen3-8B", "dataset": "problems:dapo_math_17k",  # DeepMath stand-in
        "steps": 90, "rollouts": 10, "max_tokens": 8000, "temperature": 1.0,
        "eval_n": 1000, "eval_k": 1, "eval_temperature": 0.6, "eval_max_tokens": 32768},
    "tandem_claim": {
        "section": "Tandem RL §4.1, App. A.2-A.3",
        "model": "Qwen/Qwen3-4B-Instruct-2507", "dataset": "problems:deepscaler",
        "steps": 200, "eval_k": 16, "eval_temperature": 0.7, "eval_max_tokens": 8192},
}


def _recipe_values(recipe: str, overrides: list[str]) -> dict[str, Any]:
    from training.config_recipes import merge_values, parse_overrides, read_recipe

    return merge_values(read_recipe(recipe).values, parse_overrides(overrides))


def _eval(out: dict[str, Any], sampling: Mapping[str, Any] | None) -> None:
    if not sampling:
        return
    for key in ("k", "temperature", "max_tokens"):
        if key in sampling:
            out[f"eval_{key}"] = sampling[key]


def configured_setup(experiment: Any) -> dict[str, Any]:
    """The paper-setup settings of ``experiment``'s ``paper`` run config, under the keys of
    :data:`PAPER_SETUPS` (a key is missing where the config does not say it)."""
    ops = experiment.run_config("paper")["ops"]
    out: dict[str, Any] = {}
    if experiment.paper_llm:
        out["model"] = experiment.paper_llm
    name = experiment.name
    if name in ("ep_deliberation_claim", "ep_patrol_claim"):
        out["model"] = NO_MODEL
    elif name == "ep_assistant_claim":
        cfg = ops[name]["config"]
        out.update(seeds=cfg.get("n_seeds"), episodes_per_seed=cfg.get("episodes_per_seed"))
    elif name == "mosaic_synthesis_claim":
        out["limit"] = ops[name]["config"].get("limit")
    elif name == "duet_budget_claim":
        cfg = ops["duet_sweep"]["config"]
        values = _recipe_values(cfg["recipe"], list(cfg.get("overrides", [])))
        out.update(model=values["model_name_or_path"], dataset=values["dataset"],
                   steps=cfg.get("max_steps"), prompts_per_step=cfg.get("prompts_per_step"),
                   rollouts=cfg.get("full_rollouts"),
                   max_tokens=cfg.get("max_completion_length"),
                   temperature=values.get("temperature"), top_p=values.get("top_p"),
                   eval_benchmark=cfg.get("benchmark"))
        _eval(out, cfg.get("eval_sampling"))
    elif name == "ep_budget_claim":
        cfg = ops["ep_budget_table"]["config"]
        overrides = list(cfg.get("overrides", []))
        values = _recipe_values(cfg["ep_recipe"], overrides)
        rlvr = _recipe_values(cfg["rlvr_recipe"], overrides)
        same = {k: values.get(k) for k in ("model_name_or_path", "dataset", "num_generations")
                if values.get(k) == rlvr.get(k)}
        out.update(model=same.get("model_name_or_path"), dataset=same.get("dataset"),
                   steps=cfg.get("max_steps"), rollouts=same.get("num_generations"),
                   max_tokens=cfg.get("max_completion_length",
                                      values.get("max_completion_length")),
                   temperature=values.get("temperature"), eval_n=cfg.get("heldout_n"))
        _eval(out, cfg.get("sampling"))
        out["eval_max_tokens"] = cfg.get("budget_limit")  # every budget decodes to it
    elif name in ("sxs_latency_claim", "mosaic_recovery_claim", "tandem_claim"):
        cfg = ops[name]["config"]
        values = _recipe_values(cfg["recipe"], list(cfg.get("overrides", [])))
        out.update(model=values["model_name_or_path"], dataset=values["dataset"],
                   steps=cfg.get("max_steps", cfg.get("train_steps")),
                   eval_benchmark=cfg.get("benchmark"))
        if "max_length" in values:  # an SFT recipe's sequence length
            out["max_tokens"] = values["max_length"]
        if name == "mosaic_recovery_claim":
            out["synthesizer"] = experiment.paper_llm
            out["model"] = values["model_name_or_path"]
        _eval(out, cfg.get("sampling"))
    return out


def mismatches(experiment: Any) -> dict[str, tuple[Any, Any]]:
    """{setting: (the paper's, the config's)} for every setting of :data:`PAPER_SETUPS` that
    ``experiment``'s paper config does not match."""
    want = {k: v for k, v in PAPER_SETUPS[experiment.name].items() if k != "section"}
    have = configured_setup(experiment)
    return {k: (v, have.get(k)) for k, v in want.items() if have.get(k) != v}
