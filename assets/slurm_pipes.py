"""Dagster Pipes over Slurm: submit a batch script, take its reports, end with the job.

:class:`PipesSlurmClient` opens a Pipes session whose context and messages files live in
``WEFT_HOME/pipes/<run_id>/<step>/<n>/`` (Dagster's public ``PipesFileContextInjector`` and
``PipesFileMessageReader``; ``WEFT_HOME`` must be on the filesystem the compute nodes share).
It writes the batch script there (``job.sh``, built by the caller from the Pipes bootstrap
variables it must export), submits it with ``sbatch --output=<that folder>/slurm-<job id>.log``,
tags the run with the job id (``weft/slurm_job_ids``) and polls the job's state
(``pipelines.slurm.jobs``: scontrol, then sacct) until it ends:

- ``COMPLETED`` and the script closed its Pipes session: the completed invocation, whose results
  carry ``slurm_job_id``, ``slurm_state`` and ``slurm_log`` in their metadata;
- any other end (``FAILED``, ``TIMEOUT``, ``CANCELLED``, ``OUT_OF_MEMORY``, ``NODE_FAIL``, ...): a
  ``dg.Failure`` with the state, exit code and reason, and the tail of the job's log;
- ``COMPLETED`` but no closed Pipes session within ``report_grace_s``: a ``dg.Failure`` saying the
  script never reported (or never finished reporting), never a wait without end;
- still running ``time_limit`` + ``time_limit_grace_s`` after it started (Slurm enforces limits in
  whole minutes, and a limit can be missed): ``scancel``, then a failure saying so;
- the Dagster run is stopped (``DagsterExecutionInterruptedError``, ``KeyboardInterrupt``): the
  job is ``scancel``-ed and the interruption goes on.

Not guaranteed: timely delivery of messages on a network filesystem with long attribute
caching (the reader tails a file another machine appends to), or a state when Slurm keeps no
record of finished jobs and the controller has already forgotten this one: that is a failure
unless the script closed its Pipes session.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import dagster as dg

from pipelines.settings import weft_home
from pipelines.slurm.jobs import JobState, SlurmCommands, SlurmError, log_tail
from pipelines.slurm.script import time_limit_seconds

JOB_TAG = "weft/slurm_job_ids"
STATE_ERRORS_ALLOWED = 5  # consecutive failed state reads before the launch gives up


def pipes_dir(run_id: str, step: str) -> Path:
    """A new folder ``WEFT_HOME/pipes/<run_id>/<step>/<n>`` for one launch (a step may launch
    several jobs, e.g. the arms of a comparison)."""
    base = weft_home() / "pipes" / run_id / step
    base.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        folder = base / str(n)
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            n += 1


def step_key(context: dg.AssetExecutionContext | dg.OpExecutionContext) -> str:
    op_context = getattr(context, "op_execution_context", context)
    try:
        return op_context.get_step_execution_context().step.key
    except Exception:  # noqa: BLE001 - a context built outside a run has no step
        return "step"


class PipesSlurmClient(dg.PipesClient):
    """Runs a batch script on Slurm under Dagster Pipes (see the module docstring).

    ``commands`` runs Slurm's client commands (default: from this process's environment);
    ``poll_interval_s`` is the wait between state reads; ``time_limit`` (a Slurm time, the
    job's ``--time``) arms the launcher's own cancel; ``sbatch_args`` are added to sbatch's
    command line (they override the script's ``#SBATCH`` lines)."""

    def __init__(self, commands: SlurmCommands | None = None, *, poll_interval_s: float = 10.0,
                 report_grace_s: float = 60.0, time_limit: str = "",
                 time_limit_grace_s: float = 120.0, sbatch_args: tuple[str, ...] = ()):
        self.commands = commands or SlurmCommands()
        self.poll_interval_s = poll_interval_s
        self.report_grace_s = report_grace_s
        self.time_limit = time_limit
        self.limit_s = time_limit_seconds(time_limit) if time_limit else None
        self.time_limit_grace_s = time_limit_grace_s
        self.sbatch_args = tuple(sbatch_args)

    @classmethod
    def _is_dagster_maintained(cls) -> bool:
        return False

    def run(self, *, context: dg.AssetExecutionContext | dg.OpExecutionContext,  # type: ignore[override]
            script: Callable[[Mapping[str, str]], str],
            extras: Mapping[str, Any] | None = None) -> dg.PipesClientCompletedInvocation:
        """Submit ``script(env)`` (``env``: the Pipes bootstrap variables the script must
        export) and wait for the job; see the module docstring for how it ends."""
        folder = pipes_dir(context.run_id, step_key(context))
        injector = dg.PipesFileContextInjector(str(folder / "context.json"))
        reader = dg.PipesFileMessageReader(str(folder / "messages.jsonl"), cleanup_file=False)
        with dg.open_pipes_session(context=context, context_injector=injector,
                                   message_reader=reader, extras=extras) as session:
            script_path = folder / "job.sh"
            script_path.write_text(script(session.get_bootstrap_env_vars()))
            try:
                job_id = self.commands.submit(
                    script_path, [f"--output={folder}/slurm-%j.log", *self.sbatch_args])
            except SlurmError as exc:
                raise dg.Failure(description=f"{exc} (script: {script_path})") from exc
            log = folder / f"slurm-{job_id}.log"
            context.log.info(f"submitted Slurm job {job_id}: script {script_path}, log {log}")
            _tag_run(context, job_id)
            try:
                final = self._wait(context, job_id, log)
                if final.succeeded or final.state == "UNKNOWN":
                    self._await_report(context, session, final, log)
            except (dg.DagsterExecutionInterruptedError, KeyboardInterrupt):
                context.log.warning(f"the run was stopped: cancelling Slurm job {job_id}")
                try:
                    self.commands.cancel(job_id)
                except SlurmError as exc:  # the interruption still goes on
                    context.log.error(f"could not cancel Slurm job {job_id}: {exc}; cancel it "
                                      f"by hand: scancel {job_id}")
                raise
        return dg.PipesClientCompletedInvocation(session, metadata={
            "slurm_job_id": job_id, "slurm_state": final.state,
            "slurm_log": dg.MetadataValue.path(str(log))})

    def _wait(self, context, job_id: str, log: Path) -> JobState:
        """Poll until the job ends; a failed end raises dg.Failure with the log's tail."""
        started: float | None = None
        last: tuple[str, str] | None = None
        errors = 0
        while True:
            try:
                state = self.commands.state(job_id)
                errors = 0
            except SlurmError as exc:
                errors += 1
                if errors >= STATE_ERRORS_ALLOWED:
                    raise dg.Failure(description=f"cannot read the state of Slurm job {job_id} "
                                                 f"({errors} tries): {exc}") from exc
                context.log.warning(f"reading Slurm job {job_id}'s state failed ({exc}); "
                                    "trying again")
                time.sleep(self.poll_interval_s)
                continue
            if (state.state, state.reason) != last:
                context.log.info(state.describe())
                last = (state.state, state.reason)
            if state.finished or state.state == "UNKNOWN":
                if state.finished and not state.succeeded:
                    raise _job_failure(state, log)
                return state
            if state.state == "RUNNING" and started is None:
                started = time.monotonic()
            if started is not None and self.limit_s is not None and \
                    time.monotonic() - started > self.limit_s + self.time_limit_grace_s:
                self._cancel_over_time(context, job_id, log)
            time.sleep(self.poll_interval_s)

    def _cancel_over_time(self, context, job_id: str, log: Path) -> None:
        context.log.warning(f"Slurm job {job_id} is still running {self.time_limit_grace_s:.0f} s "
                            f"past its time limit {self.time_limit}: cancelling it")
        self.commands.cancel(job_id)
        state = self.commands.state(job_id)
        deadline = time.monotonic() + 60
        while not state.finished and state.state != "UNKNOWN" and time.monotonic() < deadline:
            time.sleep(min(self.poll_interval_s, 1.0))
            state = self.commands.state(job_id)
        raise _job_failure(state, log, note=(
            f"it ran past its time limit {self.time_limit} and the launcher cancelled it "
            "(Slurm counts limits in whole minutes)"))

    def _await_report(self, context, session, final: JobState, log: Path) -> None:
        """After the job ends, give its last Pipes messages ``report_grace_s`` to arrive."""
        handler = session.message_handler
        deadline = time.monotonic() + self.report_grace_s
        while not handler.received_closed_message and time.monotonic() < deadline:
            time.sleep(0.2)
        if handler.received_closed_message:
            return
        if final.state == "UNKNOWN":
            problem = ("Slurm no longer knows the job and keeps no accounting of it, and the "
                       "script did not finish reporting through Dagster Pipes")
        elif handler.received_opened_message:
            problem = ("the job ended before its script closed its Dagster Pipes session "
                       "(killed, or exited from inside it)")
        else:
            problem = ("its script never reported through Dagster Pipes: does it call "
                       "open_dagster_pipes(), and do the compute nodes see WEFT_HOME "
                       f"({weft_home()}) at the same path?")
        raise _job_failure(final, log, note=problem)


def _job_failure(state: JobState, log: Path, note: str = "") -> dg.Failure:
    tail = log_tail(log)
    description = state.describe() + (f": {note}" if note else "")
    description += f"\nlog {log}" + (f", last lines:\n{tail}" if tail else " (empty)")
    return dg.Failure(description=description, metadata={
        "slurm_job_id": state.job_id, "slurm_state": state.state,
        "slurm_exit_code": state.exit_code, "slurm_log": dg.MetadataValue.path(str(log)),
        "log_tail": dg.MetadataValue.md(f"```\n{tail}\n```")})


def _tag_run(context, job_id: str) -> None:
    """Add the job id to the run's ``weft/slurm_job_ids`` tag (best effort: a run without a
    stored record, e.g. a direct invocation, is left untagged)."""
    try:
        run = context.instance.get_run_by_id(context.run_id)
        if run is None:
            return
        ids = [i for i in run.tags.get(JOB_TAG, "").split(",") if i]
        context.instance.add_run_tags(context.run_id, {JOB_TAG: ",".join([*ids, job_id])})
    except Exception as exc:  # noqa: BLE001 - tags are a convenience, never a failure
        context.log.debug(f"could not tag the run with Slurm job {job_id}: {exc}")
