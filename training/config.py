"""Training configs (TRL's ``SFTConfig``/``GRPOConfig`` plus weft's fields) and YAML recipes.

:func:`load_config` reads a recipe (by name from ``training/recipes/`` or by path; its
``extends`` chain merged, see ``training.config_recipes``), applies ``key=value`` overrides
(values parsed as YAML), checks every key and value against the config dataclass, and builds
the config. Every problem is a :class:`RecipeError` that names the recipe and the field; all of
this happens before any model is loaded. Numbers are range-checked first
(``training.config_ranges``: :data:`CONFIG_RANGES`, :data:`UNRANGED_FIELDS`); the error names
the field, the value and the allowed range. The recipe and range helpers are re-exported here,
so ``training.config`` is the one import for callers.

weft's fields (both configs): ``model_name_or_path`` (``embedded`` = the converted embedded
model), ``dataset`` / ``dataset_fallback`` / ``dataset_limit`` (specs, see ``training.data``),
``checkpoint_id`` (default: the recipe name plus a hash of the whole config and, once the
training script has loaded it, of the data's fingerprint, so re-running the same config on the
same data resumes the same run), ``parent_checkpoint``, ``resume``, ``overwrite``,
``torch_threads`` (CPU recipes use 1. bench/grpo_step.py on 2 cores: with the machine quiet,
2 threads were 1.6x faster than 1; with other work loading it (load ~5), 2 threads were 19x
slower, OpenMP threads waiting on each other. Raise it on a machine you have to yourself). GRPO adds
``answer_format``, ``rewards`` (names from ``training.rewards.REWARDS`` with weights and
arguments), ``drop_degenerate_groups`` (by correctness: needs a verifier reward, picked by
``correctness_reward`` when the recipe has several) and ``budgets``; ``tandem`` (a mapping of
``training.tandem.TandemSettings``) switches to Tandem RL rollouts and the senior-only loss.
GRPO's ``use_vllm`` defaults to null: ``training.rollouts.choose_engine`` resolves it before the
checkpoint id is derived (vLLM where it is installed in a TRL-supported version, a CUDA GPU is
visible and the method's generation rule allows it; ``false`` forces transformers, ``true``
where vLLM cannot run is refused with the reason); ``vllm_server_gpus`` places the vLLM server
weft starts in TRL's server mode.

Not guaranteed: that TRL accepts every combination this module lets through (TRL's own checks
run afterwards and their errors are re-raised as RecipeError with the recipe name).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import GRPOConfig, SFTConfig

from training.config_ranges import (
    COMMON_RANGES,
    CONFIG_RANGES,
    GRPO_RANGES,
    ORDERED_PAIRS,
    SFT_RANGES,
    UNRANGED_FIELDS,
    Range,
    check_ranges,
)
from training.config_recipes import (
    KINDS,
    RECIPES_DIR,
    RESERVED_KEYS,
    Recipe,
    RecipeError,
    check_values,
    find_recipe,
    list_recipes,
    merge_values,
    parse_overrides,
    read_recipe,
)
from training.data import DatasetError, parse_spec
from training.rewards import ANSWER_FORMATS, correctness_reward_index, parse_reward_specs

__all__ = [
    "COMMON_RANGES", "CONFIG_CLASSES", "CONFIG_RANGES", "EMBEDDED", "GRPO_CHOICES", "GRPO_RANGES",
    "KINDS", "ORDERED_PAIRS", "RECIPES_DIR", "RESERVED_KEYS", "SFT_RANGES", "UNRANGED_FIELDS",
    "VOLATILE_FIELDS", "Range", "Recipe", "RecipeError", "WeftArgs", "WeftGRPOConfig",
    "WeftSFTConfig", "build_config", "check_ranges", "check_values", "config_summary",
    "derive_checkpoint_id", "find_recipe", "list_recipes", "load_config", "merge_values",
    "parse_overrides",
    "read_recipe",
]

log = logging.getLogger(__name__)

EMBEDDED = "embedded"
# Fields that do not change what is trained: left out of the derived checkpoint id.
VOLATILE_FIELDS = frozenset({
    "output_dir", "checkpoint_id", "resume", "overwrite", "logging_dir", "run_name",
    "logging_steps", "save_steps", "save_total_limit", "report_to", "disable_tqdm",
    "log_completions", "num_completions_to_print", "dataloader_num_workers", "torch_threads",
})


# ---------------------------------------------------------------------------------------------
# weft's fields and checks, shared by both configs


@dataclass
class WeftArgs:
    """weft's additions to TRL's configs (see the module docstring)."""

    recipe: str = field(default="", metadata={"help": "Recipe name, recorded with the checkpoint."})
    model_name_or_path: str = field(
        default=EMBEDDED, metadata={"help": "'embedded', a local folder or a hub id."})
    dataset: str = field(default="", metadata={"help": "Dataset spec (see training.data)."})
    dataset_fallback: str = field(
        default="", metadata={"help": "Spec used when `dataset` has no data (recorded)."})
    dataset_limit: int | None = field(default=None, metadata={"help": "Use at most this many rows."})
    checkpoint_id: str = field(default="", metadata={"help": "Run id; default derived from config."})
    parent_checkpoint: str = field(default="", metadata={"help": "Id of the checkpoint trained from."})
    resume: bool = field(default=True, metadata={"help": "Resume from the last saved checkpoint."})
    overwrite: bool = field(default=False, metadata={"help": "Delete an earlier run's folder first."})
    torch_threads: int | None = field(
        default=None, metadata={"help": "torch CPU threads (1 avoids OpenMP oversubscription on a "
                                        "busy machine); null keeps torch's default."})

    def _weft_checks(self, kind: str) -> None:
        from pipelines.settings import weft_home

        check_ranges(self, kind)
        _require(isinstance(self.dataset, str) and self.dataset.strip() != "", "dataset",
                 "is required (e.g. builtin:sxs_sft, warehouse:sxs_sft_dataset)")
        for name in ("dataset", "dataset_fallback"):
            value = getattr(self, name)
            if value:
                try:
                    parse_spec(value)
                except DatasetError as exc:
                    raise RecipeError(f"field `{name}`: {exc}") from exc
        model = self.model_name_or_path
        _require(isinstance(model, str) and model.strip() != "", "model_name_or_path",
                 "is required ('embedded', a local folder or a hub id)")
        if model.startswith(("/", ".", "~")) and not Path(model).expanduser().is_dir():
            raise RecipeError(f"field `model_name_or_path`: no model folder at {model}")
        if self.bf16 is None:  # TRL would default to bf16 even on CPU
            self.bf16 = _cuda_bf16() and not self.use_cpu
        if self.bf16 and (self.use_cpu or not _cuda_available()):
            raise RecipeError("field `bf16`: bf16 training needs a CUDA GPU; set bf16: false for "
                              "CPU runs (use_cpu: true or no GPU visible)")
        self._weft_kind = kind
        self._weft_derived_id = not self.checkpoint_id
        if self._weft_derived_id:
            self.checkpoint_id = derive_checkpoint_id(self.recipe or kind, self)
        _require("/" not in self.checkpoint_id and self.checkpoint_id not in (".", ".."),
                 "checkpoint_id", f"must be a plain name, got {self.checkpoint_id!r}")
        self._weft_default_output = not self.output_dir or self.output_dir == "trainer_output"
        if self._weft_default_output:
            self.output_dir = str(weft_home() / "checkpoints" / self.checkpoint_id)
        if self.report_to is None:
            self.report_to = "none"


    def bind_data(self, fingerprints: Mapping[str, str]) -> None:
        """Fold the training data's fingerprints into a derived checkpoint id (and the default
        output folder), so that new data never resumes or reuses a run trained on old data.
        An explicit ``checkpoint_id`` is left alone."""
        from pipelines.settings import weft_home

        if not getattr(self, "_weft_derived_id", False):
            return
        self.checkpoint_id = derive_checkpoint_id(self.recipe or self._weft_kind, self,
                                                  dict(fingerprints))
        if self._weft_default_output:
            self.output_dir = str(weft_home() / "checkpoints" / self.checkpoint_id)


def _require(ok: bool, name: str, message: str) -> None:
    if not ok:
        raise RecipeError(f"field `{name}` {message}")


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _cuda_bf16() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def derive_checkpoint_id(prefix: str, config: Any, data: Mapping[str, str] | None = None) -> str:
    """``<prefix>-<8 hex>``: a hash of every non-volatile field (and of the data fingerprints
    once they are known), so equal configs on equal data share an id."""
    from warehouse import config_hash

    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
              if f.name not in VOLATILE_FIELDS}
    if data:
        values["_data"] = dict(sorted(data.items()))
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in prefix) or "run"
    return f"{safe}-{config_hash(values)[:8]}"


@dataclass
class WeftSFTConfig(WeftArgs, SFTConfig):
    """TRL's SFTConfig plus weft's fields; loss on the completion of prompt/completion rows."""

    def __post_init__(self) -> None:
        self._weft_checks("sft")
        _require(not self.assistant_only_loss, "assistant_only_loss",
                 "cannot be used: the embedded model's chat template has no generation markers. "
                 "weft's SFT data is prompt/completion, which already trains on the completion only")
        _wrap_trl(lambda: SFTConfig.__post_init__(self))


@dataclass
class WeftGRPOConfig(WeftArgs, GRPOConfig):
    """TRL's GRPOConfig plus weft's rewards, degenerate-group filter and token budgets."""

    answer_format: str = field(default="boxed", metadata={"help": "boxed, sxs or tir."})
    rewards: list = field(default_factory=lambda: ["outcome"],
                          metadata={"help": "Reward names or {name, weight, ...args} mappings."})
    drop_degenerate_groups: bool = field(
        default=False, metadata={"help": "Drop groups whose rollouts are all correct or all wrong "
                                         "(by the verifier reward) before backward."})
    correctness_reward: str | None = field(
        default=None, metadata={"help": "The verifier reward (outcome or budget) that says which "
                                        "rollouts are correct; default: the recipe's only one."})
    budgets: list[int] | None = field(
        default=None, metadata={"help": "Token budgets given to prompts (budget-aware GRPO)."})
    duet: dict | None = field(
        default=None, metadata={"help": "DUET token-budget controller settings "
                                        "(training.duet.DuetSettings); null: plain GRPO."})
    tandem: dict | None = field(
        default=None, metadata={"help": "Tandem RL rollouts (training.tandem.TandemSettings: "
                                        "senior_prob, span_cap, junior); null: plain GRPO."})
    use_vllm: bool | None = field(
        default=None, metadata={"help": "Generate rollouts with vLLM (vllm_mode: colocate or "
                                        "server). null: vLLM when it is installed in a version "
                                        "TRL supports and a CUDA GPU is visible (see "
                                        "training.rollouts); false forces transformers."})
    vllm_server_gpus: list[int] | None = field(
        default=None, metadata={"help": "Server mode without vllm_server_base_url: CUDA devices "
                                        "of the vLLM server weft starts (default: the last "
                                        "visible GPU); training processes use the others."})

    def __post_init__(self) -> None:
        self._resolve_rollouts()
        self._weft_checks("grpo")
        _require(self.answer_format in ANSWER_FORMATS, "answer_format",
                 f"must be one of {ANSWER_FORMATS}, got {self.answer_format!r}")
        try:
            specs = parse_reward_specs(self.rewards)
        except ValueError as exc:
            raise RecipeError(f"field `rewards`: {exc}") from exc
        names = [s.name for s in specs]
        if self.reward_weights is not None:
            raise RecipeError("field `reward_weights`: give weights inside `rewards` "
                              "({name: ..., weight: ...}) instead")
        for name, choices in GRPO_CHOICES.items():
            value = getattr(self, name)
            value = {True: "group", False: "none"}.get(value, value) if name == "scale_rewards" else value
            _require(value in choices, name, f"must be one of {choices}, got {value!r}")
        g = self.num_generations
        _require(isinstance(g, int) and g >= 2, "num_generations", f"must be >= 2, got {g!r}")
        steps = self.steps_per_generation or self.gradient_accumulation_steps
        if (self.per_device_train_batch_size * steps) % g:
            raise RecipeError(
                f"field `per_device_train_batch_size`: {self.per_device_train_batch_size} x "
                f"{steps} generation steps is not a multiple of num_generations={g}; each "
                "process must hold whole groups (make the batch size a multiple of "
                "num_generations)")
        if "granularity" in names and self.answer_format != "sxs":
            raise RecipeError("field `rewards`: the granularity reward shapes think/speak "
                              "outputs; set answer_format: sxs")
        if "budget" in names and not self.budgets:
            raise RecipeError("field `budgets`: the budget reward needs token budgets, e.g. "
                              "budgets: [1000, 2000, 4000, 8000]")
        if self.budgets:
            _require("budget" in names, "budgets",
                     "is set but no `budget` reward uses it; add {name: budget} to rewards")
            _require(all(isinstance(b, int) and not isinstance(b, bool) and b > 0
                         for b in self.budgets), "budgets",
                     f"must be positive integers, got {self.budgets!r}")
        if self.drop_degenerate_groups or self.correctness_reward is not None:
            try:
                correctness_reward_index(specs, self.correctness_reward)
            except ValueError as exc:
                field_name = ("correctness_reward" if self.correctness_reward is not None
                              else "drop_degenerate_groups")
                raise RecipeError(f"field `{field_name}`: {exc}") from exc
        _require(self.duet is None or self.tandem is None, "tandem", "cannot be combined with "
                 "duet (both replace generation); keep one of them")
        if self.duet is not None:
            _check_duet(self)
        if self.tandem is not None:
            _check_tandem(self)
        self.reward_weights = [s.weight for s in specs]
        _wrap_trl(lambda: GRPOConfig.__post_init__(self))

    def reward_specs(self):
        return parse_reward_specs(self.rewards)

    def _resolve_rollouts(self) -> None:
        """``use_vllm`` null -> True/False (training.rollouts.choose_engine); the reason is
        kept in ``_weft_rollouts`` for the run's log. Runs before the checkpoint id is derived,
        so the id records the engine actually used."""
        from training.rollouts import RolloutError, choose_engine, duet_vllm_hook, vllm_version

        method = "tandem" if self.tandem is not None else "duet" if self.duet is not None else "grpo"
        plugin = False
        if method == "duet":
            from training.duet.generate import processor_plugin_registered

            plugin = processor_plugin_registered()
        try:
            choice = choose_engine(self.use_vllm, method=method, vllm_mode=self.vllm_mode,
                                   use_cpu=bool(self.use_cpu), cuda=_cuda_available(),
                                   version=vllm_version(),
                                   duet_hook=method == "duet" and duet_vllm_hook() is not None,
                                   duet_plugin=plugin)
        except RolloutError as exc:
            raise RecipeError(str(exc)) from exc
        self.use_vllm = choice.use_vllm
        self._weft_rollouts = choice
        gpus = self.vllm_server_gpus
        if gpus is not None:
            _require(isinstance(gpus, list) and len(gpus) > 0 and len(set(gpus)) == len(gpus)
                     and all(isinstance(g, int) and not isinstance(g, bool) and g >= 0
                             for g in gpus), "vllm_server_gpus",
                     f"must be a non-empty list of distinct CUDA device indices, got {gpus!r}")
            _require(self.vllm_mode == "server" and not self.vllm_server_base_url,
                     "vllm_server_gpus", "only applies when weft starts the vLLM server "
                     "(vllm_mode: server with no vllm_server_base_url)")


def _check_tandem(config: WeftGRPOConfig) -> None:
    """Tandem RL (training.tandem_trainer) settings and the fields its dual decoder refuses."""
    from training.tandem import TandemError, TandemSettings

    try:
        TandemSettings.from_mapping(config.tandem)
    except (TypeError, TandemError) as exc:
        raise RecipeError(f"field `tandem`: {exc}") from exc
    _require(not config.use_transformers_continuous_batching,
             "use_transformers_continuous_batching", "tandem rollouts use weft's dual decoder: "
             "set it to false")
    _require(not config.min_p and config.repetition_penalty in (None, 1.0), "min_p",
             "and repetition_penalty are not supported by the tandem sampler; leave them unset")


def _check_duet(config: WeftGRPOConfig) -> None:
    """DUET (training.duet.trainer) settings and the GRPO fields it depends on."""
    from training.duet import COLD_K2, DuetSettings

    try:
        settings = DuetSettings.from_mapping(config.duet)
    except (TypeError, ValueError) as exc:
        raise RecipeError(f"field `duet`: {exc}") from exc
    slots, cap = config.num_generations, config.max_completion_length
    _require(settings.n_min <= slots, "duet", f"n_min={settings.n_min} exceeds num_generations="
             f"{slots} (the slots per prompt, n_max); lower duet.n_min or raise num_generations")
    mean = settings.budget_fraction * settings.full_rollouts
    _require(mean <= slots, "duet", f"budget_fraction x full_rollouts = "
             f"{settings.budget_fraction:g} x {settings.full_rollouts} = {mean:g} rollouts per "
             f"prompt on average, but num_generations={slots} caps a prompt at {slots}: the "
             f"budget cannot be spent. Raise num_generations to at least {math.ceil(mean)} or "
             "lower duet.budget_fraction / duet.full_rollouts")
    if settings.abort and cap:
        _require(settings.grace < cap, "duet", f"grace={settings.grace} is not below "
                 f"max_completion_length={cap}: a rollout without an answer marker is aborted "
                 "only past K2 + grace tokens, so no abort could ever fire. Lower duet.grace "
                 f"below {cap} or set duet.abort: false")
        start = round(COLD_K2 * cap) + settings.grace
        if start >= cap:
            log.warning("duet: the abort threshold starts at K2 + grace = %d + %d = %d tokens, "
                        "past max_completion_length=%d: no rollout is aborted until the "
                        "refitted K2 (p80 of kept lengths) falls below %d", round(COLD_K2 * cap),
                        settings.grace, start, cap, cap - settings.grace)
    _require(config.loss_type == "dapo", "loss_type", "must be 'dapo' with duet (Eq. 6 of the "
             f"DUET paper is a token mean over kept tokens), got {config.loss_type!r}")
    _require(not config.use_transformers_continuous_batching,
             "use_transformers_continuous_batching", "DUET generates with transformers' generate "
             "or, where training.rollouts finds its hook, vLLM: set it to false")
    scale = {True: "group", False: "none"}.get(config.scale_rewards, config.scale_rewards)
    _require(scale in ("group", "none"), "scale_rewards",
             "must be 'group' or 'none' with duet (per-prompt group normalisation)")


def _wrap_trl(fn) -> None:
    try:
        fn()
    except RecipeError:
        raise
    except (ValueError, TypeError) as exc:
        raise RecipeError(f"TRL/transformers rejected the configuration: {exc}") from exc


# Choices TRL only checks when the first loss is computed (after model load and generation).
GRPO_CHOICES: dict[str, tuple[str, ...]] = {
    "loss_type": ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"),
    "scale_rewards": ("group", "batch", "none"),
    "multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
    "importance_sampling_level": ("token", "sequence"),
}

CONFIG_CLASSES: dict[str, type] = {"sft": WeftSFTConfig, "grpo": WeftGRPOConfig}


def build_config(kind: str, values: Mapping[str, Any], where: str = "config"):
    """A checked ``WeftSFTConfig``/``WeftGRPOConfig`` from plain values."""
    if kind not in CONFIG_CLASSES:
        raise RecipeError(f"{where}: kind must be one of {KINDS}, got {kind!r}")
    cls = CONFIG_CLASSES[kind]
    checked = check_values(cls, values, where)
    try:
        return cls(**checked)
    except RecipeError as exc:
        raise RecipeError(f"{where}: {exc}") from exc


def load_config(recipe: str | Path, overrides: Sequence[str] | Mapping[str, Any] | None = None,
                expect_kind: str | None = None):
    """Read a recipe, apply overrides, check and build the config (no model is loaded)."""
    rec = read_recipe(recipe)
    if expect_kind and rec.kind != expect_kind:
        raise RecipeError(f"recipe {rec.name} is a {rec.kind} recipe; this entry point runs "
                          f"{expect_kind} recipes")
    values = merge_values(rec.values, parse_overrides(overrides))
    return build_config(rec.kind, values, where=f"recipe {rec.name}")


def config_summary(config: Any) -> dict[str, Any]:
    """JSON-safe dict of the config (for logs, the checkpoints table and hashing)."""
    out = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        try:
            json.dumps(value)
        except TypeError:
            value = str(value)
        out[f.name] = value
    return out
