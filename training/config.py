"""A checked training config from a YAML recipe: the kind's config class, its values, overrides.

:func:`load_config` reads a recipe (by name from ``training/recipes/`` or by path; its
``extends`` chain merged, see ``training.config_recipes``), applies ``key=value`` overrides
(values parsed as YAML), checks every key and value against the config dataclass, and builds
the config. Every problem is a ``training.config_recipes.RecipeError`` that names the recipe
and the field; all of this happens before any model is loaded. :func:`build_config` does the
same from plain values.

The recipe's kind picks the config class (:func:`config_class`; how a kind is settled:
``training.config_recipes.resolve_kind``). Each kind's class registers itself where it is
defined (``training.config_base.register_kind``); this module imports every one of them
(:data:`KindConfig`), so every kind is registered before the first lookup. The classes, their
fields and checks are ``training.config_base`` (``sft``, ``grpo``),
``training.duet.config`` (``duet``) and ``training.tandem.config`` (``tandem``).

Not guaranteed: that TRL accepts every combination the config classes let through (TRL's own
checks run afterwards and their errors are re-raised as RecipeError with the recipe name).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from training.config_base import CONFIG_CLASSES, WeftGRPOConfig, WeftSFTConfig
from training.config_recipes import (
    ENTRY_POINTS,
    KINDS,
    RecipeError,
    check_values,
    merge_values,
    parse_overrides,
    read_recipe,
    resolve_kind,
)
from training.duet.config import DuetGRPOConfig
from training.tandem.config import TandemGRPOConfig

__all__ = ["KindConfig", "build_config", "config_class", "load_config"]

# What build_config and load_config return: the config class of one of the kinds.
KindConfig = WeftSFTConfig | WeftGRPOConfig | DuetGRPOConfig | TandemGRPOConfig


def config_class(kind: str) -> type[KindConfig]:
    """The config class of a recipe kind (``training.config_recipes.KINDS``)."""
    if kind not in CONFIG_CLASSES:
        raise RecipeError(f"kind must be one of {KINDS}, got {kind!r}")
    return CONFIG_CLASSES[kind]


def build_config(kind: str, values: Mapping[str, Any], where: str = "config", *,
                 explicit: bool = False) -> KindConfig:
    """A checked config from plain values. ``kind`` is read as a recipe file's (``grpo`` with
    a ``duet`` or ``tandem`` mapping is that method) unless ``explicit`` (a ``kind=``
    override: ``grpo`` is plain GRPO); see ``training.config_recipes.resolve_kind``."""
    kind, values = resolve_kind(kind, values, explicit=explicit, where=where)
    cls = config_class(kind)
    checked = check_values(cls, values, where)
    try:
        return cls(**checked)
    except RecipeError as exc:
        raise RecipeError(f"{where}: {exc}") from exc


def load_config(recipe: str | Path, overrides: Sequence[str] | Mapping[str, Any] | None = None,
                expect_kind: str | None = None) -> KindConfig:
    """Read a recipe, apply overrides, check and build the config (no model is loaded).

    ``expect_kind`` is the entry point's kind (``sft`` or ``grpo``; the GRPO methods run under
    ``grpo``). A ``kind`` override chooses among the kinds of the recipe's entry point
    (``kind=grpo``: plain GRPO from a method recipe)."""
    rec = read_recipe(recipe)
    where = f"recipe {rec.name}"
    if expect_kind and ENTRY_POINTS[rec.kind] != expect_kind:
        raise RecipeError(f"recipe {rec.name} is a {rec.kind} recipe; this entry point runs "
                          f"{expect_kind} recipes")
    extra = parse_overrides(overrides)
    kind = extra.pop("kind", None)
    if kind is not None and (kind not in KINDS or ENTRY_POINTS[kind] != ENTRY_POINTS[rec.kind]):
        same = [k for k in KINDS if ENTRY_POINTS[k] == ENTRY_POINTS[rec.kind]]
        raise RecipeError(f"{where}: override kind={kind!r} cannot be used on a {rec.kind} "
                          f"recipe; choose one of {same}")
    return build_config(kind or rec.kind, merge_values(rec.values, extra), where,
                        explicit=kind is not None)
