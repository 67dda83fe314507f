"""Reading raw records for ingestion: local files, the Hugging Face hub, reasoning-gym.

Returns raw records (``RawRecord``: 1-based position, the decoded record, its first 500
characters as text) and, for local files, (line, reason, raw) triples for lines that could not
be decoded; turning records into canonical rows is ``pipelines.ingest.sources``'s job.

Guarantees: JSON Lines are split on ``\n`` only (never on U+2028 inside strings); a bad line
(not UTF-8, not JSON, nested too deeply for the JSON parser) never stops the lines after it;
:func:`check_record` finds records nested deeper than :class:`RecordLimits` allows or holding a
field larger than it allows, so callers can reject them before they reach code that recurses
or copies them; the hub loader fails within a few seconds when the hub cannot be reached
instead of waiting on retries; the reasoning-gym generator is deterministic for a seed and an
installed reasoning-gym version. Not guaranteed: a damaged container (bad gzip stream,
unreadable Parquet) or a missing file raises :class:`IngestError` rather than salvaging part
of it; a single huge line is read into memory before its size is checked (the limits bound
what is kept and processed, not what is read).
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pipelines.settings import cache_dir

RAW_CHARS = 500
HUB_PROBE_TIMEOUT_S = 3.0
DEFAULT_HF_ENDPOINT = "https://huggingface.co"
LOCAL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".parquet")
REASONING_GYM_TASKS = (
    "basic_arithmetic",
    "chain_sum",
    "gcd",
    "lcm",
    "fraction_simplification",
    "products",
)
REASONING_GYM_DEFAULT_COUNT = 1000
# Defaults for RecordLimits. The shared files peak at a 190,000-character field (an MBPP+ input
# list) and 29 levels of nesting (MBPP+ inputs), so these defaults reject nothing real.
MAX_FIELD_CHARS = 1_000_000
MAX_DEPTH = 100
# Above this, json.dumps of a kept record's meta could itself hit Python's recursion limit.
DEPTH_CEILING = 500


class IngestError(RuntimeError):
    """A source as a whole cannot be loaded; the message says what was tried and what to do."""


class HubUnavailableError(IngestError):
    """The Hugging Face hub cannot be reached (offline, blocked) or the dataset is not there."""


# ----------------------------------------------------------------------------- local files


@dataclass(frozen=True)
class RawRecord:
    """One decoded record: 1-based line (JSONL) or position (JSON, Parquet, hub), the record,
    and its first RAW_CHARS characters as text for a rejects row."""

    line: int
    record: Any
    raw: str


def raw_text(data: bytes | str) -> str:
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    return text[:RAW_CHARS]


def record_raw(record: Any) -> str:
    """The first RAW_CHARS characters of ``record`` as JSON text, never raising: a record too
    deeply nested to encode is described instead."""
    try:
        return raw_text(json.dumps(record, ensure_ascii=False, default=str))
    except (RecursionError, ValueError):
        return f"<a JSON {type(record).__name__} too deeply nested to show>"


@dataclass(frozen=True)
class RecordLimits:
    """Size limits one raw record must respect to be used.

    ``max_field_chars``: the largest top-level field, in characters (a string's length; a list
    or object's compact JSON text). ``max_depth``: the deepest nesting of lists and objects, the
    record itself counting as level 1 (at most :data:`DEPTH_CEILING`).
    """

    max_field_chars: int = MAX_FIELD_CHARS
    max_depth: int = MAX_DEPTH

    def __post_init__(self) -> None:
        for name, ceiling in (("max_field_chars", None), ("max_depth", DEPTH_CEILING)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"RecordLimits.{name} must be a positive integer, got {value!r}")
            if ceiling is not None and value > ceiling:
                raise ValueError(
                    f"RecordLimits.{name} must be at most {ceiling} (deeper records could "
                    f"overflow Python's recursion limit when encoded), got {value}"
                )


DEFAULT_LIMITS = RecordLimits()


def nesting_depth(value: Any, stop_after: int | None = None) -> int:
    """Deepest nesting of lists/tuples/dicts in ``value`` (a scalar is 0, ``[1]`` is 1), found
    without recursion; stops early once ``stop_after`` is exceeded."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if stop_after is not None and deepest > stop_after:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def _field_chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (Mapping, list, tuple)):
        return len(json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":")))
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    return 0


def check_record(record: Any, limits: RecordLimits = DEFAULT_LIMITS) -> str | None:
    """None when ``record`` is within ``limits``, else the reject reason (naming the field)."""
    depth = nesting_depth(record, stop_after=limits.max_depth)
    if depth > limits.max_depth:
        return (
            f"record is nested more than {limits.max_depth} levels deep (max_depth); "
            "flatten it or raise max_depth"
        )
    if not isinstance(record, Mapping):
        return None
    for key, value in record.items():
        size = _field_chars(value)
        if size > limits.max_field_chars:
            return (
                f"field {str(key)[:60]!r} is too large: {size:,} characters, limit "
                f"{limits.max_field_chars:,} (max_field_chars); shorten it or raise the limit"
            )
    return None


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb")


def _decode(data: bytes, what: str) -> tuple[str | None, str | None]:
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1].hex()
        return None, (
            f"{what} is not valid UTF-8 (byte 0x{bad} at offset {exc.start}); "
            "re-save the file as UTF-8"
        )


def _too_deep(what: str) -> str:
    return (
        f"{what} is nested too deeply for the JSON parser (Python's recursion limit); "
        "flatten the record"
    )


def _iter_jsonl(path: Path, limit: int | None) -> Iterator[RawRecord | tuple[int, str, str]]:
    """JSON Lines, split on b"\\n" only (U+2028 inside strings is legal JSON text)."""
    taken = 0
    with _open_binary(path) as handle:
        for number, data in enumerate(handle, start=1):
            if number == 1 and data.startswith(b"\xef\xbb\xbf"):
                data = data[3:]
            data = data.rstrip(b"\r\n")
            if not data.strip():
                continue
            if limit is not None and taken >= limit:
                return
            taken += 1
            text, error = _decode(data, f"line {number}")
            if error:
                yield (number, error, raw_text(data))
                continue
            try:
                record = json.loads(text)
            except ValueError as exc:
                yield (number, f"line {number} is not valid JSON: {exc}", raw_text(text))
                continue
            except RecursionError:
                yield (number, _too_deep(f"line {number}"), raw_text(text))
                continue
            yield RawRecord(number, record, raw_text(text))


def _iter_json(path: Path, limit: int | None) -> Iterator[RawRecord | tuple[int, str, str]]:
    """A JSON document: a list of records or ``{"data": [...]}``; ``line`` = 1-based position."""
    with _open_binary(path) as handle:
        data = handle.read()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    text, error = _decode(data, "the file")
    if error:
        yield (-1, error, raw_text(data))
        return
    try:
        document = json.loads(text)
    except ValueError as exc:
        yield (-1, f"the file is not valid JSON: {exc}", raw_text(text))
        return
    except RecursionError:
        yield (-1, _too_deep("the file"), raw_text(text))
        return
    if isinstance(document, Mapping) and isinstance(document.get("data"), list):
        document = document["data"]
    if not isinstance(document, list):
        yield (-1, 'expected a JSON list of records or {"data": [...]}', raw_text(text))
        return
    for number, record in enumerate(document[:limit] if limit is not None else document, start=1):
        yield RawRecord(number, record, record_raw(record))


def _iter_parquet(path: Path, limit: int | None) -> Iterator[RawRecord]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for damaged files
        raise IngestError(f"{path} is not a readable Parquet file ({exc}); re-download it") from exc
    if limit is not None:
        table = table.slice(0, limit)
    for number, record in enumerate(table.to_pylist(), start=1):
        yield RawRecord(number, record, record_raw(record))


def read_local_records(
    path: Path, *, limit: int | None = None
) -> tuple[list[RawRecord], list[tuple[int, str, str]]]:
    """Read one local file into raw records and (line, reason, raw) problems.

    ``limit`` caps the records read (malformed lines count towards it). Raises
    :class:`IngestError` for a missing file, an unknown extension or a damaged container.
    """
    path = Path(path)
    if not path.is_file():
        raise IngestError(f"{path} does not exist or is not a file")
    name = path.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz")):
        reader: Callable[[Path, int | None], Iterator[Any]] = _iter_jsonl
    elif name.endswith((".json", ".json.gz")):
        reader = _iter_json
    elif name.endswith(".parquet"):
        reader = _iter_parquet
    else:
        raise IngestError(f"{path}: unsupported file type; use one of {', '.join(LOCAL_SUFFIXES)}")
    records: list[RawRecord] = []
    bad: list[tuple[int, str, str]] = []
    try:
        for item in reader(path, limit):
            (records if isinstance(item, RawRecord) else bad).append(item)
    except (OSError, EOFError, zlib.error) as exc:
        raise IngestError(
            f"{path} could not be read ({type(exc).__name__}: {exc}); re-download it"
        ) from exc
    return records, bad


# ----------------------------------------------------------------------------- Hugging Face hub


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def probe_endpoint(url: str, timeout_s: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """None when a TCP connection to ``url``'s host opens within ``timeout_s``, else the error."""
    parsed = urlparse(url)
    host = parsed.hostname
    if not host:
        return f"not a URL: {url!r}"
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def load_hf_records(
    dataset_id: str,
    config: str | None,
    split: str,
    *,
    limit: int | None = None,
    probe_timeout_s: float = HUB_PROBE_TIMEOUT_S,
) -> list[dict[str, Any]]:
    """Records of one dataset split from the Hugging Face hub (cached under WEFT_HOME/cache).

    Fails fast with :class:`HubUnavailableError` instead of waiting on retries. With
    ``HF_HUB_OFFLINE=1`` set before ``datasets`` was imported, only its local cache is used;
    set only afterwards, nothing is tried (the library would go online). Otherwise the
    endpoint (``HF_ENDPOINT`` or huggingface.co) must accept a TCP connection within
    ``probe_timeout_s`` seconds before ``datasets.load_dataset`` is called.
    """
    where = f"{dataset_id}" + (f" (config {config})" if config else "") + f" split {split!r}"
    offline_env = _env_flag("HF_HUB_OFFLINE") or _env_flag("HF_DATASETS_OFFLINE")
    import datasets

    library_offline = bool(getattr(datasets.config, "HF_HUB_OFFLINE", False))
    endpoint = os.environ.get("HF_ENDPOINT") or DEFAULT_HF_ENDPOINT
    if offline_env and not library_offline:
        raise HubUnavailableError(
            f"cannot load {where}: HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set, but `datasets` was "
            "imported before it was, so its cache-only mode is not active and loading would go "
            "online. Use a local copy (set WEFT_DATA_DIR to a folder holding it), or set the "
            "variable before Python starts to read from the Hugging Face cache."
        )
    if not library_offline:
        problem = probe_endpoint(endpoint, probe_timeout_s)
        if problem:
            raise HubUnavailableError(
                f"cannot load {where}: the Hugging Face hub at {endpoint} did not answer within "
                f"{probe_timeout_s:g}s ({problem}). Use a local copy instead (set "
                "WEFT_DATA_DIR to a folder holding it) or retry with internet access."
            )
    split_arg = f"{split}[:{limit}]" if limit is not None else split
    try:
        dataset = datasets.load_dataset(
            dataset_id, config, split=split_arg, cache_dir=str(cache_dir() / "hf_datasets")
        )
    except (
        Exception
    ) as exc:  # datasets raises ConnectionError, FileNotFoundError, DatasetNotFoundError, ...
        mode = (
            "offline mode (HF_HUB_OFFLINE=1): not in the local cache"
            if library_offline
            else "hub error"
        )
        raise HubUnavailableError(
            f"cannot load {where} from the Hugging Face hub, {mode}: {type(exc).__name__}: "
            f"{str(exc)[:300]}. Use a local copy (WEFT_DATA_DIR), unset HF_HUB_OFFLINE with "
            "internet access, or log in (`hf auth login`) for gated datasets such as GPQA."
        ) from exc
    return [dict(row) for row in dataset]


# ----------------------------------------------------------------------------- reasoning-gym


def generate_reasoning_gym(
    count: int = REASONING_GYM_DEFAULT_COUNT,
    *,
    seed: int = 0,
    tasks: tuple[str, ...] = REASONING_GYM_TASKS,
) -> list[tuple[str, dict[str, Any]]]:
    """``count`` procedural problems as (origin, record), tasks taken round-robin.

    Deterministic for a given (seed, tasks) and installed ``reasoning-gym`` version: task ``t``
    uses seed ``seed + index_of(t)`` and items 0, 1, 2, ... of that task's dataset.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if not tasks:
        raise ValueError("tasks must name at least one reasoning-gym task")
    try:
        import reasoning_gym
    except ImportError as exc:
        raise IngestError(
            "the built-in source needs the `reasoning-gym` package: pip install reasoning-gym"
        ) from exc
    per_task = -(-count // len(tasks)) if count else 0
    generators = {}
    for offset, task in enumerate(tasks):
        try:
            generators[task] = reasoning_gym.create_dataset(
                task, seed=seed + offset, size=max(per_task, 1)
            )
        except Exception as exc:
            raise IngestError(
                f"reasoning-gym has no usable task {task!r} ({exc}); pick other tasks"
            ) from exc
    out: list[tuple[str, dict[str, Any]]] = []
    for index in range(per_task):
        for task in tasks:
            if len(out) == count:
                return out
            item = generators[task][index]
            out.append(
                (f"reasoning_gym:{task}", {"task": task, "index": index, "seed": seed, **item})
            )
    return out
