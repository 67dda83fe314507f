"""Recipe files: reading, ``extends``, ``key=value`` overrides and the type check of values.

A recipe is a flat YAML mapping of config fields plus three reserved keys: ``kind``,
``extends`` (another recipe, merged first: this file's keys win) and ``description``.
:func:`read_recipe` finds a recipe (by name in ``training/recipes/`` or by path) and merges its
``extends`` chain; :func:`parse_overrides` parses ``key=value`` overrides (values as YAML; a
dotted key such as ``duet.budget_fraction=0.5`` names one setting of a nested mapping). Both
merges are deep (:func:`merge_values`): a nested mapping such as ``duet`` or ``tandem`` given
again changes only the keys it names; :func:`check_values` checks every key and value against
a config dataclass's fields and types. Every problem is a :class:`RecipeError` that names the
recipe and the field. ``training.config`` builds the config from the result.

Kinds (:data:`KINDS`) say which config class a recipe builds (the class registered for the
kind with ``training.config_base.register_kind``) and so which trainer runs it: ``sft``;
``grpo`` (plain GRPO); ``duet`` and ``tandem`` (GRPO with the method's settings in the mapping
of the same name; :data:`METHOD_KINDS`). The three GRPO kinds run under
``python -m training.grpo`` (:data:`ENTRY_POINTS`). :func:`resolve_kind` settles the kind of
a merged recipe:

- ``duet`` and ``tandem`` mappings together are refused first, whatever the kind;
- a ``kind=...`` override is an explicit choice: ``kind=grpo`` is plain GRPO and drops the
  method mappings the recipe carries (the plain arm of a DUET comparison), ``kind=duet`` or
  ``kind=tandem`` that method;
- in a recipe file, ``kind: duet`` / ``kind: tandem`` name the method; ``kind: grpo`` with a
  non-null ``duet`` or ``tandem`` mapping is that method (recipes written before the method
  kinds existed), and without one plain GRPO;
- a method kind with the other method's mapping, or with its own mapping set to null, is
  refused with what to write instead.
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
KINDS = ("sft", "grpo", "duet", "tandem")
METHOD_KINDS = ("duet", "tandem")  # GRPO methods whose settings sit under a key of that name
ENTRY_POINTS = {"sft": "sft", "grpo": "grpo", "duet": "grpo", "tandem": "grpo"}


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


def _read_chain(path: Path, seen: tuple[Path, ...]) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """(the kind as written, nearest file first; the merged values; this file's mapping)."""
    if path in seen:
        raise RecipeError(f"recipe {path.name}: `extends` loops back to itself")
    data = _read_yaml(path)
    values: dict[str, Any] = {}
    kind = None
    if data.get("extends"):
        parent_ref = str(data["extends"])
        parent_path = path.parent / parent_ref
        parent = find_recipe(parent_path if parent_path.is_file() else parent_ref).resolve()
        kind, values, _ = _read_chain(parent, seen + (path,))
    values = merge_values(values, {k: v for k, v in data.items() if k not in RESERVED_KEYS})
    return data.get("kind", kind), values, data


def read_recipe(name_or_path: str | Path) -> Recipe:
    """The merged recipe (its ``extends`` chain applied), its kind resolved
    (:func:`resolve_kind`), not yet checked against a config."""
    path = find_recipe(name_or_path).resolve()
    kind, values, data = _read_chain(path, ())
    name = path.name[: -len(path.suffix)]
    if kind not in KINDS:
        raise RecipeError(f"recipe {name}: field `kind` must be one of {KINDS}, got {kind!r}")
    kind, values = resolve_kind(kind, values, where=f"recipe {name}")
    values["recipe"] = data.get("recipe", name)  # the leaf file names the run
    return Recipe(name, kind, values, str(data.get("description", "")), path)


def resolve_kind(kind: str, values: Mapping[str, Any], *, explicit: bool = False,
                 where: str = "config") -> tuple[str, dict[str, Any]]:
    """The recipe's kind and its values with the method mappings settled (module docstring).

    ``explicit``: the kind was given as an override (``kind=grpo`` then means plain GRPO even
    where the recipe has a method mapping). The values returned hold the chosen method's
    mapping (``{}`` when the recipe gives none) and no other method's key."""
    if kind not in KINDS:
        raise RecipeError(f"{where}: field `kind` must be one of {KINDS}, got {kind!r}")
    out = dict(values)
    if all(out.get(m) is not None for m in METHOD_KINDS):
        raise RecipeError(f"{where}: field `tandem` cannot be combined with duet (both replace "
                          "generation); keep one of them")
    if ENTRY_POINTS[kind] != "grpo":
        return kind, out
    if kind == "grpo":
        present = [m for m in METHOD_KINDS if out.get(m) is not None]
        if present and not explicit:
            kind = present[0]
        else:
            for method in METHOD_KINDS:
                out.pop(method, None)
            return kind, out
    for method in METHOD_KINDS:
        if method == kind:
            continue
        if out.get(method) is not None:
            raise RecipeError(f"{where}: field `{method}` does not belong to a {kind} recipe; "
                              f"set kind={method} to train {method}, or leave `{method}` out")
        out.pop(method, None)
    if kind in out and out[kind] is None:
        raise RecipeError(f"{where}: field `{kind}` is null in a {kind} recipe; give its "
                          f"settings as a mapping, or set kind=grpo for plain GRPO")
    out.setdefault(kind, {})
    return kind, out


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
    """``["key=value", ...]`` (values parsed as YAML) or a mapping, as a dict. A dotted key
    names a setting inside a nested mapping: ``duet.budget_fraction=0.5`` is
    ``{"duet": {"budget_fraction": 0.5}}``, merged with the other overrides deeply."""
    if not items:
        return {}
    pairs: list[tuple[str, Any]] = []
    if isinstance(items, Mapping):
        pairs = [(str(k), v) for k, v in items.items()]
    else:
        for item in items:
            key, sep, raw = str(item).partition("=")
            key = key.strip().lstrip("-").replace("-", "_")
            if not sep or not key:
                raise RecipeError(f"override {item!r} must look like key=value")
            try:
                pairs.append((key, yaml.safe_load(raw) if raw.strip() else ""))
            except yaml.YAMLError as exc:
                raise RecipeError(f"override {item!r}: value is not valid YAML: {exc}") from exc
    out: dict[str, Any] = {}
    for key, value in pairs:
        parts = key.split(".")
        if any(not p for p in parts):
            raise RecipeError(f"override key {key!r} has an empty part; write a.b=value to set "
                              "setting b of mapping a")
        for part in reversed(parts[1:]):
            value = {part: value}
        out = merge_values(out, {parts[0]: value})
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
    if dataclasses.is_dataclass(annotation):  # a method's settings: its mapping or an instance
        return isinstance(value, (Mapping, annotation)), value
    return True, value  # anything more exotic is left to the config's own checks


def _type_name(annotation: Any) -> str:
    if dataclasses.is_dataclass(annotation):
        return f"a mapping of {annotation.__name__}"
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
