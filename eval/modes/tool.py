"""``tool``: multi-turn tool-integrated solving (MOSAIC §2.2 schema, format ``tir``).

The model writes ``<think>`` then ``<code>``; weft runs the code in a sandbox session
(variables persist) and feeds the rendered observation back as ``<interpreter>``, until
``<answer>`` or the turn/token limit; the last turn's last ``<answer>`` block is graded.
Context policy ``state_preserved`` keeps earlier thoughts, ``state_discarded`` keeps only code
and outputs (``pipelines.tir.context_messages``). ``max_tokens`` limits each turn. Rows add
``turns``, ``tool_errors``, ``format_errors`` and ``context_policy``; ``output`` is the whole
transcript (turns and interpreter outputs).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from eval.modes.base import Job, Mode, Run, register_mode
from pipelines.formats import TIR

POLICIES = ("state_preserved", "state_discarded")
TURN_STOPS = ("</code>", "</answer>")


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

    def __post_init__(self) -> None:
        if self.context_policy not in POLICIES:
            raise ValueError(f"context_policy must be one of {POLICIES}, "
                             f"got {self.context_policy!r}")
        if isinstance(self.max_turns, bool) or not isinstance(self.max_turns, int) \
                or self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns!r}")

    async def prepare(self, run: Run, jobs: list[Job]) -> None:
        if run.sandbox is None:
            raise ValueError("tool mode needs a sandbox (pipelines.sandbox.SandboxPool)")

    async def generate(self, run: Run, job: Job, messages: list[dict[str, Any]],
                       params: Any) -> dict[str, Any]:
        session = await asyncio.to_thread(run.sandbox.session)
        try:
            return await self.solve(run, session, job.problem["problem"], params,
                                    sample_index=job.variant)
        finally:
            await asyncio.to_thread(session.close)

    async def solve(self, run: Run, session: Any, problem: str, params: Any, *,
                    sample_index: int) -> dict[str, Any]:
        """Multi-turn solving of one problem in one sandbox session; every turn is one
        ``run.complete`` (so a thinking cap caps each turn's thinking, not the turn). Returns
        the row's generation columns, ``graded_text`` included (the answer block of the
        last turn; an off-schema turn ends the sample with its last ``<answer>``, if any)."""
        from pipelines.sandbox import render_observation
        from pipelines.tir import KIND_ANSWER, Step, TIRFormatError, context_messages, parse_output

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
            observed = await asyncio.to_thread(session.execute, step.action)
            if observed.error is not None or observed.timed_out or observed.memory_exceeded:
                tool_errors += 1
            obs = render_observation(observed)
            history.append(step.with_observation(obs))
            transcript.append(f"<interpreter>\n{obs}\n</interpreter>")
        return {"output": "\n".join(transcript), "graded_text": final,
                "turns": len(transcript) - len(history), "tool_errors": tool_errors,
                "format_errors": format_errors, "finish_reason": finish, "gen_error": error,
                **totals}

    def sample_fields(self, run: Run, job: Job, row: Mapping[str, Any]) -> dict[str, Any]:
        return {"context_policy": self.context_policy}
