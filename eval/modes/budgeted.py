"""``budgeted``: the same problem once per token budget B (Engagement Process §5.3, App. F).

Each job carries the instruction for B (``budget_prompt``: ``urgency``, the Engagement paper's
four wordless instructions, by default; ``numeric`` states B). Every budget is decoded with
the SAME generation limit (Engagement Process App. F decodes every budget to 32,768 tokens):
``budget_limit`` when set, else ``BUDGET_LIMIT_FACTOR`` x the largest budget, capped by the
room the model's context leaves after the prompt (:func:`budget_generation_limit`);
``EvalConfig.max_tokens`` does not apply. Budgeted Success, Acc and Tok are scored afterwards
from the rows (``eval.budget``), so Acc@B is accuracy regardless of length as in the paper. A
limit below the largest budget is allowed but warned about (:func:`budget_limit_warning`):
answers are then cut before they could overrun that budget. Rows record the budget, the limit
(``generation_limit``) and the tokens counted against the budget (``tokens_used``: completion
tokens without the end-of-sequence token that stopped the answer, see
:func:`budget_tokens_used`); the run's limit and warning go to ``EvalResult.extra``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from eval.modes.base import Job, Mode, Run, prompt_token_bound, register_mode
from pipelines.formats import BOXED, BUDGET_PROMPT_STYLES, budget_instruction

log = logging.getLogger(__name__)

# The default decoding limit is this many times the largest budget (the paper's 32,768-token
# limit is 4 x its largest budget, 8,000, rounded up to a power of two).
BUDGET_LIMIT_FACTOR = 4
LIMIT = "generation_limit"  # run.state key of the run's one decoding limit


def budget_generation_limit(mode: BudgetedMode, context_window: int | None = None,
                            prompt_tokens: int = 0) -> int:
    """The one decoding limit every budget of a budgeted run gets.

    ``mode.budget_limit`` when set, else ``BUDGET_LIMIT_FACTOR * max(mode.budgets)``; when the
    model's context window is known, at most ``context_window - prompt_tokens`` (pass the
    largest prompt of the run, e.g. ``prompt_token_bound``) so no request overflows it.
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


def budget_limit_warning(mode: BudgetedMode, limit: int) -> str | None:
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


@register_mode
@dataclass(frozen=True)
class BudgetedMode(Mode):
    """Every problem under every budget in ``budgets``, all decoded with one limit."""

    name: ClassVar[str] = "budgeted"
    answer_format: ClassVar[str] = BOXED

    budgets: tuple[int, ...] = (1000, 2000, 4000, 8000)
    budget_limit: int | None = None  # one decoding limit for every budget; None: the default
    usage_counts_eos: bool = True  # the server's completion_tokens include the stopping EOS
    budget_prompt: str = "urgency"  # pipelines.formats.BUDGET_PROMPT_STYLES: urgency | numeric

    def __post_init__(self) -> None:
        if isinstance(self.budgets, int | str) or not isinstance(self.budgets, Sequence):
            raise TypeError(f"budgets must be a list of token counts, got {self.budgets!r}")
        object.__setattr__(self, "budgets", tuple(self.budgets))
        if not self.budgets:
            raise ValueError("budgeted mode needs at least one budget (e.g. budgets=[1000, 2000])")
        if any(int(b) <= 0 for b in self.budgets):
            raise ValueError("budgets must be positive token counts")
        if self.budget_limit is not None and (isinstance(self.budget_limit, bool)
                                              or not isinstance(self.budget_limit, int)
                                              or self.budget_limit < 1):
            raise ValueError(f"budget_limit must be a positive token count or None (None: "
                             f"{BUDGET_LIMIT_FACTOR} x the largest budget), "
                             f"got {self.budget_limit!r}")
        if self.budget_prompt not in BUDGET_PROMPT_STYLES:
            raise ValueError(f"budget_prompt must be one of {BUDGET_PROMPT_STYLES} (the paper's "
                             f"urgency words, or our wording with the number), "
                             f"got {self.budget_prompt!r}")

    def plan(self, problems: Sequence[dict[str, Any]], k: int) -> list[Job]:
        return [Job(p, i, budget=b) for b in self.budgets for p in problems for i in range(k)]

    def messages(self, bench: Any, job: Job) -> list[dict[str, str]]:
        instruction = budget_instruction(job.budget, self.budgets, self.budget_prompt)
        return [{"role": "user", "content": f"{bench.render(job.problem)}\n\n{instruction}"}]

    async def prepare(self, run: Run, jobs: list[Job]) -> None:
        """The run's one decoding limit (:func:`budget_generation_limit`), bounded by the
        model's context minus the run's largest prompt; logs a warning when it is below the
        largest budget."""
        context = await asyncio.to_thread(run.context_window)
        prompt = max(prompt_token_bound(self.messages(run.bench, job)) for job in jobs)
        limit = budget_generation_limit(self, context, prompt if context is not None else 0)
        warning = budget_limit_warning(self, limit)
        if warning:
            log.warning(warning)
        run.state[LIMIT] = limit

    def max_tokens(self, run: Run, job: Job, max_tokens: int) -> int:
        limit = run.state.get(LIMIT)
        return max(1, limit if limit is not None else budget_generation_limit(self))

    def sample_fields(self, run: Run, job: Job, row: Mapping[str, Any]) -> dict[str, Any]:
        return {LIMIT: self.max_tokens(run, job, 0),
                "tokens_used": budget_tokens_used(row["completion_tokens"], row["finish_reason"],
                                                  self.usage_counts_eos)}

    def run_extra(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The run's one generation limit and its warning, for the asset's metadata."""
        limits = {r[LIMIT] for r in rows if r.get(LIMIT) is not None}
        if not limits:
            return {}
        limit = max(limits)
        return {"budget_generation_limit": limit,
                "budget_limit_warning": budget_limit_warning(self, limit)}
