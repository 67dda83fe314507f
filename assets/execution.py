"""How a run's steps are executed: in the run's own process when every step is light.

Dagster's default executor starts a new Python process for every step (each imports weft's
code location and initializes its resources again: seconds per step on a small machine), which
buys isolation and parallel steps. Steps that only read and write the warehouse, call an HTTP
endpoint or hand work to worker processes of their own (the evaluation assets, their scoring
and their asset checks) need neither, so they carry the op tag :data:`IN_PROCESS_TAG` and
:data:`weft_executor`, the code location's default executor, runs a run whose steps all carry
it in one process (resources initialized once, so e.g. the grading pool stays warm across the
steps). A run with any other step (training, synthesis, the sandbox-heavy stages) is executed
as before, one process per step with up to ``max_concurrent`` at a time, so nothing there loses
its isolation or parallelism. Training steps launch their work through Dagster Pipes
subprocesses in either case.

Run config may pin the choice: ``execution: {config: {in_process: {}}}`` or
``execution: {config: {multiprocess: {max_concurrent: 2}}}``; the default is ``auto``, which
takes the multiprocess settings for runs it executes that way. Not guaranteed: that a light
step which crashes the interpreter (a native crash) leaves the run's other steps a record; the
run fails as a whole.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import dagster as dg

IN_PROCESS_TAG = "weft/in_process"
IN_PROCESS = {IN_PROCESS_TAG: "true"}  # op_tags of a light step


def light_step(tags: Mapping[str, str] | None) -> bool:
    """Whether a step with these op tags may run in the run's own process."""
    return (tags or {}).get(IN_PROCESS_TAG) == "true"


class AutoExecutor(dg.Executor):
    """Executes a plan in process when every step to execute is light (:func:`light_step`),
    else with one process per step."""

    def __init__(self, in_process: dg.Executor, multiprocess: dg.Executor) -> None:
        self._in_process = in_process
        self._multiprocess = multiprocess

    @property
    def retries(self) -> Any:
        return self._multiprocess.retries

    @property
    def step_dependency_config(self) -> Any:
        return self._multiprocess.step_dependency_config

    def chooses_in_process(self, steps: Sequence[Any]) -> bool:
        """True when every step (``ExecutionStep``-like: ``tags``) is light."""
        return bool(steps) and all(light_step(step.tags) for step in steps)

    def execute(self, plan_context: Any, execution_plan: Any) -> Iterator[Any]:
        steps = [execution_plan.get_step_by_key(key)
                 for key in execution_plan.step_keys_to_execute]
        chosen = self._in_process if self.chooses_in_process(steps) else self._multiprocess
        yield from chosen.execute(plan_context, execution_plan)


def _config_schema() -> Any:
    from dagster._core.definitions.executor_definition import IN_PROC_CONFIG, MULTI_PROC_CONFIG

    return dg.Field(dg.Selector({"auto": MULTI_PROC_CONFIG, "multiprocess": MULTI_PROC_CONFIG,
                                 "in_process": IN_PROC_CONFIG}),
                    default_value={"auto": {}})


def _requirements(config: Mapping[str, Any]) -> list[Any]:
    from dagster._core.definitions.executor_definition import (
        multiple_process_executor_requirements,
    )

    return [] if "in_process" in config else list(multiple_process_executor_requirements())


@dg.executor(name="weft", config_schema=_config_schema(), requirements=_requirements)
def weft_executor(init_context: dg.InitExecutorContext) -> dg.Executor:
    """``auto`` (default): in process when every step of the run is light, else one process per
    step; ``in_process`` / ``multiprocess``: Dagster's executors of those names."""
    from dagster._core.definitions.executor_definition import (
        _core_in_process_executor_creation,
        _core_multiprocess_executor_creation,
    )

    mode, config = next(iter(init_context.executor_config.items()))
    if mode == "in_process":
        return _core_in_process_executor_creation(config)
    multi = _core_multiprocess_executor_creation(config)
    if mode == "multiprocess":
        return multi
    in_process = _core_in_process_executor_creation(
        {"retries": config["retries"], "step_dependency_config": config.get("step_dependency_config")})
    return AutoExecutor(in_process, multi)
