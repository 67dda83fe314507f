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


def serving_spec(model: str, checkpoint_id: str | None = None):
    """The ``eval.models.ModelSpec`` that serves ``model`` locally for an evaluation: the
    embedded model's own spec for ``embedded`` (or its folder), else a local spec of the model
    folder, recorded under ``checkpoint_id`` when it is a weft checkpoint (else the folder's
    name). ValueError when ``model`` is not a model folder (a hub id cannot be served offline;
    register an endpoint for it instead)."""
    from eval.models import ModelSpec, embedded_spec, safe_model_id
    from pipelines.models import embedded_model_dir

    path = Path(model).expanduser()
    if model == EMBEDDED or path.resolve() == Path(embedded_model_dir()).resolve():
        return embedded_spec()
    if not (path / "config.json").is_file():
        raise ValueError(f"model {model!r} is not a model folder (no config.json); an evaluation "
                         "serves a folder or `embedded`")
    model_id = checkpoint_id or safe_model_id(path.name)
    return ModelSpec(model_id=model_id, kind="local", path=str(path), served_model=model_id,
                     checkpoint_id=checkpoint_id or "")
