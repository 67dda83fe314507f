"""The model a config's ``model_name_or_path`` (or Tandem's ``junior``) names, as a folder.

:data:`EMBEDDED` (``embedded``) names the embedded model shipped with weft;
:func:`resolve_model` turns it into the converted model folder (converting it once) and
expands a local folder. Any other name (a hub id) is returned unchanged.

Not guaranteed: that a hub id exists or that a folder holds a loadable model; the trainer that
loads it finds out.
"""

from __future__ import annotations

from pathlib import Path

EMBEDDED = "embedded"


def resolve_model(name_or_path: str) -> str:
    """``embedded`` -> the converted embedded model folder (converted once); else unchanged."""
    if name_or_path == EMBEDDED:
        from pipelines.models import convert

        return str(convert())
    path = Path(name_or_path).expanduser()
    return str(path) if path.is_dir() else name_or_path
