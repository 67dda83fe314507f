"""Generation modes of the evaluation: single-turn, interleaved (SxS), budgeted, tool-integrated.

Every mode turns (benchmark, problems, config) into per-sample rows of ``eval_samples``:

- ``single``: one completion per sample for the benchmark's prompt.
- ``interleaved``: the think/speak instruction as system prompt; the output is parsed with the
  tolerant tag parser, the *speak* projection is what gets graded, and the content-latency
  metrics (ARI, ABO, AIRW, first substantive disclosure, filler rate) are computed per sample
  with the model's tokenizer.
- ``budgeted``: the same problem once per requested token budget B, with the urgency
  instruction for B; generation is capped at ``B * overrun`` tokens (and ``max_tokens``) so
  overruns stay observable; rows record the budget and the tokens used.
- ``tool``: multi-turn tool-integrated solving. The model writes ``<think>`` then ``<code>``;
  weft runs the code in a sandbox session (variables persist) and feeds the rendered
  observation back as ``<interpreter>``, until ``<answer>`` or the turn/token limit. Context
  policy ``state_preserved`` keeps earlier thoughts, ``state_discarded`` keeps only code and
  outputs. ``thinking_caps`` cap each turn's tokens (the thinking-budget sweep).

A sweep over ``thinking_caps`` repeats the chosen mode once per cap (``thinking_cap`` column).
Not guaranteed: that a small model follows any of these formats; malformed outputs are graded
as they are and counted, never dropped.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Sequence

MODES = ("single", "interleaved", "budgeted", "tool")
POLICIES = ("state_preserved", "state_discarded")


@dataclass(frozen=True)
class ModeConfig:
    mode: str = "single"
    budgets: tuple[int, ...] = (1000, 2000, 4000, 8000)
    budget_overrun: float = 1.5
    thinking_caps: tuple[int, ...] = ()
    context_policy: str = "state_preserved"
    max_turns: int = 6
    tokenizer_path: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.context_policy not in POLICIES:
            raise ValueError(f"context_policy must be one of {POLICIES}, got {self.context_policy!r}")
        if self.mode == "budgeted" and not self.budgets:
            raise ValueError("budgeted mode needs at least one budget (e.g. budgets=[1000, 2000])")
        if any(int(b) <= 0 for b in self.budgets) or any(int(c) <= 0 for c in self.thinking_caps):
            raise ValueError("budgets and thinking caps must be positive token counts")
        if self.budget_overrun < 1.0:
            raise ValueError("budget_overrun must be >= 1 (the cap is budget * overrun)")
        if self.max_turns < 1:
            raise ValueError("max_turns must be >= 1")


@dataclass
class Job:
    """One generation to run: a problem, a sample index and the mode-specific settings."""

    problem: dict[str, Any]
    index: int
    budget: int | None = None
    cap: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def plan_jobs(problems: Sequence[dict[str, Any]], k: int, mode: ModeConfig) -> list[Job]:
    caps: list[int | None] = list(mode.thinking_caps) or [None]
    budgets: list[int | None] = list(mode.budgets) if mode.mode == "budgeted" else [None]
    return [Job(p, i, budget=b, cap=c) for c in caps for b in budgets for p in problems for i in range(k)]


def problem_meta(problem: dict[str, Any]) -> dict[str, Any]:
    meta = problem.get("meta") or "{}"
    return json.loads(meta) if isinstance(meta, str) else dict(meta)


def max_tokens_for(job: Job, mode: ModeConfig, max_tokens: int) -> int:
    limit = max_tokens
    if job.budget is not None:
        limit = min(limit, int(job.budget * mode.budget_overrun))
    if job.cap is not None:
        limit = min(limit, job.cap)
    return max(1, limit)


def messages_for(bench: Any, job: Job, mode: ModeConfig) -> list[dict[str, str]]:
    """The conversation that asks for one sample in this mode."""
    user = bench.render(job.problem)
    if mode.mode == "interleaved":
        from pipelines.sxs import SFT_SYSTEM_PROMPT

        return [{"role": "system", "content": SFT_SYSTEM_PROMPT}, {"role": "user", "content": user}]
    if mode.mode == "budgeted":
        from training.rewards import budget_instruction

        return [{"role": "user", "content": f"{user}\n\n{budget_instruction(job.budget, mode.budgets)}"}]
    return [{"role": "user", "content": user}]


def interleaved_fields(text: str, tokenizer: Any) -> dict[str, Any]:
    """Speak projection (the graded answer) and latency metrics of one interleaved output."""
    from eval.latency import latency_metrics, parse_tagged

    segments = parse_tagged(text or "", strict=False)
    speak = "\n\n".join(c for kind, c in segments if kind == "speak")
    out: dict[str, Any] = {"graded_text": speak}
    if segments:
        m = latency_metrics(segments, tokenizer)
        out.update(ari=m.ari, abo=m.abo, airw=m.airw, first_disclosure=m.first_disclosure,
                   filler_rate=m.filler_rate, reasoning_tokens=m.reasoning_tokens,
                   response_tokens=m.response_tokens)
    return out


async def solve_with_tools(client: Any, session: Any, problem: str, *, params: Any, mode: ModeConfig,
                           tag: str, sample_index: int) -> dict[str, Any]:
    """Multi-turn tool-integrated solving of one problem in one sandbox session."""
    import dataclasses

    from pipelines.sandbox import render_observation
    from pipelines.tir import KIND_ANSWER, Step, TIRFormatError, context_messages, parse_output

    history: list[Step] = []
    transcript: list[str] = []
    totals = {"prompt_tokens": 0, "completion_tokens": 0, "latency_s": 0.0}
    tool_errors = format_errors = 0
    final, finish, error = "", None, None
    for turn in range(mode.max_turns):
        messages = context_messages(problem, history, mode.context_policy)
        turn_params = dataclasses.replace(params, stop=("</code>", "</answer>"))
        result = (await client.chat(messages, turn_params, tag=tag, sample_index=sample_index * 100 + turn))[0]
        totals["prompt_tokens"] += int(result.prompt_tokens or 0)
        totals["completion_tokens"] += int(result.completion_tokens or 0)
        totals["latency_s"] += float(result.latency_s or 0.0)
        finish, error = result.finish_reason, result.error
        if error:
            break
        text = _close_stopped_block(result.text or "")
        transcript.append(text)
        try:
            step = parse_output(text)
        except TIRFormatError:
            format_errors += 1
            final = text  # not in the schema: grade what the model said
            break
        if step.kind == KIND_ANSWER:
            final = step.action
            break
        observed = await asyncio.to_thread(session.execute, step.action)
        if observed.error is not None or observed.timed_out or observed.memory_exceeded:
            tool_errors += 1
        obs = render_observation(observed)
        history.append(step.with_observation(obs))
        transcript.append(f"<interpreter>\n{obs}\n</interpreter>")
    return {"output": "\n".join(transcript), "graded_text": final, "turns": len(transcript) - len(history),
            "tool_errors": tool_errors, "format_errors": format_errors, "finish_reason": finish,
            "gen_error": error, **totals}


def _close_stopped_block(text: str) -> str:
    """vLLM drops the stop string: close the ``<code>``/``<answer>`` block it ended."""
    for tag in ("code", "answer"):
        if text.count(f"<{tag}>") > text.count(f"</{tag}>"):
            return text.rstrip() + f"\n</{tag}>"
    return text
