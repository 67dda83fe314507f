"""Persistent, content-addressed store of LLM responses (SQLite in WAL mode).

``cache_key`` hashes everything that determines a response: which model answers (the endpoint's
base URL, the served model name and, when the server reports it, the model's root: the weights
vLLM loaded under that name), messages, sampling parameters (temperature, top_p, max_tokens,
stop, seed, n), the response format / schema, any extra request body and a caller
``sample_index``. A model redeployed under the same served name at the same URL therefore gets
fresh answers when its root differs, and the same name at another URL never shares entries.
One exception (:func:`endpoint_identity`): a server on this machine (a loopback address) that
reports its root is known by that root, not by its port, since local servers (the ones weft
starts among them) take whatever port is free: a re-run whose server came up on another port
still replays its answers.
``ResponseCache`` maps that key to the response payload. Each ``put`` is its own committed transaction, so a crash loses at most the
request in flight; several processes may read and write one file at once (WAL + busy timeout),
and the first successful writer of a key wins (later writes of the same key are ignored).

Failed entries: ``mark_failed`` (or ``put(..., failed=reason)``) flags an entry whose reply turned
out unusable (e.g. structured output that failed validation even after the repair round).
``get`` never returns a flagged entry, so a re-run asks the server again, and the next
successful ``put`` replaces it; the flagged payload and its reason stay readable through
``failure`` until then, for inspection. Files written before the flag existed gain the column
when opened.

Errors: ``get``, ``put`` and ``mark_failed`` raise ``sqlite3.Error`` (e.g. "database or disk
is full") or :class:`CacheUnavailable` (the file cannot be opened as a cache); the client turns
both into a warning and goes on without caching (``pipelines.llm.client``).

What this does not guarantee: with ``synchronous=NORMAL`` a power cut (not a process crash)
may drop the last few commits, never corrupt the file; the file must be on a local disk
(SQLite locking over NFS is unreliable); nothing is ever evicted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipelines.llm.endpoint import redact_url

logger = logging.getLogger(__name__)

CACHE_KEY_VERSION = 2  # 2: the endpoint and the model root are part of the key
BUSY_TIMEOUT_S = 60.0
_SCHEMA_SQL = (
    "CREATE TABLE IF NOT EXISTS responses ("
    " key TEXT PRIMARY KEY,"
    " model TEXT NOT NULL,"
    " payload TEXT NOT NULL,"
    " created_at TEXT NOT NULL,"
    " failed TEXT)"
)


LOOPBACK_HOSTS = ("localhost", "::1")


class CacheUnavailable(RuntimeError):
    """The cache file cannot be opened (or set up) as a cache; the message says why and what
    to do."""


def endpoint_identity(endpoint: str, model_root: str | None) -> str:
    """The endpoint as it counts in a cache key: its base URL without credentials or a trailing
    ``/``; for a loopback host (127.0.0.0/8, ``localhost``, ``::1``) with a known
    ``model_root``, without the host and port (``http://loopback/v1``), so that the same
    weights served on this machine on another port share entries. A loopback server that does
    not report its root keeps its port: nothing else tells two of them apart."""
    url = redact_url(endpoint.rstrip("/"))
    parts = urllib.parse.urlsplit(url)
    host = (parts.hostname or "").lower()
    if model_root is not None and (host in LOOPBACK_HOSTS or host.startswith("127.")):
        return urllib.parse.urlunsplit(parts._replace(netloc="loopback"))
    return url


def cache_key(
    model: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    endpoint: str,
    model_root: str | None = None,
    temperature: float,
    top_p: float,
    max_tokens: int,
    stop: Sequence[str] | None,
    seed: int | None,
    n: int,
    response_format: Mapping[str, Any] | None = None,
    extra_body: Mapping[str, Any] | None = None,
    sample_index: int = 0,
) -> str:
    """sha256 (hex) over a canonical JSON of every input that determines the response.

    ``endpoint`` is the base URL the request goes to and ``model_root`` what the server says it
    loaded under ``model`` (vLLM's ``root`` in ``GET /models``; None when it does not say).
    Dict key order does not matter; 0 and 0.0 give the same key; a trailing ``/`` of the
    endpoint and any ``user:password@`` in it do not count, and neither does the API key; nor
    does the port of a loopback server that reports its root (:func:`endpoint_identity`).
    """
    if not isinstance(endpoint, str) or not endpoint.startswith(("http://", "https://")):
        raise ValueError(
            f"cache_key needs the endpoint's base URL (http(s)://...), got {endpoint!r}: the "
            "same served name at two endpoints may be two different models"
        )
    payload = {
        "v": CACHE_KEY_VERSION,
        "endpoint": endpoint_identity(endpoint, model_root),
        "model": model,
        "model_root": model_root,
        "messages": list(messages),
        "temperature": float(temperature),
        "top_p": float(top_p),
        "max_tokens": int(max_tokens),
        "stop": list(stop) if stop else None,
        "seed": seed,
        "n": int(n),
        "response_format": response_format,
        "extra_body": dict(extra_body) if extra_body else None,
        "sample_index": int(sample_index),
    }
    try:
        blob = json.dumps(
            payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"LLM request is not JSON-serializable, so it cannot be cached or sent: {exc}"
        ) from exc
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """A SQLite file of ``key -> payload`` (a JSON object). Thread-safe; reopens after fork."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None
        self._pid: int | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.path)!r})"

    def _connection(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        # After a fork the inherited connection must not be touched; open a fresh one.
        self._conn = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            # Switching to WAL needs a brief exclusive lock; several processes opening a new
            # file at once can see "database is locked" here even with a busy timeout.
            try:
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute(_SCHEMA_SQL)
                columns = {row[1] for row in conn.execute("PRAGMA table_info(responses)")}
                if "failed" not in columns:  # a file from before the failure flag
                    conn.execute("ALTER TABLE responses ADD COLUMN failed TEXT")
                break
            except sqlite3.DatabaseError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    conn.close()
                    raise CacheUnavailable(
                        f"cannot open the LLM cache {self.path}: {exc}. Move the file away (it is only a "
                        "cache) or point the client at another cache_path."
                    ) from exc
                time.sleep(0.05)
        if str(mode).lower() != "wal":
            logger.warning(
                "LLM cache %s is in %s journal mode, not WAL (file system without shared memory?)",
                self.path,
                mode,
            )
        self._conn, self._pid = conn, os.getpid()
        return conn

    def get(self, key: str) -> dict | None:
        """The stored payload for ``key``, or None (also when the stored row is unreadable or
        flagged as failed)."""
        with self._lock:
            row = (
                self._connection()
                .execute(
                    "SELECT payload FROM responses WHERE key = ? AND failed IS NULL", (key,)
                )
                .fetchone()
            )
        if row is None:
            return None
        try:
            payload = json.loads(row[0])
        except ValueError:
            logger.warning("LLM cache %s: unreadable entry %s ignored", self.path, key)
            return None
        return payload if isinstance(payload, dict) else None

    def put(
        self, key: str, model: str, payload: Mapping[str, Any], failed: str | None = None
    ) -> None:
        """Store ``payload`` under ``key`` in one committed transaction. An existing successful
        entry is kept; a failed one is replaced. ``failed`` (a reason) stores it flagged."""
        blob = json.dumps(dict(payload), ensure_ascii=False, separators=(",", ":"))
        created = datetime.now(UTC).isoformat()
        with self._lock:
            self._connection().execute(
                "INSERT INTO responses (key, model, payload, created_at, failed) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET "
                "model = excluded.model, payload = excluded.payload, "
                "created_at = excluded.created_at, failed = excluded.failed "
                "WHERE responses.failed IS NOT NULL",
                (key, model, blob, created, failed),
            )

    def mark_failed(self, key: str, reason: str) -> bool:
        """Flag the entry of ``key`` as failed (``get`` skips it from now on); False if absent."""
        if not reason:
            raise ValueError("mark_failed needs a non-empty reason (it is kept for inspection)")
        with self._lock:
            cursor = self._connection().execute(
                "UPDATE responses SET failed = ? WHERE key = ?", (reason, key)
            )
        return cursor.rowcount > 0

    def failure(self, key: str) -> str | None:
        """The reason ``key`` is flagged as failed, or None (absent or not flagged)."""
        with self._lock:
            row = (
                self._connection()
                .execute("SELECT failed FROM responses WHERE key = ?", (key,))
                .fetchone()
            )
        return None if row is None else row[0]

    def __contains__(self, key: str) -> bool:
        """True when ``key`` has a usable (not failed) entry, i.e. when ``get`` would hit."""
        with self._lock:
            row = (
                self._connection()
                .execute("SELECT 1 FROM responses WHERE key = ? AND failed IS NULL", (key,))
                .fetchone()
            )
        return row is not None

    def __len__(self) -> int:
        with self._lock:
            return int(self._connection().execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def integrity_ok(self) -> bool:
        """True when SQLite's own integrity check passes."""
        with self._lock:
            return self._connection().execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None
