"""Ingestion of real tool-integrated reasoning trajectories into the TIR schema (``pipelines.tir``).

Reads the TIR files under ``WEFT_DATA_DIR/tir``:

- ``mathcoder``: MathCoder-L outputs on MATH (``debug_result``: a list of ``text`` / ``code`` /
  ``execution`` turns after the system and user turns; the last ``text`` turn repeats the bare
  final answer, which equals the record's ``completion``).
- ``tora``: ToRA examples (one assistant message in Markdown: prose, fenced ```` ```python ````
  blocks each followed by an ```` ```output ```` block, and a closing sentence with
  ``\\boxed{}``).

Each record becomes a :class:`pipelines.tir.Trajectory`: every code block with the prose
before it (the thought) and its output (the observation) is one intermediate step; the prose
after the last output is the final thought, and the final action is ``\\boxed{X}`` with X the
last ``\\boxed{}`` of that prose (MathCoder: else the record's ``completion``). A record that
cannot be turned into a valid trajectory (code without output, no final text, no answer,
missing problem or gold) becomes a :class:`pipelines.ingest.Reject` with the reason, and so
does a record over the :class:`pipelines.ingest.RecordLimits` (field size, nesting depth) or a
record whose ``id`` an earlier record of the file used for a different problem text (the first
is kept and the conflict counted as ``id_conflicts``: the same keep-first rule as
``pipelines.ingest``). Control characters are stripped from the problem text exactly as for
``problems`` rows (counted: ``control_chars_stripped``, ``control_char_rows``), so the ids
computed from it still join; steps are kept as written.

Guarantees: every returned trajectory passes ``tir.validate_steps``; ``problem_id`` is the
problems-table id of the MATH family (``problem_id("math", text)``), so trajectories join MATH
problems; with ``decontaminate`` (default) problems that are also in MATH-500 are dropped
and counted as ``excluded``. Not guaranteed: that the recorded answers are correct (the
MathCoder file holds answers its authors graded correct, e.g. ``1.2`` for gold ``\\frac{6}{5}``;
ToRA examples are not graded); that consecutive code turns without prose have a thought (their
thought is empty, which the schema allows).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.ingest import adapters as ad
from pipelines.ingest.core import (
    IngestSpec,
    LoadResult,
    Prefer,
    Registry,
    dump_meta,
    lookup,
)
from pipelines.ingest.io import DEFAULT_LIMITS, RecordLimits
from pipelines.ingest.sources import load_rows
from pipelines.text import last_boxed
from pipelines.tir import (
    KIND_ANSWER,
    KIND_CODE,
    Step,
    Trajectory,
    neutralize_tags,
    serialize_trajectory,
    trajectory_id,
    validate_steps,
)

PROBLEM_FAMILY = "math"  # both files hold MATH problems; ids join the `math` problems
DECONTAMINATE_AGAINST = ("math500",)
_FENCE_RE = re.compile(r"```(python|output)[ \t]*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class ParsedTIR:
    problem: str
    answer: str
    steps: list[Step]
    meta: dict[str, Any] = field(default_factory=dict)


class TIRResult(LoadResult[Trajectory]):
    """Output of :func:`load_tir`: trajectories, rejects and every count of
    ``pipelines.ingest.core`` (``excluded``: MATH-500 problems dropped)."""

    ROWS = "trajectories"

    @property
    def trajectories(self) -> list[Trajectory]:
        return self.rows


@dataclass(frozen=True, kw_only=True)
class TIRSpec(IngestSpec):
    """One TIR source (local file only). Rows and rejects carry ``name`` as their source;
    problem ids are MATH's (``family="math"``) so trajectories join MATH problems; the record
    id key is ``id``; decontaminated against MATH-500 by default."""

    adapter: Callable[[Mapping[str, Any]], ParsedTIR]
    family: str | None = PROBLEM_FAMILY
    exclude_sources: tuple[str, ...] = DECONTAMINATE_AGAINST

    KIND = "TIR source"
    RESULT = TIRResult
    ID_KEYS = ("id",)

    def make_row(self, parsed: ParsedTIR, problem: str, pid: str,
                 extra_meta: Mapping[str, Any]) -> Trajectory:
        steps, changed = _neutralized(parsed.steps)
        problems = validate_steps(steps)
        if problems:
            raise ad.RowError("invalid trajectory: " + "; ".join(problems))
        meta = dict(parsed.meta, code_steps=len(steps) - 1)
        if changed:
            meta["neutralized_tags"] = True
        return Trajectory(
            trajectory_id=trajectory_id(self.name, problem, serialize_trajectory(steps)),
            problem_id=pid, source=self.name, problem=problem.strip(),
            answer=parsed.answer.strip(), steps=tuple(steps), meta=dump_meta(meta))

    def dedup_key(self, row: Trajectory) -> str:
        return row.trajectory_id


def _clean_code(code: str) -> str:
    lines = code.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).strip("\n")


def _final_step(thought: str, answer_text: str | None) -> Step:
    if not answer_text:
        raise ad.RowError("no final answer: the closing text has no \\boxed{} answer")
    return Step(thought.strip(), KIND_ANSWER, f"\\boxed{{{answer_text.strip()}}}")


def adapt_mathcoder(record: Mapping[str, Any]) -> ParsedTIR:
    """MathCoder ``debug_result`` turns -> steps (see the module docstring)."""
    turns = record.get("debug_result")
    if not isinstance(turns, list) or len(turns) < 3:
        raise ad.RowError("debug_result must be a list of turns (system, user, then the solution)")
    for i, turn in enumerate(turns):
        if not isinstance(turn, Mapping) or not isinstance(turn.get("content"), str):
            raise ad.RowError(f"debug_result[{i}] is not a {{role, content}} turn with text content")
    problem = turns[1]["content"].strip() if turns[1].get("role") == "user" else ""
    if not problem:
        raise ad.RowError("debug_result[1] is not the user's problem")
    truth = record.get("ground_truth")
    gold = ad.as_text(truth.get("answer") if isinstance(truth, Mapping) else None,
                      "ground_truth.answer").strip()
    completion = ad.as_text(record.get("completion"), "completion").strip()
    body = list(turns[2:])
    if (len(body) >= 2 and body[-1]["role"] == "text" and body[-2]["role"] == "text"
            and body[-1]["content"].strip() == completion):
        body = body[:-1]  # the bare answer repeated as a last text turn
    steps: list[Step] = []
    texts: list[str] = []
    code: str | None = None
    for turn in body:
        role, content = turn["role"], turn["content"]
        if role == "text":
            if code is not None:
                raise ad.RowError(f"code turn {len(steps) + 1} has no execution turn after it")
            if content.strip():
                texts.append(content.strip())
        elif role == "code":
            if code is not None:
                raise ad.RowError(f"code turn {len(steps) + 1} has no execution turn after it")
            code = _clean_code(content)
        elif role == "execution":
            if code is None:
                raise ad.RowError(f"execution turn {len(steps) + 1} does not follow a code turn")
            steps.append(Step("\n\n".join(texts), KIND_CODE, code, content.strip("\n")))
            texts, code = [], None
        else:
            raise ad.RowError(f"unknown turn role {role!r} in debug_result")
    if code is not None or not texts:
        raise ad.RowError("the solution ends with a code step: no final text with the answer")
    final = "\n\n".join(texts)
    steps.append(_final_step(final, last_boxed(final) or completion))
    meta = {"id": record.get("id"), "completion": completion,
            "gold_solution": truth.get("solution") if isinstance(truth, Mapping) else None}
    return ParsedTIR(problem, gold, steps, {k: v for k, v in meta.items() if v is not None})


def adapt_tora(record: Mapping[str, Any]) -> ParsedTIR:
    """ToRA Markdown solution -> steps (see the module docstring)."""
    messages = record.get("messages")
    if not isinstance(messages, list) or len(messages) < 2:
        raise ad.RowError("messages must hold the user problem and the assistant solution")
    user = next((m for m in messages if isinstance(m, Mapping) and m.get("role") == "user"), None)
    assistant = next((m for m in messages if isinstance(m, Mapping)
                      and m.get("role") == "assistant"), None)
    if user is None or assistant is None:
        raise ad.RowError("messages need one user and one assistant message")
    problem = ad.as_text(user.get("content"), "user content").strip()
    text = ad.as_text(assistant.get("content"), "assistant content").replace("\r\n", "\n")
    gold = ad.as_text(record.get("gt"), "gt").strip()
    steps: list[Step] = []
    pos, thought, code = 0, "", None
    for match in _FENCE_RE.finditer(text):
        between = text[pos:match.start()].strip()
        kind, content = match.group(1), match.group(2)
        if kind == "python":
            if code is not None:
                raise ad.RowError(f"python block {len(steps) + 1} has no output block after it")
            thought, code = between, _clean_code(content)
        else:
            if code is None:
                raise ad.RowError(f"output block {len(steps) + 1} does not follow a python block")
            if between:
                raise ad.RowError(f"prose between python block {len(steps) + 1} and its output")
            steps.append(Step(thought, KIND_CODE, code, content.strip("\n")))
            code = None
        pos = match.end()
    if code is not None:
        raise ad.RowError("the last python block has no output block")
    final = text[pos:].strip()
    steps.append(_final_step(final, last_boxed(final)))
    meta = {k: record.get(k) for k in ("id", "dataset", "level")}
    if record.get("gt_cot"):
        meta["gold_solution"] = record["gt_cot"]
    return ParsedTIR(problem, gold, steps, {k: v for k, v in meta.items() if v is not None})


TIR_SOURCES: dict[str, TIRSpec] = Registry()
for _spec in (TIRSpec(name="mathcoder", adapter=adapt_mathcoder,
                      local_path="tir/mathcoder_math_correct.jsonl"),
              TIRSpec(name="tora", adapter=adapt_tora, local_path="tir/tora_examples.jsonl")):
    TIR_SOURCES[_spec.name] = _spec


def _neutralized(steps: list[Step]) -> tuple[list[Step], bool]:
    out, changed = [], False
    for s in steps:
        obs = None if s.observation is None else neutralize_tags(s.observation)
        new = Step(neutralize_tags(s.thought), s.kind, neutralize_tags(s.action), obs)
        changed = changed or new != s
        out.append(new)
    return out, changed


def load_tir(name: str, *, data_dir: Path | str | None = None, prefer: Prefer = "local",
             limit: int | None = None, decontaminate: bool = True,
             limits: RecordLimits = DEFAULT_LIMITS) -> TIRResult:
    """Load one registered TIR source from the local data folder.

    ``limit`` caps raw records read. With ``decontaminate`` the MATH-500 problems (loaded with
    ``pipelines.ingest.load_source``) are dropped by normalised text; if MATH-500 itself cannot
    be loaded this raises :class:`IngestError` (pass ``decontaminate=False`` to skip it).
    ``limits`` bounds each raw record's field size and nesting (over it: a reject).
    """
    return load_rows(lookup(TIR_SOURCES, name, TIRSpec.KIND), data_dir=data_dir, prefer=prefer,
                     limit=limit, decontaminate=decontaminate, limits=limits)
