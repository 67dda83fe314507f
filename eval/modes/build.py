"""A mode built by name from flat settings (one field per setting of every mode, as the
``eval_samples`` Dagster config has them): :func:`build_mode`.

The settings of the named mode go to its class; ``thinking_caps`` (non-empty) wraps it in the
thinking-cap sweep (:class:`eval.modes.capped.ThinkingCaps`); a setting of another mode is
refused with the name of the mode that takes it, unless it is left at that mode's default;
``tokenizer_path`` (see :data:`IGNORED_ELSEWHERE`) is ignored by modes without it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from eval.modes.base import MODES, Mode, mode_class
from eval.modes.capped import ThinkingCaps

# Settings that any mode accepts and ignores when it has no use for them: the asset fills
# ``tokenizer_path`` with the model's folder for every mode.
IGNORED_ELSEWHERE = ("tokenizer_path",)


def _settings(cls: type) -> dict[str, Any]:
    """``{setting: default}`` of a mode class (its init fields)."""
    if not dataclasses.is_dataclass(cls):
        return {}
    out = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = dataclasses.MISSING
    return out


def _same(value: Any, default: Any) -> bool:
    if isinstance(value, list | tuple) and isinstance(default, list | tuple):
        return tuple(value) == tuple(default)
    return value == default


def build_mode(mode: str = "single", **settings: Any) -> Mode:
    """The mode called ``mode``, built from flat settings (``eval_samples``' config fields).

    The mode's own settings go to its class; ``thinking_caps`` (non-empty) wraps it in the
    thinking-cap sweep (``eval.modes.capped.ThinkingCaps``, modes with ``cappable``); a
    setting of another mode raises ValueError naming the mode that takes it, unless it equals
    that mode's default; ``tokenizer_path`` is ignored by modes without it; an unknown name
    raises TypeError."""
    cls = mode_class(mode)
    caps = settings.pop("thinking_caps", ())
    own = _settings(cls)
    kwargs: dict[str, Any] = {}
    for key, value in settings.items():
        if key in own:
            kwargs[key] = value
            continue
        owners = {name: _settings(c)[key] for name, c in MODES.items() if key in _settings(c)}
        if not owners:
            raise TypeError(f"unknown mode setting {key!r}; mode {mode!r} takes "
                            f"{sorted(own) or 'no settings'} (and thinking_caps where it "
                            "can be capped)")
        if key in IGNORED_ELSEWHERE or all(_same(value, d) for d in owners.values()):
            continue
        names = " or ".join(repr(n) for n in owners)
        raise ValueError(f"{key} is a setting of mode {names}, not of mode {mode!r}: set "
                         f"mode={next(iter(owners))!r} or leave {key} out (got {value!r})")
    built = cls(**kwargs)
    if caps is None or (isinstance(caps, list | tuple) and len(caps) == 0):
        return built
    return ThinkingCaps(built, caps)
