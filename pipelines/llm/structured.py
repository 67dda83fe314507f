"""Structured-output helpers for the LLM client: find JSON in model text, check it against a schema.

``extract_json`` pulls the first JSON value of the wanted kind out of a reply, tolerating
Markdown code fences, leading or trailing prose and ``<think>…</think>`` blocks.
``schema_errors`` validates a decoded value against a small, explicit subset of JSON Schema
(listed in ``SUPPORTED_KEYWORDS``); ``check_schema`` rejects schemas that use anything outside
that subset, so a caller never believes a keyword is enforced when it is not.

What this does not guarantee: it is not a full JSON Schema implementation (no ``$ref``,
``anyOf``, ``pattern``, formats); a JSON value embedded in prose is found by scanning for the
first decodable object or array, so prose that itself contains a decodable ``{...}`` before the
real answer wins. Pure functions, standard library only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

SUPPORTED_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "enum",
        "minimum",
        "maximum",
        "items",
        "additionalProperties",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
    }
)
ANNOTATION_KEYWORDS = frozenset(
    {"title", "description", "$schema", "default", "examples", "$comment"}
)
JSON_TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")

_FENCE_RE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL)
_MAX_ERRORS = 20


def check_schema(schema: Any, path: str = "schema") -> None:
    """Raise ValueError when ``schema`` uses a keyword or value this module cannot enforce
    (TypeError when a part that must be a schema object is not a dict)."""
    if not isinstance(schema, dict):
        raise TypeError(
            f"{path} must be a dict (a JSON Schema object), got {type(schema).__name__}"
        )
    unknown = set(schema) - SUPPORTED_KEYWORDS - ANNOTATION_KEYWORDS
    if unknown:
        raise ValueError(
            f"{path} uses unsupported JSON Schema keyword(s) {sorted(unknown)}; supported: "
            f"{sorted(SUPPORTED_KEYWORDS)}. Rewrite the schema with these, or check the extra "
            "condition in a `validate` callable."
        )
    types = schema.get("type")
    if types is not None:
        names = types if isinstance(types, list) else [types]
        bad = [t for t in names if t not in JSON_TYPES]
        if bad or not names:
            raise ValueError(
                f"{path}.type must be one of {list(JSON_TYPES)} (or a list of them), got {types!r}"
            )
    if "properties" in schema:
        if not isinstance(schema["properties"], dict):
            raise TypeError(f"{path}.properties must be a dict of name -> schema")
        for name, sub in schema["properties"].items():
            check_schema(sub, f"{path}.properties.{name}")
    if "required" in schema and not (
        isinstance(schema["required"], list) and all(isinstance(r, str) for r in schema["required"])
    ):
        raise ValueError(f"{path}.required must be a list of property names")
    if "enum" in schema and not (isinstance(schema["enum"], list) and schema["enum"]):
        raise ValueError(f"{path}.enum must be a non-empty list")
    for key in ("minimum", "maximum"):
        if key in schema and not _is_number(schema[key]):
            raise ValueError(f"{path}.{key} must be a number")
    for key in ("minItems", "maxItems", "minLength", "maxLength"):
        if key in schema and not (_is_integer(schema[key]) and schema[key] >= 0):
            raise ValueError(f"{path}.{key} must be a non-negative integer")
    if "items" in schema:
        check_schema(schema["items"], f"{path}.items")
    extra = schema.get("additionalProperties", True)
    if isinstance(extra, dict):
        check_schema(extra, f"{path}.additionalProperties")
    elif not isinstance(extra, bool):
        raise TypeError(f"{path}.additionalProperties must be a bool or a schema")


def _is_integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _type_matches(value: Any, name: str) -> bool:
    if name == "integer":
        return _is_integer(value)
    if name == "number":
        return _is_number(value)
    return isinstance(value, _PY_TYPES[name])


_PY_TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def _json_type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def schema_errors(value: Any, schema: dict, path: str = "$") -> list[str]:
    """Every way ``value`` breaks ``schema`` (empty list when it conforms), each naming its path."""
    errors: list[str] = []
    _collect(value, schema, path, errors)
    return errors[:_MAX_ERRORS]


def _collect(value: Any, schema: dict, path: str, errors: list[str]) -> None:
    if len(errors) >= _MAX_ERRORS:
        return
    types = schema.get("type")
    if types is not None:
        names = types if isinstance(types, list) else [types]
        if not any(_type_matches(value, t) for t in names):
            errors.append(f"{path}: expected {' or '.join(names)}, got {_json_type_name(value)}")
            return
    if "enum" in schema and not any(_same_json(value, option) for option in schema["enum"]):
        errors.append(f"{path}: {value!r} is not one of {schema['enum']!r}")
    if _is_number(value):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: {value} is below the minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: {value} is above the maximum {schema['maximum']}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(f"{path}: string shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{path}: string longer than {schema['maxLength']} characters")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(f"{path}: {len(value)} items, fewer than minItems {schema['minItems']}")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{path}: {len(value)} items, more than maxItems {schema['maxItems']}")
        if "items" in schema:
            for i, item in enumerate(value):
                _collect(item, schema["items"], f"{path}[{i}]", errors)
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{path}: missing required key {name!r}")
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in props:
                _collect(item, props[name], f"{path}.{name}", errors)
            elif extra is False:
                errors.append(f"{path}: unexpected key {name!r} (allowed: {sorted(props)})")
            elif isinstance(extra, dict):
                _collect(item, extra, f"{path}.{name}", errors)


def _same_json(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0 but True != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return a == b


def extract_json(text: str, kind: str = "object") -> Any:
    """The first JSON ``kind`` ("object", "array" or "any") found in ``text``; ValueError if none.

    Tried in order: the whole text, the inside of each Markdown code fence, then every
    position where a ``{`` (or ``[``) starts a decodable value. ``<think>`` blocks are ignored.
    """
    if kind not in ("object", "array", "any"):
        raise ValueError(f"kind must be 'object', 'array' or 'any', got {kind!r}")
    if not isinstance(text, str) or not text.strip():
        raise ValueError("the reply is empty")
    cleaned = _THINK_RE.sub("", text)
    if "<think>" in cleaned and "</think>" not in cleaned:
        raise ValueError("the reply ends inside an unfinished <think> block (raise max_tokens?)")
    if "</think>" in cleaned:
        cleaned = cleaned.rsplit("</think>", 1)[1]
    candidates = [cleaned.strip()] + [m.group(1).strip() for m in _FENCE_RE.finditer(cleaned)]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except (ValueError, RecursionError):
            continue
        if _kind_ok(value, kind):
            return value
    decoder = json.JSONDecoder()
    openers = {"object": "{", "array": "[", "any": "{["}[kind]
    for i, ch in enumerate(cleaned):
        if ch not in openers:
            continue
        try:
            value, _ = decoder.raw_decode(cleaned, i)
        except (ValueError, RecursionError):
            continue
        if _kind_ok(value, kind):
            return value
    what = {"object": "JSON object", "array": "JSON array", "any": "JSON object or array"}[kind]
    raise ValueError(f"found no {what} in the reply (starts: {text.strip()[:80]!r})")


def _kind_ok(value: Any, kind: str) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    return isinstance(value, (dict, list))


def json_kind_for(schema: dict) -> str:
    """Which top-level JSON kind ``extract_json`` should look for, from the schema's type."""
    types = schema.get("type")
    names = types if isinstance(types, list) else [types]
    if names == ["array"]:
        return "array"
    if names == ["object"]:
        return "object"
    return "any"


def schema_name(schema: dict) -> str:
    """A name for ``response_format.json_schema.name``: the schema title, made identifier-safe."""
    title = str(schema.get("title") or "response")
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", title).strip("_")[:64]
    return name or "response"


def response_format(schema: dict, mode: str) -> dict | None:
    """The ``response_format`` request field for a json mode ("schema", "object" or "prompt")."""
    if mode == "schema":
        return {
            "type": "json_schema",
            "json_schema": {"name": schema_name(schema), "schema": schema, "strict": True},
        }
    if mode == "object":
        return {"type": "json_object"}
    if mode == "prompt":
        return None
    raise ValueError(f"json_mode must be 'schema', 'object' or 'prompt', got {mode!r}")


def schema_instruction(schema: dict) -> str:
    """Text appended to the prompt when the server is not given the schema itself."""
    return (
        "\n\nAnswer with one JSON value only, no other text. It must match this JSON Schema:\n"
        + json.dumps(schema, ensure_ascii=False, sort_keys=True)
    )


def repair_message(error: str) -> str:
    """The follow-up user turn asking the model to fix a reply that failed validation."""
    return (
        f"Your reply could not be used: {error}\n"
        "Reply again with only the corrected JSON value, matching the schema exactly, and no other text."
    )


def parse_reply(
    text: str, schema: dict, validate: Callable[[Any], Any] | None
) -> tuple[Any, str | None]:
    """(value, None) when ``text`` holds JSON that passes ``schema`` and ``validate``, else
    (None, the reason). ``validate`` may return a replacement value; any exception it raises
    counts as invalid output, since it is judging model output."""
    try:
        value = extract_json(text, json_kind_for(schema))
    except ValueError as exc:
        return None, f"not valid JSON: {exc}"
    problems = schema_errors(value, schema)
    if problems:
        return None, "does not match the schema: " + "; ".join(problems)
    if validate is not None:
        try:
            checked = validate(value)
        except Exception as exc:  # noqa: BLE001 - it judges model output: any failure = invalid
            return None, f"failed validation: {type(exc).__name__}: {exc}"
        if checked is not None:
            value = checked
    return value, None
