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
from pipelines.ingest.io import (
    DEFAULT_LIMITS,
    IngestError,
    RawRecord,
    RecordLimits,
    check_record,
    read_local_records,
)
from pipelines.ingest.sources import Reject, clean_problem_text, dump_meta, load_source, problem_id
from pipelines.settings import data_dir as default_data_dir
from pipelines.text import last_boxed, normalize_problem_text
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


@dataclass
class TIRResult:
    trajectories: list[Trajectory]
    rejects: list[Reject]
    origin: str
    duplicates: int = 0
    excluded: int = 0
    id_conflicts: int = 0
    control_chars_stripped: int = 0
    control_char_rows: int = 0

    def counts(self) -> dict[str, int]:
        return {"trajectories": len(self.trajectories), "rejects": len(self.rejects),
                "duplicates": self.duplicates, "excluded": self.excluded,
                "id_conflicts": self.id_conflicts,
                "control_chars_stripped": self.control_chars_stripped,
                "control_char_rows": self.control_char_rows}


@dataclass(frozen=True)
class TIRSpec:
    name: str
    adapter: Callable[[Mapping[str, Any]], ParsedTIR]
    local_path: str


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


def _build_tir_sources() -> dict[str, TIRSpec]:
    registry: dict[str, TIRSpec] = {}
    for spec in (TIRSpec("mathcoder", adapt_mathcoder, "tir/mathcoder_math_correct.jsonl"),
                 TIRSpec("tora", adapt_tora, "tir/tora_examples.jsonl")):
        if spec.name in registry:
            raise KeyError(f"TIR source {spec.name!r} is registered twice")
        registry[spec.name] = spec
    return registry


TIR_SOURCES: dict[str, TIRSpec] = _build_tir_sources()


def _neutralized(steps: list[Step]) -> tuple[list[Step], bool]:
    out, changed = [], False
    for s in steps:
        obs = None if s.observation is None else neutralize_tags(s.observation)
        new = Step(neutralize_tags(s.thought), s.kind, neutralize_tags(s.action), obs)
        changed = changed or new != s
        out.append(new)
    return out, changed


def build_tir(spec: TIRSpec, records: list[RawRecord], origin: str, *,
              exclude_texts: frozenset[str] = frozenset(),
              limits: RecordLimits = DEFAULT_LIMITS) -> TIRResult:
    """Adapt, validate, deduplicate (same trajectory text) and decontaminate; pure."""
    result = TIRResult([], [], origin)
    seen: set[str] = set()
    ids_seen: dict[str, tuple[str, int]] = {}  # record id -> (normalised problem, line)
    for item in records:
        def reject(reason: str, item: RawRecord = item) -> None:
            result.rejects.append(Reject(spec.name, origin, item.line, reason, item.raw))

        if not isinstance(item.record, Mapping):
            reject(f"record is a JSON {type(item.record).__name__}, expected an object")
            continue
        too_big = check_record(item.record, limits)
        if too_big:
            reject(too_big)
            continue
        try:
            parsed = spec.adapter(item.record)
        except ad.RowError as exc:
            reject(str(exc))
            continue
        problem, removed = clean_problem_text(parsed.problem)
        if not problem.strip() or not parsed.answer.strip():
            reject("missing answer" if problem.strip() else "empty problem")
            continue
        key = normalize_problem_text(problem)
        record_id = parsed.meta.get("id")
        if record_id is not None:
            first = ids_seen.setdefault(str(record_id), (key, item.line))
            if first[0] != key:
                result.id_conflicts += 1
                reject(f"duplicate source id: id={str(record_id)[:80]!r} was already used by "
                       f"line {first[1]} with different problem text; the first record is kept, "
                       "check which one is right")
                continue
        steps, changed = _neutralized(parsed.steps)
        problems = validate_steps(steps)
        if problems:
            reject("invalid trajectory: " + "; ".join(problems))
            continue
        if key in exclude_texts:
            result.excluded += 1
            continue
        text = serialize_trajectory(steps)
        tid = trajectory_id(spec.name, problem, text)
        if tid in seen:
            result.duplicates += 1
            continue
        seen.add(tid)
        if removed:
            result.control_chars_stripped += removed
            result.control_char_rows += 1
        meta = dict(parsed.meta, code_steps=len(steps) - 1)
        if changed:
            meta["neutralized_tags"] = True
        result.trajectories.append(Trajectory(
            trajectory_id=tid, problem_id=problem_id(PROBLEM_FAMILY, problem),
            source=spec.name, problem=problem.strip(), answer=parsed.answer.strip(),
            steps=tuple(steps), meta=dump_meta(meta)))
    return result


def load_tir(name: str, *, data_dir: Path | str | None = None, limit: int | None = None,
             decontaminate: bool = True, limits: RecordLimits = DEFAULT_LIMITS) -> TIRResult:
    """Load one registered TIR source from the local data folder.

    ``limit`` caps raw records read. With ``decontaminate`` the MATH-500 problems (loaded with
    ``pipelines.ingest.load_source``) are dropped by normalised text; if MATH-500 itself cannot
    be loaded this raises :class:`IngestError` (pass ``decontaminate=False`` to skip it).
    ``limits`` bounds each raw record's field size and nesting (over it: a reject).
    """
    if name not in TIR_SOURCES:
        raise KeyError(f"unknown TIR source {name!r}; known: {', '.join(sorted(TIR_SOURCES))}")
    spec = TIR_SOURCES[name]
    base = Path(data_dir) if data_dir is not None else default_data_dir()
    if base is None:
        raise IngestError(f"no data directory for TIR source {name!r}: set WEFT_DATA_DIR to a "
                          f"folder holding {spec.local_path}")
    path = base / spec.local_path
    if not path.is_file():
        raise IngestError(f"TIR source {name!r}: {path} not found; put {spec.local_path} under "
                          "a data folder and set WEFT_DATA_DIR to that folder")
    exclude: set[str] = set()
    if decontaminate:
        for other in DECONTAMINATE_AGAINST:
            try:
                found = load_source(other, data_dir=base, limits=limits)
            except IngestError as exc:
                raise IngestError(f"cannot decontaminate {name!r} against {other!r} ({exc}); "
                                  "make that benchmark available or pass decontaminate=False") from exc
            exclude.update(normalize_problem_text(p.problem) for p in found.problems)
    records, bad = read_local_records(path, limit=limit)
    result = build_tir(spec, records, str(path), exclude_texts=frozenset(exclude),
                       limits=limits)
    result.rejects[:0] = [Reject(spec.name, str(path), line, reason, raw)
                          for line, reason, raw in bad]
    return result
