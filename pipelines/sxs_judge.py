"""The SxS coverage judge: protocol, LLM implementation, prompt loading, and the pre-filter.

A coverage judge answers one question per reasoning prefix R[1..k]: how many leading answer
blocks A[1..m] follow from the problem and that prefix without any new derivation.
``LLMJudge`` asks an OpenAI-compatible model through ``pipelines.llm.LLMClient.chat_json``
with our prompt (``prompts/sxs_judge.md``, read at every call so it can be edited between
runs) and the JSON schema ``{"covered": int}`` bounded to 0..K_A. A reply that is still invalid
after the client's one repair retry comes back as ``None`` ("failed"); the caller treats it as
no new coverage and counts it.

The pre-filter (``prefilter_skips``) is a cheap heuristic, not a judge: it says "nothing new"
when the next uncovered answer block mentions a number or key symbol that neither the problem
nor the prefix contains yet. It can be wrong both ways; ``bench/sxs_alignment.py`` measures
how often it agrees with the LLM judge.

``EvidenceJudge`` is a scripted judge through the same interface, for models too small to
judge (the embedded one): it covers the longest run of leading answer blocks whose numbers and
key symbols all appear in the problem or the reasoning prefix already. It never discloses a
number before the reasoning has written it (SxS App. B.1's "no new derivation" rule, read on
numbers only), but it cannot see a step that restates known numbers in a new claim, and a
block with no numbers or key symbols is covered as soon as it is reached.

Not guaranteed: that the model judges well (small models do not); only that every reply is
validated and every failure is reported as ``None`` rather than raised.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pipelines.prompts import PromptFile, load_prompt, prompt_path, render

if TYPE_CHECKING:  # imported lazily at run time, so the pure parts need no LLM client
    from pipelines.llm import LLMClient, SamplingParams

BLOCK_SEP = "\n\n"
JUDGE_PROMPT_PATH = prompt_path("sxs_judge")
JUDGE_TAG = "sxs/judge"

# Pre-filter evidence: numbers, plus a few symbols that have a LaTeX, Unicode and plain spelling.
_NUMBER_RE = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")
KEY_SYMBOLS: dict[str, tuple[str, ...]] = {
    "sqrt": (r"\\sqrt", "√", r"\bsqrt\b", r"\bsquare root\b"),
    "pi": (r"\\pi\b", "π", r"\bpi\b"),
    "infinity": (r"\\infty\b", "∞", r"\binfinit"),
    "degree": (r"\\circ\b", "°", r"\bdegrees?\b"),
    "log": (r"\\log\b", r"\\ln\b", r"\blog\b", r"\blogarithm", r"\bln\b"),
}


# ---------------------------------------------------------------------------------------------
# The judge


class CoverageJudge(Protocol):
    async def judge(self, problem: str, reasoning_prefix: Sequence[str],
                    answer_blocks: Sequence[str]) -> int | None:
        """Number of leading answer blocks supported by the prefix, or None if the call failed."""
        ...


def load_judge_prompt(path: str | Path | None = None) -> PromptFile:
    """The judge prompt (``pipelines/prompts/sxs_judge.md`` unless ``path`` names another file
    with ``# system`` and ``# user`` sections; see the file itself)."""
    return load_prompt(path if path is not None else JUDGE_PROMPT_PATH)


def render_judge_messages(prompt: PromptFile, problem: str, reasoning_prefix: Sequence[str],
                          answer_blocks: Sequence[str]) -> list[dict[str, str]]:
    """Chat messages for one prefix check; blocks are numbered ``[R1]…`` and ``[A1]…``."""
    values = {
        "problem": problem.strip(),
        "reasoning": BLOCK_SEP.join(f"[R{i}] {b}" for i, b in enumerate(reasoning_prefix, 1)),
        "answer": BLOCK_SEP.join(f"[A{i}] {b}" for i, b in enumerate(answer_blocks, 1)),
        "n_steps": str(len(reasoning_prefix)),
        "n_answer": str(len(answer_blocks)),
    }
    return render(prompt, values, "the judge prompt")


def coverage_schema(k_a: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"covered": {"type": "integer", "minimum": 0, "maximum": k_a}},
        "required": ["covered"],
        "additionalProperties": False,
    }


def parse_coverage(value: Any, k_a: int) -> int:
    """The count inside a judge reply (``{"covered": n}`` or a bare int); ValueError if invalid."""
    if isinstance(value, dict):
        if "covered" not in value:
            raise ValueError(f'reply has no "covered" key: {value!r}')
        value = value["covered"]
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValueError(f'"covered" must be an integer, got {value!r}')
    if not 0 <= value <= k_a:
        raise ValueError(f'"covered" must be between 0 and {k_a} (the number of answer blocks), '
                         f"got {value}")
    return value


class LLMJudge:
    """``CoverageJudge`` over ``pipelines.llm.LLMClient.chat_json``; the prompt file is read per call."""

    def __init__(self, client: LLMClient, *, params: SamplingParams | None = None,
                 prompt_path: str | Path | None = None, tag: str = JUDGE_TAG) -> None:
        if params is None:
            from pipelines.llm import SamplingParams
            params = SamplingParams(temperature=0.0, max_tokens=64)
        self.client, self.params, self.prompt_path, self.tag = client, params, prompt_path, tag

    async def judge(self, problem: str, reasoning_prefix: Sequence[str],
                    answer_blocks: Sequence[str]) -> int | None:
        k_a = len(answer_blocks)
        messages = render_judge_messages(load_judge_prompt(self.prompt_path), problem,
                                         reasoning_prefix, answer_blocks)
        result = await self.client.chat_json(messages, coverage_schema(k_a), self.params,
                                             validate=lambda v: parse_coverage(v, k_a), tag=self.tag)
        if result.value is None:
            return None
        try:
            return parse_coverage(result.value, k_a)
        except ValueError:
            return None


EVIDENCE_JUDGE = "evidence"  # the judge_model recorded for EvidenceJudge's alignments


class EvidenceJudge:
    """Scripted ``CoverageJudge``: the number of leading answer blocks whose :func:`evidence`
    (numbers, key symbols) is contained in the evidence of the problem plus the reasoning
    prefix. Deterministic and free; it makes no LLM call. ``name`` is what the alignments
    record as their judge."""

    name = EVIDENCE_JUDGE

    async def judge(self, problem: str, reasoning_prefix: Sequence[str],
                    answer_blocks: Sequence[str]) -> int:
        have = evidence(problem)
        for block in reasoning_prefix:
            have |= evidence(block)
        covered = 0
        while covered < len(answer_blocks) and evidence(answer_blocks[covered]) <= have:
            covered += 1
        return covered


def unsupported_disclosures(problem: str, reasoning: Sequence[str], answer: Sequence[str],
                            levels: Sequence[int]) -> tuple[int, int]:
    """(answer blocks shown before the last reasoning block, those among them with a number or
    key symbol that the problem and the reasoning shown so far do not contain) for repaired
    levels ``levels`` (one per reasoning prefix). A quality figure of a judge's alignments:
    the second count is how often it disclosed a value before the reasoning wrote it (zero by
    construction for :class:`EvidenceJudge`; an LLM judge is not bound by it)."""
    if len(levels) != len(reasoning):
        raise ValueError(f"levels has {len(levels)} entries but there are {len(reasoning)} "
                         "reasoning blocks; pass one level per reasoning prefix")
    have = set(evidence(problem))
    shown = early = unsupported = 0
    for k, level in enumerate(levels[:-1]):  # the last prefix is the terminal safeguard
        have |= evidence(reasoning[k])
        for block in answer[shown:level]:
            early += 1
            unsupported += not evidence(block) <= have
        shown = max(shown, level)
    return early, unsupported


# ---------------------------------------------------------------------------------------------
# Pre-filter


def evidence(text: str) -> frozenset[str]:
    """Numbers (``1,000`` → ``1000``, ``27.0`` → ``27``, ``033`` → ``33``) and key-symbol names."""
    found: set[str] = set()
    for raw in _NUMBER_RE.findall(text):
        whole, _, frac = raw.replace(",", "").partition(".")
        frac = frac.rstrip("0")
        found.add((whole.lstrip("0") or "0") + (f".{frac}" if frac else ""))
    for name, patterns in KEY_SYMBOLS.items():
        if any(re.search(p, text, flags=re.IGNORECASE) for p in patterns):
            found.add(name)
    return frozenset(found)


def prefilter_skips(context: str | frozenset[str], answer_blocks: Sequence[str], covered: int) -> bool:
    """True when the next uncovered block ``A[covered+1]`` has evidence absent from ``context``.

    ``context`` is the problem plus the reasoning prefix, as text or as its ``evidence`` (the
    evidence of a text joined from blocks is the union of the blocks' evidence, so callers can
    grow it block by block). A block with no numbers or key symbols is never skipped: the filter
    only acts on positive evidence that something new is needed.
    """
    if covered >= len(answer_blocks):
        return False
    have = context if isinstance(context, frozenset) else evidence(context)
    return not evidence(answer_blocks[covered]) <= have
