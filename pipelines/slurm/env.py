"""The ``WEFT_SLURM_*`` environment variables, read in one place for the Slurm trainer
(``assets.training.slurm_trainer_from_env``) and the Slurm model servers
(``pipelines.slurm.serve.settings_from_env``).

Each field ``<name>`` is read from ``WEFT_SLURM_<NAME>``: text fields as they are, whole-number
fields as ints (anything else is a ValueError naming the variable), and three with a syntax of
their own: ``WEFT_SLURM_SBATCH_ARGS`` split like a shell line, ``WEFT_SLURM_SETUP`` one shell
line, ``WEFT_SLURM_CONTAINER_MOUNTS`` comma-separated (Pyxis's own syntax). An unset or empty
variable leaves its field out.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

# the fields both the trainer and the servers read
TEXT = ("partition", "account", "qos", "time_limit", "mem", "constraint", "python", "workdir",
        "container_image")
INT = ("gpus_per_node", "cpus_per_task")
# the trainer's own: multi-node launches and TRL's vLLM node
TRAINER_TEXT = (*TEXT, "accelerate_config")
TRAINER_INT = ("nodes", *INT, "vllm_nodes", "vllm_gpus")


def variable(name: str) -> str:
    """The environment variable of field ``name``."""
    return f"WEFT_SLURM_{name.upper()}"


def env_int(name: str, default: int, env: Mapping[str, str] | None = None) -> int:
    """Whole-number variable ``name`` (the full variable name), ``default`` when unset or
    empty; ValueError naming it when it is not a whole number."""
    env = os.environ if env is None else env
    value = env.get(name, "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise ValueError(f"{name} must be a whole number, got {value!r}") from exc


def read_fields(text: Sequence[str], ints: Sequence[str],
                env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The fields ``text`` and ``ints`` that are set in ``env`` (default ``os.environ``), plus
    ``sbatch_args``, ``setup`` and ``container_mounts`` (lists) when their variables are set."""
    env = os.environ if env is None else env
    fields: dict[str, Any] = {name: env[variable(name)] for name in text
                              if env.get(variable(name))}
    for name in ints:
        if env.get(variable(name), "").strip():
            fields[name] = env_int(variable(name), 0, env)
    if env.get("WEFT_SLURM_SBATCH_ARGS"):
        fields["sbatch_args"] = shlex.split(env["WEFT_SLURM_SBATCH_ARGS"])
    if env.get("WEFT_SLURM_SETUP"):
        fields["setup"] = [env["WEFT_SLURM_SETUP"]]
    if env.get("WEFT_SLURM_CONTAINER_MOUNTS"):
        fields["container_mounts"] = env["WEFT_SLURM_CONTAINER_MOUNTS"].split(",")
    return fields
