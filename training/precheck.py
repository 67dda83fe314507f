"""Check a training command line before torch, transformers and TRL are imported.

``python -m training.sft|grpo --recipe R key=value ...`` builds its config from TRL's config
classes, and importing TRL (with torch and transformers) takes seconds on an idle machine and
tens of seconds on a loaded one. Most mistakes need none of it: an unknown recipe, a malformed
override, a recipe of the other entry point, a misspelled field. :func:`precheck` finds those
from the recipe files and an index of each kind's field names, and the command exits with the
same message the full check gives, before the heavy imports.

The index (:func:`field_index`) is written by the full check the first time it runs (and by
``python -m training.precheck --index``, which ``make setup`` calls) to
``WEFT_HOME/cache/config_fields/<key>.json``; its key hashes the installed TRL and transformers
versions and the source of weft's config modules, so an upgrade or a new field makes a new
index rather than a stale one. Without an index the fast path checks what it can (recipe,
overrides, kind) and leaves field names to the full check.

Not guaranteed: that a command line this accepts is valid; types, ranges and cross-field rules
are checked by the config classes after the import (``training.config``).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from training.config_recipes import (
    ENTRY_POINTS,
    KINDS,
    RecipeError,
    merge_values,
    parse_overrides,
    read_recipe,
    resolve_kind,
)

_CONFIG_SOURCES = ("config_base.py", "config_recipes.py", "config.py", "config_ranges.py",
                   "duet/config.py", "tandem/config.py")


def index_key() -> str:
    """What the field index depends on: TRL's and transformers' versions and weft's config
    sources (16 hex chars)."""
    h = hashlib.sha256()
    for dist in ("trl", "transformers"):
        try:
            h.update(f"{dist}={metadata.version(dist)};".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{dist}=none;".encode())
    here = Path(__file__).resolve().parent
    for name in _CONFIG_SOURCES:
        path = here / name
        h.update(name.encode() + (path.read_bytes() if path.is_file() else b"-"))
    return h.hexdigest()[:16]


def index_path() -> Path:
    from pipelines.settings import weft_home

    return weft_home() / "cache" / "config_fields" / f"{index_key()}.json"


def write_field_index() -> Path:
    """Write the field names of every kind's config class (imports TRL: the slow side)."""
    import dataclasses

    import training.config  # noqa: F401  (registers the DUET and Tandem kinds)
    from training.config_base import CONFIG_CLASSES

    index = {kind: sorted(f.name for f in dataclasses.fields(cls) if f.init)
             for kind, cls in CONFIG_CLASSES.items()}
    path = index_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(index, sort_keys=True))
    tmp.replace(path)
    return path


def field_index() -> dict[str, list[str]] | None:
    """The field names per kind from the index of this install, or None when it is missing or
    unreadable (the full check then decides)."""
    try:
        data = json.loads(index_path().read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and all(k in data for k in KINDS) else None


def precheck(entry: str, recipe: str, overrides: Sequence[str]) -> None:
    """RecipeError for what can be found wrong in a ``python -m training.<entry>`` command line
    without importing TRL: the recipe, the overrides' syntax, the kind, and (with the field
    index) every unknown field name, worded as the full check words it."""
    rec = read_recipe(recipe)
    where = f"recipe {rec.name}"
    if ENTRY_POINTS[rec.kind] != entry:
        raise RecipeError(f"recipe {rec.name} is a {rec.kind} recipe; this entry point runs "
                          f"{entry} recipes")
    extra = parse_overrides(list(overrides))
    kind = extra.pop("kind", None)
    if kind is not None and (kind not in KINDS or ENTRY_POINTS[kind] != ENTRY_POINTS[rec.kind]):
        same = [k for k in KINDS if ENTRY_POINTS[k] == ENTRY_POINTS[rec.kind]]
        raise RecipeError(f"{where}: override kind={kind!r} cannot be used on a {rec.kind} "
                          f"recipe; choose one of {same}")
    kind, values = resolve_kind(kind or rec.kind, merge_values(rec.values, extra),
                                explicit=kind is not None, where=where)
    index = field_index()
    if index is None:
        return
    names = set(index[kind])
    for key in values:
        if key not in names:
            close = difflib.get_close_matches(key, sorted(names), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise RecipeError(f"{where}: unknown field `{key}`{hint}")


def bad_command_line(entry: str, argv: Sequence[str] | None = None) -> int | None:
    """Run :func:`precheck` on a training command line (``--recipe R [key=value ...]``): print
    the message and return 2 when it finds a mistake; None otherwise (also for a command line
    it cannot read, which the full parser then reports)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--recipe")
    parser.add_argument("--print-config", action="store_true")
    parser.add_argument("-h", "--help", action="store_true")
    parser.add_argument("overrides", nargs="*")
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit:
        return None
    if args.help or not args.recipe:
        return None
    try:
        precheck(entry, args.recipe, args.overrides)
    except RecipeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.precheck",
                                     description="Write the field index that lets the training "
                                                 "commands report a misspelled field before "
                                                 "importing TRL.")
    parser.add_argument("--index", action="store_true", help="write the index (imports TRL)")
    args = parser.parse_args(argv)
    if not args.index:
        parser.print_help()
        return 2
    print(f"field index: {write_field_index()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
