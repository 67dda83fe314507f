"""Generation modes of the evaluation, one class per mode (``eval.modes.base.Mode``).

Every mode turns (benchmark, problems, config) into per-sample rows of ``eval_samples``
through the same protocol (plan the jobs, build the messages, generate, extract the graded
text, add its own columns; ``eval.modes.base``), driven by ``eval.runner``. Each mode's
outputs have an answer format (:data:`MODE_FORMATS`, ``pipelines.formats``) and what is
graded is that format's answer region (``Mode.graded_text``), the same region the RL reward
of that format grades, with the same grader.

| mode | class | module |
|---|---|---|
| ``single`` | :class:`SingleMode` | ``eval.modes.single`` |
| ``interleaved`` (SxS think/speak) | :class:`InterleavedMode` | ``eval.modes.single`` |
| ``budgeted`` (Engagement Process §5.3) | :class:`BudgetedMode` | ``eval.modes.budgeted`` |
| ``tool`` (MOSAIC tool-integrated) | :class:`ToolMode` | ``eval.modes.tool`` |
| ``handoff`` (Tandem RL §4.3) | :class:`HandoffMode` | ``eval.modes.handoff`` |
| ``thinking_caps`` sweep of ``single`` / ``tool`` (DeepTool §3.4) | :class:`ThinkingCaps` | ``eval.modes.capped`` |

Build a mode by name from flat settings with :func:`build_mode` (what the ``eval_samples``
config does), or construct its class directly. A new mode is one class: subclass
:class:`Mode` as a frozen dataclass of its settings, set ``name`` and ``answer_format``,
override what differs and decorate it with :func:`register_mode`.

Not guaranteed: that a small model follows any of these formats; malformed outputs are graded
by their format's answer-region rules (possibly as no answer) and counted, never dropped.
"""

from __future__ import annotations

from eval.modes.base import (
    MODES,
    TEMPLATE_TOKENS,
    Job,
    Mode,
    Run,
    completion_fields,
    messages_for,
    mode_class,
    plain_chat,
    plan_jobs,
    prompt_token_bound,
    register_mode,
)
from eval.modes.budgeted import (
    BUDGET_LIMIT_FACTOR,
    BudgetedMode,
    budget_generation_limit,
    budget_limit_warning,
    budget_tokens_used,
)
from eval.modes.build import build_mode
from eval.modes.capped import CONTINUE_MESSAGE, NO_THINKING, ThinkingCaps, capped_chat
from eval.modes.handoff import HandoffMode
from eval.modes.single import InterleavedMode, SingleMode, latency_fields, load_tokenizer
from eval.modes.tool import POLICIES, ToolMode

# The answer format of each built-in mode's outputs (pipelines.formats): its answer region is
# graded, exactly as the RL reward of that format reads it.
MODE_FORMATS = {cls.name: cls.answer_format
                for cls in (SingleMode, InterleavedMode, BudgetedMode, ToolMode, HandoffMode)}


__all__ = [
    "BUDGET_LIMIT_FACTOR",
    "CONTINUE_MESSAGE",
    "MODES",
    "MODE_FORMATS",
    "NO_THINKING",
    "POLICIES",
    "TEMPLATE_TOKENS",
    "BudgetedMode",
    "HandoffMode",
    "InterleavedMode",
    "Job",
    "Mode",
    "Run",
    "SingleMode",
    "ThinkingCaps",
    "ToolMode",
    "budget_generation_limit",
    "budget_limit_warning",
    "budget_tokens_used",
    "build_mode",
    "capped_chat",
    "completion_fields",
    "latency_fields",
    "load_tokenizer",
    "messages_for",
    "mode_class",
    "plain_chat",
    "plan_jobs",
    "prompt_token_bound",
    "register_mode",
]
