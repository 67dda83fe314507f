"""MOSAIC's adversarial failure injection: code mutations and synthetic environment failures.

Two failure modes, chosen with equal chance for a code step picked with probability ρ:

- *generation anomaly* (:func:`mutate`): the actor's code is changed the way a model
  slips — a misspelled keyword or builtin (``imprt``, ``pritn``), a dropped block colon, a
  dropped closing bracket, a misspelled variable at one use, or a broken indentation — and then
  really executed, so the observation is the interpreter's own traceback. Syntax-level
  mutations are checked with ``compile`` (they must fail to compile); name-level ones fail
  when the line runs.
- *environment failure* (:func:`environment_failure`): the code is not executed and the
  observation is a synthetic system error — a wall-clock timeout, running out of memory, a
  connection reset, or a kernel restart — built as a ``pipelines.sandbox.result.ExecResult``
  with the fields the local sandbox sets for the real event, so ``render_observation`` shows it
  exactly as it would show a real one (a real timeout's rendering is compared in the tests).

Everything here is pure and seeded by the caller's ``random.Random``. Not guaranteed: that a
name-level mutation raises (the changed line may never run; the caller records whether an
error was observed); that synthetic failures match a non-local backend's rendering (E2B
tracebacks have Jupyter's layout).
"""

from __future__ import annotations

import ast
import io
import random
import re
import tokenize
from collections.abc import Callable
from dataclasses import dataclass

from pipelines.sandbox.result import LIMIT_MEMORY, LIMIT_WALL, ExecError, ExecResult

GENERATION = "generation"
ENVIRONMENT = "environment"
MODES = (GENERATION, ENVIRONMENT)

MISSPELLED_KEYWORD = "misspelled_keyword"
DROPPED_COLON = "dropped_colon"
DROPPED_BRACKET = "dropped_bracket"
WRONG_NAME = "wrong_name"
BROKEN_INDENTATION = "broken_indentation"
GENERATION_KINDS = (MISSPELLED_KEYWORD, DROPPED_COLON, DROPPED_BRACKET, WRONG_NAME,
                    BROKEN_INDENTATION)

TIMEOUT = "timeout"
OUT_OF_MEMORY = "out_of_memory"
CONNECTION_RESET = "connection_reset"
KERNEL_RESTART = "kernel_restart"
ENVIRONMENT_KINDS = (TIMEOUT, OUT_OF_MEMORY, CONNECTION_RESET, KERNEL_RESTART)

# Keywords and common builtins with the slip a model makes on them.
MISSPELLINGS: dict[str, str] = {
    "import": "imprt", "from": "form", "def": "dfe", "return": "retrun", "for": "fro",
    "while": "whlie", "elif": "elfi", "lambda": "lamda", "print": "pritn", "range": "rnage",
    "len": "lne", "sum": "smu",
}
_SYNTAX_KINDS = {DROPPED_COLON, DROPPED_BRACKET, BROKEN_INDENTATION}
_TRACEBACK_HEAD = "Traceback (most recent call last):"
_CALL_ASSIGN_RE = re.compile(r"^([A-Za-z_][\w.]*\s*=\s*)([A-Za-z_][\w.]*\(.*\))$")


@dataclass(frozen=True)
class Perturbation:
    """How a step was perturbed. ``original_code`` is what the actor wrote; ``detail`` says
    what changed (e.g. ``"import -> imprt on line 1"``)."""

    mode: str
    kind: str
    original_code: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"mode": self.mode, "kind": self.kind, "original_code": self.original_code,
                "detail": self.detail}


def choose_mode(rng: random.Random, rho: float, generation_share: float = 0.5) -> str | None:
    """None with probability 1-ρ, else GENERATION with probability ``generation_share``
    (equal chance by default) and ENVIRONMENT otherwise."""
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"rho must be a probability in [0, 1], got {rho!r}")
    if not 0.0 <= generation_share <= 1.0:
        raise ValueError(f"generation_share must be in [0, 1], got {generation_share!r}")
    if rng.random() >= rho:
        return None
    return GENERATION if rng.random() < generation_share else ENVIRONMENT


# ---------------------------------------------------------------------------------------------
# Generation anomalies


def _tokens(code: str) -> list[tokenize.TokenInfo] | None:
    try:
        return list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None


def _lines(code: str) -> list[str]:
    """Lines split on "\\n" only, as tokenize sees them (str.splitlines also splits on \\x0c…)."""
    return io.StringIO(code).readlines()


def _offset(lines: list[str], row: int, col: int) -> int:
    """Character offset of a tokenize (row, col) position in ``code``."""
    return sum(len(line) for line in lines[: row - 1]) + col


def _replace(code: str, start: int, end: int, new: str) -> str:
    return code[:start] + new + code[end:]


def _compiles(code: str) -> bool:
    try:
        compile(code, "<mutated>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True


def _misspell_keyword(code: str, rng: random.Random, toks: list[tokenize.TokenInfo]):
    lines = _lines(code)
    found = [t for t in toks if t.type == tokenize.NAME and t.string in MISSPELLINGS]
    if not found:
        return None
    tok = rng.choice(found)
    start = _offset(lines, *tok.start)
    new = MISSPELLINGS[tok.string]
    return (_replace(code, start, start + len(tok.string), new),
            f"{tok.string} -> {new} on line {tok.start[0]}")


def _drop_colon(code: str, rng: random.Random, toks: list[tokenize.TokenInfo]):
    lines = _lines(code)
    colons = []
    for i, tok in enumerate(toks):
        if tok.type == tokenize.OP and tok.string == ":":
            rest = [t for t in toks[i + 1:i + 3] if t.type != tokenize.COMMENT]
            if rest and rest[0].type in (tokenize.NEWLINE, tokenize.NL):
                colons.append(tok)
    if not colons:
        return None
    tok = rng.choice(colons)
    start = _offset(lines, *tok.start)
    return _replace(code, start, start + 1, ""), f"dropped the ':' ending line {tok.start[0]}"


def _drop_bracket(code: str, rng: random.Random, toks: list[tokenize.TokenInfo]):
    lines = _lines(code)
    closers = [t for t in toks if t.type == tokenize.OP and t.string in ")]}"]
    if not closers:
        return None
    tok = rng.choice(closers)
    start = _offset(lines, *tok.start)
    return (_replace(code, start, start + 1, ""),
            f"dropped the '{tok.string}' on line {tok.start[0]}")


def _misspell_name(name: str, rng: random.Random, code: str) -> str | None:
    options = []
    if len(name) >= 3:
        i = rng.randrange(1, len(name) - 1)
        options.append(name[:i] + name[i + 1:])  # drop an inner letter
        j = rng.randrange(0, len(name) - 1)
        options.append(name[:j] + name[j + 1] + name[j] + name[j + 2:])  # swap two letters
    options.append(name + "_")
    for option in options:
        if option != name and option.isidentifier() and option not in code:
            return option
    return None


def _wrong_name(code: str, rng: random.Random, toks: list[tokenize.TokenInfo]):
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    defined = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    defined |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    uses = [n for n in ast.walk(tree)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in defined]
    rng.shuffle(uses)
    lines = _lines(code)
    for node in uses:
        new = _misspell_name(node.id, rng, code)
        if new is None:
            continue
        line = lines[node.lineno - 1]
        col = len(line.encode("utf-8")[: node.col_offset].decode("utf-8", "replace"))
        start = _offset(lines, node.lineno, col)
        if code[start:start + len(node.id)] != node.id:
            continue
        return (_replace(code, start, start + len(node.id), new),
                f"{node.id} -> {new} on line {node.lineno}")
    return None


def _break_indentation(code: str, rng: random.Random, toks: list[tokenize.TokenInfo] | None):
    """Indent a logical line that does not open a block body: always an IndentationError."""
    lines = _lines(code)
    starts: list[int] = []
    if toks is not None:
        previous = tokenize.NEWLINE
        for tok in toks:
            if tok.type in (tokenize.NL, tokenize.COMMENT, tokenize.DEDENT):
                continue
            if previous == tokenize.NEWLINE and tok.type not in (tokenize.INDENT, tokenize.ENDMARKER):
                starts.append(tok.start[0])
            previous = tok.type
    else:
        starts = [i + 1 for i, line in enumerate(lines) if line.strip()]
    if not starts:
        return None
    row = rng.choice(starts)
    start = _offset(lines, row, 0)
    pad = " " * rng.choice((1, 2, 3))
    return _replace(code, start, start, pad), f"indented line {row} by {len(pad)} space(s)"


_OPERATORS: dict[str, Callable] = {
    MISSPELLED_KEYWORD: _misspell_keyword,
    DROPPED_COLON: _drop_colon,
    DROPPED_BRACKET: _drop_bracket,
    WRONG_NAME: _wrong_name,
    BROKEN_INDENTATION: _break_indentation,
}


def mutate(code: str, rng: random.Random,
           kinds: tuple[str, ...] = GENERATION_KINDS) -> tuple[str, Perturbation] | None:
    """A generation anomaly: ``(mutated_code, perturbation)``, or None when no operator applies
    (blank code, or nothing the allowed operators can change). Operators are tried in a random
    order; a syntax-level mutation is kept only if the result really fails to compile."""
    unknown = set(kinds) - set(GENERATION_KINDS)
    if unknown:
        raise ValueError(f"unknown mutation kinds {sorted(unknown)}; known: {GENERATION_KINDS}")
    if not code.strip():
        return None
    toks = _tokens(code)
    order = list(kinds)
    rng.shuffle(order)
    for kind in order:
        if toks is None and kind != BROKEN_INDENTATION:
            continue  # the code does not even tokenize: only the line-based operator applies
        found = _OPERATORS[kind](code, rng, toks)
        if found is None:
            continue
        new, detail = found
        if new == code or (kind in _SYNTAX_KINDS and _compiles(new)):
            continue
        return new, Perturbation(GENERATION, kind, code, detail)
    return None


# ---------------------------------------------------------------------------------------------
# Environment failures


def _last_code_line(code: str) -> tuple[int, str]:
    lines = code.splitlines() or [""]
    for number in range(len(lines), 0, -1):
        if lines[number - 1].strip() and not lines[number - 1].lstrip().startswith("#"):
            return number, lines[number - 1].strip()
    return 1, lines[0].strip()


def _carets(text: str) -> str | None:
    """The caret line Python (3.11+) prints under a failing call on the right of an
    assignment (``y = f(x)`` -> carets under ``f(x)``); None where it would print none."""
    match = _CALL_ASSIGN_RE.match(text)
    if not match:
        return None
    return " " * (4 + match.start(2)) + "^" * len(match.group(2))


def _cell_traceback(cell_number: int, code: str, last_line: str, *, carets: bool = False) -> str:
    number, text = _last_code_line(code)
    frame = f'  File "<cell-{cell_number}>", line {number}, in <module>'
    body = f"{frame}\n    {text}" if text else frame
    marks = _carets(text) if carets and text else None
    if marks:
        body += "\n" + marks
    return f"{_TRACEBACK_HEAD}\n{body}\n{last_line}\n"


def environment_failure(kind: str, code: str, *, cell_number: int = 1,
                        timeout_s: float = 10.0) -> ExecResult:
    """The result a sandbox session would return for a system failure while running ``code``
    as cell ``cell_number`` (``timeout_s``: the session's wall-clock limit). The code is not run.

    ``timeout`` and ``out_of_memory`` look like the local kernel interrupting the cell at its
    last line; ``kernel_restart`` like a kernel killed and replaced (the caller must really
    restart the session so that state is lost, as the note says); ``connection_reset`` like
    the transport to the interpreter failing.
    """
    if kind == TIMEOUT:
        message = f"the cell exceeded its wall-clock limit of {timeout_s:g} s"
        error = ExecError("TimeoutError", message,
                          _cell_traceback(cell_number, code, f"TimeoutError: {message}"))
        return ExecResult(error=error, exit_code=None, timed_out=True, limit_exceeded=LIMIT_WALL,
                          duration_s=float(timeout_s))
    if kind == OUT_OF_MEMORY:
        error = ExecError("MemoryError", "",
                          _cell_traceback(cell_number, code, "MemoryError", carets=True))
        return ExecResult(error=error, exit_code=None, memory_exceeded=True,
                          limit_exceeded=LIMIT_MEMORY)
    if kind == CONNECTION_RESET:
        error = ExecError("ConnectionResetError", "[Errno 104] Connection reset by peer")
        return ExecResult(error=error, exit_code=None)
    if kind == KERNEL_RESTART:
        error = ExecError("KernelDied", "the interpreter was killed by SIGKILL")
        return ExecResult(error=error, exit_code=-9, restarted=True)
    raise ValueError(f"unknown environment failure {kind!r}; known: {ENVIRONMENT_KINDS}")


def choose_environment_failure(rng: random.Random,
                               kinds: tuple[str, ...] = ENVIRONMENT_KINDS) -> str:
    unknown = set(kinds) - set(ENVIRONMENT_KINDS)
    if unknown or not kinds:
        raise ValueError(f"environment failure kinds must be a non-empty subset of "
                         f"{ENVIRONMENT_KINDS}, got {kinds!r}")
    return rng.choice(list(kinds))
