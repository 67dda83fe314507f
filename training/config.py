"""Training configs (TRL's ``SFTConfig``/``GRPOConfig`` plus weft's fields) and YAML recipes.

A recipe is a flat YAML mapping of config fields plus three reserved keys: ``kind`` (``sft`` or
``grpo``), ``extends`` (another recipe, merged first: this file's keys win) and
``description``. :func:`load_config` reads a recipe (by name from ``training/recipes/`` or by
path), applies ``key=value`` overrides (values parsed as YAML), checks every key and value
against the config dataclass, and builds the config. Every problem is a :class:`RecipeError`
that names the recipe and the field; all of this happens before any model is loaded.

weft's fields (both configs): ``model_name_or_path`` (``embedded`` = the converted embedded
model), ``dataset`` / ``dataset_fallback`` / ``dataset_limit`` (specs, see ``training.data``),
``checkpoint_id`` (default: the recipe name plus a hash of the whole config and, once the
training script has loaded it, of the data's fingerprint, so re-running the same config on the
same data resumes the same run), ``parent_checkpoint``, ``resume``, ``overwrite``,
``torch_threads`` (CPU recipes use 1. bench/grpo_step.py on 2 cores: with the machine quiet,
2 threads were 1.6x faster than 1; with other work loading it (load ~5), 2 threads were 19x
slower, OpenMP threads waiting on each other. Raise it on a machine you have to yourself). GRPO adds
``answer_format``, ``rewards`` (names from ``training.rewards.REWARDS`` with weights and
arguments), ``drop_degenerate_groups`` and ``budgets``.

Not guaranteed: that TRL accepts every combination this module lets through (TRL's own checks
run afterwards and their errors are re-raised as RecipeError with the recipe name).
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import json
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from trl import GRPOConfig, SFTConfig

from training.data import DatasetError, parse_spec
from training.rewards import ANSWER_FORMATS, parse_reward_specs

RECIPES_DIR = Path(__file__).with_name("recipes")
RESERVED_KEYS = ("kind", "extends", "description")
KINDS = ("sft", "grpo")
EMBEDDED = "embedded"
# Fields that do not change what is trained: left out of the derived checkpoint id.
VOLATILE_FIELDS = frozenset({
    "output_dir", "checkpoint_id", "resume", "overwrite", "logging_dir", "run_name",
    "logging_steps", "save_steps", "save_total_limit", "report_to", "disable_tqdm",
    "log_completions", "num_completions_to_print", "dataloader_num_workers", "torch_threads",
})


class RecipeError(ValueError):
    """A recipe or override that cannot be used; the message names the recipe and the field."""


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

        _require(isinstance(self.dataset, str) and self.dataset.strip() != "", "dataset",
                 "is required (e.g. builtin:sxs_sft, warehouse:sxs_sft_dataset)")
        for name in ("dataset", "dataset_fallback"):
            value = getattr(self, name)
            if value:
                try:
                    parse_spec(value)
                except DatasetError as exc:
                    raise RecipeError(f"field `{name}`: {exc}") from exc
        _require(self.torch_threads is None or self.torch_threads > 0, "torch_threads",
                 f"must be a positive integer or null, got {self.torch_threads!r}")
        _require(self.dataset_limit is None or self.dataset_limit > 0, "dataset_limit",
                 f"must be a positive integer or null, got {self.dataset_limit!r}")
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
        _require(self.max_length is None or self.max_length > 0, "max_length",
                 f"must be positive or null, got {self.max_length!r}")
        _wrap_trl(lambda: SFTConfig.__post_init__(self))


@dataclass
class WeftGRPOConfig(WeftArgs, GRPOConfig):
    """TRL's GRPOConfig plus weft's rewards, degenerate-group filter and token budgets."""

    answer_format: str = field(default="boxed", metadata={"help": "boxed, sxs or tir."})
    rewards: list = field(default_factory=lambda: ["outcome"],
                          metadata={"help": "Reward names or {name, weight, ...args} mappings."})
    drop_degenerate_groups: bool = field(
        default=False, metadata={"help": "Drop groups whose rewards are all equal before backward."})
    budgets: list[int] | None = field(
        default=None, metadata={"help": "Token budgets given to prompts (budget-aware GRPO)."})

    def __post_init__(self) -> None:
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
        if self.use_vllm and self.use_cpu:
            raise RecipeError("field `use_vllm`: vLLM generation needs a GPU; set use_vllm: "
                              "false with use_cpu: true")
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
        self.reward_weights = [s.weight for s in specs]
        _wrap_trl(lambda: GRPOConfig.__post_init__(self))

    def reward_specs(self):
        return parse_reward_specs(self.rewards)


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


# ---------------------------------------------------------------------------------------------
# Recipes


@dataclass(frozen=True)
class Recipe:
    name: str
    kind: str
    values: dict[str, Any]
    description: str = ""
    path: Path | None = None


def list_recipes() -> list[str]:
    return sorted(p.name[: -len(".yaml")] for p in RECIPES_DIR.glob("*.yaml"))


def find_recipe(name_or_path: str | Path) -> Path:
    """A recipe file from a name in ``training/recipes/`` or a path to a YAML file."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if text.endswith((".yaml", ".yml")) and path.is_file():
        return path
    candidate = RECIPES_DIR / f"{text}.yaml"
    if candidate.is_file():
        return candidate
    close = difflib.get_close_matches(text, list_recipes(), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; recipes: {', '.join(list_recipes())}"
    raise RecipeError(f"no recipe {text!r}{hint}")


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise RecipeError(f"recipe {path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise RecipeError(f"recipe {path}: expected a mapping of config fields at the top level")
    return data


def read_recipe(name_or_path: str | Path, _seen: tuple[Path, ...] = ()) -> Recipe:
    """The merged recipe (its ``extends`` chain applied), not yet checked against a config."""
    path = find_recipe(name_or_path).resolve()
    if path in _seen:
        raise RecipeError(f"recipe {path.name}: `extends` loops back to itself")
    data = _read_yaml(path)
    values: dict[str, Any] = {}
    kind = None
    if data.get("extends"):
        parent_ref = str(data["extends"])
        parent_path = path.parent / parent_ref
        parent = read_recipe(parent_path if parent_path.is_file() else parent_ref, _seen + (path,))
        values.update(parent.values)
        kind = parent.kind
    values.update({k: v for k, v in data.items() if k not in RESERVED_KEYS})
    kind = data.get("kind", kind)
    name = path.name[: -len(path.suffix)]
    if kind not in KINDS:
        raise RecipeError(f"recipe {name}: field `kind` must be one of {KINDS}, got {kind!r}")
    values["recipe"] = data.get("recipe", name)  # the leaf file names the run
    return Recipe(name, kind, values, str(data.get("description", "")), path)


def parse_overrides(items: Sequence[str] | Mapping[str, Any] | None) -> dict[str, Any]:
    """``["key=value", ...]`` (values parsed as YAML) or a mapping, as a dict."""
    if not items:
        return {}
    if isinstance(items, Mapping):
        return dict(items)
    out = {}
    for item in items:
        key, sep, raw = str(item).partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or not key:
            raise RecipeError(f"override {item!r} must look like key=value")
        try:
            out[key] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise RecipeError(f"override {item!r}: value is not valid YAML: {exc}") from exc
    return out


def _type_hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable annotations: fall back to no type checks
        return {}


def _accepts(annotation: Any, value: Any) -> tuple[bool, Any]:
    """Whether ``value`` fits ``annotation`` and the (possibly converted) value."""
    if annotation is Any or annotation is None:
        return True, value
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            ok, converted = _accepts(arg, value)
            if ok:
                return True, converted
        return False, value
    if annotation is type(None):
        return value is None, value
    if annotation is bool:
        return isinstance(value, bool), value
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return True, value  # ints stay ints: TRL reads e.g. save_steps >= 1 as a count
        if isinstance(value, str):
            try:
                return True, float(value)
            except ValueError:
                return False, value
        return False, value
    if annotation is str:
        return isinstance(value, str), value
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return isinstance(value, (str, annotation)), value
    if origin in (list, Sequence) or annotation is list:
        if not isinstance(value, list):
            return False, value
        args = typing.get_args(annotation)
        if args:
            converted = []
            for item in value:
                ok, item = _accepts(args[0], item)
                if not ok:
                    return False, value
                converted.append(item)
            return True, converted
        return True, value
    if origin in (dict, Mapping) or annotation is dict:
        return isinstance(value, dict), value
    return True, value  # anything more exotic is left to the config's own checks


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    return text or str(annotation).replace("typing.", "")


def check_values(cls: type, values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Unknown keys and wrongly typed values raise RecipeError naming the field."""
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    hints = _type_hints(cls)
    out = {}
    for key, value in values.items():
        if key not in names:
            close = difflib.get_close_matches(key, sorted(names), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise RecipeError(f"{where}: unknown field `{key}`{hint}")
        annotation = hints.get(key)
        if annotation is not None:
            ok, value = _accepts(annotation, value)
            if not ok:
                hint = (" (YAML reads no/yes/off/on as booleans: quote the word, e.g. \"no\")"
                        if isinstance(value, bool) else "")
                raise RecipeError(f"{where}: field `{key}` expects {_type_name(annotation)}, got "
                                  f"{value!r} ({type(value).__name__}){hint}")
        out[key] = value
    return out


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
    values = {**rec.values, **parse_overrides(overrides)}
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
