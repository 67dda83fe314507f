"""How a training run is started: the command line and, for Kubernetes, the pod spec.

Pure functions, no Dagster and no Kubernetes client: ``assets/training.py`` hands their output
to ``PipesSubprocessClient`` (local) or ``dagster_k8s.PipesK8sClient`` (cluster). The same
script runs everywhere: ``python -m training.<kind> --recipe R key=value ...`` for one process,
``accelerate launch --multi_gpu --num_processes N -m training.<kind> ...`` for N GPUs, or
``accelerate launch --config_file training/accelerate/<name>.yaml ...`` with one of the
multi-GPU configs in :data:`ACCELERATE_CONFIGS` (DDP, FSDP2, DeepSpeed ZeRO-2/3).

GPUs for the vLLM rollout server (GRPO only, ``vllm_gpus``): the launch keeps that many GPUs
out of the training processes and adds the overrides of TRL's server mode. With the server as a
*process* (default) the training script starts it on the kept GPUs (``vllm_server_gpus``,
``training.rollouts``); in a pod with the server as a *container*, a native sidecar
(``initContainers`` with ``restartPolicy: Always``, Kubernetes 1.29+) runs ``vllm serve`` as
``trl vllm-serve`` builds it, on its own GPUs, sharing the pod's network, ``/dev/shm`` (NCCL
weight transfer) and ``WEFT_HOME``; the trainer connects through ``vllm_server_base_url`` and
starts only once the sidecar's ``/health`` answers; the sidecar stops when training ends.

:func:`pod_spec` builds a ``V1PodSpec``-shaped dict: the training container with the image,
command, GPU/CPU/memory requests and limits, ``WEFT_HOME`` on a persistent volume claim
(checkpoints and the warehouse must outlive the pod), a memory-backed ``/dev/shm`` (NCCL and
data loaders need more than the default 64 MiB), node selector, tolerations, service account
and pull secrets.

Not guaranteed: that the image has weft and its dependencies installed (the ``gpu`` extra for
vLLM and DeepSpeed), that its working directory is the project root (accelerate config paths in
pod commands are relative to it; set ``working_dir`` otherwise), or that the cluster schedules
the pod; these are checked only by running it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

KINDS = ("sft", "grpo")
ACCELERATE_DIR = Path(__file__).with_name("accelerate")
ACCELERATE_CONFIGS = ("ddp", "fsdp", "zero2", "zero3")
VLLM_SERVERS = ("process", "container")


def accelerate_config_path(name: str, *, relative: bool = False) -> str:
    """The file of a multi-GPU config: a name from :data:`ACCELERATE_CONFIGS` (relative to the
    project root when ``relative``, e.g. for a pod) or a path to an accelerate YAML file."""
    if name in ACCELERATE_CONFIGS:
        path = ACCELERATE_DIR / f"{name}.yaml"
        return f"training/accelerate/{name}.yaml" if relative else str(path)
    if name.endswith((".yaml", ".yml", ".json")):
        return name
    raise ValueError(f"accelerate_config must be one of {ACCELERATE_CONFIGS} or a path to an "
                     f"accelerate config file, got {name!r}")


def vllm_server_overrides(training_processes: int, vllm_gpus: int,
                          base_url: str = "") -> list[str]:
    """TRL server-mode overrides for a launch that keeps ``vllm_gpus`` GPUs for the server:
    the GPUs after the training processes' (``vllm_server_gpus``), or an external server."""
    out = ["use_vllm=true", "vllm_mode=server"]
    if base_url:
        return [*out, f"vllm_server_base_url={base_url}"]
    gpus = list(range(training_processes, training_processes + vllm_gpus))
    return [*out, format_override("vllm_server_gpus", gpus)]


def format_override(key: str, value: Any) -> str:
    """``key=value`` whose value parses back (as YAML) to ``value``."""
    if isinstance(value, str):
        try:
            if yaml.safe_load(value) == value and "\n" not in value:
                return f"{key}={value}"
        except yaml.YAMLError:
            pass
    return f"{key}={json.dumps(value)}"


def override_args(overrides: Sequence[str] | Mapping[str, Any] | None) -> list[str]:
    """Overrides as command-line arguments (a mapping is formatted, a list passes through)."""
    if not overrides:
        return []
    if isinstance(overrides, Mapping):
        return [format_override(k, v) for k, v in overrides.items()]
    out = []
    for item in overrides:
        if "=" not in str(item):
            raise ValueError(f"override {item!r} must look like key=value")
        out.append(str(item))
    return out


def script_command(kind: str, recipe: str, overrides: Sequence[str] | Mapping[str, Any] | None = None,
                   *, processes: int = 1, python: str = "python", accelerate_config: str = "",
                   vllm_gpus: int = 0, relative_paths: bool = False) -> list[str]:
    """The argv that runs a recipe. ``processes`` training processes (one per GPU); more than
    one, or an ``accelerate_config``, wraps it in ``accelerate launch``. ``vllm_gpus`` > 0
    (GRPO) keeps that many further GPUs for the vLLM server the script starts (server mode)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if not recipe:
        raise ValueError("recipe is required")
    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    if vllm_gpus < 0:
        raise ValueError(f"vllm_gpus must be >= 0, got {vllm_gpus}")
    if vllm_gpus and kind != "grpo":
        raise ValueError(f"vllm_gpus only applies to GRPO runs (rollouts), not {kind}")
    extra = vllm_server_overrides(processes, vllm_gpus) if vllm_gpus else []
    tail = ["--recipe", recipe, *override_args(overrides), *extra]
    if accelerate_config:
        return [python, "-m", "accelerate.commands.launch", "--config_file",
                accelerate_config_path(accelerate_config, relative=relative_paths),
                "--num_processes", str(processes), "-m", f"training.{kind}", *tail]
    if processes == 1:
        return [python, "-m", f"training.{kind}", *tail]
    return [python, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes",
            str(processes), "-m", f"training.{kind}", *tail]


@dataclass(frozen=True)
class PodSettings:
    """What a training pod needs; ``image`` must contain weft and its training dependencies.

    ``gpus`` is the pod's total; ``vllm_gpus`` of them go to the vLLM rollout server (GRPO),
    run as a ``process`` of the training container or as a sidecar ``container``
    (``vllm_image``, default ``image``; ``vllm_port``); the rest run one training process each.
    ``accelerate_config`` picks a multi-GPU config (:data:`ACCELERATE_CONFIGS` or a path)."""

    image: str
    gpus: int = 1
    gpu_resource: str = "nvidia.com/gpu"
    cpu: str = "8"
    memory: str = "64Gi"
    shm_size: str = "16Gi"
    weft_home_claim: str = ""
    weft_home_path: str = "/weft"
    working_dir: str = ""
    service_account: str = ""
    image_pull_secrets: tuple[str, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    accelerate_config: str = ""
    vllm_gpus: int = 0
    vllm_server: str = "process"
    vllm_image: str = ""
    vllm_port: int = 8000
    vllm_cpu: str = "4"
    vllm_memory: str = "32Gi"

    def __post_init__(self) -> None:
        if not self.image:
            raise ValueError("a training pod needs an image with weft installed; set `image`")
        if self.gpus < 0:
            raise ValueError(f"gpus must be >= 0, got {self.gpus}")
        if self.vllm_gpus < 0:
            raise ValueError(f"vllm_gpus must be >= 0, got {self.vllm_gpus}")
        if self.vllm_gpus and self.gpus - self.vllm_gpus < 1:
            raise ValueError(f"vllm_gpus={self.vllm_gpus} leaves no GPU for training out of "
                             f"gpus={self.gpus}; raise gpus or lower vllm_gpus")
        if self.vllm_server not in VLLM_SERVERS:
            raise ValueError(f"vllm_server must be one of {VLLM_SERVERS}, got {self.vllm_server!r}")
        if self.accelerate_config:
            accelerate_config_path(self.accelerate_config)  # raises on an unknown name

    @property
    def training_gpus(self) -> int:
        return self.gpus - self.vllm_gpus

    @property
    def sidecar(self) -> bool:
        return bool(self.vllm_gpus) and self.vllm_server == "container"


def pod_command(kind: str, recipe: str, overrides: Sequence[str] | Mapping[str, Any] | None,
                settings: PodSettings) -> list[str]:
    """The training container's command: one process per training GPU (at least one), the
    vLLM server's GPUs kept out; a sidecar server is reached on the pod's localhost."""
    processes = max(1, settings.training_gpus)
    args = override_args(overrides)
    vllm_gpus = settings.vllm_gpus
    if settings.sidecar:
        if kind != "grpo":
            raise ValueError(f"vllm_gpus only applies to GRPO runs (rollouts), not {kind}")
        args += vllm_server_overrides(processes, vllm_gpus,
                                      f"http://127.0.0.1:{settings.vllm_port}")
        vllm_gpus = 0
    return script_command(kind, recipe, args, processes=processes,
                          accelerate_config=settings.accelerate_config, vllm_gpus=vllm_gpus,
                          relative_paths=True)


def override_value(overrides: Sequence[str], key: str) -> str | None:
    """The last ``key=value`` given for ``key`` in a list of overrides (parsed as YAML)."""
    found = None
    for item in overrides:
        name, sep, raw = str(item).partition("=")
        if sep and name.strip() == key:
            found = yaml.safe_load(raw) if raw.strip() else ""
    return None if found is None else str(found)


def vllm_container(settings: PodSettings, model: str) -> dict[str, Any]:
    """The sidecar running ``vllm serve`` as TRL's server mode needs it (the arguments of
    ``trl vllm-serve``: NCCL weight transfer, processed logprobs), with a ``/health`` probe."""
    if not model:
        raise ValueError("a vLLM sidecar needs the model the training run starts from: give "
                         "model_name_or_path=<folder on the WEFT_HOME volume> in the overrides")
    from trl.scripts.vllm_serve import ScriptArguments, build_command

    serve = build_command(ScriptArguments(model=model, host="127.0.0.1", port=settings.vllm_port,
                                          tensor_parallel_size=settings.vllm_gpus))
    serve[0] = "python"
    gpus = str(settings.vllm_gpus)
    probe = {"httpGet": {"path": "/health", "port": settings.vllm_port},
             "periodSeconds": 10, "failureThreshold": 90}
    return {
        "name": "vllm",
        "image": settings.vllm_image or settings.image,
        "command": serve,
        "restartPolicy": "Always",  # a native sidecar: stopped once the trainer exits
        "env": [{"name": "VLLM_SERVER_DEV_MODE", "value": "1"},
                {"name": "WEFT_HOME", "value": settings.weft_home_path}],
        "resources": {"requests": {"cpu": settings.vllm_cpu, "memory": settings.vllm_memory,
                                   settings.gpu_resource: gpus},
                      "limits": {"memory": settings.vllm_memory, settings.gpu_resource: gpus}},
        "startupProbe": probe,
        "volumeMounts": _mounts(settings),
    }


def _mounts(settings: PodSettings) -> list[dict[str, str]]:
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if settings.weft_home_claim:
        mounts.append({"name": "weft-home", "mountPath": settings.weft_home_path})
    return mounts


def pod_spec(settings: PodSettings, command: Sequence[str]) -> dict[str, Any]:
    """A ``V1PodSpec``-shaped dict (camelCase keys) for ``PipesK8sClient.run(base_pod_spec=)``.
    With a sidecar vLLM server, its model is the command's ``model_name_or_path`` override."""
    train_gpus = settings.training_gpus if settings.sidecar else settings.gpus
    resources: dict[str, dict[str, str]] = {
        "requests": {"cpu": settings.cpu, "memory": settings.memory},
        "limits": {"memory": settings.memory},
    }
    if train_gpus:
        resources["requests"][settings.gpu_resource] = str(train_gpus)
        resources["limits"][settings.gpu_resource] = str(train_gpus)
    env = {"WEFT_HOME": settings.weft_home_path, "PYTHONUNBUFFERED": "1", **settings.env}
    container: dict[str, Any] = {
        "name": "weft-train",
        "image": settings.image,
        "command": list(command),
        "env": [{"name": k, "value": str(v)} for k, v in env.items()],
        "resources": resources,
        "volumeMounts": _mounts(settings),
    }
    if settings.working_dir:
        container["workingDir"] = settings.working_dir
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size}},
    ]
    if settings.weft_home_claim:
        volumes.append({"name": "weft-home",
                        "persistentVolumeClaim": {"claimName": settings.weft_home_claim}})
    spec: dict[str, Any] = {"containers": [container], "volumes": volumes, "restartPolicy": "Never"}
    if settings.sidecar:
        model = override_value([c for c in command if "=" in c], "model_name_or_path") or ""
        spec["initContainers"] = [vllm_container(settings, model)]
    if settings.service_account:
        spec["serviceAccountName"] = settings.service_account
    if settings.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in settings.image_pull_secrets]
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        spec["tolerations"] = [dict(t) for t in settings.tolerations]
    elif settings.gpus:
        spec["tolerations"] = [{"key": settings.gpu_resource, "operator": "Exists",
                                "effect": "NoSchedule"}]
    return spec
