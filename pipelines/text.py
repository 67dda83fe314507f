"""Small text helpers shared by ingestion, grading and synthesis.

Pure functions on strings; no third-party imports. ``last_boxed`` finds the content of the
last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces, which is how MATH-style
solutions and model outputs mark their final answer.
"""

from __future__ import annotations

import re
import unicodedata

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_WS_RE = re.compile(r"\s+")


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
