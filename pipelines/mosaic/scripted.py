"""Scripted MOSAIC agents: a manager that walks the reference solution's calculations and an
actor that turns each card into a Python cell, for runs where no capable LLM is at hand.

MOSAIC (DeepTool §2.1, Algorithm 1) needs a manager that reads the reference solution y* and
an actor that writes correct code from the manager's card. A 135M model does neither (it
completes a trajectory for about one problem in ten), so a CPU-sized experiment about what
*training on* MOSAIC data teaches — e.g. the recovery that failure injection is meant to
teach (DeepTool §1, §3.6) — gets no data from it. These agents play the two roles by rule,
through the same ``Manager``/``Actor`` protocols, so the loop itself is unchanged: the same
cards, the same enforcement of Listing 1's rules, the same sandbox and, above all, the same
failure injection (Φ_gen mutates the cell the actor wrote and the interpreter really runs it;
Φ_env replaces the observation), with the same ρ.

- :class:`ScriptedManager` extracts the arithmetic the reference states (``3*25=75``-style
  equations whose left side evaluates to their right side: :func:`reference_calculations`) and
  asks for them in order, a few per step when there are more calculations than steps; after a
  failed observation it asks for the same calculation again (Correction, verdict
  ``execution_error``); when every calculation has run it asks for the final answer.
- :class:`ScriptedActor` sees only the problem, the history and the card (never the
  reference, as in the paper): it writes the calculations named in the card's guide as a cell
  that prints each result, and on a Final card answers with the last number the interpreter
  printed.

What this is not: the paper's synthesizer (an LLM manager judging logic against y*). The
trajectories are as good as the reference's arithmetic: a reference whose equations do not
reach the gold answer gives an incorrect trajectory (the grader says so), and a reference with
no checkable equation gives a failed record (a manager failure whose detail says why). Records name these agents as their models
(:data:`SCRIPTED_LABEL`), so they are never mistaken for an LLM's.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Sequence

from pipelines.mosaic.agents import (
    MODE_CORRECTION,
    MODE_PROGRESS,
    STAGE_FINAL,
    STAGE_INTERMEDIATE,
    VERDICT_EXECUTION_ERROR,
    VERDICT_ON_TRACK,
    ActorView,
    AgentResult,
    ManagerView,
    NavigationCard,
)
from pipelines.tir import KIND_CODE, Step

SCRIPTED_LABEL = "scripted-reference-walker"

# the characters an equation's left side may use: digits, operators, brackets, a currency sign,
# thousands separators, percent, and the times signs people write
_LEFT_CHARS = re.compile(r"[0-9.+\-*/()x×÷−–$,%\s]*$")
_RIGHT_NUMBER = re.compile(r"\s*\$?\s*(-?\d[\d,]*(?:\.\d+)?|-?\.\d+)")
_BACKTICKED = re.compile(r"`([^`]+)`")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
# LaTeX operators a worked solution may write inside $...$ (``15 \times 35 = 525``), read as
# the plain signs before equations are looked for
_LATEX_OPERATORS = re.compile(r"\\(times|cdot|div)(?![A-Za-z])")
_LATEX_SIGNS = {"times": "×", "cdot": "×", "div": "÷"}
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv}


def safe_value(expr: str) -> float:
    """The value of an arithmetic expression of numbers, + - * / and brackets; ValueError for
    anything else (names, calls, powers, division by zero)."""
    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return float(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = value(node.operand)
            return -inner if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Div) and right == 0:
                raise ValueError("division by zero")
            return _BINARY[type(node.op)](left, right)
        raise ValueError(f"not plain arithmetic: {ast.dump(node)[:60]}")

    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an expression: {expr!r}") from exc
    return value(tree.body)


def _normalize(left: str) -> str | None:
    """A reference equation's left side as a Python expression, or None when it is not a
    calculation (no operator between two numbers)."""
    text = left.replace("$", "").replace("×", "*").replace("÷", "/").strip()
    text = text.replace("−", "-").replace("–", "-")  # minus sign, en dash
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)  # thousands separators
    if "," in text:
        return None
    text = re.sub(r"(\d*\.?\d+)\s*%", r"(\1/100)", text)
    text = re.sub(r"(?<=[\d)])\s*x\s*(?=[\d(.])", "*", text)
    if "x" in text:
        return None
    text = re.sub(r"(?<=[\d)])\s*(?=\()", "*", text)  # 100(.20) is 100*(.20)
    text = re.sub(r"(?<=\))\s*(?=[\d.])", "*", text)
    text = text.strip(" +*/")
    if not re.search(r"[\d.)]\s*[-+*/]\s*[-(\d.]", text):
        return None
    try:
        return ast.unparse(ast.parse(text, mode="eval"))
    except SyntaxError:
        return None


def reference_calculations(reference: str) -> list[str]:
    """The calculations a worked solution states, in order, as Python expressions: every
    ``<left> = <number>`` whose left side is arithmetic (:func:`_normalize`) and evaluates to
    the number on the right (to within 1e-6 relative, or to the right side's own rounding).
    Equations that do not check out are skipped, never guessed at. LaTeX's ``\\times``,
    ``\\cdot`` and ``\\div`` count as the signs they stand for."""
    reference = _LATEX_OPERATORS.sub(lambda m: _LATEX_SIGNS[m.group(1)], reference)
    out: list[str] = []
    for eq in re.finditer("=", reference):
        start = max(reference.rfind("\n", 0, eq.start()), reference.rfind("=", 0, eq.start())) + 1
        left = _LEFT_CHARS.search(reference[start:eq.start()])
        right = _RIGHT_NUMBER.match(reference, eq.end())
        if left is None or right is None:
            continue
        expr = _normalize(left.group(0))
        if expr is None:
            continue
        try:
            got = safe_value(expr)
        except ValueError:
            continue
        stated_text = right.group(1).replace(",", "")
        stated = float(stated_text)
        decimals = len(stated_text.split(".")[1]) if "." in stated_text else 0
        if math.isclose(got, stated, rel_tol=1e-6, abs_tol=1e-9) or \
                round(got, decimals) == stated:
            out.append(expr)
    return out


def _chunks(items: Sequence[str], parts: int) -> list[list[str]]:
    """``items`` in order, split into at most ``parts`` runs of near-equal length."""
    parts = max(1, min(parts, len(items)))
    size, extra = divmod(len(items), parts)
    out, at = [], 0
    for i in range(parts):
        n = size + (1 if i < extra else 0)
        out.append(list(items[at:at + n]))
        at += n
    return out


def format_number(text: str) -> str:
    """A printed number as an answer: integral values without a decimal point (``75.0`` ->
    ``75``), others rounded to 6 places with trailing zeros dropped."""
    value = float(text)
    if math.isfinite(value) and abs(value - round(value)) < 1e-9:
        return str(round(value))
    return f"{value:.6f}".rstrip("0").rstrip(".")


class ScriptedManager:
    """The manager by rule (see the module docstring). It keeps, per problem, how many of the
    planned cells have run; the loop calls ``navigate`` once per step of a problem, in order,
    so the count is exact (a new trajectory of the same problem starts at step 1 and resets
    it). ``code_steps`` caps the cells planned: the trajectory's ``max_steps`` less one step for
    the answer and one for a correction, by default."""

    def __init__(self, *, reserve_steps: int = 2) -> None:
        self.reserve_steps = reserve_steps
        self._done: dict[str, int] = {}

    def plan(self, reference: str, max_steps: int) -> list[list[str]]:
        """The cells to ask for, each a list of calculations."""
        calcs = reference_calculations(reference)
        return _chunks(calcs, max_steps - self.reserve_steps) if calcs else []

    async def navigate(self, view: ManagerView) -> AgentResult:
        plan = self.plan(view.reference, view.max_steps)
        if not plan:
            return AgentResult(error="the reference states no calculation that checks out "
                                     "(no `a*b=c` equation), so the scripted manager has "
                                     "nothing to guide with")
        key = view.problem
        if view.step == 1:
            self._done[key] = 0
        elif not view.last_failed and view.history and view.history[-1].kind == KIND_CODE:
            self._done[key] = self._done.get(key, 0) + 1
        done = self._done.get(key, 0)
        if done >= len(plan):
            card = NavigationCard(
                guide="Every calculation has run: give the last result the interpreter "
                      "printed as the final answer.",
                stage=STAGE_FINAL, mode=MODE_PROGRESS)
        elif view.last_failed:
            card = NavigationCard(
                guide=f"The last cell did not run. Run it again without the error: compute "
                      f"{_listing(plan[done])}.",
                stage=STAGE_INTERMEDIATE, mode=MODE_CORRECTION,
                verdict=VERDICT_EXECUTION_ERROR,
                reason="the interpreter reported a failure for the last cell")
        else:
            card = NavigationCard(guide=f"Compute {_listing(plan[done])}.",
                                  stage=STAGE_INTERMEDIATE, mode=MODE_PROGRESS,
                                  verdict=VERDICT_ON_TRACK)
        return AgentResult(value=card)


def _listing(calcs: Sequence[str]) -> str:
    return ", then ".join(f"`{c}`" for c in calcs)


def code_for(calcs: Sequence[str], first_index: int = 1) -> str:
    """A cell computing each calculation into a numbered variable and printing it."""
    lines = []
    for i, calc in enumerate(calcs, start=first_index):
        lines += [f"value_{i} = {calc}", f"print(value_{i})"]
    return "\n".join(lines)


def last_printed_number(history: Sequence[Step]) -> str | None:
    """The last number in the newest observation of a cell that ran (None when none did)."""
    for step in reversed(history):
        if step.kind != KIND_CODE or step.observation is None:
            continue
        if "Traceback" in step.observation or "Error" in step.observation:
            continue
        numbers = _NUMBER.findall(step.observation)
        if numbers:
            return format_number(numbers[-1])
    return None


class ScriptedActor:
    """The actor by rule (see the module docstring): the card's backticked calculations as a
    cell, or on a Final card the last printed number as the answer. A guide it cannot use (a
    calculation the answer redaction cut, say) gets a reply with neither block, which the loop
    records as a format failure."""

    async def act(self, view: ActorView) -> AgentResult:
        card = view.card
        if card is None:
            return AgentResult(error="the scripted actor needs a manager's card (it does not "
                                     "play the baseline)")
        calcs = _BACKTICKED.findall(card.guide)
        wants_answer = card.stage == STAGE_FINAL or not view.allow_code
        if wants_answer or not calcs:
            value = last_printed_number(view.history)
            if value is None or not view.allow_answer and not wants_answer:
                return AgentResult(value="I cannot tell which calculation to run next.")
            return AgentResult(value=f"<think>The interpreter printed {value}, which is what "
                                     f"the question asks for.</think>\n"
                                     f"<answer>\\boxed{{{value}}}</answer>")
        for calc in calcs:
            try:
                safe_value(calc)
            except ValueError:
                return AgentResult(value=f"The calculation {calc!r} cannot be computed.")
        cells_run = sum(1 for s in view.history if s.kind == KIND_CODE)
        if card.mode == MODE_CORRECTION:
            thought = ("The last cell failed, so I write it again carefully and run it: "
                       f"{', '.join(calcs)}.")
        else:
            thought = f"Next I compute {', '.join(calcs)} with Python."
        code = code_for(calcs, first_index=cells_run + 1)
        return AgentResult(value=f"<think>{thought}</think>\n<code>\n{code}\n</code>")
