"""The one Dagster instance of a weft home, and the `weft` command that runs against it.

``ensure_dagster_home`` prepares ``DAGSTER_HOME`` (default ``WEFT_HOME/dagster``): telemetry off,
run monitoring on, the first-run modal dismissed, and weft's own loggers
(``pipelines.progress.WEFT_LOGGERS``) captured into every run's log at INFO
(``python_logs.managed_python_loggers``), so progress lines of long steps show in the UI. `make ui`,
`make demo` and the `weft` command all use it, so a run started from the shell is listed in the
UI. ``weft`` wraps Dagster's CLI with that environment and checks what weft can check first:

    weft materialize --select eval_samples,eval_scores --partition 'gsm8k|smollm2-135m-instruct'
    weft job ingest_job              # a job of the code location, on the shared instance
    weft add-model-partition MODEL   # the `model` partition of a registered model
    weft ui [--port 3000]            # dagster dev, after checking that the port is free
    weft home                        # prepare DAGSTER_HOME and print it
    weft dagster ARGS...             # any other dagster command on the shared instance

Evaluation partitions are keyed ``benchmark|model`` (Dagster writes a two-dimensional key as its
dimension values joined by ``|``, in dimension-name order); ``parse_eval_partition`` explains a
malformed or unknown key. ``weft materialize`` checks the key of every partitioned asset it is
given (``check_partition``: static keys such as ``ep_episodes``' ``assistant.ep`` or
``mosaic_trajectories``' ``gsm8k`` against their lists) before Dagster starts.

``weft materialize`` and ``weft job`` run in a child process, ``python -m cli.launcher``
(:mod:`cli.launcher`), which creates the run from the code location's job (the implicit asset
job ``__ASSET_JOB`` for ``--select``), so the UI can re-execute it, and executes it there; the
run config is every ``-c`` file then ``--config-json``, merged (:func:`run_config_of`). Both
end with what happened (:func:`run_summary`: each run's id and status, what it materialized
with row counts, its UI page and a SQL line for its ``runs`` rows). Stopping ``weft`` (Ctrl-C, SIGTERM) is a first-class outcome: the run is marked
as canceling, the child is interrupted so each step writes its calls and a ``canceled``
``runs`` row, and the child with everything it started is stopped (:func:`_stop_child`); the
exit status is 128 + the signal. Not guaranteed: a port can be taken between the check and
``dagster dev`` binding it.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipelines.settings import weft_home

ENV_MAX_RUN_SECONDS = "WEFT_MAX_RUN_SECONDS"
DEFINITIONS_MODULE = "assets.definitions"
DEFAULT_UI_PORT = 3000


class WeftUsageError(ValueError):
    """A mistake in what the user asked for; the message says what to do instead."""


# ------------------------------------------------------------------------------- the instance


def run_monitoring_settings() -> dict:
    """Dagster run monitoring (keys checked against dagster 1.13's instance schema), run by the
    daemon that `dagster dev` starts: runs stuck starting or cancelling are failed after 3
    minutes. The default run launcher cannot probe a run worker's health, so a killed run is
    marked failed when it passes ``max_runtime_seconds`` (default 6 h; override with
    WEFT_MAX_RUN_SECONDS, or per run with the tag ``dagster/max_runtime_seconds``)."""
    max_runtime = int(os.environ.get(ENV_MAX_RUN_SECONDS) or 6 * 3600)
    if max_runtime < 1:
        raise ValueError(f"{ENV_MAX_RUN_SECONDS} must be a positive number of seconds, "
                         f"got {max_runtime}")
    return {"enabled": True, "start_timeout_seconds": 180, "cancel_timeout_seconds": 180,
            "max_runtime_seconds": max_runtime, "poll_interval_seconds": 30}


def python_logs_settings() -> dict:
    """Capture weft's own loggers into the Dagster run log at INFO (dagster.yaml
    ``python_logs``; keys checked against dagster 1.13's instance schema)."""
    from pipelines.progress import WEFT_LOGGERS

    return {"managed_python_loggers": list(WEFT_LOGGERS), "python_log_level": "INFO"}


def dagster_home() -> Path:
    """``DAGSTER_HOME`` when set, else ``WEFT_HOME/dagster`` (what `make ui` uses)."""
    return Path(os.environ.get("DAGSTER_HOME") or weft_home() / "dagster").absolute()


def ensure_dagster_home() -> Path:
    """A persistent DAGSTER_HOME under WEFT_HOME (telemetry off, run monitoring on, weft's
    loggers captured, first-run modal dismissed), exported as ``DAGSTER_HOME``. An existing
    dagster.yaml keeps its settings and gains the missing ones."""
    import yaml

    home = dagster_home()
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "dagster.yaml"
    settings = (yaml.safe_load(cfg.read_text()) if cfg.exists() else None) or {}
    if not isinstance(settings, dict):
        raise TypeError(f"{cfg} is not a YAML mapping; fix or remove it (weft recreates it)")
    defaults = {"telemetry": {"enabled": False}, "run_monitoring": run_monitoring_settings(),
                "python_logs": python_logs_settings()}
    missing = [key for key in defaults if key not in settings]
    if missing:
        for key in missing:
            settings[key] = defaults[key]
        cfg.write_text(yaml.safe_dump(settings, sort_keys=False))
    nux = home / ".nux" / "nux.yaml"
    nux.parent.mkdir(exist_ok=True)
    if not nux.exists():
        nux.write_text("seen: 1\n")
    os.environ["DAGSTER_HOME"] = str(home)
    return home


# --------------------------------------------------------------------------- partition keys


def _did_you_mean(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    return f" Did you mean {' or '.join(close)}?" if close else ""


def parse_eval_partition(key: str, registered: list[str] | None = None) -> tuple[str, str]:
    """(benchmark, model) of an evaluation partition key ``benchmark|model``; WeftUsageError
    saying what is wrong and how to fix it otherwise. With ``registered`` (model ids of the
    registry) the model must be one of them."""
    from eval.benchmarks import BENCHMARKS
    from eval.models import MODEL_ID_RE

    example = "e.g. 'gsm8k|smollm2-135m-instruct' (quote it: | is a pipe in the shell)"
    parts = key.split("|") if isinstance(key, str) else []
    if len(parts) != 2 or not all(p.strip() for p in parts):
        raise WeftUsageError(f"evaluation partition key {key!r} is not 'benchmark|model', "
                             f"{example}")
    benchmark, model = (p.strip() for p in parts)
    if benchmark not in BENCHMARKS:
        if model in BENCHMARKS:
            raise WeftUsageError(f"partition key {key!r} has its parts swapped: the benchmark "
                                 f"comes first, '{model}|{benchmark}'")
        raise WeftUsageError(f"unknown benchmark {benchmark!r} in partition key {key!r}."
                             f"{_did_you_mean(benchmark, sorted(BENCHMARKS))} "
                             f"Benchmarks: {', '.join(sorted(BENCHMARKS))}")
    if not MODEL_ID_RE.match(model):
        raise WeftUsageError(f"model id {model!r} in partition key {key!r} must be 1-128 letters, "
                             "digits, '.', '_', ':' or '-'")
    if registered is not None and model not in registered:
        raise WeftUsageError(
            f"model {model!r} is not registered.{_did_you_mean(model, registered)} Registered: "
            f"{', '.join(registered) or 'none'}. Register it first: `python -m eval.models add "
            "--id ID --base-url URL --served-model NAME` (an endpoint) or `--path FOLDER`")
    return benchmark, model


def add_model_partition(instance, model_id: str, registered: list[str]) -> bool:
    """Add ``model_id`` to the instance's `models` partitions (True if it was new)."""
    from assets.partition_defs import model_partitions

    if model_id not in registered:
        raise WeftUsageError(
            f"model {model_id!r} is not registered.{_did_you_mean(model_id, registered)} "
            "Register it with `python -m eval.models add ...` (the models sensor then adds "
            "its partition by itself)")
    if instance.has_dynamic_partition(model_partitions.name, model_id):
        return False
    instance.add_dynamic_partitions(model_partitions.name, [model_id])
    return True


def _registered_models() -> list[str]:
    from eval.models import list_models

    return [spec.model_id for spec in list_models()]


def selected_partitioning(select: str, asset_graph=None) -> dict[str, object]:
    """{asset name: its PartitionsDefinition or None} of every asset the selection names
    (resolved as ``dagster asset materialize`` resolves it: comma-separated, ``*``/``+``,
    ``group:``...) against weft's definitions (or ``asset_graph``); WeftUsageError for names
    no asset has."""
    import dagster as dg
    from dagster._core.errors import DagsterInvalidSubsetError

    if asset_graph is None:
        from assets.definitions import defs

        asset_graph = defs.resolve_asset_graph()
    parts = [p.strip() for p in select.split(",") if p.strip()]
    if not parts:
        raise WeftUsageError("--select is empty; name assets, e.g. --select problems")
    try:
        keys = dg.AssetSelection.from_coercible(parts).resolve(asset_graph)
    except DagsterInvalidSubsetError as err:
        raise WeftUsageError(f"--select {select!r}: {str(err).splitlines()[0]} "
                             + " ".join(str(err).splitlines()[1:]).strip()) from err
    return {key.to_user_string(): asset_graph.get(key).partitions_def for key in sorted(keys)}


def _key_list(keys: list[str], limit: int = 12) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f", ... ({len(keys)} in all)" if len(keys) > limit else "")


def check_partition(select: str, partition: str | None, instance=None,
                    registered: list[str] | None = None, asset_graph=None) -> str | None:
    """Check ``partition`` against the partitions of the assets ``select`` names, before
    Dagster runs; WeftUsageError saying what is wrong and what to do. Returns the model id to
    add as a ``models`` partition for an evaluation key (``benchmark|model`` with a registered
    model), else None. Rules: a key only for partitioned assets; a key required when any
    selected asset is partitioned; all partitioned assets of one run share one partitioning
    (as Dagster requires); a static key must be one of the listed keys, a dynamic one must
    exist in the instance, a two-dimensional one is checked by :func:`parse_eval_partition`."""
    import dagster as dg

    by_asset = selected_partitioning(select, asset_graph)
    partitioned = {name: pdef for name, pdef in by_asset.items() if pdef is not None}
    if not partitioned:
        if partition is not None:
            raise WeftUsageError(f"{_key_list(sorted(by_asset))} "
                                 f"{'is' if len(by_asset) == 1 else 'are'} not partitioned: "
                                 "drop --partition")
        return None
    kinds = {id(p): p for p in partitioned.values()}
    if len(kinds) > 1:
        groups = [", ".join(n for n, p in partitioned.items() if p is pdef)
                  for pdef in kinds.values()]
        raise WeftUsageError("the selected assets are partitioned differently (" + "; ".join(
            groups) + "): materialize each group in a command of its own")
    pdef = next(iter(kinds.values()))
    names = ", ".join(partitioned)
    if isinstance(pdef, dg.MultiPartitionsDefinition):
        if partition is None:
            raise WeftUsageError(f"{names} {'is' if len(partitioned) == 1 else 'are'} "
                                 "partitioned: add --partition 'benchmark|model', e.g. "
                                 "--partition 'gsm8k|smollm2-135m-instruct'")
        registered = _registered_models() if registered is None else registered
        return parse_eval_partition(partition, registered)[1]
    if isinstance(pdef, dg.DynamicPartitionsDefinition):
        if instance is None:
            ensure_dagster_home()
            with dg.DagsterInstance.get() as own:
                valid = sorted(own.get_dynamic_partitions(pdef.name))
        else:
            valid = sorted(instance.get_dynamic_partitions(pdef.name))
        what = f"one of the instance's `{pdef.name}` partitions"
    else:
        valid = list(pdef.get_partition_keys())
        what = "one of its partition keys"
    if partition is None:
        raise WeftUsageError(f"{names} {'is' if len(partitioned) == 1 else 'are'} partitioned: "
                             f"add --partition KEY, {what}: {_key_list(valid) or 'none yet'}")
    if partition not in valid:
        raise WeftUsageError(f"partition {partition!r} is not {what} for {names}."
                             f"{_did_you_mean(partition, valid)} Valid keys: "
                             f"{_key_list(valid) or 'none yet'}")
    return None


# ------------------------------------------------------------------------------------ the UI


def port_problem(host: str, port: int) -> str | None:
    """Why ``dagster dev`` could not serve on host:port (something listens there already), or
    None when the port is free."""
    if not 0 < port < 65536:
        return f"port {port} is not a TCP port (1-65535)"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        listening = probe.connect_ex((host, port)) == 0
    if not listening:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError as err:
                return f"port {port} on {host} cannot be bound ({err.strerror})"
        return None
    what = "another program"
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/server_info", timeout=2) as resp:
            if b"dagster" in resp.read(4096).lower():
                what = "a Dagster UI (probably an earlier `make ui`)"
    except (OSError, ValueError):
        pass
    return (f"port {port} on {host} is already in use by {what}. Open http://{host}:{port} if "
            f"it is weft's UI, stop the other process first, or use another port: "
            f"`make ui UI_PORT={port + 1}` / `weft ui --port {port + 1}`")


# ------------------------------------------------------------------------------- the command


def _dagster_bin() -> str:
    local = Path(sys.executable).with_name("dagster")
    found = str(local) if local.exists() else shutil.which("dagster")
    if not found:
        raise WeftUsageError("the `dagster` command is not installed in this environment; "
                             "run `make setup` (or `pip install -e .`) first")
    return found


STOP_GRACE_S = 60.0  # how long a stopped run gets to record itself before it is killed
ENV_STOP_GRACE = "WEFT_STOP_GRACE_S"  # overrides STOP_GRACE_S


def stop_grace_s() -> float:
    raw = os.environ.get(ENV_STOP_GRACE, "").strip()
    try:
        return float(raw) if raw else STOP_GRACE_S
    except ValueError:
        raise WeftUsageError(f"{ENV_STOP_GRACE}={raw!r} must be a number of seconds") from None


def _stop_child(child: subprocess.Popen, since: float | None = None,
                grace: float | None = None) -> None:
    """Stop the child (the run's process) and everything it started (its own session: the
    run's step processes, a local model server) when it has not ended ``grace`` seconds after
    it was interrupted at ``since`` (monotonic clock; None: now, without waiting): SIGTERM to
    the whole session, then SIGKILL 10 s later; once the child has ended, anything it left in its
    session is sent SIGTERM. Call it outside a signal handler: ``Popen.poll`` cannot reap the
    child while the interrupted ``wait`` holds its lock."""
    import signal
    import time

    grace = stop_grace_s() if grace is None else grace
    since = time.monotonic() - grace if since is None else since
    for sig, after in ((signal.SIGTERM, grace), (signal.SIGKILL, grace + 10.0)):
        while child.poll() is None and time.monotonic() - since < after:
            time.sleep(0.2)
        if child.poll() is not None:
            break
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            break
    deadline = time.monotonic() + 5.0
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    try:  # anything the run left behind in its session (e.g. a model server) goes too
        os.killpg(child.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass


def _run_dagster(args: list[str], summarize: bool = False) -> int:
    """Run a ``dagster`` command on weft's instance (:func:`_run_child`)."""
    return _run_child([_dagster_bin(), *args], summarize=summarize)


def _launch_command(*args: str) -> list[str]:
    """The child ``weft job`` / ``weft materialize`` run: ``python -m cli.launcher`` (creates
    the run from the code location's job, so the UI can re-execute it, and executes it)."""
    return [sys.executable, "-m", "cli.launcher", *args]


def _run_child(command: list[str], summarize: bool = False,
               child_summarizes: bool = False) -> int:
    """Run ``command`` (a run's process: ``python -m cli.launcher`` or ``dagster``) on weft's
    instance. The child gets a session of its own, so stopping ``weft`` (Ctrl-C, SIGTERM)
    stops it and whatever it started instead of leaving it running: the run is marked
    canceling, the child gets SIGINT (Dagster forwards it to its steps as an interrupt, so each
    writes what it has and a ``canceled`` ``runs`` row), and :func:`_stop_child` ends what is
    still there after :data:`STOP_GRACE_S` (or ``WEFT_STOP_GRACE_S``). With ``summarize``, the
    runs it made are summarized after, here, unless ``child_summarizes`` and the child ended
    with 0, 1 or 130 (``python -m cli.launcher --summary`` prints its run's summary itself
    when the run ends, stopped or not, which saves this process importing Dagster: about a
    second of every ``weft job``); a child killed before it could is summarized here."""
    import signal
    import time

    env = dict(os.environ, DAGSTER_HOME=str(ensure_dagster_home()))
    print(f"[weft] DAGSTER_HOME={env['DAGSTER_HOME']} (the instance `make ui` shows)",
          file=sys.stderr, flush=True)
    started = time.time()
    child = subprocess.Popen(command, env=env, start_new_session=True)
    stopped: list[tuple[int, float]] = []

    def stop(signum, _frame):  # quick and non-blocking: the waiting happens below
        name = signal.Signals(signum).name
        if not stopped:
            print(f"[weft] stopping the run ({name}); what it has computed is kept and its "
                  "runs row says canceled", file=sys.stderr, flush=True)
            mark_canceling(started, f"weft received {name}")
            try:
                os.kill(child.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        stopped.append((signum, time.monotonic()))

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            try:
                rc = child.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                if stopped:
                    _stop_child(child, since=stopped[0][1])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _stop_child(child, since=stopped[0][1] if stopped else None)
    if summarize and not (child_summarizes and rc in (0, 1, 130)):
        print_run_summary(started)
    if stopped:
        return 128 + stopped[0][0]
    return rc


def _runs_since(instance, since: float) -> list:
    """The runs created after ``since`` (epoch seconds), newest first."""
    records = instance.get_run_records(limit=50)  # newest first
    return [r.dagster_run for r in records if r.create_timestamp.timestamp() >= since - 1]


def mark_canceling(since: float, reason: str) -> None:
    """Mark the unfinished runs created after ``since`` as CANCELING (a user's termination
    request), so the interrupt that follows ends them CANCELED rather than FAILURE."""
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        for run in _runs_since(instance, since):
            if not run.is_finished and run.status != dg.DagsterRunStatus.CANCELING:
                instance.report_run_canceling(run, message=reason)


def run_summary(instance, since: float) -> list[str]:
    """Lines saying what the runs created after ``since`` (epoch seconds) did
    (:func:`runs_summary`), oldest first."""
    return runs_summary(instance, list(reversed(_runs_since(instance, since))))


def runs_summary(instance, runs) -> list[str]:
    """Lines saying what ``runs`` did: run id, job, status, each materialization (asset,
    partition, rows where the asset reports them) and where to look (the run's UI page, a SQL
    line for the warehouse)."""
    import dagster as dg

    lines: list[str] = []
    for run in runs:
        lines.append(f"[weft] run {run.run_id} ({run.job_name}): {run.status.value}")
        records = instance.get_records_for_run(
            run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION, limit=1000).records
        for record in records:
            mat = record.event_log_entry.asset_materialization
            if mat is None:
                continue
            name = mat.asset_key.to_user_string()
            where = f" [{mat.partition}]" if mat.partition else ""
            rows = (mat.metadata.get("rows") or mat.metadata.get("dagster/row_count")
                    or mat.metadata.get("samples"))
            count = f": {rows.value} rows" if rows is not None else ""
            lines.append(f"[weft]   materialized {name}{where}{count}")
            scores = score_figures(mat.metadata)
            if scores:
                lines.append(f"[weft]     {scores}")
        if not records:
            lines.append("[weft]   nothing was materialized")
        url, running = ui_url()
        lines.append(f"[weft]   UI: {url}/runs/{run.run_id}"
                     + ("" if running else " (start it with `make ui`)"))
        lines.append("[weft]   SQL: python -m warehouse sql \"SELECT asset, partition, status, "
                     f"rows_written, error FROM runs WHERE run_id = '{run.run_id}'\"")
    return lines


SCORE_KEY = re.compile(r"^(avg|pass|maj)@\d+$")


def score_figures(metadata: Mapping[str, Any]) -> str:
    """An evaluation's scores from its materialization's metadata (``avg@k``, ``pass@k``,
    ``maj@k`` entries, as ``eval_scores`` reports them) as one line, "" when it has none."""
    found = [(key, meta.value) for key, meta in metadata.items()
             if SCORE_KEY.match(key) and isinstance(getattr(meta, "value", None), int | float)]
    return "scores: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(found)) if found else ""


UI_STATE = "weft-ui.json"  # under DAGSTER_HOME: where `weft ui` serves, while it runs


def ui_url() -> tuple[str, bool]:
    """(the URL of the UI `weft ui` / `make ui` is serving now, True), or (the default URL,
    False) when none is running."""
    import json

    try:
        state = json.loads((ensure_dagster_home() / UI_STATE).read_text())
        os.kill(int(state["pid"]), 0)
        return f"http://{state['host']}:{int(state['port'])}", True
    except (OSError, ValueError, KeyError, TypeError):
        return f"http://127.0.0.1:{DEFAULT_UI_PORT}", False


def print_run_summary(since: float) -> None:
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        for line in run_summary(instance, since):
            print(line, flush=True)


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``over``, mapping values merged key by key (``over`` wins)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def run_config_of(args: argparse.Namespace) -> dict:
    """The run config of ``weft materialize`` / ``weft job``: each ``-c`` YAML file in order,
    then ``--config-json``, merged key by key (a later value wins). WeftUsageError for a
    missing file, invalid YAML or JSON, or a document that is not a mapping."""
    import json

    import yaml

    config: dict = {}
    for path in args.config or []:
        if not Path(path).is_file():
            raise WeftUsageError(f"run config file {path} does not exist")
        try:
            loaded = yaml.safe_load(Path(path).read_text()) or {}
        except yaml.YAMLError as exc:
            raise WeftUsageError(f"run config file {path} is not valid YAML: {exc}") from None
        if not isinstance(loaded, dict):
            raise WeftUsageError(f"run config file {path} must hold a mapping (ops:, "
                                 f"resources:, ...), not {type(loaded).__name__}")
        config = deep_merge(config, loaded)
    if args.config_json:
        try:
            loaded = json.loads(args.config_json)
        except json.JSONDecodeError as exc:
            raise WeftUsageError(f"--config-json is not valid JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise WeftUsageError("--config-json must be a JSON object, e.g. "
                                 "'{\"ops\": {\"problems\": {\"config\": {}}}}'")
        config = deep_merge(config, loaded)
    return config


def _config_json_args(args: argparse.Namespace) -> list[str]:
    import json

    config = run_config_of(args)
    return ["--run-config-json", json.dumps(config)] if config else []


def materialize(args: argparse.Namespace) -> int:
    import dagster as dg

    model = check_partition(args.select, args.partition)  # before Dagster starts a run
    if model is not None:
        ensure_dagster_home()
        with dg.DagsterInstance.get() as instance:
            if add_model_partition(instance, model, _registered_models()):
                print(f"[weft] added model partition {model!r}", file=sys.stderr)
    extra = [] if args.partition is None else ["--partition", args.partition]
    config = _config_json_args(args)
    return _run_child(_launch_command("--select", args.select, *extra, *config, "--summary"),
                      summarize=True, child_summarizes=True)


def job(args: argparse.Namespace) -> int:
    extra = [] if args.partition is None else ["--partition", args.partition]
    config = _config_json_args(args)
    return _run_child(_launch_command("--job", args.name, *extra, *config, "--summary"),
                      summarize=True, child_summarizes=True)


def ui(host: str, port: int) -> int:
    problem = port_problem(host, port)
    if problem:
        raise WeftUsageError(problem)
    env = dict(os.environ, DAGSTER_HOME=str(ensure_dagster_home()))
    print(f"[weft] Dagster UI on http://{host}:{port} (DAGSTER_HOME={env['DAGSTER_HOME']})",
          flush=True)
    import json

    # exec keeps this pid: run summaries find the UI while this process lives
    (Path(env["DAGSTER_HOME"]) / UI_STATE).write_text(json.dumps(
        {"host": host, "port": port, "pid": os.getpid(), "loaded_at": time.time()}))
    dagster = _dagster_bin()
    import signal

    # A shell starts a background job (`make ui &`) with SIGINT ignored, an ignored signal
    # stays ignored across exec, and `dagster dev` turns SIGTERM into SIGINT's handling: so a
    # background UI ignored SIGTERM. Reset both to their defaults for the UI and its children.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    os.execve(dagster, [dagster, "dev", "-m", DEFINITIONS_MODULE, "-h", host, "-p", str(port)],
              env)
    return 0  # not reached


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="weft", description="Run Dagster commands on weft's instance (the one `make ui` "
                                 "shows: DAGSTER_HOME, default WEFT_HOME/dagster).")
    sub = parser.add_subparsers(dest="cmd", required=True)
    mat = sub.add_parser("materialize", help="materialize assets on weft's instance")
    mat.add_argument("--select", required=True, help="asset selection, e.g. 'problems' or "
                                                     "'eval_samples,eval_scores'")
    mat.add_argument("--partition", default=None,
                     help="partition key; evaluation assets: 'benchmark|model'")
    mat.add_argument("--config-json", default=None, help="run config as JSON")
    mat.add_argument("-c", "--config", action="append", help="run config YAML file(s)")
    job_p = sub.add_parser("job", help="run a job of weft's code location on weft's instance")
    job_p.add_argument("name", help="e.g. ingest_job")
    job_p.add_argument("--partition", default=None, help="partition key of a partitioned job")
    job_p.add_argument("--config-json", default=None, help="run config as JSON")
    job_p.add_argument("-c", "--config", action="append", help="run config YAML file(s)")
    part = sub.add_parser("add-model-partition", help="add a registered model's partition")
    part.add_argument("model_id")
    ui_p = sub.add_parser("ui", help="dagster dev on weft's instance, if the port is free")
    ui_p.add_argument("--host", default="127.0.0.1")
    ui_p.add_argument("--port", type=int, default=DEFAULT_UI_PORT)
    port = sub.add_parser("check-port", help="exit 1 with a message when the UI port is taken")
    port.add_argument("--host", default="127.0.0.1")
    port.add_argument("--port", type=int, default=DEFAULT_UI_PORT)
    sub.add_parser("home", help="prepare DAGSTER_HOME and print its path")
    raw = sub.add_parser("dagster", help="any dagster command on weft's instance")
    raw.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def reload_ui_for_benchmarks(client_factory: Any = None) -> str | None:
    """When a UI started by `weft ui` is serving and the benchmarks file changed after its code
    location last loaded, reload that location through the UI's GraphQL endpoint (the UI's
    **Reload**), so a benchmark just added to the file shows in the running UI; record the
    reload. Returns the line it printed (None when nothing was to do). A reload that fails
    says what to do by hand and changes nothing else."""
    import json

    from pipelines.ingest.benchmark_file import benchmark_file

    path = benchmark_file()
    state_path = ensure_dagster_home() / UI_STATE
    try:
        state = json.loads(state_path.read_text())
        os.kill(int(state["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if path is None or not path.is_file() or path.stat().st_mtime <= float(
            state.get("loaded_at") or 0):
        return None
    location = DEFINITIONS_MODULE  # `dagster dev -m MODULE` names its location MODULE
    try:
        if client_factory is None:
            from dagster_graphql import DagsterGraphQLClient

            client_factory = DagsterGraphQLClient
        info = client_factory(str(state["host"]), port_number=int(state["port"]))
        result = info.reload_repository_location(location)
        ok = getattr(getattr(result, "status", None), "name", str(result)) == "SUCCESS"
        why = getattr(result, "message", None) or getattr(result, "failure_type", None)
    except Exception as exc:  # noqa: BLE001 - any failure leaves the UI as it was
        ok, why = False, exc
    if not ok:
        line = (f"weft: {path} changed after the UI at http://{state['host']}:{state['port']} "
                f"loaded; reloading it failed ({why}): press Reload on the code location "
                f"{location!r} (Deployment) or restart `make ui` to see its benchmarks")
    else:
        state["loaded_at"] = time.time()
        state_path.write_text(json.dumps(state))
        line = (f"weft: {path} changed: reloaded the UI's code location {location!r} at "
                f"http://{state['host']}:{state['port']}, so its benchmarks show there")
    print(line, file=sys.stderr)
    return line


def benchmark_file_problems() -> int:
    """Print the configured benchmarks file's problems, one line each, and return 2; 0 when
    it has none (or there is no file)."""
    from pipelines.ingest import CONFIG_PROBLEMS

    for line in CONFIG_PROBLEMS:
        print(f"weft: {line}", file=sys.stderr)
    return 2 if CONFIG_PROBLEMS else 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.cmd not in ("home", "check-port") and benchmark_file_problems():
        return 2
    if args.cmd in ("materialize", "job", "add-model-partition"):
        reload_ui_for_benchmarks()
    try:
        if args.cmd == "materialize":
            return materialize(args)
        if args.cmd == "job":
            return job(args)
        if args.cmd == "add-model-partition":
            import dagster as dg

            ensure_dagster_home()
            with dg.DagsterInstance.get() as instance:
                new = add_model_partition(instance, args.model_id, _registered_models())
            print(f"{'added' if new else 'already present'}: model partition {args.model_id!r}")
            return 0
        if args.cmd == "ui":
            return ui(args.host, args.port)
        if args.cmd == "check-port":
            problem = port_problem(args.host, args.port)
            if problem:
                raise WeftUsageError(problem)
            return 0
        if args.cmd == "home":
            print(ensure_dagster_home())
            return 0
        return _run_dagster(args.args)
    except WeftUsageError as err:
        print(f"weft: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
