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
_WS_RE = re.compile(r"\s+")
# Unicode category Cc (C0 controls, DEL, C1 controls) minus tab and newline; CR is handled as a
# line end by strip_control_chars.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_CR_RE = re.compile(r"\r\n?")


def boxed_contents(text: str) -> list[str]:
    """Contents of every ``\\boxed{…}`` in order, braces balanced; unterminated ones skipped."""
    found: list[str] = []
    for match in _BOX_RE.finditer(text or ""):
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            ch = text[i]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    found.append(text[start:i].strip())
                    break
    return found


def last_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{…}``, or None when there is none."""
    found = boxed_contents(text)
    return found[-1] if found else None


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
