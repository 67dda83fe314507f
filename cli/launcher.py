"""Runs the Dagster UI can re-execute: each run is created from the code location's own job and
then executed to the end in the calling process.

Dagster re-executes a run (the UI's *Re-execute*, GraphQL ``launchRunReexecution``) only when
the run records where its job lives: ``remote_job_origin`` (the code location and repository,
found by name in the UI's workspace) and ``job_code_origin`` (how a run worker loads the job).
Runs made by ``execute_in_process`` / ``dg.materialize`` (whose job is the ad-hoc
``__ephemeral_asset_job__``), ``dagster job execute`` and ``dagster asset materialize`` carry
neither. :class:`Launcher` makes runs the way ``dagster job launch`` and the webserver do: it
loads the code location (weft's, ``assets.definitions``, under the location name ``dagster dev
-m assets.definitions`` gives it), takes the named job (subset to an asset selection, with a
partition's tags), checks the run config against the job's schema, builds the execution plan
and creates the run with both origins. It then executes the run here, as Dagster's run worker
(``dagster api execute_run``) does, and returns the finished run.

Used by ``weft job`` / ``weft materialize`` (in the child process they spawn:
``python -m cli.launcher``), by ``make demo`` for each of its stages, and by anything else that
starts a run. An asset selection without a job runs under the code location's implicit asset job
(``__ASSET_JOB``), which is what the UI's *Materialize* button launches.

Stopping: an interrupt (SIGINT, or SIGTERM, which Dagster maps to it) while the run executes
ends the run CANCELED when it was marked canceling first (``weft`` does that before it
interrupts its child), else FAILURE; the run records its end before :meth:`Launcher.execute`
raises ``KeyboardInterrupt``. Not guaranteed: the UI's *Terminate* reaches a run started here
only through that canceling mark (the default run launcher has no handle on this process).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import logging
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

from cli.instance import (
    DEFINITIONS_MODULE,
    WeftUsageError,
    _did_you_mean,
    deep_merge,
    ensure_dagster_home,
    runs_summary,
)

log = logging.getLogger(__name__)


def location_name_for(module: str) -> str:
    """The code location name Dagster gives ``dagster dev -m MODULE`` (the module's name): a
    run is re-executed in the UI's location of that name."""
    return module


class Launcher:
    """One loaded code location (``module``, default weft's ``assets.definitions``) that creates
    and executes runs on ``instance``. A context manager; load it once for many runs (loading
    weft's definitions takes a few seconds)."""

    def __init__(self, instance: dg.DagsterInstance, module: str = DEFINITIONS_MODULE,
                 working_directory: str | None = None):
        from dagster._core.remote_origin import InProcessCodeLocationOrigin
        from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

        self.instance = instance
        self.module = module
        origin = InProcessCodeLocationOrigin(
            LoadableTargetOrigin(executable_path=sys.executable, module_name=module,
                                 working_directory=working_directory or os.getcwd()),
            location_name=location_name_for(module))
        self.location = origin.create_location(instance)
        repositories = self.location.get_repositories()
        if len(repositories) != 1:
            self.location.cleanup()
            raise WeftUsageError(f"code location {module} has {len(repositories)} repositories; "
                                 "weft launches runs of a location with exactly one Definitions")
        self.repository = next(iter(repositories.values()))

    def __enter__(self) -> Launcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.location.cleanup()

    # ----------------------------------------------------------------------- what to run

    def job_names(self) -> list[str]:
        return sorted(job.name for job in self.repository.get_all_jobs())

    def asset_keys(self, selection: str | Sequence[str]) -> list[dg.AssetKey]:
        """The asset keys a selection names (comma-separated or a list; names, ``*``/``+``
        as ``dagster asset materialize`` reads them); WeftUsageError for names no asset has."""
        from dagster._core.errors import DagsterInvalidSubsetError

        parts = ([p.strip() for p in selection.split(",")] if isinstance(selection, str)
                 else [str(p).strip() for p in selection])
        parts = [p for p in parts if p]
        if not parts:
            raise WeftUsageError("the asset selection is empty; name assets, e.g. 'problems'")
        try:
            keys = dg.AssetSelection.from_coercible(parts).resolve(self.repository.asset_graph)
        except DagsterInvalidSubsetError as err:
            raise WeftUsageError(f"asset selection {parts}: "
                                 + " ".join(str(err).split())) from err
        return sorted(keys, key=lambda k: k.to_user_string())

    def _job_definition(self, job_name: str) -> dg.JobDefinition:
        repo_name = self.repository.name
        return self.location.get_reconstructable_job(repo_name, job_name).get_definition()

    # --------------------------------------------------------------------------- the run

    def create_run(self, job: str | None = None, *, selection: str | Sequence[str] | None = None,
                   partition: str | dg.MultiPartitionKey | None = None,
                   run_config: Mapping[str, Any] | None = None,
                   tags: Mapping[str, str] | None = None) -> dg.DagsterRun:
        """A NOT_STARTED run of ``job`` (None: the location's implicit asset job, which needs a
        ``selection``) with its remote and code origins, as the webserver's launchRun creates it:
        ``selection`` subsets the job to those assets (and their checks), ``partition`` (required
        exactly when the job or the selected assets are partitioned) adds the partition's tags
        (and run config, for a job with partitioned config), ``run_config`` is
        checked against the job's config schema, ``tags`` are added to the job's own.
        WeftUsageError for an unknown job, a selection outside the job, a missing partition or
        one the assets do not have, or run config the job does not accept."""
        from dagster._config import validate_config_from_snap
        from dagster._core.definitions.selector import JobSubsetSelector
        from dagster._core.errors import DagsterInvalidSubsetError, DagsterUnknownPartitionError

        keys = self.asset_keys(selection) if selection is not None else None
        if job is None:
            if keys is None:
                raise WeftUsageError("name a job or an asset selection to run")
            from dagster._core.definitions.assets.job.asset_job import IMPLICIT_ASSET_JOB_NAME

            job = IMPLICIT_ASSET_JOB_NAME
        if not self.repository.has_job(job):
            known = [n for n in self.job_names() if not n.startswith("__")]
            raise WeftUsageError(f"code location {self.module} has no job {job!r}."
                                 f"{_did_you_mean(job, known)} Jobs: {', '.join(known)}")
        job_def = self._job_definition(job)
        config: dict[str, Any] = dict(run_config or {})
        run_tags: dict[str, str] = {}
        if keys is not None:
            what = f"the selected assets of job {job!r}"
            partitioned = any(self.repository.asset_graph.get(k).partitions_def is not None
                              for k in keys)
        else:
            what = f"job {job!r}"
            partitioned = job_def.partitions_def is not None
        if partition is None and partitioned:
            raise WeftUsageError(f"{what} {'are' if keys else 'is'} partitioned: give a "
                                 "partition key (`weft job`/`weft materialize`: --partition KEY)")
        if partition is not None:
            key = str(partition)
            if not partitioned:
                raise WeftUsageError(f"{what} {'are' if keys else 'is'} not partitioned: drop "
                                     f"the partition {key!r}")
            try:
                from dagster._core.definitions.partitions.context import (
                    partition_loading_context,
                )

                with partition_loading_context(dynamic_partitions_store=self.instance) as ctx:
                    job_def.validate_partition_key(key, selected_asset_keys=keys, context=ctx)
                run_tags.update(job_def.get_tags_for_partition_key(key, selected_asset_keys=keys))
            except (DagsterUnknownPartitionError, dg.DagsterInvariantViolationError) as err:
                raise WeftUsageError(f"partition {key!r} of job {job!r}: "
                                     + " ".join(str(err).split())) from err
            config = deep_merge(dict(job_def.get_run_config_for_partition_key(key)), config)
        run_tags.update(tags or {})
        selector = JobSubsetSelector(location_name=self.location.name,
                                     repository_name=self.repository.name, job_name=job,
                                     op_selection=None, asset_selection=keys,
                                     asset_check_selection=None)
        try:
            remote_job = self.location.get_job(selector)
        except DagsterInvalidSubsetError as err:
            raise WeftUsageError(f"job {job!r} cannot run the selection: "
                                 + " ".join(str(err).split())) from err
        checked = validate_config_from_snap(remote_job.config_schema_snapshot,
                                            remote_job.root_config_key, config)
        if not checked.success:
            problems = "; ".join(_short(e.message) for e in checked.errors or [])
            raise WeftUsageError(f"run config for job {job!r} is not valid: {problems}. The "
                                 "job's Launchpad in the UI (`make ui`, Jobs, the job, "
                                 "Launchpad) shows and checks the config it takes")
        plan = self.location.get_execution_plan(remote_job, config, step_keys_to_execute=None,
                                                known_state=None, instance=self.instance)
        return self.instance.create_run(
            job_name=job, run_id=None, run_config=config,
            resolved_op_selection=remote_job.resolved_op_selection, op_selection=None,
            step_keys_to_execute=plan.execution_plan_snapshot.step_keys_to_execute,
            status=dg.DagsterRunStatus.NOT_STARTED, root_run_id=None, parent_run_id=None,
            tags={**remote_job.tags, **run_tags}, job_snapshot=remote_job.job_snapshot,
            execution_plan_snapshot=plan.execution_plan_snapshot,
            parent_job_snapshot=remote_job.parent_job_snapshot,
            remote_job_origin=remote_job.get_remote_origin(),
            job_code_origin=remote_job.get_python_origin(),
            asset_selection=frozenset(keys) if keys is not None else None,
            asset_check_selection=None, asset_graph=self.repository.asset_graph)

    def execute(self, run: dg.DagsterRun) -> dg.DagsterRun:
        """Execute a created run in this process to its end, as Dagster's run worker does (the
        job reloaded from the run's code origin), and return it as stored (SUCCESS, FAILURE or
        CANCELED). An interrupt ends the run first, then raises ``KeyboardInterrupt``."""
        from dagster._core.errors import DagsterExecutionInterruptedError
        from dagster._core.events import EngineEventData
        from dagster._grpc.impl import core_execute_run
        from dagster._utils.hosted_user_process import recon_job_from_origin
        from dagster._utils.interrupts import capture_interrupts

        if run.job_code_origin is None:
            raise ValueError(f"run {run.run_id} has no code origin; create it with create_run")
        interrupted = False
        with capture_interrupts():
            recon_job = recon_job_from_origin(run.job_code_origin)
            self.instance.report_engine_event(f"Started process for run (pid: {os.getpid()}).",
                                              run, EngineEventData.in_process(os.getpid()))
            try:
                for _event in core_execute_run(recon_job, run, self.instance,
                                               inject_env_vars=True):
                    pass
            except (KeyboardInterrupt, DagsterExecutionInterruptedError):
                interrupted = True
            except Exception as exc:  # noqa: BLE001 - recorded as the run's failure already
                log.warning("run %s stopped on an error outside its steps (its event log has "
                            "the traceback): %s", run.run_id, exc)
        stored = self.instance.get_run_by_id(run.run_id)
        assert stored is not None
        if interrupted:
            raise KeyboardInterrupt(f"run {run.run_id} was interrupted ({stored.status.value})")
        return stored

    def launch(self, job: str | None = None, **kwargs: Any) -> dg.DagsterRun:
        """:meth:`create_run` then :meth:`execute`: the finished run."""
        return self.execute(self.create_run(job, **kwargs))


def launch(job: str | None = None, *, instance: dg.DagsterInstance | None = None,
           module: str = DEFINITIONS_MODULE, **kwargs: Any) -> dg.DagsterRun:
    """One run of ``job`` (or of an asset ``selection``) created from ``module``'s code location
    and executed here (:class:`Launcher`); on weft's instance when ``instance`` is None."""
    if instance is None:
        ensure_dagster_home()
        with dg.DagsterInstance.get() as own, Launcher(own, module) as launcher:
            return launcher.launch(job, **kwargs)
    with Launcher(instance, module) as launcher:
        return launcher.launch(job, **kwargs)


def _short(message: str, limit: int = 300) -> str:
    """A config error without the full expected schema Dagster appends when it is long."""
    message = " ".join(message.split())
    if len(message) > limit and ' Expected: "' in message:
        message = message.split(' Expected: "')[0].rstrip(".")
    return message


# ------------------------------------------------------------------ the child `weft` spawns


def _print_summary(instance: dg.DagsterInstance, run_id: str) -> None:
    stored = instance.get_run_by_id(run_id)
    for line in runs_summary(instance, [stored] if stored is not None else []):
        print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m cli.launcher [--job NAME] [--select SEL] [--partition KEY]
    [--run-config-json JSON] [--tag KEY=VALUE ...] [--summary]``: one run on weft's instance, executed here
    (what ``weft job`` and ``weft materialize`` run in their child process). Exit status 0 when
    the run succeeded, 1 when it failed or was canceled, 2 for a usage error."""
    parser = argparse.ArgumentParser(prog="python -m cli.launcher")
    parser.add_argument("--job", default=None, help="a job of the code location")
    parser.add_argument("--select", default=None, help="asset selection, e.g. 'problems'")
    parser.add_argument("--partition", default=None, help="partition key")
    parser.add_argument("--run-config-json", default=None, help="run config as JSON")
    parser.add_argument("--tag", action="append", default=[], help="KEY=VALUE, repeatable")
    parser.add_argument("--module", default=DEFINITIONS_MODULE, help=argparse.SUPPRESS)
    parser.add_argument("--summary", action="store_true",
                        help="print what the run did when it ends (as `weft job` shows it)")
    args = parser.parse_args(argv)
    try:
        config = json.loads(args.run_config_json) if args.run_config_json else {}
        if not isinstance(config, dict):
            raise WeftUsageError("--run-config-json must be a JSON object")
        tags = {}
        for tag in args.tag:
            key, sep, value = tag.partition("=")
            if not sep or not key:
                raise WeftUsageError(f"--tag {tag!r} is not KEY=VALUE")
            tags[key] = value
        ensure_dagster_home()
        with dg.DagsterInstance.get() as instance, Launcher(instance, args.module) as launcher:
            run = launcher.create_run(args.job, selection=args.select, partition=args.partition,
                                      run_config=config, tags=tags)
            print(f"[weft] run {run.run_id} ({run.job_name}) created from code location "
                  f"{launcher.location.name}", file=sys.stderr, flush=True)
            try:
                run = launcher.execute(run)
            except KeyboardInterrupt:
                if args.summary:
                    _print_summary(instance, run.run_id)
                return 130
            if args.summary:
                _print_summary(instance, run.run_id)
    except json.JSONDecodeError as exc:
        print(f"weft: --run-config-json is not valid JSON: {exc}", file=sys.stderr)
        return 2
    except WeftUsageError as err:
        print(f"weft: {err}", file=sys.stderr)
        return 2
    return 0 if run.status == dg.DagsterRunStatus.SUCCESS else 1


def _exit(code: int) -> None:
    """End this process with ``code`` once its run is over and recorded: wait for its
    non-daemon threads and run its atexit handlers (logging's flush, finalizers, the
    multiprocessing children's clean-up) as the interpreter would, flush, and exit. What
    this skips is the interpreter's teardown of its modules, whose garbage collections walk
    every object Dagster and the definitions made: 0.6-0.8 s of each ``weft job``
    (``bench/eval_overhead.py``), for nothing a finished run needs."""
    threading._shutdown()  # what Py_FinalizeEx calls first
    atexit._run_exitfuncs()  # what it calls next
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(main())
