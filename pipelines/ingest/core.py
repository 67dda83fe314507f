"""The one ingestion front end: read -> adapt -> check limits -> deduplicate -> decontaminate.

Problems (``pipelines.ingest.sources``), reasoning traces (``pipelines.ingest.traces``) and
tool-integrated trajectories (``pipelines.ingest.trajectories``) go through the same two functions:
:func:`read_records` finds a spec's records (its local file under ``WEFT_DATA_DIR``, or the
Hugging Face hub) and :func:`build_rows` turns them into rows and rejects; :func:`load_rows`
does both plus decontamination. A kind is a subclass of :class:`IngestSpec` and says only what
differs: the row it makes (:meth:`IngestSpec.make_row`), the text fields that must not be empty
besides the problem and the answer, the meta keys that hold a dataset's own record id, the
deduplication key and whether a later copy is a duplicate or a conflict.

Every kind gets the same checks, in this order, with the same reject reasons:

1. a record that is not a JSON object, or is over the :class:`RecordLimits` (field size,
   nesting), is a reject; so is one the kind's adapter refuses (``RowError``: its message);
2. control characters are removed from the problem text (``clean_problem_text``) before any
   id or key is computed;
3. an empty problem text is ``"missing problem text"``, an empty answer ``"missing answer"``,
   another empty required field ``"empty <field>"``;
4. a record whose dataset id (one of the kind's id keys in the adapter's meta) an earlier record
   used with *different* normalised problem text is rejected and counted in ``id_conflicts``
   (keep-first: appending rows to a file never changes which earlier rows are kept);
5. the kind builds its row (it may still refuse: e.g. an invalid trajectory);
6. a record whose normalised problem text is in the decontamination set is dropped and
   counted in ``excluded``;
7. a record whose deduplication key a kept row already has is counted in ``duplicates``, or
   rejected when the kind says the two conflict (problems: same text, different answer);
8. control characters removed from kept rows are counted (``control_chars_stripped``,
   ``control_char_rows``).

Decontamination (:func:`load_rows` with ``decontaminate``) loads every problem source named in
the spec's ``exclude_sources`` and drops records whose normalised problem text is among them;
a source that cannot be loaded raises :class:`IngestError` saying how to skip it. Whole-file
damage (a corrupt container, a missing file) raises :class:`IngestError`, never rejects.
Nothing here writes files except the Hugging Face cache under ``WEFT_HOME/cache``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, TypeVar

from pipelines.ingest import adapters as ad
from pipelines.ingest.io import (
    DEFAULT_LIMITS,
    HubUnavailableError,
    IngestError,
    RawRecord,
    RecordLimits,
    check_record,
    load_hf_records,
    read_local_records,
    record_raw,
)
from pipelines.settings import data_dir as default_data_dir
from pipelines.text import normalize_problem_text, strip_control_chars

REDACTED = "<redacted: this dataset's text must not be stored or logged in plain text>"

Prefer = Literal["local", "hf"]
Row = TypeVar("Row")


# ----------------------------------------------------------------------------- shared helpers


def problem_id(source: str, problem: str) -> str:
    """Stable id: first 16 hex chars of sha1(source + US + normalised problem text)."""
    key = f"{source}\x1f{normalize_problem_text(problem)}"
    return hashlib.sha1(key.encode("utf-8")).hexdigest()[:16]


def dump_meta(meta: Mapping[str, Any]) -> str:
    """Meta as a JSON string with sorted keys, so identical inputs give identical text."""
    return json.dumps(dict(meta), sort_keys=True, ensure_ascii=False, default=str)


def clean_problem_text(text: str) -> tuple[str, int]:
    """Problem text without control characters (see ``pipelines.text.strip_control_chars``:
    CR and CRLF become LF) and the number removed; outer whitespace is trimmed only when a
    character was removed, so text without control characters keeps its exact form."""
    cleaned, removed = strip_control_chars(text)
    return (cleaned.strip() if removed else cleaned), removed


class TableRow:
    """Mixin of the canonical row dataclasses (problems, traces): a warehouse row and the
    ``meta`` JSON string as a dict."""

    def to_row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def meta_dict(self) -> dict[str, Any]:
        return json.loads(self.meta)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Reject:
    """One ``rejects`` row: where the bad record came from and why it was refused."""

    source: str
    origin: str
    line: int
    reason: str
    raw: str

    def to_row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Registry(dict):
    """A plain dict that refuses to register a name twice."""

    def __setitem__(self, key: str, value: Any) -> None:
        if key in self:
            raise KeyError(f"{key!r} is already registered; pick another name")
        super().__setitem__(key, value)


# ----------------------------------------------------------------------------- spec and result


@dataclass
class LoadResult(Generic[Row]):
    """Rows, rejects and what was dropped and why. Subclasses name the rows (``problems``,
    ``traces``, ``trajectories``) and the counts they report (:meth:`counts`)."""

    rows: list[Row]
    rejects: list[Reject]
    origin: str
    duplicates: int = 0
    excluded: int = 0
    id_conflicts: int = 0
    control_chars_stripped: int = 0
    control_char_rows: int = 0

    ROWS: ClassVar[str] = "rows"
    COUNTED: ClassVar[tuple[str, ...]] = (
        "duplicates", "excluded", "id_conflicts", "control_chars_stripped", "control_char_rows",
    )

    def counts(self) -> dict[str, int]:
        return {self.ROWS: len(self.rows), "rejects": len(self.rejects),
                **{name: getattr(self, name) for name in self.COUNTED}}


@dataclass(frozen=True, kw_only=True)
class IngestSpec:
    """How to find and read one dataset; subclasses add what their rows need.

    ``local_path`` is relative to the data folder (``WEFT_DATA_DIR``) unless absolute;
    ``hf_configs`` are read one after another and concatenated; the hub split is ``hf_split``,
    else ``split``. ``family`` is the problem-id namespace (defaults to ``name``): two specs of
    one family share ids. ``exclude_sources`` are the problem sources this one is
    decontaminated against; ``redact_raw`` keeps the raw text out of ``rejects`` rows."""

    name: str
    adapter: Callable[[Mapping[str, Any]], Any]
    local_path: str | None = None
    hf_id: str | None = None
    hf_configs: tuple[str | None, ...] = (None,)
    hf_split: str | None = None
    split: str = "train"
    family: str | None = None
    exclude_sources: tuple[str, ...] = ()
    redact_raw: bool = False

    # What differs between kinds (class attributes of each subclass).
    KIND: ClassVar[str] = "source"  # in messages: "unknown trace source 'x'"
    RESULT: ClassVar[type[LoadResult]] = LoadResult
    ID_KEYS: ClassVar[tuple[str, ...]] = ()  # meta keys holding a dataset's own record id
    REQUIRED: ClassVar[tuple[str, ...]] = ()  # parsed text fields besides problem and answer
    STAMPS_DECONTAMINATION: ClassVar[bool] = False  # record exclude_sources in each row's meta

    @property
    def source(self) -> str:
        """The ``source`` value of this spec's rejects (and, for problems, of its rows)."""
        return self.name

    @property
    def id_family(self) -> str:
        """The namespace of :func:`problem_id` for this spec's problems."""
        return self.family or self.name

    @property
    def hub_split(self) -> str:
        return self.hf_split or self.split

    def shown_raw(self, raw: str) -> str:
        return REDACTED if self.redact_raw else raw

    def make_row(self, parsed: Any, problem: str, pid: str, extra_meta: Mapping[str, Any]) -> Any:
        """The row for one record that passed the shared checks; ``problem`` is the cleaned
        problem text and ``pid`` its problem id. Raise ``ad.RowError`` to reject it."""
        raise NotImplementedError

    def dedup_key(self, row: Any) -> str:
        """Two rows with the same key are copies; the first is kept."""
        raise NotImplementedError

    def duplicate_reason(self, kept: Any, row: Any) -> str | None:
        """None: ``row`` is a plain duplicate of ``kept`` (counted); else the reject reason."""
        return None


# ----------------------------------------------------------------------------- build


def _id_conflict(
    spec: IngestSpec,
    meta: Mapping[str, Any],
    key: str,
    line: int,
    pid: str,
    seen: dict[tuple[str, str], tuple[str, int, str]],
) -> str | None:
    """The reject reason when one of the record's dataset ids was used by an earlier record
    with different normalised text; otherwise registers its ids and returns None."""
    ids = [(name, str(meta[name])) for name in spec.ID_KEYS if meta.get(name) is not None]
    for name, value in ids:
        first = seen.get((name, value))
        if first is not None and first[0] != key:
            return (
                f"duplicate source id: {name}={value[:80]!r} was already used by line "
                f"{first[1]} (problem {first[2]}) with different problem text; the first "
                "record is kept, check which one is right"
            )
    for name, value in ids:
        seen.setdefault((name, value), (key, line, pid))
    return None


def _missing(parsed: Any, problem: str, required: tuple[str, ...]) -> str | None:
    if not problem.strip():
        return "missing problem text"
    if not str(parsed.answer).strip():
        return "missing answer"
    empty = [name for name in required if not str(getattr(parsed, name)).strip()]
    return f"empty {', '.join(empty)}" if empty else None


def build_rows(
    spec: IngestSpec,
    records: list[RawRecord],
    origin: str,
    *,
    exclude_texts: frozenset[str] = frozenset(),
    extra_meta: Mapping[str, Any] | None = None,
    limits: RecordLimits = DEFAULT_LIMITS,
) -> LoadResult:
    """Adapt, check, deduplicate and decontaminate ``records`` (see the module docstring for
    the order of the checks); pure given its inputs. ``exclude_texts`` holds normalised
    problem texts to drop; ``extra_meta`` is merged into every kept row's meta by kinds that
    keep it (problems)."""
    result = spec.RESULT([], [], origin)
    kept: dict[str, Any] = {}
    # (id key, id value) -> (normalised text, line, problem id) of the first record using it
    ids_seen: dict[tuple[str, str], tuple[str, int, str]] = {}
    for item in records:
        def reject(reason: str, item: RawRecord = item) -> None:
            result.rejects.append(
                Reject(spec.source, origin, item.line, reason, spec.shown_raw(item.raw))
            )

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
        missing = _missing(parsed, problem, spec.REQUIRED)
        if missing:
            reject(missing)
            continue
        key = normalize_problem_text(problem)
        pid = problem_id(spec.id_family, problem)
        conflict = _id_conflict(spec, parsed.meta, key, item.line, pid, ids_seen)
        if conflict:
            result.id_conflicts += 1
            reject(conflict)
            continue
        try:
            row = spec.make_row(parsed, problem, pid, extra_meta or {})
        except ad.RowError as exc:
            reject(str(exc))
            continue
        if key in exclude_texts:
            result.excluded += 1
            continue
        dedup = spec.dedup_key(row)
        if dedup in kept:
            reason = spec.duplicate_reason(kept[dedup], row)
            if reason is None:
                result.duplicates += 1
            else:
                reject(reason)
            continue
        kept[dedup] = row
        result.rows.append(row)
        if removed:
            result.control_chars_stripped += removed
            result.control_char_rows += 1
    return result


# ----------------------------------------------------------------------------- read and load


def _local_file(spec: IngestSpec, base: Path | None) -> Path | None:
    if spec.local_path is None:
        return None
    if Path(spec.local_path).is_absolute():
        return Path(spec.local_path)
    return None if base is None else base / spec.local_path


def read_local(
    spec: IngestSpec, path: Path, limit: int | None
) -> tuple[list[RawRecord], list[Reject], str]:
    """Records of one local file and the rejects of its undecodable lines."""
    records, bad = read_local_records(path, limit=limit)
    origin = str(path)
    rejects = [Reject(spec.source, origin, line, reason, spec.shown_raw(raw))
               for line, reason, raw in bad]
    return records, rejects, origin


def _read_hub(spec: IngestSpec, limit: int | None) -> tuple[list[RawRecord], list[Reject], str]:
    assert spec.hf_id is not None
    records: list[RawRecord] = []
    for config in spec.hf_configs:
        remaining = None if limit is None else limit - len(records)
        if remaining is not None and remaining <= 0:
            break
        rows = load_hf_records(spec.hf_id, config, spec.hub_split, limit=remaining)
        start = len(records)
        records.extend(RawRecord(start + i + 1, row, record_raw(row)) for i, row in enumerate(rows))
    return records, [], f"hf://{spec.hf_id}/{spec.hub_split}"


def read_records(
    spec: IngestSpec,
    *,
    data_dir: Path | str | None = None,
    prefer: Prefer = "local",
    limit: int | None = None,
) -> tuple[list[RawRecord], list[Reject], str]:
    """Raw records, rejects of undecodable lines and the origin of one spec.

    ``prefer="local"`` tries the local file (``data_dir`` defaults to ``WEFT_DATA_DIR`` /
    ``../shared/data``) and then the hub; ``prefer="hf"`` the reverse. Raises
    :class:`IngestError` naming every attempt and what to do when neither works."""
    base = Path(data_dir) if data_dir is not None else default_data_dir()
    path = _local_file(spec, base)
    attempts: list[str] = []
    for way in ("local", "hf") if prefer == "local" else ("hf", "local"):
        if way == "local":
            if spec.local_path is None:
                attempts.append(f"local: no local file for this {spec.KIND}")
            elif path is None:
                attempts.append(
                    "local: no data directory (WEFT_DATA_DIR unset and ../shared/data missing)"
                )
            elif not path.is_file():
                attempts.append(f"local: {path} not found")
            else:
                return read_local(spec, path, limit)
            continue
        if spec.hf_id is None:
            attempts.append(f"hub: this {spec.KIND} has no Hugging Face id")
            continue
        try:
            return _read_hub(spec, limit)
        except HubUnavailableError as exc:
            attempts.append(f"hub: {str(exc).rstrip('.')}")
    where = (f"Put the file {spec.local_path} under a data folder and set WEFT_DATA_DIR to that "
             "folder" if spec.local_path else "This source has no local file")
    hub = ", or use a machine with access to the Hugging Face hub" if spec.hf_id else ""
    raise IngestError(
        f"could not load {spec.KIND} {spec.name!r}. Tried: {'; '.join(attempts)}. {where}{hub}."
    )


def check_load_args(prefer: str, limit: int | None) -> None:
    if prefer not in ("local", "hf"):
        raise ValueError(f"prefer must be 'local' or 'hf', got {prefer!r}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")


def lookup(registry: Mapping[str, IngestSpec], name: str, kind: str) -> IngestSpec:
    """The spec registered as ``name``; KeyError naming the known ones otherwise."""
    try:
        return registry[name]
    except KeyError:
        raise KeyError(
            f"unknown {kind} {name!r}; known {kind}s: {', '.join(sorted(registry))}"
        ) from None
