"""Make long steps visible: weft's loggers on stderr for scripts, progress for concurrent loops
and a heartbeat for blocking phases.

Three pieces, all plain ``logging`` (no Dagster here):

- ``WEFT_LOGGERS`` names weft's top-level loggers. Inside Dagster runs they reach the run log
  because the instance's ``dagster.yaml`` lists them under ``python_logs.managed_python_loggers``
  (``cli.instance.ensure_dagster_home`` writes that); scripts call ``log_to_stderr`` instead.
- ``gather_with_progress`` is ``asyncio.gather`` with progress lines (done/total, failures,
  items/s, completion tokens/s, ETA) every 10 % and at least every ``log_every_s`` seconds,
  also while nothing finishes (``pipelines.llm.batch.Progress`` formats and paces them).
- ``heartbeat`` wraps a blocking phase (grading in a process pool, a model load): one line when
  it starts, one every ``every_s`` seconds while it runs, one with its duration when it ends.

Not guaranteed: a line per item (progress is sampled), or any line at all from a logger whose
level a caller raised above INFO.
"""

from __future__ import annotations

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


@contextmanager
def heartbeat(desc: str, log: Callable[[str], None] | None = None,
              every_s: float = 20.0) -> Iterator[dict[str, Any]]:
    """Log ``desc`` when the block starts, ``desc: still running, Ns elapsed`` every ``every_s``
    while it runs (from a daemon thread, so a blocking call in the block does not silence it),
    and ``desc: done in Ns`` (or ``failed after Ns``) when it ends. Yields a dict whose
    ``elapsed_s`` is filled on exit."""
    if not every_s > 0:
        raise ValueError(f"every_s must be > 0, got {every_s!r}")
    emit = log or _logger.info
    started = time.monotonic()
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            emit(f"{desc}: still running, {time.monotonic() - started:.0f}s elapsed")

    info: dict[str, Any] = {"elapsed_s": None}
    emit(f"{desc}: started")
    thread = threading.Thread(target=beat, name="weft-heartbeat", daemon=True)
    thread.start()
    ok = False
    try:
        yield info
        ok = True
    finally:
        stop.set()
        thread.join()
        info["elapsed_s"] = time.monotonic() - started
        emit(f"{desc}: {'done in' if ok else 'failed after'} {info['elapsed_s']:.1f}s")
