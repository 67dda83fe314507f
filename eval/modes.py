"""Generation modes of the evaluation: single-turn, interleaved (SxS), budgeted, tool-integrated.

Every mode turns (benchmark, problems, config) into per-sample rows of ``eval_samples``:

Each mode's outputs have an answer format (:data:`MODE_FORMATS`, ``pipelines.formats``) and
what is graded is that format's answer region (:func:`graded_text`), the same region the RL
reward of that format grades, with the same grader.

- ``single``: one completion per sample for the benchmark's prompt (format ``boxed``). With a
  tokenizer (``tokenizer_path``) the content-latency metrics are computed too: a
  reason-then-answer output is one think and one speak block, which gives the single-mode rows
  of SxS Table 1.
- ``interleaved``: the think/speak instruction as system prompt (format ``sxs``); the output
  is parsed with the tolerant tag parser, the *speak* projection is what gets graded, and the
  content-latency metrics (ARI, ABO, AIRW, first substantive disclosure, filler rate) are
  computed per sample with the model's tokenizer.
- ``budgeted``: the same problem once per requested token budget B, with the instruction for
  B (``budget_prompt``: ``urgency``, the Engagement paper's four wordless instructions, by
  default; ``numeric`` states B). Every budget is decoded with the SAME generation limit (Engagement
  Process App. F decodes every budget to 32,768 tokens): ``budget_limit`` when set, else
  ``BUDGET_LIMIT_FACTOR`` x the largest budget, capped by the room the model's context leaves
  after the prompt (:func:`budget_generation_limit`); ``EvalConfig.max_tokens`` does not apply.
  Budgeted Success, Acc and Tok are scored afterwards from the rows (``eval.budget``), so Acc@B
  is accuracy regardless of length as in the paper. A limit below the largest budget is
  allowed but warned about (:func:`budget_limit_warning`): answers are then cut before they
  could overrun that budget. Rows record the budget, the limit (``generation_limit``) and the
  tokens counted against the budget (``tokens_used``: completion tokens without the
  end-of-sequence token that stopped the answer, see :func:`budget_tokens_used`).
- ``tool``: multi-turn tool-integrated solving. The model writes ``<think>`` then ``<code>``;
  weft runs the code in a sandbox session (variables persist) and feeds the rendered
  observation back as ``<interpreter>``, until ``<answer>`` or the turn/token limit; the last
  turn's last ``<answer>`` block is graded (format ``tir``). Context
  policy ``state_preserved`` keeps earlier thoughts, ``state_discarded`` keeps only code and
  outputs. ``thinking_caps`` cap each turn's thinking (the thinking-budget sweep).

- ``handoff``: Tandem RL §4.3 handoff robustness. The evaluated model (senior) and a partner
  model (``handoff_partner``, the junior) take turns at every ``"\n\n"`` reasoning step of one
  shared answer (format ``boxed``), strictly alternating or by a seeded draw per step
  (``handoff_schedule``: ``alternate`` | ``bernoulli`` with ``handoff_p``, App. B.3), with the
  senior or the junior writing the first step (``handoff_starts``). Run by ``eval.handoff``;
  the client passed to the runner is an ``eval.handoff.HandoffTeam`` of the two clients.

A sweep over ``thinking_caps`` repeats the chosen mode (``single`` or ``tool``) once per cap
(``thinking_cap`` column). A cap limits the THINKING of each answer or turn, not the whole
reply (DeepTool §3.4, a per-step thinking budget): the reply is generated up to the cap, an
open ``<think>`` block is closed there and the same assistant message is continued for the
action or answer within ``max_tokens`` (:func:`capped_chat`; vLLM's
``continue_final_message``). Cap 0 is the no-thinking run (an empty thinking block), the
baseline of the token cost-effectiveness curve (DeepTool Eq. 12, ``eval.budget.eff_curve``).
Departure from the paper: DeepTool's no-thinking baseline is a separately trained model; here
it is the same model with thinking closed (``eval_reports`` can name another model instead).
Not guaranteed: that a small model follows any of these formats; malformed outputs are graded
by their format's answer-region rules (possibly as no answer) and counted, never dropped.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from eval.latency import latency_metrics
from pipelines.formats import (
    BOXED,
    BUDGET_PROMPT_STYLES,
    SXS,
    SXS_SYSTEM_PROMPT,
    TIR,
    answer_region,
    budget_instruction,
    parse_tagged,
)

MODES = ("single", "interleaved", "budgeted", "tool", "handoff")
# The answer format of each mode's outputs (pipelines.formats): its answer region is graded,
# exactly as the RL reward of that format reads it.
MODE_FORMATS = {"single": BOXED, "budgeted": BOXED, "interleaved": SXS, "tool": TIR,
                "handoff": BOXED}
# Modes whose outputs get content-latency metrics (SxS Table 1 has both kinds of rows).
LATENCY_MODES = ("single", "interleaved")
# Budgeted mode's default decoding limit is this many times the largest budget (the paper's
# 32,768-token limit is 4 x its largest budget, 8,000, rounded up to a power of two).
BUDGET_LIMIT_FACTOR = 4
# Modes whose answers (or turns) open with one <think> block that a thinking cap can limit.
CAPPED_MODES = ("single", "tool")
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
# Cap 0 (no thinking): the answer is continued from an empty, closed thinking block.
NO_THINKING = f"{THINK_OPEN}\n\n{THINK_CLOSE}\n"
# vLLM chat-completions fields that continue the last (assistant) message instead of starting
# a new one; other servers may ignore them (then the continuation is a fresh reply).
CONTINUE_MESSAGE = {"continue_final_message": True, "add_generation_prompt": False}
# Tokens a chat template may add around the messages (role markers, a default system prompt);
# part of the prompt-size bound used to keep the decoding limit inside the model's context.
TEMPLATE_TOKENS = 128
POLICIES = ("state_preserved", "state_discarded")


@dataclass(frozen=True)
class ModeConfig:
    mode: str = "single"
    budgets: tuple[int, ...] = (1000, 2000, 4000, 8000)
    budget_limit: int | None = None  # one decoding limit for every budget; None: the default
    usage_counts_eos: bool = True  # the server's completion_tokens include the stopping EOS
    thinking_caps: tuple[int, ...] = ()
    context_policy: str = "state_preserved"
    max_turns: int = 6
    tokenizer_path: str | None = None
    budget_prompt: str = "urgency"  # pipelines.formats.BUDGET_PROMPT_STYLES: urgency | numeric
    # handoff mode (eval.handoff): the partner's label, who writes the first step, the schedule
    handoff_partner: str = ""
    handoff_starts: str = "senior"  # senior | junior
    handoff_schedule: str = "alternate"  # alternate (§4.3) | bernoulli (App. B.3)
    handoff_p: float = 0.5  # bernoulli: the senior's probability at each step

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.context_policy not in POLICIES:
            raise ValueError(f"context_policy must be one of {POLICIES}, got {self.context_policy!r}")
        if self.mode == "budgeted" and not self.budgets:
            raise ValueError("budgeted mode needs at least one budget (e.g. budgets=[1000, 2000])")
        if any(int(b) <= 0 for b in self.budgets):
            raise ValueError("budgets must be positive token counts")
        if any(isinstance(c, bool) or not isinstance(c, int) or c < 0
               for c in self.thinking_caps):
            raise ValueError(f"thinking caps must be token counts >= 0 (0: no thinking, the "
                             f"baseline of the Eff curve), got {list(self.thinking_caps)}")
        if self.thinking_caps and self.mode not in CAPPED_MODES:
            raise ValueError(f"thinking caps apply to the modes {CAPPED_MODES} (one thinking "
                             f"block per answer or turn), not to {self.mode!r}")
        if self.budget_limit is not None and (isinstance(self.budget_limit, bool)
                                              or not isinstance(self.budget_limit, int)
                                              or self.budget_limit < 1):
            raise ValueError(f"budget_limit must be a positive token count or None (None: "
                             f"{BUDGET_LIMIT_FACTOR} x the largest budget), "
                             f"got {self.budget_limit!r}")
        if self.max_turns < 1:
            raise ValueError("max_turns must be >= 1")
        if self.mode == "handoff":
            from eval.handoff import check_handoff_settings

            check_handoff_settings(self.handoff_schedule, self.handoff_starts, self.handoff_p)
        if self.budget_prompt not in BUDGET_PROMPT_STYLES:
            raise ValueError(f"budget_prompt must be one of {BUDGET_PROMPT_STYLES} (the paper's "
                             f"urgency words, or our wording with the number), "
                             f"got {self.budget_prompt!r}")


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


def prompt_token_bound(messages: Sequence[dict[str, Any]]) -> int:
    """An upper bound on the prompt's tokens without a tokenizer: UTF-8 bytes of the contents
    (a byte-level BPE token covers at least one byte) plus :data:`TEMPLATE_TOKENS`."""
    return sum(len(str(m.get("content") or "").encode()) for m in messages) + TEMPLATE_TOKENS


def budget_generation_limit(mode: ModeConfig, context_window: int | None = None,
                            prompt_tokens: int = 0) -> int:
    """The one decoding limit every budget of a budgeted run gets.

    ``mode.budget_limit`` when set, else ``BUDGET_LIMIT_FACTOR * max(mode.budgets)``; when the
    model's context window is known, at most ``context_window - prompt_tokens`` (pass the
    largest prompt of the run, e.g. :func:`prompt_token_bound`) so no request overflows it.
    """
    if not mode.budgets:
        raise ValueError("budget_generation_limit needs budgets (budgeted mode)")
    limit = mode.budget_limit or BUDGET_LIMIT_FACTOR * max(int(b) for b in mode.budgets)
    if context_window is not None:
        room = int(context_window) - int(prompt_tokens)
        if room < 1:
            raise ValueError(f"the prompts (up to {prompt_tokens} tokens) leave no room in the "
                             f"model's {context_window}-token context; serve the model with a "
                             "longer context (vLLM --max-model-len)")
        limit = min(limit, room)
    return limit


def budget_limit_warning(mode: ModeConfig, limit: int) -> str | None:
    """A warning when ``limit`` is below the largest budget (answers are cut before they can
    overrun it, so Budgeted Success there cannot see overruns), else None."""
    largest = max(int(b) for b in mode.budgets)
    if limit >= largest:
        return None
    return (f"budgeted generation limit {limit} is below the largest budget {largest}: answers "
            f"are cut at {limit} tokens, so budgets above it cannot observe overruns and Acc@B "
            "there counts cut-off answers. Raise budget_limit (or serve the model with a longer "
            "context) to at least the largest budget; the paper decodes to 32,768 tokens.")


def budget_tokens_used(completion_tokens: int, finish_reason: str | None,
                       usage_counts_eos: bool = True) -> int:
    """Tokens counted against a budget: the completion without the end-of-sequence token.

    vLLM counts the EOS token that ended a sequence in ``usage.completion_tokens``
    (``finish_reason == "stop"`` with no stop strings, as in budgeted mode); that token is not
    part of the solution, so it is removed. Cut-off answers (``"length"``) have no EOS.
    """
    used = int(completion_tokens or 0)
    if usage_counts_eos and finish_reason == "stop" and used > 0:
        used -= 1
    return used


def max_tokens_for(job: Job, mode: ModeConfig, max_tokens: int,
                   budget_limit: int | None = None) -> int:
    """The generation limit of one job's answer (or of each turn in tool mode).

    Budgeted jobs all get the run's one limit (``budget_limit``, default
    :func:`budget_generation_limit` without a context bound), whatever their own budget;
    other jobs get ``max_tokens``. A thinking cap does not lower it: the cap limits only the
    thinking inside that limit (:func:`capped_chat`).
    """
    if job.budget is not None:
        return max(1, budget_limit if budget_limit is not None else budget_generation_limit(mode))
    return max(1, max_tokens)


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
    import dataclasses

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


def messages_for(bench: Any, job: Job, mode: ModeConfig) -> list[dict[str, str]]:
    """The conversation that asks for one sample in this mode."""
    user = bench.render(job.problem)
    if mode.mode == "interleaved":
        return [{"role": "system", "content": SXS_SYSTEM_PROMPT}, {"role": "user", "content": user}]
    if mode.mode == "budgeted":
        instruction = budget_instruction(job.budget, mode.budgets, mode.budget_prompt)
        return [{"role": "user", "content": f"{user}\n\n{instruction}"}]
    return [{"role": "user", "content": user}]


def wants_tokenizer(mode: ModeConfig) -> bool:
    """Whether rows of this mode get content-latency metrics, which need a tokenizer: always in
    ``interleaved`` mode, in ``single`` mode when ``tokenizer_path`` is given."""
    return mode.mode == "interleaved" or (mode.mode in LATENCY_MODES
                                          and mode.tokenizer_path is not None)


def graded_text(mode: str, text: str) -> str:
    """The answer region of one output in the mode's format (:data:`MODE_FORMATS`), the text
    the grader reads; "" when the output has none (so nothing else is graded instead)."""
    region = answer_region(text or "", MODE_FORMATS[mode])
    return "" if region is None else region


def output_fields(mode: str, text: str, tokenizer: Any) -> dict[str, Any]:
    """The graded text of one output and, for :data:`LATENCY_MODES` with a tokenizer, its
    content-latency metrics (tolerant tag parse)."""
    out: dict[str, Any] = {"graded_text": graded_text(mode, text)}
    if tokenizer is None or mode not in LATENCY_MODES:
        return out
    segments = parse_tagged(text or "", strict=False)
    if segments:
        m = latency_metrics(segments, tokenizer)
        out.update(ari=m.ari, abo=m.abo, airw=m.airw, airw_between=m.airw_between,
                   first_disclosure=m.first_disclosure,
                   filler_rate=m.filler_rate, reasoning_tokens=m.reasoning_tokens,
                   response_tokens=m.response_tokens)
    return out


async def solve_with_tools(client: Any, session: Any, problem: str, *, params: Any, mode: ModeConfig,
                           tag: str, sample_index: int, cap: int | None = None) -> dict[str, Any]:
    """Multi-turn tool-integrated solving of one problem in one sandbox session; with a
    thinking ``cap``, each turn's thinking is capped (:func:`capped_chat`), not the turn."""
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
        index = sample_index * 100 + turn
        if cap is None:
            result = (await client.chat(messages, turn_params, tag=tag, sample_index=index))[0]
        else:
            result = await capped_chat(client, messages, turn_params, cap, tag=tag,
                                       sample_index=index)
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
            final = graded_text("tool", text)  # off-schema: its last <answer> block, if any
            break
        if step.kind == KIND_ANSWER:
            final = graded_text("tool", text)
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
