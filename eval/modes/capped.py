"""The thinking-cap sweep: a cappable mode (``single`` or ``tool``) repeated once per cap.

A cap limits the THINKING of each answer or turn, not the whole reply (DeepTool §3.4, a
per-step thinking budget): the reply is generated up to the cap, an open ``<think>`` block is
closed there and the same assistant message is continued for the action or answer within
``max_tokens`` (:func:`capped_chat`; vLLM's ``continue_final_message``). Cap 0 is the
no-thinking run (an empty thinking block), the baseline of the token cost-effectiveness curve
(DeepTool Eq. 12, ``eval.budget.eff_curve``). Departure from the paper: DeepTool's no-thinking
baseline is a separately trained model; here it is the same model with thinking closed
(``eval_reports`` can name another model instead). Rows keep the wrapped mode's name and
columns, plus the cap in ``thinking_cap``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eval.modes.base import MODES, Job, Mode, Run

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
# Cap 0 (no thinking): the answer is continued from an empty, closed thinking block.
NO_THINKING = f"{THINK_OPEN}\n\n{THINK_CLOSE}\n"
# vLLM chat-completions fields that continue the last (assistant) message instead of starting
# a new one; other servers may ignore them (then the continuation is a fresh reply).
CONTINUE_MESSAGE = {"continue_final_message": True, "add_generation_prompt": False}


def _thinking_open(text: str) -> bool:
    start = text.rfind(THINK_OPEN)
    return start >= 0 and THINK_CLOSE not in text[start + len(THINK_OPEN):]


async def capped_chat(client: Any, messages: list[dict[str, Any]], params: Any, cap: int, *,
                      tag: str, sample_index: int) -> Any:
    """One answer (or tool-mode turn) whose THINKING is limited to ``cap`` tokens and the whole
    reply to ``params.max_tokens`` (DeepTool §3.4: a per-step thinking budget).

    Phase 1 asks for at most ``min(cap, max_tokens)`` tokens. If the reply ends there with its
    ``<think>`` block still open (the cap was reached, or the model stopped inside it),
    ``</think>`` is appended and the same assistant message is continued
    (:data:`CONTINUE_MESSAGE`) with the remaining ``max_tokens - used`` tokens and the caller's
    stop strings; a reply cut at the cap after (or without) its thinking is continued the same
    way; a reply that ended on its own is returned as it is. Cap 0 continues from an empty
    thinking block (:data:`NO_THINKING`). Returns one ``ChatResult``: the joined text, tokens
    and latency summed over both requests, the last request's finish reason and error.

    Not guaranteed: a model that opens further ``<think>`` blocks after the first is not capped
    there; the ``</think>`` appended here is not counted in ``completion_tokens``; servers
    without ``continue_final_message`` start a new reply for phase 2; a thinking block opened by
    the chat template (no ``<think>`` in the output) that is still open at the cap is continued
    without being closed.
    """
    from pipelines.llm import ChatResult

    limit = int(params.max_tokens)
    first = None
    if cap == 0:
        text, used = NO_THINKING, 0
    else:
        think = dataclasses.replace(params, max_tokens=max(1, min(cap, limit)))
        first = (await client.chat(messages, think, tag=tag, sample_index=sample_index))[0]
        text, used = first.text or "", int(first.completion_tokens or 0)
        if first.error or used >= limit:
            return first
        if _thinking_open(text):
            text = text + ("" if text.endswith("\n") else "\n") + THINK_CLOSE + "\n"
        elif first.finish_reason != "length":
            return first  # the reply ended within the cap
    rest = dataclasses.replace(params, max_tokens=max(1, limit - used))
    conversation = [*messages, {"role": "assistant", "content": text}]
    second = (await client.chat(conversation, rest, tag=tag, sample_index=sample_index,
                                extra_body=CONTINUE_MESSAGE))[0]
    return ChatResult(
        text=text + (second.text or ""), finish_reason=second.finish_reason,
        prompt_tokens=int((first or second).prompt_tokens or 0),
        completion_tokens=used + int(second.completion_tokens or 0),
        latency_s=float((first.latency_s or 0.0) if first else 0.0) + float(second.latency_s or 0.0),
        cached=bool(second.cached and (first is None or first.cached)), error=second.error)


@dataclass(frozen=True)
class ThinkingCaps(Mode):
    """``inner`` (a cappable mode) once per cap in ``thinking_caps``; every request of a job
    with cap c goes through :func:`capped_chat` with c. Everything else is ``inner``'s, and
    its settings read through (``caps.max_turns`` is ``caps.inner.max_turns``)."""

    inner: Mode
    thinking_caps: tuple[int, ...]

    def __post_init__(self) -> None:
        caps = self.thinking_caps
        if isinstance(caps, int) or not isinstance(caps, Sequence) or any(
                isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in caps):
            raise ValueError(f"thinking caps must be token counts >= 0 (0: no thinking, the "
                             f"baseline of the Eff curve), got {caps!r}")
        if not caps:
            raise ValueError("ThinkingCaps needs at least one cap (e.g. thinking_caps=[0, 64])")
        if not isinstance(self.inner, Mode) or not self.inner.cappable:
            cappable = tuple(n for n, c in MODES.items() if c.cappable)
            name = getattr(self.inner, "name", type(self.inner).__name__)
            raise ValueError(f"thinking caps apply to the modes {cappable} (one thinking "
                             f"block per answer or turn), not to {name!r}")
        object.__setattr__(self, "thinking_caps", tuple(caps))

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") or attr == "inner":
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.inner.name

    @property
    def answer_format(self) -> str:  # type: ignore[override]
        return self.inner.answer_format

    @property
    def measures_latency(self) -> bool:  # type: ignore[override]
        return self.inner.measures_latency

    def plan(self, problems: Sequence[dict[str, Any]], k: int) -> list[Job]:
        jobs = self.inner.plan(problems, k)
        return [dataclasses.replace(job, cap=cap, extra=dict(job.extra))
                for cap in self.thinking_caps for job in jobs]

    def messages(self, bench: Any, job: Job) -> list[dict[str, str]]:
        return self.inner.messages(bench, job)

    async def prepare(self, run: Run, jobs: list[Job]) -> None:
        await self.inner.prepare(run, jobs)

    def max_tokens(self, run: Run, job: Job, max_tokens: int) -> int:
        return self.inner.max_tokens(run, job, max_tokens)

    def capped_run(self, run: Run, cap: int | None) -> Run:
        """``run`` whose completions cap the thinking at ``cap`` (unchanged for None)."""
        if cap is None:
            return run
        return dataclasses.replace(run, chat=functools.partial(capped_chat, cap=cap))

    async def generate(self, run: Run, job: Job, messages: list[dict[str, Any]],
                       params: Any) -> dict[str, Any]:
        return await self.inner.generate(self.capped_run(run, job.cap), job, messages, params)

    def graded_text(self, output: str) -> str:
        return self.inner.graded_text(output)

    def sample_fields(self, run: Run, job: Job, row: Mapping[str, Any]) -> dict[str, Any]:
        return self.inner.sample_fields(run, job, row)

    def run_extra(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return self.inner.run_extra(rows)

