"""Run many LLM calls from one place: ordered concurrent map with progress logs, sync ``run``.

``map_ordered`` awaits ``fn(item)`` for every item with a fixed number of worker coroutines
(so a 100k-item batch does not create 100k tasks), keeps results in input order and logs
done/total, rate, errors and ETA every few seconds or every 10 %, so long batches are visible
in Dagster's captured logs. ``run`` drives a coroutine from synchronous code.

Not guaranteed: the worker count bounds items in flight, not HTTP requests (the client's
semaphore does that); an item counts as an error when ``fn`` raised or its result (or any
element of a list result) has a non-None ``error`` attribute.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

logger = logging.getLogger("pipelines.llm")

T = TypeVar("T")


_LOOP_CLOSERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[weakref.WeakMethod]] = (
    weakref.WeakKeyDictionary()
)


def on_loop_exit(method: Callable[[], Awaitable[None]]) -> None:
    """Have ``run`` await the bound ``method`` before the current loop ends (weakly held), so
    loop-bound resources such as HTTP connection pools are closed on the loop that owns them."""
    _LOOP_CLOSERS.setdefault(asyncio.get_running_loop(), []).append(weakref.WeakMethod(method))


async def _close_loop_resources() -> None:
    for ref in _LOOP_CLOSERS.pop(asyncio.get_running_loop(), []):
        method = ref()
        if method is not None:
            try:
                await method()
            except Exception as exc:  # noqa: BLE001 - closing is best effort; keep the real result
                logger.debug("closing a loop resource failed: %s", exc)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code (a Dagster asset, a script).

    Uses ``asyncio.run`` and closes what registered with ``on_loop_exit`` before the loop ends;
    when called from a thread that already runs an event loop (Jupyter, an async framework)
    the coroutine runs on a fresh loop in a helper thread instead.
    """

    async def main() -> T:
        try:
            return await coro
        finally:
            await _close_loop_resources()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with concurrent.futures.ThreadPoolExecutor(
        max_workers=1, thread_name_prefix="weft-llm-run"
    ) as pool:
        return pool.submit(asyncio.run, main()).result()


def is_failure(result: Any) -> bool:
    """True for an exception, a result whose ``error`` is set, or a list holding one."""
    if isinstance(result, BaseException):
        return True
    if isinstance(result, list):
        return any(is_failure(r) for r in result)
    return getattr(result, "error", None) is not None


@dataclass
class Progress:
    """Counts finished items and logs done/total, rate and errors every few seconds or 10 %."""

    total: int
    desc: str = ""
    log_every_s: float = 10.0
    started: float = field(default_factory=time.monotonic)
    done: int = 0
    errors: int = 0
    last_log: float = field(default_factory=time.monotonic)
    next_pct: int = 10

    def update(self, failed: bool) -> None:
        self.done += 1
        self.errors += int(failed)
        now = time.monotonic()
        pct = 100 * self.done // max(self.total, 1)
        if (
            self.done == self.total
            or now - self.last_log >= self.log_every_s
            or pct >= self.next_pct
        ):
            self.last_log = now
            self.next_pct = (pct // 10 + 1) * 10
            self.log()

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done / elapsed
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        return (
            f"{self.desc or 'llm batch'}: {self.done}/{self.total} done "
            f"({100 * self.done // max(self.total, 1)}%), {rate:.1f}/s, {self.errors} errors, "
            f"{elapsed:.0f}s elapsed, eta {eta:.0f}s"
        )

    def log(self) -> None:
        logger.info("%s", self.line())


async def map_ordered(
    fn: Callable[[Any], Awaitable[T]],
    items: Iterable[Any],
    *,
    workers: int,
    desc: str = "",
    return_exceptions: bool = False,
    log_every_s: float = 10.0,
    fatal: tuple[type[BaseException], ...] = (),
) -> list[T]:
    """``[await fn(x) for x in items]`` run by ``workers`` coroutines, in input order.

    An exception cancels the remaining work and is raised, unless ``return_exceptions`` (then
    it takes the item's place); exception types in ``fatal`` are always raised.
    """
    if not (isinstance(workers, int) and workers >= 1):
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    todo = list(items)
    results: list[Any] = [None] * len(todo)
    if not todo:
        return results
    progress = Progress(len(todo), desc, log_every_s)
    queue = iter(enumerate(todo))

    async def worker() -> None:
        for index, item in queue:  # one shared iterator: each item is taken exactly once
            try:
                results[index] = await fn(item)
            except fatal:
                raise
            except Exception as exc:
                if not return_exceptions:
                    raise
                results[index] = exc
            progress.update(is_failure(results[index]))

    tasks = [asyncio.ensure_future(worker()) for _ in range(min(workers, len(todo)))]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        failed = [t for t in done if not t.cancelled() and t.exception() is not None]
        if failed:
            logger.warning(
                "%s (stopped by %s)", progress.line(), type(failed[0].exception()).__name__
            )
            raise failed[0].exception()  # type: ignore[misc]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return results
