"""The model registry: which models can be evaluated, and how to reach each one.

A model is either an OpenAI-compatible ``endpoint`` (remote API, GPU vLLM server) or a
``local`` folder (the embedded model, or a weft checkpoint) that is served on demand by the
local vLLM server. Registered models live in the warehouse table ``models`` (one partition per
model id), so training can register a checkpoint and the Dagster layer can turn every model
into a dynamic partition. The embedded model is always registered.

Not guaranteed: that a registered endpoint is up (checked when it is used).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from warehouse import Lineage, Warehouse

MODEL_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
KINDS = ("endpoint", "local")


def safe_model_id(name: str) -> str:
    """A partition-safe model id from any name ("org/model" → "org--model")."""
    cleaned = re.sub(r"[^A-Za-z0-9._:-]+", "--", name.strip()).strip("-")
    if not cleaned:
        raise ValueError(f"cannot make a model id from {name!r}")
    return cleaned[:128]


@dataclass(frozen=True)
class ModelSpec:
    model_id: str
    kind: str
    base_url: str = ""
    served_model: str = ""  # the `model` field sent to the endpoint
    path: str = ""  # local folder for kind "local"
    api_key_env: str = ""  # name of the env var holding the key (never the key)
    checkpoint_id: str = ""
    baseline: bool = False

    def __post_init__(self) -> None:
        if not MODEL_ID_RE.match(self.model_id):
            raise ValueError(
                f"model id {self.model_id!r} must be 1-128 letters, digits, '.', '_', ':' or '-' "
                "(use eval.models.safe_model_id to derive one)"
            )
        if self.kind not in KINDS:
            raise ValueError(f"model kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "endpoint" and not (self.base_url and self.served_model):
            raise ValueError(f"endpoint model {self.model_id!r} needs base_url and served_model")
        if self.kind == "local" and not self.path:
            raise ValueError(f"local model {self.model_id!r} needs the path of its folder")

    def to_row(self) -> dict[str, Any]:
        return dict(asdict(self), added_at=dt.datetime.now(dt.UTC))

    @contextmanager
    def serve(self) -> Iterator[tuple[str, str, str | None]]:
        """(base_url, served model id, api key) while the model is reachable.

        Local folders reuse a weft server already serving them on the default port, or start
        one on a free port for the duration of the block and stop it afterwards."""
        import os

        if self.kind == "endpoint":
            key = os.environ.get(self.api_key_env) if self.api_key_env else None
            yield self.base_url.rstrip("/"), self.served_model, key
            return
        from pipelines.serving import DEFAULT_PORT, LocalModelServer, free_port

        served = self.served_model or self.model_id
        default = LocalModelServer(model_path=self.path, served_name=served, port=DEFAULT_PORT)
        if default.is_ready():
            yield default.base_url, served, None
            return
        server = LocalModelServer(model_path=self.path, served_name=served, port=free_port())
        server.start()
        try:
            yield server.base_url, served, None
        finally:
            server.stop()


def embedded_spec() -> ModelSpec:
    from pipelines.models import EMBEDDED_SERVED_NAME, embedded_model_dir

    return ModelSpec(model_id=EMBEDDED_SERVED_NAME, kind="local", path=str(embedded_model_dir()),
                     served_model=EMBEDDED_SERVED_NAME, baseline=True)


def register_model(spec: ModelSpec, wh: Warehouse | None = None, *, run_id: str = "manual") -> ModelSpec:
    """Record (or replace) a model in the `models` table."""
    if spec.kind == "local" and not (Path(spec.path) / "config.json").is_file():
        raise FileNotFoundError(f"{spec.path} is not a model folder (no config.json)")
    wh = wh or Warehouse()
    wh.write("models", [spec.to_row()],
             lineage=Lineage(run_id=run_id, asset="models", partition=spec.model_id))
    return spec


def list_models(wh: Warehouse | None = None) -> list[ModelSpec]:
    """Every registered model (the embedded one first), newest registration wins."""
    wh = wh or Warehouse()
    specs: dict[str, ModelSpec] = {}
    embedded = embedded_spec()
    specs[embedded.model_id] = embedded
    rows = sorted(wh.read("models").to_pylist(), key=lambda r: r.get("added_at") or 0)
    fields = ModelSpec.__dataclass_fields__
    for row in rows:
        spec = ModelSpec(**{k: row[k] for k in fields if k in row and row[k] is not None})
        specs[spec.model_id] = spec
    return list(specs.values())


def get_model(model_id: str, wh: Warehouse | None = None) -> ModelSpec:
    for spec in list_models(wh):
        if spec.model_id == model_id:
            return spec
    raise KeyError(
        f"model {model_id!r} is not registered; register it with "
        "`python -m eval.models add --id ID --base-url URL --served-model NAME` "
        "(endpoint) or `--path FOLDER` (local checkpoint)"
    )


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m eval.models")
    sub = parser.add_subparsers(dest="cmd", required=True)
    add = sub.add_parser("add", help="register an endpoint or a local model folder")
    add.add_argument("--id", required=True)
    add.add_argument("--base-url", default="")
    add.add_argument("--served-model", default="")
    add.add_argument("--path", default="")
    add.add_argument("--api-key-env", default="")
    add.add_argument("--baseline", action="store_true")
    sub.add_parser("list", help="list registered models")
    args = parser.parse_args(argv)
    if args.cmd == "add":
        kind = "local" if args.path else "endpoint"
        spec = register_model(ModelSpec(model_id=args.id, kind=kind, base_url=args.base_url,
                                        served_model=args.served_model, path=args.path,
                                        api_key_env=args.api_key_env, baseline=args.baseline))
        print(f"registered {spec.model_id} ({spec.kind}); the Dagster sensor adds its partition")
    else:
        for spec in list_models():
            where = spec.base_url or spec.path
            print(f"{spec.model_id}\t{spec.kind}\t{where}\t{'baseline' if spec.baseline else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
