"""Make long steps visible: weft's loggers on stderr for scripts, progress for concurrent loops
and a heartbeat for blocking phases.

Three pieces, all plain ``logging`` (no Dagster here):

- ``WEFT_LOGGERS`` names weft's top-level loggers. Inside Dagster runs they reach the run log
  because the instance's ``dagster.yaml`` lists them under ``python_logs.managed_python_loggers``
  (``cli.instance.ensure_dagster_home`` writes that); scripts call ``log_to_stderr`` instead.
- ``gather_with_progress`` is ``asyncio.gather`` with progress lines (done/total, failures,
  items/s, completion tokens/s, ETA) every 10 % and at least every ``log_every_s`` seconds,
  also while nothing finishes (``pipelines.llm.batch.Progress`` formats and paces them).
- ``heartbeat`` wraps a blocking phase (grading in a process pool, a model load, a claim's
  computation): one line when it starts, one every ``every_s`` seconds while it runs, one with
  its duration when it ends. Code running inside it, however deep, says how far it is with
  :func:`report` (what it is doing, ``done`` of ``total``); the beats then carry that and an
  ETA (elapsed / done × what is left, the pace so far).

Not guaranteed: a line per item (progress is sampled), or any line at all from a logger whose
level a caller raised above INFO.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from pipelines.llm import map_ordered

T = TypeVar("T")

WEFT_LOGGERS = ("pipelines", "eval", "training", "warehouse", "assets")
STDERR_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_logger = logging.getLogger(__name__)


def log_to_stderr(level: int | str = logging.INFO) -> list[logging.Logger]:
    """Send weft's loggers to stderr at ``level`` (for scripts run by hand). Idempotent: a
    logger gets one stderr handler however often this is called; returns the loggers."""
    if isinstance(level, str):
        names = logging.getLevelNamesMapping()
        if level.upper() not in names:
            raise ValueError(f"unknown log level {level!r}; use DEBUG, INFO, WARNING or ERROR")
        level = names[level.upper()]
    loggers = []
    for name in WEFT_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(level)
        if not any(getattr(h, "_weft_stderr", False) for h in logger.handlers):
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter(STDERR_FORMAT))
            handler._weft_stderr = True  # type: ignore[attr-defined]
            logger.addHandler(handler)
        logger.propagate = False  # one line per record, also when the root logger prints too
        loggers.append(logger)
    return loggers


async def _await(aw: Awaitable[T]) -> T:
    return await aw


async def gather_with_progress(aws: Iterable[Awaitable[T]], *, desc: str,
                               log: Callable[[str], None] | None = None,
                               log_every_s: float = 10.0) -> list[T]:
    """``asyncio.gather(*aws)`` (all run concurrently, results in order, the first exception
    cancels the rest and is raised) with progress lines sent to ``log`` (default: the
    ``pipelines.llm`` logger). A result counts as failed when it (or a dict's ``error`` /
    ``gen_error``) carries an error; its ``completion_tokens`` feed tokens/s."""
    todo = list(aws)
    if not todo:
        return []
    return await map_ordered(_await, todo, workers=len(todo), desc=desc, log=log,
                             log_every_s=log_every_s)


_ACTIVE: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "weft_heartbeat", default=None)


def report(doing: str | None = None, done: float | None = None,
           total: float | None = None) -> bool:
    """Tell the innermost :func:`heartbeat` of this context how far its work is: ``doing``
    (what it is working on now), ``done`` of ``total`` units. Fields left None keep their
    value. Returns False (and does nothing) outside a heartbeat, so library code can call it
    unconditionally."""
    info = _ACTIVE.get()
    if info is None:
        return False
    if total is not None and not total >= 0:
        raise ValueError(f"total must be >= 0, got {total!r}")
    for key, value in (("doing", doing), ("done", done), ("total", total)):
        if value is not None:
            info[key] = value
    return True


def progress_line(desc: str, info: dict[str, Any], elapsed: float) -> str:
    """``desc: doing, done/total (p%), Ns elapsed, ETA Ms`` from a heartbeat's ``info`` (the
    parts it has); the ETA assumes the pace so far holds."""
    parts = [desc + (f": {info['doing']}" if info.get("doing") else ": still running")]
    done, total = info.get("done"), info.get("total")
    if done is not None and total:
        parts.append(f"{done:g}/{total:g} ({100.0 * done / total:.0f}%)")
    parts.append(f"{elapsed:.0f}s elapsed")
    if done and total and done < total:
        parts.append(f"ETA {elapsed / done * (total - done):.0f}s")
    return ", ".join(parts)


@contextmanager
def heartbeat(desc: str, log: Callable[[str], None] | None = None,
              every_s: float = 20.0) -> Iterator[dict[str, Any]]:
    """Log ``desc`` when the block starts, ``desc: still running, Ns elapsed`` every ``every_s``
    while it runs (from a daemon thread, so a blocking call in the block does not silence it;
    with what :func:`report` said inside the block, :func:`progress_line`), and ``desc: done in
    Ns`` (or ``failed after Ns``) when it ends. Yields a dict whose ``elapsed_s`` is filled on
    exit."""
    if not every_s > 0:
        raise ValueError(f"every_s must be > 0, got {every_s!r}")
    emit = log or _logger.info
    started = time.monotonic()
    stop = threading.Event()

    info: dict[str, Any] = {"elapsed_s": None}

    def beat() -> None:
        while not stop.wait(every_s):
            emit(progress_line(desc, dict(info), time.monotonic() - started))

    emit(f"{desc}: started")
    token = _ACTIVE.set(info)
    thread = threading.Thread(target=beat, name="weft-heartbeat", daemon=True)
    thread.start()
    ok = False
    try:
        yield info
        ok = True
    finally:
        _ACTIVE.reset(token)
        stop.set()
        thread.join()
        info["elapsed_s"] = time.monotonic() - started
        emit(f"{desc}: {'done in' if ok else 'failed after'} {info['elapsed_s']:.1f}s")
