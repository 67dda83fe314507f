"""The sbatch script of a training run: ``#SBATCH`` lines, setup lines and the launch.

:func:`batch_script` turns :class:`SlurmSettings` (sbatch's flags, the interpreter and project
root on the shared filesystem, escape hatches) and a :class:`TrainingLaunch` (the training
module, its arguments, and the command one node runs) into the text handed to ``sbatch``. It is
a pure function: the same inputs give the same text, so a job can be reviewed offline.

Layouts:

- one node (``nodes=1``): the one-node command (``python -m training.sft ...``, or ``accelerate
  launch`` over the node's GPUs, exactly as a local launch builds it) runs in the batch step, or
  in ``srun --container-image=...`` when a Pyxis image is set;
- N nodes: ``srun`` starts one task per training node and each task runs ``accelerate launch
  --num_machines N --num_processes N*P --machine_rank $SLURM_PROCID --main_process_ip <first
  host> --main_process_port <port> --rdzv_backend c10d``: these flags override the
  single-machine settings of the accelerate YAML, and torch's c10d rendezvous on the first host
  joins the nodes;
- ``vllm_nodes=1`` (GRPO, N >= 2): the last node runs TRL's vLLM server (``trl vllm-serve``,
  tensor parallel over that node's GPUs) and the other nodes train (one training node runs the
  one-node command under ``srun``) with ``use_vllm=true vllm_mode=server
  vllm_server_base_url=http://<last host>:<vllm_port>``; TRL waits for the server
  (``vllm_server_timeout``), and the server step is stopped once training ends.

Every ``srun`` says ``--export=ALL`` (steps see the script's exports even under ``sbatch
--export=NONE``) and repeats ``--cpus-per-task`` and ``--gpus-per-node`` (srun does not take
``--cpus-per-task`` from the job on every Slurm release).

Time limit: ``--signal=B:USR1@<signal_before_s>`` makes Slurm signal the batch shell that long
before the limit. The script traps it (an untrapped USR1 would end the job at once), writes a
line to the job's log and forwards the signal to the training step (``weft_train_pid``; srun
passes it on to its tasks). weft's training scripts save a checkpoint at the end of the step
they are in when it arrives (``training.callbacks.SaveOnSignal``), so the run can resume from
there (``resume: true``). Under ``accelerate launch`` with several processes the signal reaches
the launcher, which is not known to pass it on: there the last ``save_steps`` checkpoint is
what survives.

Not guaranteed: that the interpreter, the project root and ``WEFT_HOME`` are on a filesystem
every node mounts at the same path, that a container image has weft installed, or that the
cluster grants the resources asked for (sbatch refuses an impossible request at submission).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

SIGNAL_BEFORE_S = 300
MAIN_PROCESS_PORT = 29500
VLLM_PORT = 8000
JOB_NAME = "weft-train"
_MEM = re.compile(r"^[0-9]+[KMGT]?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_UNLIMITED = ("UNLIMITED", "INFINITE")


def time_limit_seconds(value: str) -> int | None:
    """Seconds in a Slurm time string (``--time``): ``minutes``, ``minutes:seconds``,
    ``hours:minutes:seconds``, ``days-hours``, ``days-hours:minutes`` or
    ``days-hours:minutes:seconds``; None for ``UNLIMITED``/``INFINITE``. Raises ValueError
    naming the accepted forms otherwise."""
    text = str(value).strip()
    if text.upper() in _UNLIMITED:
        return None
    forms = ("time_limit must be a Slurm time: minutes, minutes:seconds, hours:minutes:seconds, "
             "days-hours, days-hours:minutes or days-hours:minutes:seconds (e.g. '04:00:00', "
             f"'1-12'), got {value!r}")
    days_text, dash, rest = text.partition("-")
    if not dash:
        days_text, rest = "0", text
    parts = rest.split(":")
    if not days_text.isdigit() or not all(p.isdigit() for p in parts) or len(parts) > 3:
        raise ValueError(forms)
    numbers = [int(p) for p in parts]
    if dash:  # days-hours[:minutes[:seconds]]
        hours, minutes, seconds = (numbers + [0, 0])[:3]
    elif len(numbers) == 1:
        hours, minutes, seconds = 0, numbers[0], 0
    elif len(numbers) == 2:
        hours, minutes, seconds = 0, numbers[0], numbers[1]
    else:
        hours, minutes, seconds = numbers
    return ((int(days_text) * 24 + hours) * 60 + minutes) * 60 + seconds


@dataclass(frozen=True)
class SlurmSettings:
    """Where and how a training job runs; fields named after sbatch's flags.

    ``python`` (the interpreter with weft installed), ``workdir`` (the project root) and
    ``weft_home`` (checkpoints, warehouse, Pipes files) must be absolute paths that every node
    sees. Empty strings and zeros leave a flag out (the cluster's defaults apply).
    ``sbatch_args`` are extra ``#SBATCH`` flags (``--exclusive``, ``--gres=gpu:a100:4``, ...);
    ``setup`` are shell lines run before training (``module load cuda/12.4``, ``source ...``).
    ``container_image``/``container_mounts`` run the steps under Pyxis (``srun
    --container-image``). ``vllm_nodes=1`` keeps the last node for TRL's vLLM server (GRPO)."""

    python: str
    workdir: str
    weft_home: str
    partition: str = ""
    account: str = ""
    qos: str = ""
    time_limit: str = ""
    nodes: int = 1
    gpus_per_node: int = 0
    cpus_per_task: int = 0
    mem: str = ""
    constraint: str = ""
    job_name: str = JOB_NAME
    sbatch_args: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    container_image: str = ""
    container_mounts: tuple[str, ...] = ()
    signal_before_s: int = SIGNAL_BEFORE_S
    main_process_port: int = MAIN_PROCESS_PORT
    vllm_nodes: int = 0
    vllm_port: int = VLLM_PORT

    def __post_init__(self) -> None:
        for name in ("python", "workdir", "weft_home"):
            value = getattr(self, name)
            if not value or not PurePosixPath(value).is_absolute():
                raise ValueError(f"{name} must be an absolute path on the filesystem every node "
                                 f"mounts (e.g. /shared/weft/.venv/bin/python for python), got "
                                 f"{value!r}")
        texts = [self.python, self.workdir, self.weft_home, self.partition, self.account,
                 self.qos, self.time_limit, self.mem, self.constraint, self.job_name,
                 self.container_image, *self.sbatch_args, *self.setup, *self.container_mounts,
                 *self.env, *self.env.values()]
        if any("\n" in str(t) or "\r" in str(t) for t in texts):
            raise ValueError("Slurm settings must not contain line breaks; give several setup "
                             "lines as a list")
        if self.nodes < 1:
            raise ValueError(f"nodes must be >= 1, got {self.nodes}")
        if self.gpus_per_node < 0 or self.cpus_per_task < 0:
            raise ValueError("gpus_per_node and cpus_per_task must be >= 0 (0 leaves the flag out)")
        if self.time_limit:
            time_limit_seconds(self.time_limit)
        if self.mem and not _MEM.match(self.mem):
            raise ValueError(f"mem must be an sbatch --mem value such as 64G or 500000 "
                             f"(megabytes), got {self.mem!r}")
        for arg in self.sbatch_args:
            if not arg.startswith("-"):
                raise ValueError(f"each sbatch_args item is one sbatch flag such as "
                                 f"'--exclusive' or '--gres=gpu:4', got {arg!r}")
        if self.signal_before_s < 0:
            raise ValueError(f"signal_before_s must be >= 0 (0: no signal), got "
                             f"{self.signal_before_s}")
        for name in ("main_process_port", "vllm_port"):
            if not 0 < getattr(self, name) < 65536:
                raise ValueError(f"{name} must be a TCP port, got {getattr(self, name)}")
        if self.vllm_nodes not in (0, 1):
            raise ValueError(f"vllm_nodes must be 0 or 1 (one node serves, tensor parallel over "
                             f"its GPUs), got {self.vllm_nodes}")
        if self.vllm_nodes and self.nodes < 2:
            raise ValueError("vllm_nodes=1 needs nodes >= 2 (one node serves, the others train); "
                             "on one node, keep GPUs for the server with vllm_gpus instead")
        if self.vllm_nodes and self.gpus_per_node < 1:
            raise ValueError("vllm_nodes=1 needs gpus_per_node >= 1: TRL's vLLM server mode "
                             "syncs weights over NCCL, which needs CUDA devices")
        if self.container_mounts and not self.container_image:
            raise ValueError("container_mounts needs container_image (Pyxis mounts are for a "
                             "container)")
        bad = [k for k in self.env if not _ENV_NAME.match(k)]
        if bad:
            raise ValueError(f"environment variable names must be shell identifiers, got {bad}")

    @property
    def training_nodes(self) -> int:
        return self.nodes - self.vllm_nodes

    @property
    def trl(self) -> str:
        """TRL's command, installed next to the interpreter (``trl vllm-serve``)."""
        return str(PurePosixPath(self.python).with_name("trl"))


@dataclass(frozen=True)
class TrainingLaunch:
    """What the job runs: ``python -m <module> <args>``. ``one_node`` is the full command of a
    one-node job (the one a local launch would run); ``processes_per_node`` (one per training
    GPU) and ``accelerate_config`` (a YAML path, or '' for ``--multi_gpu``) shape the
    multi-node ``accelerate launch``; ``vllm_model`` is the model a vLLM node serves."""

    module: str
    args: tuple[str, ...]
    one_node: tuple[str, ...]
    processes_per_node: int = 1
    accelerate_config: str = ""
    vllm_model: str = ""

    def __post_init__(self) -> None:
        if not self.module or not self.one_node:
            raise ValueError("a training launch needs a module and its one-node command")
        if self.processes_per_node < 1:
            raise ValueError(f"processes_per_node must be >= 1, got {self.processes_per_node}")


def sbatch_directives(settings: SlurmSettings) -> list[str]:
    """The ``#SBATCH`` lines: sbatch's flags from the settings, then ``sbatch_args``."""
    flags = [f"--job-name={settings.job_name}", f"--nodes={settings.nodes}",
             "--ntasks-per-node=1"]
    for name, flag in (("partition", "partition"), ("account", "account"), ("qos", "qos"),
                       ("time_limit", "time"), ("mem", "mem"), ("constraint", "constraint")):
        value = getattr(settings, name)
        if value:
            flags.append(f"--{flag}={value}")
    if settings.gpus_per_node:
        flags.append(f"--gpus-per-node={settings.gpus_per_node}")
    if settings.cpus_per_task:
        flags.append(f"--cpus-per-task={settings.cpus_per_task}")
    if settings.signal_before_s:
        flags.append(f"--signal=B:USR1@{settings.signal_before_s}")
    return [f"#SBATCH {flag}" for flag in (*flags, *settings.sbatch_args)]


def _srun(settings: SlurmSettings, *flags: str) -> list[str]:
    out = ["srun", "--export=ALL", *flags]
    if settings.gpus_per_node:
        out.append(f"--gpus-per-node={settings.gpus_per_node}")
    if settings.cpus_per_task:
        out.append(f"--cpus-per-task={settings.cpus_per_task}")
    if settings.container_image:
        out += [f"--container-image={settings.container_image}",
                f"--container-workdir={settings.workdir}"]
        if settings.container_mounts:
            out.append("--container-mounts=" + ",".join(settings.container_mounts))
    return out


class Raw(str):
    """A shell word written as given (it expands variables), never quoted."""


def _word(word: str | tuple[str, ...]) -> str:
    if isinstance(word, tuple):  # a flag and its value: kept on one line
        return " ".join(map(_word, word))
    return word if isinstance(word, Raw) else shlex.quote(word)


def pairs(words: Sequence[str]) -> list[str | tuple[str, ...]]:
    """Words with each option kept beside its value (``--recipe R``, ``-m module``) for
    :func:`_line`."""
    out: list[str | tuple[str, ...]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("-") and "=" not in word and i + 1 < len(words) \
                and not words[i + 1].startswith("-"):
            out.append((word, words[i + 1]))
            i += 2
        else:
            out.append(word)
            i += 1
    return out


def _line(words: Sequence[str | tuple[str, ...]], indent: str = "    ", width: int = 96) -> str:
    """Shell words (quoted unless :class:`Raw`; a tuple stays on one line), broken into
    readable continuation lines."""
    lines, current = [], ""
    for word in map(_word, words):
        if current and len(current) + len(word) > width:
            lines.append(current)
            current = indent + word
        else:
            current = f"{current} {word}" if current else word
    lines.append(current)
    return " \\\n".join(lines)


def accelerate_multinode(settings: SlurmSettings,
                         launch: TrainingLaunch) -> list[str | tuple[str, ...]]:
    """The words after the interpreter that each training node's task runs: ``accelerate
    launch`` with the multi-node flags; ``$SLURM_PROCID``, ``$WEFT_MAIN_HOST`` and
    ``$WEFT_MAIN_PORT`` are :class:`Raw`, expanded by the task's own shell. The first node's
    task hosts the c10d store (``is_host``), whatever the node names resolve to."""
    machines = settings.training_nodes
    config = (("--config_file", launch.accelerate_config) if launch.accelerate_config
              else "--multi_gpu")
    return [("-m", "accelerate.commands.launch"), config,
            ("--num_machines", str(machines)),
            ("--num_processes", str(machines * launch.processes_per_node)),
            ("--machine_rank", Raw('"$SLURM_PROCID"')),
            ("--main_process_ip", Raw('"$WEFT_MAIN_HOST"')),
            ("--main_process_port", Raw('"$WEFT_MAIN_PORT"')),
            ("--rdzv_backend", "c10d"),
            ("--rdzv_conf", Raw('"is_host=$((SLURM_PROCID == 0))"')), ("-m", launch.module)]


WAIT_FUNCTIONS = """\
weft_on_usr1() {
    echo "weft: Slurm sent USR1: the time limit is ${WEFT_SIGNAL_BEFORE_S}s away;" \\
        "asking the training step to save a checkpoint at the end of its current step"
    [ -n "${weft_train_pid:-}" ] && kill -USR1 "$weft_train_pid" 2>/dev/null
}
weft_wait() {  # wait for a background step across trapped signals; return its status
    local pid=$1 status
    while true; do
        wait "$pid"
        status=$?
        kill -0 "$pid" 2>/dev/null || return "$status"
    done
}"""


def launch_lines(settings: SlurmSettings, launch: TrainingLaunch) -> list[str]:
    """The shell lines that start training (and the vLLM node) and exit with its status."""
    if settings.nodes == 1:
        words = ([*_srun(settings, "--nodes=1", "--ntasks=1"), *pairs(launch.one_node)]
                 if settings.container_image else pairs(launch.one_node))
        return [_line(words) + " &", "weft_train_pid=$!", "weft_wait $weft_train_pid",
                "exit $?"]
    trainers = settings.training_nodes
    lines = ['mapfile -t weft_hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")']
    if trainers > 1:
        lines += ['export WEFT_MAIN_HOST="${weft_hosts[0]}"',
                  f"export WEFT_MAIN_PORT={settings.main_process_port}"]
    train_flags = [f"--nodes={trainers}", f"--ntasks={trainers}", "--ntasks-per-node=1"]
    server_args: list[str] = []
    if settings.vllm_nodes:
        if not launch.vllm_model:
            raise ValueError("a vLLM node needs the model the run starts from: give "
                             "model_name_or_path=<folder on the shared filesystem> or set it in "
                             "the recipe")
        lines += [f'export WEFT_VLLM_HOST="${{weft_hosts[{trainers}]}}"',
                  f'weft_train_hosts=$(IFS=,; echo "${{weft_hosts[*]:0:{trainers}}}")']
        serve = [*_srun(settings, "--nodes=1", "--ntasks=1", Raw('--nodelist="$WEFT_VLLM_HOST"')),
                 settings.trl, "vllm-serve", ("--model", launch.vllm_model),
                 ("--host", "0.0.0.0"), ("--port", str(settings.vllm_port)),
                 ("--tensor-parallel-size", str(settings.gpus_per_node))]
        lines += [_line(serve) + " &", "weft_vllm_pid=$!"]
        train_flags.append(Raw('--nodelist="$weft_train_hosts"'))
        server_args = ["use_vllm=true", "vllm_mode=server",
                       Raw(f'"vllm_server_base_url=http://${{WEFT_VLLM_HOST}}:{settings.vllm_port}"')]
    if trainers == 1:  # one training node beside the vLLM node: the one-node command
        train = [*_srun(settings, *train_flags), *pairs(launch.one_node), *server_args]
    else:  # the task's own shell reads the body (its backslash-newlines continue the line)
        body = _line([Raw('exec "$WEFT_PYTHON"'), *accelerate_multinode(settings, launch),
                      Raw('"$@"')], indent="        ", width=80)
        train = [*_srun(settings, *train_flags), "bash", "-c", body, "weft-train",
                 *pairs(launch.args), *server_args]
    lines += [_line(train) + " &", "weft_train_pid=$!", "weft_wait $weft_train_pid",
              "weft_status=$?"]
    if settings.vllm_nodes:
        lines += ['kill "$weft_vllm_pid" 2>/dev/null', 'wait "$weft_vllm_pid" 2>/dev/null']
    lines.append('exit "$weft_status"')
    return lines


def batch_script(settings: SlurmSettings, launch: TrainingLaunch,
                 env: Mapping[str, str] | None = None) -> str:
    """The sbatch script: directives, working directory, exports (``WEFT_HOME``, the settings'
    ``env``, then ``env``: e.g. the Dagster Pipes bootstrap variables), setup lines, the USR1
    trap and the launch. A failing setup line fails the job before training starts."""
    extra = dict(env or {})
    bad = [k for k in extra if not _ENV_NAME.match(k)]
    if bad:
        raise ValueError(f"environment variable names must be shell identifiers, got {bad}")
    exports = {"WEFT_HOME": settings.weft_home, "PYTHONUNBUFFERED": "1",
               "WEFT_PYTHON": settings.python,
               "WEFT_SIGNAL_BEFORE_S": str(settings.signal_before_s),
               **settings.env, **extra}
    layout = (f"{settings.nodes} nodes" if settings.nodes > 1 else "one node") + (
        ", the last one serving vLLM" if settings.vllm_nodes else "")
    lines = ["#!/bin/bash",
             f"# weft training job ({layout}): python -m {launch.module} "
             + " ".join(shlex.quote(a) for a in launch.args[:2]),
             *sbatch_directives(settings),
             "set -eo pipefail",
             f"cd {shlex.quote(settings.workdir)}",
             *(f"export {k}={shlex.quote(str(v))}" for k, v in exports.items())]
    if settings.setup:
        lines += ["# setup", *settings.setup]
    lines += ["set +e", WAIT_FUNCTIONS, "trap weft_on_usr1 USR1",
              *launch_lines(settings, launch)]
    return "\n".join(lines) + "\n"
