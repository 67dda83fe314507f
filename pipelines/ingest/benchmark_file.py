"""Local JSONL benchmarks declared in a config file, without editing weft's code.

The file is ``$WEFT_BENCHMARKS`` when that is set, else ``$WEFT_HOME/benchmarks.yaml`` when it
exists; ``pipelines.ingest`` reads it once, when it is first imported, and registers one
problem source per entry (so ``load_source(name)`` and the ``<name>_problems`` asset work) with
its :class:`pipelines.ingest.BenchmarkUse` (so ``eval.benchmarks`` lists it). Layout (YAML, or
the same as JSON)::

    benchmarks:
      - name: toy_arith               # letters, digits, _; becomes <name>_problems
        path: toy_arith.jsonl         # relative to this file's folder, or absolute
        fields: {problem: question, answer: gold, id: qid}   # id, solution optional
        grader: math                  # math or choice
        prompt: math                  # a named instruction or a template with {problem}
        k: 1                          # default samples per problem
        normalizer: thousands         # optional output normaliser (eval.benchmarks)
        split: test                   # optional (default test)
        answer_type: math             # optional (math; multiple_choice for choice)
        default_ingest: true          # optional: part of the default ingest job

Guarantees: a bad file or entry raises :class:`BenchmarkFileError` naming the file, the entry
(number and name) and the field, with what to write instead, and nothing of that file is
registered; a name already taken (a built-in source) is refused the same way. The instruction
and normaliser names are checked by ``eval.benchmarks`` (its error names the file and entry
too). Not checked here: that the JSONL file exists (loading it says so) or that its rows parse
(bad rows become rejects, as for every source). Code benchmarks cannot be declared here: their
tests must be kept by an adapter (``pipelines.ingest.adapters``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipelines.ingest.adapters import FieldMap
from pipelines.ingest.io import LOCAL_SUFFIXES
from pipelines.ingest.sources import SOURCES, BenchmarkUse, SourceSpec, register_source
from pipelines.settings import weft_home

ENV_VAR = "WEFT_BENCHMARKS"
FILE_NAME = "benchmarks.yaml"
_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_ANSWER_TYPES = {"math": "math", "choice": "multiple_choice"}
_KEYS = ("name", "path", "fields", "grader", "prompt", "k", "normalizer", "split",
         "answer_type", "default_ingest")
_FIELD_KEYS = ("problem", "answer", "id", "solution")


class BenchmarkFileError(ValueError):
    """The benchmarks config file, or entries of it, cannot be used. ``problems`` lists every
    problem found (one line each: file, entry, field, what to write instead); the message is
    those lines."""

    def __init__(self, problems: str | list[str]):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


def benchmark_file() -> Path | None:
    """The configured file: ``$WEFT_BENCHMARKS`` (which must exist), else
    ``$WEFT_HOME/benchmarks.yaml`` if present, else None."""
    env = os.environ.get(ENV_VAR)
    if env:
        path = Path(env).expanduser().resolve()
        if not path.is_file():
            raise BenchmarkFileError(
                f"{ENV_VAR}={env} does not name a file; create it (see docs/evaluation.md, "
                f"'Adding a benchmark') or unset {ENV_VAR}"
            )
        return path
    default = weft_home() / FILE_NAME
    return default if default.is_file() else None


def _load_document(path: Path) -> Any:
    import yaml

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise BenchmarkFileError(f"{path}: cannot be read ({exc})") from exc
    except yaml.YAMLError as exc:
        raise BenchmarkFileError(f"{path}: not valid YAML ({exc}); fix the syntax") from exc


class _Entry:
    """One entry being checked: every problem found is kept (:meth:`problem`), so a file with
    several mistakes is reported whole, one line per problem."""

    def __init__(self, path: Path, number: int, raw: Mapping[str, Any]):
        self.path, self.number, self.raw = path, number, raw
        name = raw.get("name")
        self.label = f"entry {number}" + (f" ({name!r})" if isinstance(name, str) else "")
        self.problems: list[str] = []

    def where(self) -> str:
        return f"{self.path}, {self.label}"

    def problem(self, field: str, text: str) -> None:
        self.problems.append(f"{self.where()}, field {field!r}: {text}")

    def text(self, field: str, default: str | None = None) -> str | None:
        value = self.raw.get(field, default)
        if value is None:
            if default is None and field in ("name", "path", "grader"):
                self.problem(field, "missing; every entry needs name, path, fields and grader")
            return None
        if not isinstance(value, str) or not value.strip():
            self.problem(field, f"should be non-empty text, got {value!r}")
            return None
        return value


def _check_fields(entry: _Entry) -> Mapping[str, Any] | None:
    fields = entry.raw.get("fields")
    if not isinstance(fields, Mapping):
        entry.problem("fields", "missing or not a mapping; write e.g. "
                                "{problem: question, answer: answer, id: id}")
        return None
    for key in sorted(str(k) for k in fields if k not in _FIELD_KEYS):
        entry.problem(f"fields.{key}", f"unknown key; use {', '.join(_FIELD_KEYS)}")
    for key in _FIELD_KEYS:
        value = fields.get(key)
        if value is None and key in ("problem", "answer"):
            entry.problem(f"fields.{key}", "missing; name the record's field that holds it")
        elif value is not None and (not isinstance(value, str) or not value.strip()):
            entry.problem(f"fields.{key}", f"should be a field name, got {value!r}")
    return fields


def _spec(path: Path, number: int, raw: Any) -> SourceSpec:
    """The entry's source spec; BenchmarkFileError listing every problem of the entry."""
    if not isinstance(raw, Mapping):
        raise BenchmarkFileError(
            f"{path}, entry {number}: should be a mapping of {', '.join(_KEYS[:4])}, ...; "
            f"got {type(raw).__name__}")
    entry = _Entry(path, number, raw)
    for key in sorted(str(k) for k in raw if k not in _KEYS):
        entry.problem(key, f"unknown field; the fields are {', '.join(_KEYS)}")
    name = entry.text("name")
    if name is not None and not _NAME_RE.fullmatch(name):
        entry.problem("name", f"{name!r} is not a name of letters, digits and _ starting "
                              "with a letter (it becomes the asset <name>_problems)")
    file = entry.text("path")
    if file is not None and not file.lower().endswith(LOCAL_SUFFIXES):
        entry.problem("path", f"{file!r} is not one of {', '.join(LOCAL_SUFFIXES)}")
    fields = _check_fields(entry)
    grader = entry.text("grader")
    if grader is not None and grader not in _ANSWER_TYPES:
        hint = (" (code benchmarks need an adapter that keeps their tests: add one in "
                "pipelines/ingest/adapters.py and a row in pipelines/ingest/sources.py)"
                if grader == "code" else "")
        entry.problem("grader", f"{grader!r} cannot be declared in a config file; use one "
                                f"of {', '.join(_ANSWER_TYPES)}{hint}")
    k = raw.get("k", 1)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        entry.problem("k", f"should be a whole number >= 1, got {k!r}")
    default_ingest = raw.get("default_ingest", True)
    if not isinstance(default_ingest, bool):
        entry.problem("default_ingest", f"should be true or false, got {default_ingest!r}")
    split = entry.text("split", "test") or "test"
    prompt = entry.text("prompt", grader or "math")
    normalizer = entry.text("normalizer")
    answer_type = entry.text("answer_type", _ANSWER_TYPES.get(grader or "", "math"))
    if entry.problems:
        raise BenchmarkFileError(entry.problems)
    assert name and file and fields is not None and grader and answer_type
    local = Path(file).expanduser()
    local = local if local.is_absolute() else (path.parent / local).resolve()
    return SourceSpec(
        name=name, split=split, answer_type=answer_type,
        adapter=FieldMap(**{k: v for k, v in fields.items() if v is not None}),
        local_path=str(local), default_ingest=default_ingest,
        benchmark=BenchmarkUse(grader=grader, prompt=prompt or grader, k=k,
                               normalizer=normalizer, declared_in=entry.where()),
    )


def read_benchmark_file(path: Path | str) -> list[SourceSpec]:
    """The source specs the file declares, checked (see the module docstring); registers
    nothing."""
    path = Path(path).expanduser().resolve()
    document = _load_document(path)
    if document is None:
        return []
    if not isinstance(document, Mapping) or set(document) != {"benchmarks"}:
        raise BenchmarkFileError(
            f"{path}: the file should hold one key, 'benchmarks', with a list of entries "
            "(see docs/evaluation.md, 'Adding a benchmark')"
        )
    entries = document["benchmarks"] or []
    if not isinstance(entries, list):
        raise BenchmarkFileError(f"{path}: 'benchmarks' should be a list of entries, got "
                                 f"{type(entries).__name__}")
    specs: list[SourceSpec] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(entries, start=1):
        try:
            spec = _spec(path, i, raw)
        except BenchmarkFileError as err:
            problems += err.problems
            continue
        if spec.name in seen:
            problems.append(f"{path}, entry {i} ({spec.name!r}), field 'name': also used by "
                            f"entry {seen[spec.name]}; pick another name")
        seen.setdefault(spec.name, i)
        specs.append(spec)
    if problems:
        raise BenchmarkFileError(problems)
    return specs


def register_benchmark_file(path: Path | str) -> list[SourceSpec]:
    """Read ``path`` and register every entry as a source (all or none)."""
    specs = read_benchmark_file(path)
    taken = [f"{spec.benchmark.declared_in if spec.benchmark else path}, field 'name': "
             f"{spec.name!r} is already a registered source; pick another name"
             for spec in specs if spec.name in SOURCES]
    if taken:
        raise BenchmarkFileError(taken)
    return [register_source(spec) for spec in specs]


def register_configured_benchmarks() -> list[SourceSpec]:
    """Register the configured file's entries (see :func:`benchmark_file`); [] without one."""
    path = benchmark_file()
    return [] if path is None else register_benchmark_file(path)
