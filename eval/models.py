"""The model registry: which models can be evaluated, and how to reach each one.

A model is either an OpenAI-compatible ``endpoint`` (remote API, GPU vLLM server) or a
``local`` folder (the embedded model, or a weft checkpoint) that is served on demand by the
local vLLM server. Registered models live in the warehouse table ``models`` (one partition per
model id), so training can register a checkpoint and the Dagster layer can turn every model
into a dynamic partition. The embedded model is always registered.

Registration checks what can be checked without the model running: an endpoint's URL form (and,
with ``--check``, that it answers ``GET /models`` and serves the named model), a local folder's
``config.json`` and weights. ``python -m eval.models add|remove|list`` reports a mistake in one
line (exit status 2) instead of a traceback.

Not guaranteed: that a registered endpoint is up (checked when it is used; an unreachable one
fails the evaluation with ``unreachable_advice``).
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

    def running_server(self) -> str | None:
        """The base URL of a local server that already serves this local folder under its
        served name: on the default port, or one a weft process started for the folder on any
        port and left running (``pipelines.serving.recorded_server``); None otherwise."""
        from pipelines.serving import DEFAULT_PORT, LocalModelServer, recorded_server

        served = self.served_model or self.model_id
        default = LocalModelServer(model_path=self.path, served_name=served, port=DEFAULT_PORT)
        if default.is_ready():
            return default.base_url
        return recorded_server(self.path, served)

    @contextmanager
    def serve(self) -> Iterator[tuple[str, str, str | None]]:
        """(base_url, served model id, api key) while the model is reachable.

        Local folders reuse a server already serving them (``running_server``), or start one
        on a free port for the duration of the block and stop it afterwards. With
        ``WEFT_SERVE_MODE=slurm`` they are served by a Slurm job instead
        (``pipelines.slurm.serve``), cancelled after the block unless it is kept."""
        import os

        if self.kind == "endpoint":
            key = os.environ.get(self.api_key_env) if self.api_key_env else None
            yield self.base_url.rstrip("/"), self.served_model, key
            return
        from pipelines.serving import LocalModelServer, free_port, serve_mode

        served = self.served_model or self.model_id
        if serve_mode() == "slurm":  # a vLLM Slurm job (reused when one is kept for it)
            from pipelines.slurm.serve import server_from_env

            with server_from_env(self.path, served) as job:
                yield job.base_url, served, None
            return
        running = self.running_server()
        if running is not None:
            yield running, served, None
            return
        server = LocalModelServer(model_path=self.path, served_name=served, port=free_port())
        try:
            server.start()
            yield server.base_url, served, None
        finally:
            server.stop()


def embedded_spec() -> ModelSpec:
    from pipelines.models import EMBEDDED_SERVED_NAME, embedded_model_dir

    return ModelSpec(model_id=EMBEDDED_SERVED_NAME, kind="local", path=str(embedded_model_dir()),
                     served_model=EMBEDDED_SERVED_NAME, baseline=True)


WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "*.bin", "*.pt", "*.gguf")


class ModelRegistryError(ValueError):
    """A registry request that cannot be carried out; the message says what to do instead."""


def check_base_url(url: str) -> str:
    """The URL without a trailing '/', or ModelRegistryError when it is not an http(s) URL with
    a host (what an OpenAI-compatible client needs, e.g. http://gpu-node:8000/v1)."""
    import urllib.parse

    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or " " in url.strip():
        raise ModelRegistryError(
            f"--base-url {url!r} is not an http(s) URL; give the server's OpenAI-compatible "
            "base URL, e.g. http://gpu-node:8000/v1 (vLLM) or https://api.example.com/v1")
    try:
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError as err:
        raise ModelRegistryError(f"--base-url {url!r} has a bad port: {err}") from None
    return url.strip().rstrip("/")


def check_model_folder(path: str) -> Path:
    """The folder as an absolute path, or ModelRegistryError unless it exists and holds a
    model (config.json plus weights: safetensors, .bin, .pt or .gguf files)."""
    folder = Path(path).expanduser()
    if not folder.exists():
        raise ModelRegistryError(f"--path {path} does not exist; give the folder of a saved "
                                 "model (a weft checkpoint or a Hugging Face model folder)")
    if not folder.is_dir():
        raise ModelRegistryError(f"--path {path} is a file; give the folder that holds it")
    if not (folder / "config.json").is_file():
        raise ModelRegistryError(f"{path} is not a model folder (no config.json); a weft "
                                 "checkpoint folder or `save_pretrained` output has one")
    if not any(next(folder.glob(pattern), None) for pattern in WEIGHT_PATTERNS):
        raise ModelRegistryError(f"{path} has a config.json but no weights ("
                                 f"{', '.join(WEIGHT_PATTERNS)})")
    return folder.absolute()


def probe_endpoint(spec: ModelSpec, timeout_s: float = 10.0) -> list[str]:
    """The models the endpoint serves; ModelRegistryError when it does not answer or does not
    serve ``spec.served_model``."""
    import os

    from pipelines.llm import EndpointUnreachable
    from pipelines.llm import list_models as served_list

    key = os.environ.get(spec.api_key_env, "") if spec.api_key_env else ""
    if spec.api_key_env and not key:
        raise ModelRegistryError(f"--api-key-env {spec.api_key_env} is not set in this shell; "
                                 f"export {spec.api_key_env}=... before --check")
    try:
        served = served_list(spec.base_url, key, timeout_s)
    except EndpointUnreachable as err:
        raise ModelRegistryError(
            f"{spec.base_url} did not answer GET /models ({err}). Start the server, fix "
            "--base-url, or register without --check to add it anyway") from None
    if served and spec.served_model not in served:
        raise ModelRegistryError(f"{spec.base_url} serves {served}, not {spec.served_model!r}; "
                                 "set --served-model to one of them")
    return served


def unreachable_advice(spec: ModelSpec, detail: str) -> str:
    """What to do when a registered model's endpoint does not answer (it is the registry,
    not the WEFT_BASE_URL setting, that says where the model lives)."""
    return (
        f"model {spec.model_id!r} is registered as the endpoint {spec.base_url} (serving "
        f"{spec.served_model!r}), which is unreachable: {detail}. Start that server, or "
        f"re-register the model at its current address (`python -m eval.models add --id "
        f"{spec.model_id} --base-url URL --served-model {spec.served_model} --check`), or remove "
        f"it (`python -m eval.models remove {spec.model_id}`).")


def register_model(spec: ModelSpec, wh: Warehouse | None = None, *, run_id: str = "manual") -> ModelSpec:
    """Record (or replace) a model in the `models` table after checking its URL form (endpoint)
    or that its folder holds a model (local); ModelRegistryError otherwise."""
    if spec.kind == "local":
        check_model_folder(spec.path)
    else:
        check_base_url(spec.base_url)
    wh = wh or Warehouse()
    wh.write("models", [spec.to_row()],
             lineage=Lineage(run_id=run_id, asset="models", partition=spec.model_id))
    return spec


def model_for(target: str, wh: Warehouse, *, run_id: str = "manual") -> ModelSpec:
    """The registered model ``target`` names: a registered model id, the registered local
    model whose folder ``target`` is, the embedded model's folder, or an unregistered model
    folder, which is registered (under its folder's name, made unique with a hash of its path
    when that id is taken) so rows written for it carry an id the registry knows.
    ModelRegistryError when ``target`` is none of these."""
    from pipelines.models import embedded_model_dir
    from warehouse.store import config_hash

    by_id = {s.model_id: s for s in list_models(wh)}
    if target in by_id:
        return by_id[target]
    path = Path(target)
    for spec in by_id.values():
        if spec.kind == "local" and Path(spec.path).resolve() == path.resolve():
            return spec
    if not (path.is_dir() and (path / "config.json").is_file()):
        raise ModelRegistryError(f"{target!r} is neither a registered model id nor a model "
                                 "folder")
    if path.resolve() == Path(embedded_model_dir()).resolve():
        return embedded_spec()
    model_id = safe_model_id(path.name)
    if model_id in by_id:
        model_id = safe_model_id(f"{model_id}-{config_hash(str(path.resolve()))[:8]}")
    return register_model(ModelSpec(model_id=model_id, kind="local", path=str(target),
                                    served_model=model_id), wh, run_id=run_id)


def remove_model(model_id: str, wh: Warehouse | None = None) -> ModelSpec:
    """Delete a registered model from the `models` table (its evaluation results stay)."""
    wh = wh or Warehouse()
    if model_id == embedded_spec().model_id:
        raise ModelRegistryError(f"{model_id} is the embedded model; it is always registered")
    spec = get_model(model_id, wh)
    wh.delete_partition("models", model_id)
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


class UnknownModelError(KeyError):
    """No model with this id is registered (a KeyError, for callers that expect one)."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0])


def get_model(model_id: str, wh: Warehouse | None = None) -> ModelSpec:
    for spec in list_models(wh):
        if spec.model_id == model_id:
            return spec
    import difflib

    known = [spec.model_id for spec in list_models(wh)]
    close = difflib.get_close_matches(model_id, known, n=3, cutoff=0.5)
    hint = f" Did you mean {' or '.join(close)}?" if close else ""
    raise UnknownModelError(
        f"model {model_id!r} is not registered.{hint} Registered: {', '.join(known)}. "
        "Register it with "
        "`python -m eval.models add --id ID --base-url URL --served-model NAME` "
        "(endpoint) or `--path FOLDER` (local checkpoint)"
    )


CHECKPOINT_MARKER = "weft-checkpoint.json"  # written by training.run beside a finished checkpoint


def checkpoint_of_folder(folder: Path) -> str:
    """The weft checkpoint id a model folder holds (its ``weft-checkpoint.json``), or ""."""
    import json

    marker = folder / CHECKPOINT_MARKER
    try:
        return str(json.loads(marker.read_text()).get("checkpoint_id") or "")
    except (OSError, ValueError, AttributeError):
        return ""


def checkpoint_spec(checkpoint_id: str, wh: Warehouse, model_id: str = "",
                    baseline: bool = False) -> ModelSpec:
    """A local spec of weft's own checkpoint ``checkpoint_id`` (its folder read from the
    `checkpoints` table), registered under ``model_id`` (default: the checkpoint id) and
    carrying the checkpoint id, so ``model_lineage`` says what trained it."""
    rows = [] if "checkpoints" not in wh.tables() else wh.sql(
        "SELECT path FROM checkpoints WHERE checkpoint_id = $id ORDER BY created_at DESC LIMIT 1",
        {"id": checkpoint_id}).to_pylist()
    if not rows:
        known = [] if "checkpoints" not in wh.tables() else [r["checkpoint_id"] for r in wh.sql(
            "SELECT DISTINCT checkpoint_id FROM checkpoints ORDER BY 1").to_pylist()]
        raise ModelRegistryError(f"--checkpoint {checkpoint_id!r} is not a weft checkpoint in "
                                 f"the warehouse (known: {', '.join(known[:10]) or 'none'})")
    folder = check_model_folder(rows[0]["path"])
    model_id = model_id or safe_model_id(checkpoint_id)
    return ModelSpec(model_id=model_id, kind="local", path=str(folder), served_model=model_id,
                     checkpoint_id=checkpoint_id, baseline=baseline)


def _folder_hint(path: str, wh: Warehouse) -> str:
    """Where a weft checkpoint named like ``path``'s last part really is, as advice ("" if no
    checkpoint of that name exists)."""
    name = Path(path).name
    if not name or "checkpoints" not in wh.tables():
        return ""
    rows = wh.sql("SELECT path FROM checkpoints WHERE checkpoint_id = $id ORDER BY created_at "
                  "DESC LIMIT 1", {"id": name}).to_pylist()
    return (f"; {name} is a weft checkpoint whose folder is {rows[0]['path']}: register it with "
            f"`--checkpoint {name}`" if rows else "")


def _spec_from_args(args: Any, wh: Warehouse | None = None) -> ModelSpec:
    wh = wh or Warehouse()
    if args.checkpoint:
        if args.path or args.base_url:
            raise ModelRegistryError("give --checkpoint alone (its folder comes from the "
                                     "warehouse), not with --path or --base-url")
        return checkpoint_spec(args.checkpoint, wh, args.id or "", baseline=args.baseline)
    if not args.id:
        raise ModelRegistryError("--id is required (the model id, the `model` partition), "
                                 "except with --checkpoint, which defaults to the checkpoint id")
    if args.path and args.base_url:
        raise ModelRegistryError("give either --path (a local model folder) or --base-url and "
                                 "--served-model (an endpoint), not both")
    if not args.path and not (args.base_url and args.served_model):
        raise ModelRegistryError("an endpoint needs --base-url URL and --served-model NAME (the "
                                 "`model` field the server expects); a local folder needs --path")
    if not MODEL_ID_RE.match(args.id):
        raise ModelRegistryError(f"--id {args.id!r} must be 1-128 letters, digits, '.', '_', ':' "
                                 f"or '-', starting with a letter or digit; e.g. "
                                 f"--id {safe_model_id(args.id) if args.id.strip('-/ ') else 'my-model'}")
    if args.path:
        try:
            folder = check_model_folder(args.path)
        except ModelRegistryError as err:
            raise ModelRegistryError(f"{err}{_folder_hint(args.path, wh)}") from None
        return ModelSpec(model_id=args.id, kind="local", path=str(folder),
                         served_model=args.served_model, baseline=args.baseline,
                         checkpoint_id=checkpoint_of_folder(folder))
    return ModelSpec(model_id=args.id, kind="endpoint", base_url=check_base_url(args.base_url),
                     served_model=args.served_model, api_key_env=args.api_key_env,
                     baseline=args.baseline)


def main(argv: list[str] | None = None) -> int:
    """``python -m eval.models add|remove|list``. A mistake prints one line saying what to do
    and exits 2 (no traceback)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m eval.models")
    sub = parser.add_subparsers(dest="cmd", required=True)
    add = sub.add_parser("add", help="register an endpoint or a local model folder")
    add.add_argument("--id", default="", help="model id (the `model` partition), e.g. qwen3-8b "
                                               "(with --checkpoint: the checkpoint id)")
    add.add_argument("--checkpoint", default="",
                     help="a weft checkpoint id (its folder and lineage come from the warehouse)")
    add.add_argument("--base-url", default="", help="OpenAI-compatible URL, e.g. http://host:8000/v1")
    add.add_argument("--served-model", default="", help="the `model` name the endpoint expects")
    add.add_argument("--path", default="", help="a local model folder (served on demand)")
    add.add_argument("--api-key-env", default="", help="name of the env var holding the key")
    add.add_argument("--baseline", action="store_true", help="re-evaluated every night")
    add.add_argument("--check", action="store_true",
                     help="ask the endpoint (GET /models) before registering")
    rm = sub.add_parser("remove", help="unregister a model (its results stay in the warehouse)")
    rm.add_argument("id")
    sub.add_parser("list", help="list registered models")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "add":
            spec = _spec_from_args(args)
            if args.check and spec.kind == "endpoint":
                served = probe_endpoint(spec)
                print(f"{spec.base_url} answers and serves {served or 'an unnamed model'}")
            spec = register_model(spec)
            print(f"registered {spec.model_id} ({spec.kind}); the models sensor adds its "
                  f"partition, or now: `weft add-model-partition {spec.model_id}`")
        elif args.cmd == "remove":
            spec = remove_model(args.id)
            print(f"removed {spec.model_id} from the registry; its eval results stay in the "
                  "warehouse and its Dagster partition stays until you delete it in the UI")
        else:
            for spec in list_models():
                where = spec.base_url or spec.path
                print(f"{spec.model_id}\t{spec.kind}\t{where}\t"
                      f"{'baseline' if spec.baseline else ''}")
    except (ModelRegistryError, UnknownModelError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
