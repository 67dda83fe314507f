"""MOSAIC: manager/actor synthesis of tool-integrated trajectories with adversarial failure injection.

From a problem x and a reference trace y* (its worked solution), :func:`synthesize_mosaic`
builds a trajectory H = [s_1..s_T] in the TIR schema (``pipelines.tir``). For t = 1..T_max:

1. the **manager** (``pipelines.mosaic.agents``) sees x, y*, the history and the steps left and
   returns a navigation card {verdict, reason, guide, stage, mode} (eq. 1, Listing 1); the loop
   enforces Listing 1's rules (``enforce_card``): Correction after a failed observation or a
   verdict of execution error or logical deviation from y*, Correction means Intermediate, Final
   at the last step (Final wins there); each step records why it is in Correction
   (``correction_reason``); a gold answer the guide gives away is withheld;
2. the **actor** sees x, the history and the card (never y*) and is asked for a thought plus
   code, or at stage Final the answer (eq. 2, Listing 2); a reply in the wrong form gets one
   repair round. An answer is accepted at any step and ends the trajectory (Algorithm 1: "if
   â_t = ans then ... break"); one given while the card asked for code is recorded as an
   *early answer* (``StepRecord.early_answer``, counted per trajectory and in the summary);
3. the code runs in one sandbox **session** per trajectory (variables persist across steps);
4. with probability ρ a code step is **perturbed** (``pipelines.mosaic.inject``): a generation
   anomaly (the code is mutated, then really run) or an environment failure (not run; a
   synthetic timeout, memory error, connection reset or kernel restart — a restart really
   restarts the session). Each step records whether and how it was perturbed.

:func:`synthesize_baseline` is the comparison: one actor in a plain multi-turn loop, no manager,
no injection. Records (``pipelines.mosaic.records``, re-exported by the package) are labelled by
:func:`label_records` (final answer correct by the shared
grader, turns, perturbed steps, recovered = correct despite a perturbation) and carry a failure
reason when synthesis broke: ``manager_invalid_json`` (bad JSON after the repair round),
``actor_invalid_format``, ``max_steps`` (T_max reached without an answer), ``endpoint_error``,
``sandbox_error``. :func:`summarize_records` gives the figures the assets and the benchmark
report, MOSAIC and baseline side by side (average turns over all attempts and over completed
trajectories only).

Departures from Algorithm 1, on purpose: at the last step (t = T_max) the actor may only answer
(Algorithm 1 would append a code step and stop without an answer; such a trajectory is useless
for SFT, so code there gets the repair round and then ``max_steps``); a reply that is neither
code nor an answer gets one repair round instead of ending synthesis.

Guarantees: every record whose ``status`` is ``complete`` holds a trajectory that passes
``tir.validate_steps``; a failed record keeps its valid prefix of steps; injection is
reproducible (seeded per problem). Not guaranteed: that trajectories are correct (that is what
``correct`` records), or that a rerun against a live endpoint replays the same texts unless
the client's response cache holds them.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from pipelines.mosaic.agents import (
    STAGE_FINAL,
    STAGE_INTERMEDIATE,
    Actor,
    ActorView,
    AgentResult,
    Manager,
    ManagerView,
    correction_reason,
    enforce_card,
    parse_actor_reply,
    redact_answer,
)
from pipelines.mosaic.inject import (
    CONNECTION_RESET,
    ENVIRONMENT,
    GENERATION,
    KERNEL_RESTART,
    Perturbation,
    choose_environment_failure,
    choose_mode,
    environment_failure,
    mutate,
)
from pipelines.mosaic.records import (
    FAIL_ACTOR_FORMAT,
    FAIL_ENDPOINT,
    FAIL_MANAGER_JSON,
    FAIL_MAX_STEPS,
    FAIL_SANDBOX,
    METHOD_BASELINE,
    METHOD_MOSAIC,
    MosaicConfig,
    ProblemInput,
    StepRecord,
    TrajectoryRecord,
)
from pipelines.progress import gather_with_progress
from pipelines.sandbox.result import ExecResult, render_observation
from pipelines.tir import KIND_ANSWER, KIND_CODE, Step, neutralize_tags

# ---------------------------------------------------------------------------------------------
# The sandbox adapter


class CodeSession(Protocol):
    """What the loop needs from a sandbox session (``pipelines.sandbox`` sessions fit)."""

    def execute(self, cell: str) -> ExecResult: ...

    def restart(self) -> None: ...

    def close(self) -> None: ...


SessionFactory = Callable[[], CodeSession]


def session_factory(sandbox: Any = None, *, timeout_s: float | None = 10.0,
                    memory_mb: int = 1024) -> SessionFactory:
    """Sessions from ``sandbox`` (anything with ``session(limits=None)``: a backend from
    ``pipelines.sandbox.make_sandbox()`` or a ``SandboxPool``); default: the local sandbox.
    ``timeout_s=None`` keeps the sandbox's own limits (a pool's warm sessions need that)."""
    from pipelines.sandbox import Limits, make_sandbox

    box = sandbox if sandbox is not None else make_sandbox("local")
    if timeout_s is None:
        return lambda: box.session()
    limits = Limits(timeout_s=timeout_s, memory_mb=memory_mb)
    return lambda: box.session(limits)


class TrackedSession:
    """A session plus the number of cells its current kernel has run, so a synthetic failure
    can name the cell (``<cell-N>``) the way the real kernel would."""

    def __init__(self, session: CodeSession) -> None:
        self.session = session
        self.cells = 0

    def execute(self, cell: str) -> ExecResult:
        result = self.session.execute(cell)
        if result.restarted:
            died_here = result.timed_out or (result.error is not None and result.error.name == "KernelDied")
            self.cells = 0 if died_here else 1
        else:
            self.cells += 1
        return result

    def skip_cell(self) -> None:
        """Count a cell the kernel did not run (an injected failure) by running an empty one,
        so later real tracebacks keep the numbering a real failure would have left."""
        self.execute("")

    def restart(self) -> None:
        self.session.restart()
        self.cells = 0

    def close(self) -> None:
        self.session.close()


def inject_environment_failure(session: TrackedSession, code: str, kind: str,
                               default_timeout_s: float = 10.0) -> ExecResult:
    """Φ_env (DeepTool §2.1, Eq. 4) on a live session: the result a real ``kind`` failure
    (``pipelines.mosaic.inject.ENVIRONMENT_KINDS``) would give for ``code``, which is not run,
    with the session left as that failure leaves it: a kernel restart really restarts it
    (variables are lost), a timeout or memory error counts the cell the kernel did not finish,
    a connection reset leaves it as it was. A synthetic timeout quotes the session's own
    wall-clock limit (``default_timeout_s`` when the session states none). The synthesis loop
    and the tool-mode evaluation's injected failures both go through here. Blocking: call it
    in a thread from async code."""
    limits = getattr(session.session, "limits", None)  # quote the session's real limit
    result = environment_failure(kind, code, cell_number=session.cells + 1,
                                 timeout_s=getattr(limits, "timeout_s", default_timeout_s))
    if kind == KERNEL_RESTART:
        session.restart()
    elif kind != CONNECTION_RESET:
        session.skip_cell()
    return result


# ---------------------------------------------------------------------------------------------
# The loops


def _observation(result: ExecResult, config: MosaicConfig) -> str:
    return neutralize_tags(render_observation(result, max_chars=config.observation_chars))


async def _act(actor: Actor, view: ActorView, *, accept_answer: bool | None = None
               ) -> tuple[AgentResult, Any, int]:
    """Ask the actor; one repair round for a reply in the wrong form. Returns the last agent
    result, the parsed reply (or None) and the number of attempts. ``view.allow_*`` say what
    the actor is asked for; ``accept_answer`` (default ``view.allow_answer``) whether an answer
    it gives anyway is taken."""
    accept = view.allow_answer if accept_answer is None else accept_answer
    result = await actor.act(view)
    if result.error is not None:
        return result, None, 1
    reply = parse_actor_reply(result.value, allow_code=view.allow_code, allow_answer=accept)
    if reply.step is not None:
        return result, reply, 1
    retry = replace(view, previous_reply=result.value, feedback=reply.error)
    result = await actor.act(retry)
    if result.error is not None:
        return result, None, 2
    reply = parse_actor_reply(result.value, allow_code=view.allow_code, allow_answer=accept)
    return result, reply, 2


async def _run(session: TrackedSession, code: str) -> ExecResult:
    return await asyncio.to_thread(session.execute, code)


async def _execute_step(session: TrackedSession, step: Step, config: MosaicConfig,
                        rng: random.Random | None) -> tuple[Step, Perturbation | None, ExecResult]:
    """Run (or perturb) a code step; returns the step as it enters the trajectory."""
    mode = choose_mode(rng, config.rho, config.generation_share) if rng is not None else None
    if mode == GENERATION:
        mutated = mutate(step.action, rng, config.generation_kinds)
        if mutated is not None:
            code, perturbation = mutated
            result = await _run(session, code)
            return Step(step.thought, KIND_CODE, code), perturbation, result
        mode = ENVIRONMENT  # nothing to mutate (e.g. blank-ish code): fail the environment
    if mode == ENVIRONMENT:
        kind = choose_environment_failure(rng, config.environment_kinds)
        result = await asyncio.to_thread(inject_environment_failure, session, step.action, kind,
                                         config.exec_timeout_s)
        return step, Perturbation(ENVIRONMENT, kind, step.action, f"synthetic {kind}; code not run"), result
    return step, None, await _run(session, step.action)


async def _open_session(factory: SessionFactory) -> TrackedSession:
    return TrackedSession(await asyncio.to_thread(factory))


def _rng(config: MosaicConfig, problem: ProblemInput) -> random.Random:
    return random.Random(f"mosaic:{config.seed}:{problem.source}:{problem.problem_id}")


async def synthesize_mosaic(problem: ProblemInput, manager: Manager, actor: Actor,
                            session_factory: SessionFactory,
                            config: MosaicConfig | None = None) -> TrajectoryRecord:
    """One MOSAIC trajectory (see the module docstring). Never raises for model or sandbox
    misbehaviour (the record says what failed); ``EndpointUnreachable`` propagates."""
    config = config or MosaicConfig()
    record = TrajectoryRecord(METHOD_MOSAIC, problem, config)
    started = time.monotonic()
    rng = _rng(config, problem)
    try:
        session = await _open_session(session_factory)
    except Exception as exc:  # noqa: BLE001 - any sandbox start failure is recorded
        record.fail(FAIL_SANDBOX, f"could not start a sandbox session: {type(exc).__name__}: {exc}")
        record.seconds = time.monotonic() - started
        return record
    try:
        await _mosaic_loop(record, problem, manager, actor, session, config, rng)
    finally:
        await asyncio.to_thread(session.close)
        record.seconds = time.monotonic() - started
    return record


async def _mosaic_loop(record: TrajectoryRecord, problem: ProblemInput, manager: Manager,
                       actor: Actor, session: TrackedSession, config: MosaicConfig,
                       rng: random.Random) -> None:
    for t in range(1, config.max_steps + 1):
        history = tuple(record.plain_steps)
        last_failed = bool(record.steps) and record.steps[-1].error_observed
        view = ManagerView(problem.problem, problem.reference, problem.answer, history, t,
                           config.max_steps, last_failed)
        navigated = await manager.navigate(view)
        if navigated.value is None:
            reason = FAIL_ENDPOINT if navigated.endpoint_error else FAIL_MANAGER_JSON
            record.fail(reason, f"manager at step {t}: {navigated.error}")
            return
        card, overrides = enforce_card(navigated.value, view.steps_left, last_failed)
        guide, redacted = redact_answer(card.guide, problem.answer, problem.problem)
        card = replace(card, guide=guide)
        last = t == config.max_steps
        # The card decides what is asked: Intermediate asks for code; Final asks for the answer,
        # and before the last step a code reply is still accepted (the actor wanted one more
        # check). An answer is accepted at any step (Algorithm 1 ends on an answer).
        allow_code = not last
        allow_answer = card.stage == STAGE_FINAL
        acted, reply, attempts = await _act(actor, ActorView(problem.problem, history, card,
                                                             allow_code, allow_answer),
                                            accept_answer=True)
        if acted.error is not None:
            record.fail(FAIL_ENDPOINT, f"actor at step {t}: {acted.error}")
            return
        if reply is None or reply.step is None:
            reason = FAIL_MAX_STEPS if last else FAIL_ACTOR_FORMAT
            record.fail(reason, f"actor at step {t}: {reply.error if reply else 'no reply'}")
            return
        step_record = StepRecord(reply.step, card, tuple(overrides), redacted,
                                 actor_attempts=attempts, actor_repairs=reply.repairs,
                                 correction_reason=correction_reason(card, last_failed))
        if reply.step.kind == KIND_ANSWER:
            step_record.early_answer = card.stage == STAGE_INTERMEDIATE
            record.steps.append(step_record)
            return
        try:
            step, perturbation, result = await _execute_step(session, reply.step, config, rng)
        except Exception as exc:  # noqa: BLE001 - a broken sandbox fails this record only
            record.fail(FAIL_SANDBOX, f"step {t}: {type(exc).__name__}: {exc}")
            return
        step_record.step = step.with_observation(_observation(result, config))
        step_record.perturbation = perturbation
        step_record.error_observed = not result.ok
        step_record.error_name = result.error.name if result.error else None
        record.steps.append(step_record)
    record.fail(FAIL_MAX_STEPS, f"no final answer after {config.max_steps} steps")


async def synthesize_baseline(problem: ProblemInput, actor: Actor, session_factory: SessionFactory,
                              config: MosaicConfig | None = None) -> TrajectoryRecord:
    """The baseline: one actor, plain multi-turn loop, no manager, no injection, no forcing."""
    config = config or MosaicConfig()
    record = TrajectoryRecord(METHOD_BASELINE, problem, config)
    started = time.monotonic()
    try:
        session = await _open_session(session_factory)
    except Exception as exc:  # noqa: BLE001
        record.fail(FAIL_SANDBOX, f"could not start a sandbox session: {type(exc).__name__}: {exc}")
        record.seconds = time.monotonic() - started
        return record
    try:
        for t in range(1, config.max_steps + 1):
            view = ActorView(problem.problem, tuple(record.plain_steps), None)
            acted, reply, attempts = await _act(actor, view)
            if acted.error is not None:
                record.fail(FAIL_ENDPOINT, f"actor at step {t}: {acted.error}")
                break
            if reply is None or reply.step is None:
                record.fail(FAIL_ACTOR_FORMAT, f"actor at step {t}: {reply.error if reply else 'no reply'}")
                break
            step_record = StepRecord(reply.step, actor_attempts=attempts, actor_repairs=reply.repairs)
            if reply.step.kind == KIND_ANSWER:
                record.steps.append(step_record)
                break
            try:
                step, _, result = await _execute_step(session, reply.step, config, None)
            except Exception as exc:  # noqa: BLE001
                record.fail(FAIL_SANDBOX, f"step {t}: {type(exc).__name__}: {exc}")
                break
            step_record.step = step.with_observation(_observation(result, config))
            step_record.error_observed = not result.ok
            step_record.error_name = result.error.name if result.error else None
            record.steps.append(step_record)
        else:
            record.fail(FAIL_MAX_STEPS, f"no final answer after {config.max_steps} steps")
    finally:
        await asyncio.to_thread(session.close)
        record.seconds = time.monotonic() - started
    return record


async def synthesize_many(problems: Sequence[ProblemInput], make: Callable[[ProblemInput], Any],
                          concurrency: int = 4) -> list[TrajectoryRecord]:
    """Run ``make(problem)`` (a coroutine, e.g. a ``synthesize_mosaic`` call) for every problem,
    at most ``concurrency`` at a time; results in input order. Exceptions propagate (only
    ``EndpointUnreachable`` is expected to: the loops record everything else)."""
    semaphore = asyncio.Semaphore(concurrency)

    async def one(item: ProblemInput) -> TrajectoryRecord:
        async with semaphore:
            return await make(item)

    return await gather_with_progress([one(p) for p in problems], desc="mosaic synthesis")


