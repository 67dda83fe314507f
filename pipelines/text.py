"""Small text helpers shared by ingestion, grading and synthesis.

Pure functions on strings; no third-party imports. ``last_boxed`` finds the content of the
last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces, which is how MATH-style
solutions and model outputs mark their final answer. ``strip_control_chars`` removes control
characters (keeping tab and newline) and says how many it removed.
"""

from __future__ import annotations

import re
import unicodedata

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE_RE = re.compile(r"[{}]")
_WS_RE = re.compile(r"\s+")
# Unicode category Cc (C0 controls, DEL, C1 controls) minus tab and newline; CR is handled as a
# line end by strip_control_chars.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_CR_RE = re.compile(r"\r\n?")


def boxed_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of the content of every complete ``\\boxed{…}`` (or ``\\fbox{…}``), in
    order of the opening ``\\boxed``; the braces inside are balanced, unterminated boxes are
    skipped, and a box nested in another comes after its parent.

    One left-to-right pass with a stack of open braces: the cost is linear in ``len(text)``
    however many boxes are left open (scanning ahead from each box was quadratic).
    """
    text = text or ""
    box_starts = {m.end() for m in _BOX_RE.finditer(text)}  # index just after each box's "{"
    spans: list[tuple[int, int]] = []
    stack: list[int] = []  # content start of each open brace; -1 for a brace that opens no box
    for m in _BRACE_RE.finditer(text):
        if m.group() == "{":
            stack.append(m.end() if m.end() in box_starts else -1)
        elif stack:  # a "}" with nothing open closes nothing
            start = stack.pop()
            if start >= 0:
                spans.append((start, m.start()))
    spans.sort()
    return spans


def boxed_contents(text: str) -> list[str]:
    """Contents of every ``\\boxed{…}`` in order, stripped (see :func:`boxed_spans`)."""
    return [text[a:b].strip() for a, b in boxed_spans(text)]


def last_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{…}``, or None when there is none (linear time)."""
    spans = boxed_spans(text)
    if not spans:
        return None
    a, b = spans[-1]
    return text[a:b].strip()


def normalize_problem_text(text: str) -> str:
    """Canonical form used for deduplication and stable ids: NFKC, lower case, single spaces."""
    return _WS_RE.sub(" ", unicodedata.normalize("NFKC", text or "")).strip().lower()


def strip_control_chars(text: str) -> tuple[str, int]:
    """``text`` without control characters, and how many were removed.

    Removes every character of Unicode category Cc (NUL, the other C0 controls, DEL, the C1
    controls) except tab and newline. Carriage returns are line ends, not noise: ``\\r\\n``
    and a lone ``\\r`` become ``\\n`` and are not counted. Format characters (category Cf:
    zero-width joiners, bidi marks, soft hyphens) are left alone: they carry meaning in some
    scripts and in emoji.
    """
    text = _CR_RE.sub("\n", text or "")
    cleaned, removed = _CONTROL_RE.subn("", text)
    return cleaned, removed
