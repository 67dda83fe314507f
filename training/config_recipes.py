"""Recipe files: reading, ``extends``, ``key=value`` overrides and the type check of values.

A recipe is a flat YAML mapping of config fields plus three reserved keys: ``kind`` (``sft`` or
``grpo``), ``extends`` (another recipe, merged first: this file's keys win) and
``description``. :func:`read_recipe` finds a recipe (by name in ``training/recipes/`` or by
path) and merges its ``extends`` chain; :func:`parse_overrides` parses ``key=value`` overrides
(values as YAML). Both merges are deep (:func:`merge_values`): a nested mapping such as
``duet`` or ``tandem`` given again changes only the keys it names; :func:`check_values` checks every key and value against a config dataclass's
fields and types. Every problem is a :class:`RecipeError` that names the recipe and the field.
``training.config`` builds the config from the result (and re-exports these names).
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

RECIPES_DIR = Path(__file__).with_name("recipes")
RESERVED_KEYS = ("kind", "extends", "description")
KINDS = ("sft", "grpo")


class RecipeError(ValueError):
    """A recipe or override that cannot be used; the message names the recipe and the field."""


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
    values = merge_values(values, {k: v for k, v in data.items() if k not in RESERVED_KEYS})
    kind = data.get("kind", kind)
    name = path.name[: -len(path.suffix)]
    if kind not in KINDS:
        raise RecipeError(f"recipe {name}: field `kind` must be one of {KINDS}, got {kind!r}")
    values["recipe"] = data.get("recipe", name)  # the leaf file names the run
    return Recipe(name, kind, values, str(data.get("description", "")), path)


def merge_values(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``extra``, deeply: where both hold a mapping under the same key the
    two are merged the same way, so a nested override (``duet={budget_fraction: 0.5}``)
    changes only the settings it names; any other value (a list, a scalar, null) replaces."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_values(out[key], value)
        else:
            out[key] = value
    return out


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
