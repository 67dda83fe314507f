"""Prompt texts (Markdown files, written in our own words) and the one loader every pipeline
uses (the SxS judge, the MOSAIC manager and actors, the Engagement Process policies).

A prompt file holds sections introduced by lines that are exactly ``# system``, ``# user`` and,
where a pipeline asks for one, ``# repair``; HTML comments (``<!-- ... -->``) are notes for
editors and are dropped. Placeholders are ``{{name}}``; :func:`fill` replaces them in one pass
(inserted text is never re-scanned, so a value that itself contains ``{{...}}`` stays as it
is) and an unknown placeholder is an error. Files are read at every call, so a prompt can be
edited between runs.

Not guaranteed: that a model follows the prompt; callers check every reply.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROMPTS_DIR = Path(__file__).resolve().parent
_SECTION_RE = re.compile(r"^# (system|user|repair)[ \t]*$", re.MULTILINE)
_COMMENT_RE = re.compile(r"<!--.*?-->", re.DOTALL)
_PLACEHOLDER_RE = re.compile(r"\{\{(\w+)\}\}")


@dataclass(frozen=True)
class PromptFile:
    """The sections of one prompt file (``repair`` is "" when the file has none)."""

    system: str
    user: str
    repair: str = ""


def prompt_path(name: str) -> Path:
    """The file of a prompt shipped with weft, by name (``sxs_judge`` -> ``sxs_judge.md``)."""
    return PROMPTS_DIR / f"{name}.md"


def load_prompt(prompt: str | Path, *, need_repair: bool = False) -> PromptFile:
    """Read a prompt: a shipped prompt's name (``ep_assistant_triage``) or a file path.

    FileNotFoundError names the missing file; ValueError says which sections are missing,
    empty or repeated."""
    path = Path(prompt)
    if isinstance(prompt, str) and path.suffix != ".md" and len(path.parts) == 1:
        path = prompt_path(prompt)
    if not path.is_file():
        raise FileNotFoundError(f"prompt file not found at {path}; restore it from "
                                "pipelines/prompts/ or pass another prompt_path")
    parts = _SECTION_RE.split(_COMMENT_RE.sub("", path.read_text(encoding="utf-8")))
    names = [parts[i] for i in range(1, len(parts) - 1, 2)]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"{path}: sections {repeated} appear more than once")
    sections = {parts[i]: parts[i + 1].strip("\n") for i in range(1, len(parts) - 1, 2)}
    wanted = {"system", "user"} | ({"repair"} if need_repair else set())
    if not wanted <= set(sections) or not all(sections[k].strip() for k in wanted):
        raise ValueError(f"{path}: needs non-empty sections {sorted(wanted)} (lines that are "
                         f"exactly '# system', '# user', '# repair'); found {sorted(sections)}")
    return PromptFile(sections["system"], sections["user"], sections.get("repair", ""))


def fill(template: str, values: Mapping[str, Any], where: str = "a prompt") -> str:
    """Replace ``{{name}}`` placeholders with ``values`` in one pass; an unknown placeholder
    raises ValueError naming it and the known ones."""
    def sub(match: re.Match[str]) -> str:
        if match.group(1) not in values:
            raise ValueError(f"unknown placeholder {match.group(0)} in {where}; known: "
                             + (", ".join("{{" + k + "}}" for k in sorted(values)) or "none"))
        return str(values[match.group(1)])
    return _PLACEHOLDER_RE.sub(sub, template)


def render(prompt: PromptFile, values: Mapping[str, Any], where: str = "a prompt"
           ) -> list[dict[str, str]]:
    """The system and user messages of ``prompt`` with ``values`` filled in."""
    return [{"role": "system", "content": fill(prompt.system, values, where)},
            {"role": "user", "content": fill(prompt.user, values, where)}]
