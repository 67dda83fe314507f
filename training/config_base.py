"""weft's config classes (TRL's ``SFTConfig``/``GRPOConfig`` plus weft's fields), the registry
of recipe kinds, and what is printed and hashed of a config.

Every problem is a :class:`training.config_recipes.RecipeError` that names the field; all of
this happens before any model is loaded. Numbers are range-checked first
(``training.config_ranges``: ``CONFIG_RANGES``, ``UNRANGED_FIELDS``); the error names the
field, the value and the allowed range. Building a config from a recipe (``load_config``,
``build_config``, ``config_class``) is ``training.config``.

weft's fields (both configs): ``model_name_or_path`` (``embedded`` = the converted embedded
model, see ``training.model_path``), ``dataset`` / ``dataset_fallback`` / ``dataset_limit``
(specs, see ``training.data``), ``checkpoint_id`` (default: the recipe name plus a hash of the
whole config and, once the training script has loaded it, of the data's fingerprint, so
re-running the same config on the same data resumes the same run), ``parent_checkpoint``,
``resume``, ``overwrite``, ``torch_threads`` (CPU recipes use 1. bench/grpo_step.py on 2 cores:
with the machine quiet, 2 threads were 1.6x faster than 1; with other work loading it (load ~5),
2 threads were 19x slower, OpenMP threads waiting on each other. Raise it on a machine you have
to yourself). GRPO adds ``answer_format``, ``rewards`` (names from ``training.rewards.REWARDS``
with weights and arguments), ``drop_degenerate_groups`` (by correctness: needs a verifier
reward, picked by ``correctness_reward`` when the recipe has several) and ``budgets``. GRPO's
``use_vllm`` defaults to null: ``training.rollouts.choose_engine`` resolves it before the
checkpoint id is derived (vLLM where it is installed in a TRL-supported version, a CUDA GPU is
visible and the method's generation rule allows it; ``false`` forces transformers, ``true``
where vLLM cannot run is refused with the reason); ``vllm_server_gpus`` places the vLLM server
weft starts in TRL's server mode.

Each recipe kind (``training.config_recipes.KINDS``) has one config class, registered where it
is defined by the class decorator :func:`register_kind` in :data:`CONFIG_CLASSES` (a plain
dict; a kind registered twice is refused): ``sft`` and ``grpo`` here, the GRPO methods next to
their trainers: ``training.duet.config.DuetGRPOConfig`` (field ``duet``: the DUET controller's
settings) and ``training.tandem.config.TandemGRPOConfig`` (field ``tandem``: Tandem RL's handoff
schedule and junior). The registry is complete once ``training.config`` is imported (it imports
every kind's class); look a kind up there (``training.config.config_class``). A GRPO method is
a subclass of :class:`WeftGRPOConfig`; the class picks the trainer
(:meth:`WeftGRPOConfig.trainer_class`) and what it is built with
(:meth:`WeftGRPOConfig.trainer_kwargs`), and checks its settings (read by
:func:`method_settings`) against the GRPO fields it depends on in
:meth:`WeftGRPOConfig._check_method`, which ``__post_init__`` runs after the shared GRPO checks
and before TRL's own. :func:`describe_config` is what ``--print-config`` prints: every field and
value, with the help of weft's and the method's fields.

Not guaranteed: that TRL accepts every combination this module lets through (TRL's own checks
run afterwards and their errors are re-raised as RecipeError with the recipe name).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from trl import GRPOConfig, SFTConfig

from training.config_ranges import check_ranges
from training.config_recipes import KINDS, RecipeError, check_values
from training.data import parse_spec
from training.errors import DatasetError
from training.model_path import EMBEDDED
from training.rewards import ANSWER_FORMATS, correctness_reward_index, parse_reward_specs

__all__ = [
    "CONFIG_CLASSES", "GRPO_CHOICES", "VOLATILE_FIELDS", "WeftArgs", "WeftGRPOConfig",
    "WeftSFTConfig", "config_summary", "derive_checkpoint_id", "describe_config",
    "method_settings", "register_kind",
]

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# The recipe kinds' config classes

# kind -> config class, filled by register_kind where each class is defined.
CONFIG_CLASSES: dict[str, type] = {}


def register_kind(kind: str) -> Callable[[type], type]:
    """Class decorator: the decorated config class builds recipes of ``kind``.

    ``kind`` must be one of ``training.config_recipes.KINDS`` (what a recipe may name); a kind
    another class already holds is refused (registering the same class again, as a reloaded
    module does, replaces it)."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not a recipe kind; add it to "
                         f"training.config_recipes.KINDS first (now {KINDS})")

    def register(cls: type) -> type:
        taken = CONFIG_CLASSES.get(kind)
        if taken is not None and (taken.__module__, taken.__qualname__) != (cls.__module__,
                                                                            cls.__qualname__):
            raise ValueError(f"kind {kind!r} is already registered to "
                             f"{taken.__module__}.{taken.__qualname__}; {cls.__qualname__} "
                             "cannot take it")
        CONFIG_CLASSES[kind] = cls
        return cls

    return register


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


    def to_dict(self) -> dict[str, Any]:
        """transformers' ``to_dict`` (its JSON and logging integrations read it) with a
        method's settings dataclass as a plain mapping."""
        out = super().to_dict()
        name = _settings_field(self)
        if name in out:
            out[name] = _plain(self, name)
        return out

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


def _settings_field(config: Any) -> str | None:
    """The field holding a GRPO method's settings dataclass (named after the method, as the
    recipe's mapping is), or None."""
    name = getattr(config, "method", None)
    if name and isinstance(name, str) and name in getattr(config, "__dataclass_fields__", {}):
        return name
    return None


def _plain(config: Any, name: str) -> Any:
    """Field ``name`` of ``config``, the method's settings as their field mapping."""
    value = getattr(config, name)
    if name == _settings_field(config) and dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    return value


def derive_checkpoint_id(prefix: str, config: Any, data: Mapping[str, str] | None = None) -> str:
    """``<prefix>-<8 hex>``: a hash of every non-volatile field (and of the data fingerprints
    once they are known), so equal configs on equal data share an id."""
    from warehouse import config_hash

    values = {f.name: _plain(config, f.name) for f in dataclasses.fields(config)
              if f.name not in VOLATILE_FIELDS}
    if data:
        values["_data"] = dict(sorted(data.items()))
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in prefix) or "run"
    return f"{safe}-{config_hash(values)[:8]}"


@register_kind("sft")
@dataclass
class WeftSFTConfig(WeftArgs, SFTConfig):
    """TRL's SFTConfig plus weft's fields; loss on the completion of prompt/completion rows."""

    def __post_init__(self) -> None:
        self._weft_checks("sft")
        _require(not self.assistant_only_loss, "assistant_only_loss",
                 "cannot be used: the embedded model's chat template has no generation markers. "
                 "weft's SFT data is prompt/completion, which already trains on the completion only")
        _wrap_trl(lambda: SFTConfig.__post_init__(self))


@register_kind("grpo")
@dataclass
class WeftGRPOConfig(WeftArgs, GRPOConfig):
    """TRL's GRPOConfig plus weft's rewards, degenerate-group filter and token budgets: plain
    GRPO, trained by ``training.grpo_trainer.WeftGRPOTrainer``. A method subclass sets
    :attr:`method`, overrides :meth:`trainer_class` and :meth:`trainer_kwargs`, and checks its
    settings in :meth:`_check_method`."""

    method: ClassVar[str] = "grpo"  # the recipe kind and training.rollouts' method name

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
        self._check_method()
        self.reward_weights = [s.weight for s in specs]
        _wrap_trl(lambda: GRPOConfig.__post_init__(self))

    def reward_specs(self):
        return parse_reward_specs(self.rewards)

    @classmethod
    def trainer_class(cls) -> type:
        """The trainer this config trains with (imported on demand: trainers load TRL's
        trainer stack and the method's modules)."""
        from training.grpo_trainer import WeftGRPOTrainer

        return WeftGRPOTrainer

    def trainer_kwargs(self, base_model: str) -> dict[str, Any]:
        """The method's keyword arguments for :meth:`trainer_class` beyond the ones every GRPO
        trainer takes; ``base_model`` is the resolved folder of the model being trained."""
        return {}

    def _check_method(self) -> None:
        """The method's checks against the GRPO fields (nothing for plain GRPO); run by
        ``__post_init__`` after the GRPO checks, before TRL's."""

    def _engine_hooks(self) -> dict[str, bool]:
        """Extra facts ``training.rollouts.choose_engine`` needs for this method."""
        return {}

    def _resolve_rollouts(self) -> None:
        """``use_vllm`` null -> True/False (training.rollouts.choose_engine); the reason is
        kept in ``_weft_rollouts`` for the run's log. Runs before the checkpoint id is derived,
        so the id records the engine actually used."""
        from training.rollouts import RolloutError, choose_engine, vllm_version

        try:
            choice = choose_engine(self.use_vllm, method=self.method, vllm_mode=self.vllm_mode,
                                   use_cpu=bool(self.use_cpu), cuda=_cuda_available(),
                                   version=vllm_version(), **self._engine_hooks())
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


def method_settings(cls: type, value: Any, name: str) -> Any:
    """A GRPO method's settings dataclass ``cls`` from the recipe's ``name`` mapping (or an
    instance, kept): unknown keys, wrongly typed values and values the settings refuse raise
    RecipeError naming the field."""
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise RecipeError(f"field `{name}` expects a mapping of {cls.__name__}, got "
                          f"{value!r} ({type(value).__name__})")
    known = sorted(f.name for f in dataclasses.fields(cls) if f.init)
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise RecipeError(f"field `{name}`: unknown {name} settings {unknown}; known: {known}")
    checked = check_values(cls, value, f"field `{name}`")
    try:
        return cls(**checked)
    except (TypeError, ValueError) as exc:
        raise RecipeError(f"field `{name}`: {exc}") from exc


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


def config_summary(config: Any) -> dict[str, Any]:
    """JSON-safe dict of the config (for logs, the checkpoints table and hashing); a method's
    settings as a mapping."""
    out = {}
    for f in dataclasses.fields(config):
        value = _plain(config, f.name)
        try:
            json.dumps(value)
        except TypeError:
            value = str(value)
        out[f.name] = value
    return out


def _help(f: dataclasses.Field) -> str:
    return " ".join(str(f.metadata.get("help", "")).split())


def _flow(value: Any) -> str:
    """One-line YAML for a JSON-safe value (strings double-quoted, so any text reads back)."""
    if value is None or isinstance(value, (bool, int, float)):
        import yaml

        return yaml.safe_dump(value, default_flow_style=True).split("\n", 1)[0]
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {_flow(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value))


def describe_config(config: Any) -> str:
    """The config as YAML, one field a line in name order (values as :func:`config_summary`
    gives them, so ``yaml.safe_load`` reads that mapping back). Fields weft declares or
    re-documents carry their help as a comment; a method's settings field is a block with
    one line and help per setting. TRL's own fields show their value only (their help is
    TRL's documentation). What ``--print-config`` prints."""
    trl_base = GRPOConfig if isinstance(config, GRPOConfig) else SFTConfig
    trl_help = {f.name: _help(f) for f in dataclasses.fields(trl_base)}
    summary = config_summary(config)
    lines = [f"# {type(config).__name__}"
             + (f" (recipe {config.recipe})" if getattr(config, "recipe", "") else "")]
    trainer = getattr(config, "trainer_class", None)
    if trainer is not None:
        cls = trainer()
        lines.append(f"# trainer: {cls.__module__}.{cls.__qualname__}")
    settings = _settings_field(config)
    for f in sorted(dataclasses.fields(config), key=lambda f: f.name):
        value, text = getattr(config, f.name), _help(f)
        note = f"  # {text}" if text and trl_help.get(f.name) != text else ""
        if f.name == settings:
            lines.append(f"{f.name}:{note}")
            for sub in dataclasses.fields(value):
                sub_text = _help(sub)
                lines.append(f"  {sub.name}: {_flow(summary[f.name][sub.name])}"
                             + (f"  # {sub_text}" if sub_text else ""))
        else:
            lines.append(f"{f.name}: {_flow(summary[f.name])}{note}")
    return "\n".join(lines) + "\n"
