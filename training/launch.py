"""How a training run is started: the command line and, for Kubernetes, the pod spec.

Pure functions, no Dagster and no Kubernetes client: ``assets/training.py`` hands their output
to ``PipesSubprocessClient`` (local) or ``dagster_k8s.PipesK8sClient`` (cluster). The same
script runs everywhere: ``python -m training.<kind> --recipe R key=value ...`` for one process,
``accelerate launch --multi_gpu --num_processes N -m training.<kind> ...`` for N GPUs.

:func:`pod_spec` builds a ``V1PodSpec``-shaped dict: one container with the image, command,
GPU/CPU/memory requests and limits, ``WEFT_HOME`` on a persistent volume claim (checkpoints and
the warehouse must outlive the pod), a memory-backed ``/dev/shm`` (NCCL and data loaders need
more than the default 64 MiB), node selector, tolerations, service account and pull secrets.

Not guaranteed: that the image has weft and its dependencies installed, or that the cluster
schedules the pod; both are checked only by running it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

KINDS = ("sft", "grpo")


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
                   *, processes: int = 1, python: str = "python") -> list[str]:
    """The argv that runs a recipe; ``processes > 1`` wraps it in ``accelerate launch``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if not recipe:
        raise ValueError("recipe is required")
    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    tail = ["--recipe", recipe, *override_args(overrides)]
    if processes == 1:
        return [python, "-m", f"training.{kind}", *tail]
    return [python, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes",
            str(processes), "-m", f"training.{kind}", *tail]


@dataclass(frozen=True)
class PodSettings:
    """What a training pod needs; ``image`` must contain weft and its training dependencies."""

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

    def __post_init__(self) -> None:
        if not self.image:
            raise ValueError("a training pod needs an image with weft installed; set `image`")
        if self.gpus < 0:
            raise ValueError(f"gpus must be >= 0, got {self.gpus}")


def pod_command(kind: str, recipe: str, overrides: Sequence[str] | Mapping[str, Any] | None,
                settings: PodSettings) -> list[str]:
    """The container command: one process per GPU (at least one)."""
    return script_command(kind, recipe, overrides, processes=max(1, settings.gpus))


def pod_spec(settings: PodSettings, command: Sequence[str]) -> dict[str, Any]:
    """A ``V1PodSpec``-shaped dict (camelCase keys) for ``PipesK8sClient.run(base_pod_spec=)``."""
    resources: dict[str, dict[str, str]] = {
        "requests": {"cpu": settings.cpu, "memory": settings.memory},
        "limits": {"memory": settings.memory},
    }
    if settings.gpus:
        resources["requests"][settings.gpu_resource] = str(settings.gpus)
        resources["limits"][settings.gpu_resource] = str(settings.gpus)
    env = {"WEFT_HOME": settings.weft_home_path, "PYTHONUNBUFFERED": "1", **settings.env}
    container: dict[str, Any] = {
        "name": "weft-train",
        "image": settings.image,
        "command": list(command),
        "env": [{"name": k, "value": str(v)} for k, v in env.items()],
        "resources": resources,
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if settings.working_dir:
        container["workingDir"] = settings.working_dir
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size}},
    ]
    if settings.weft_home_claim:
        container["volumeMounts"].append({"name": "weft-home", "mountPath": settings.weft_home_path})
        volumes.append({"name": "weft-home",
                        "persistentVolumeClaim": {"claimName": settings.weft_home_claim}})
    spec: dict[str, Any] = {"containers": [container], "volumes": volumes, "restartPolicy": "Never"}
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
