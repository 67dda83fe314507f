"""``tool``: multi-turn tool-integrated solving (MOSAIC §2.2 schema, format ``tir``).

The model writes ``<think>`` then ``<code>``; weft runs the code in a sandbox session
(variables persist) and feeds the rendered observation back as ``<interpreter>``, until
``<answer>`` or the turn/token limit; the last turn's last ``<answer>`` block is graded.
Context policy ``state_preserved`` keeps earlier thoughts, ``state_discarded`` keeps only code
and outputs (``pipelines.tir.context_messages``). ``max_tokens`` limits each turn. Rows add
``turns``, ``cells`` (code cells run), ``tool_errors``, ``format_errors``,
``injected_failure`` and ``context_policy``; ``output`` is the whole transcript (turns and
interpreter outputs).

``inject_first_cell`` evaluates recovery from an interpreter error that every evaluated model
meets alike: the first code cell of each sample is not run and gets instead the observation of
one of MOSAIC's environment failures (DeepTool §2.1, Φ_env, Eq. 4: a timeout, a memory error, a
connection reset or a kernel restart, through ``pipelines.mosaic.inject_environment_failure``,
the code the synthesis loop injects with), and the model goes on from there. The kind is drawn
from the sample's seed and the problem id alone (:func:`injected_failure`), so two models
evaluated with the same seed get the same failure on the same sample of the same problem,
whatever code they wrote. Φ_gen (a mutation of the model's own code) is not used here: what it
does depends on the code, so two models could not be given the same error. The row's
``injected_failure`` names the kind (None when the sample wrote no cell or nothing is injected).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from eval.modes.base import Job, Mode, Run, register_mode
from pipelines.formats import TIR

POLICIES = ("state_preserved", "state_discarded")
TURN_STOPS = ("</code>", "</answer>")


INJECTION_SALT = "tool-injection"


def injected_failure(seed: int | None, problem_id: str) -> str:
    """The environment failure (``pipelines.mosaic.inject.ENVIRONMENT_KINDS``) injected into a
    sample's first cell: drawn with MOSAIC's own chooser from a generator seeded by the
    sample's seed and the problem id, and by nothing a model does."""
    from pipelines.mosaic.inject import choose_environment_failure

    return choose_environment_failure(random.Random(f"{INJECTION_SALT}:{seed}:{problem_id}"))


def close_stopped_block(text: str) -> str:
    """vLLM drops the stop string: close the ``<code>``/``<answer>`` block it ended."""
    for tag in ("code", "answer"):
        if text.count(f"<{tag}>") > text.count(f"</{tag}>"):
            return text.rstrip() + f"\n</{tag}>"
    return text


@register_mode
@dataclass(frozen=True)
class ToolMode(Mode):
    """Turns of think/code/interpreter in one sandbox session per sample."""

    name: ClassVar[str] = "tool"
    answer_format: ClassVar[str] = TIR
    cappable: ClassVar[bool] = True

    context_policy: str = "state_preserved"
    max_turns: int = 6
    inject_first_cell: bool = False

    def __post_init__(self) -> None:
        if self.context_policy not in POLICIES:
            raise ValueError(f"context_policy must be one of {POLICIES}, "
                             f"got {self.context_policy!r}")
        if isinstance(self.max_turns, bool) or not isinstance(self.max_turns, int) \
                or self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns!r}")
        if not isinstance(self.inject_first_cell, bool):  # a bad setting, like those above
            raise ValueError(f"inject_first_cell must be true or false, got "  # noqa: TRY004
                             f"{self.inject_first_cell!r}")

    async def prepare(self, run: Run, jobs: list[Job]) -> None:
        if run.sandbox is None:
            raise ValueError("tool mode needs a sandbox (pipelines.sandbox.SandboxPool)")

    async def generate(self, run: Run, job: Job, messages: list[dict[str, Any]],
                       params: Any) -> dict[str, Any]:
        session = await asyncio.to_thread(run.sandbox.session)
        inject = (injected_failure(params.seed, str(job.problem["problem_id"]))
                  if self.inject_first_cell else None)
        try:
            return await self.solve(run, session, job.problem["problem"], params,
                                    sample_index=job.variant, inject=inject)
        finally:
            await asyncio.to_thread(session.close)

    async def solve(self, run: Run, session: Any, problem: str, params: Any, *,
                    sample_index: int, inject: str | None = None) -> dict[str, Any]:
        """Multi-turn solving of one problem in one sandbox session; every turn is one
        ``run.complete`` (so a thinking cap caps each turn's thinking, not the turn). Returns
        the row's generation columns, ``graded_text`` included (the answer block of the
        last turn; an off-schema turn ends the sample with its last ``<answer>``, if any).
        ``inject`` (an environment failure kind) replaces the first cell's run by that
        failure (see the module docstring)."""
        from pipelines.sandbox import render_observation
        from pipelines.tir import KIND_ANSWER, Step, TIRFormatError, context_messages, parse_output

        if inject is not None:
            from pipelines.mosaic import TrackedSession

            session = TrackedSession(session)
        injected = None
        history: list[Step] = []
        transcript: list[str] = []
        totals = {"prompt_tokens": 0, "completion_tokens": 0, "latency_s": 0.0}
        tool_errors = format_errors = 0
        final, finish, error = "", None, None
        for turn in range(self.max_turns):
            messages = context_messages(problem, history, self.context_policy)
            turn_params = dataclasses.replace(params, stop=TURN_STOPS)
            result = await run.complete(messages, turn_params, sample_index=sample_index * 100 + turn)
            totals["prompt_tokens"] += int(result.prompt_tokens or 0)
            totals["completion_tokens"] += int(result.completion_tokens or 0)
            totals["latency_s"] += float(result.latency_s or 0.0)
            finish, error = result.finish_reason, result.error
            if error:
                break
            text = close_stopped_block(result.text or "")
            transcript.append(text)
            try:
                step = parse_output(text)
            except TIRFormatError:
                format_errors += 1
                final = self.graded_text(text)  # off-schema: its last <answer> block, if any
                break
            if step.kind == KIND_ANSWER:
                final = self.graded_text(text)
                break
            if inject is not None and not history:
                from pipelines.mosaic import inject_environment_failure

                observed = await asyncio.to_thread(inject_environment_failure, session,
                                                   step.action, inject)
                injected = inject
            else:
                observed = await asyncio.to_thread(session.execute, step.action)
            if observed.error is not None or observed.timed_out or observed.memory_exceeded:
                tool_errors += 1
            obs = render_observation(observed)
            history.append(step.with_observation(obs))
            transcript.append(f"<interpreter>\n{obs}\n</interpreter>")
        return {"output": "\n".join(transcript), "graded_text": final,
                "turns": len(transcript) - len(history), "cells": len(history),
                "tool_errors": tool_errors, "format_errors": format_errors,
                "injected_failure": injected, "finish_reason": finish, "gen_error": error,
                **totals}

    def sample_fields(self, run: Run, job: Job, row: Mapping[str, Any]) -> dict[str, Any]:
        return {"context_policy": self.context_policy}
