"""Run many LLM calls from one place: ordered concurrent map with progress logs, sync ``run``.

``map_ordered`` awaits ``fn(item)`` for every item with a fixed number of worker coroutines
(so a 100k-item batch does not create 100k tasks), keeps results in input order and reports
done/total, failures, items/s, generated tokens/s, cache hits and ETA every 10 % and at least every
``log_every_s`` seconds, also while no item finishes (a stuck request shows as a stalled count
instead of silence), to a ``log`` callable (e.g. Dagster's ``context.log.info``) or the
``pipelines.llm`` logger. With ``deadline_s`` it is a watchdog over the whole batch: when the
batch outlives it, the remaining work is cancelled and ``BatchTimeout`` raised, naming how far
it got. ``run`` drives a coroutine from synchronous code.

Not guaranteed: the worker count bounds items in flight, not HTTP requests (the client's
semaphore does that); an item counts as a failure when ``fn`` raised or its result (or any
element of a list result) has a non-None ``error`` attribute or, for a dict, a non-None
``error`` / ``gen_error`` value. With ``usage`` (the client's ``usage`` method, as
``LLMClient.map`` passes it) tokens/s is generated tokens over the time spent generating during
the batch and cache hits are counted apart; without it, tokens are read from a
``completion_tokens`` attribute or key of results that are not cache replays (a true ``cached``
attribute or key), over the batch's elapsed time, and are 0 where a result has neither.
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


class BatchTimeout(TimeoutError):
    """A batch ran past its whole-batch deadline; the unfinished items were cancelled."""

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
    """True for an exception, a result whose ``error`` is set (attribute, or ``error`` /
    ``gen_error`` key of a dict), or a list holding one."""
    if isinstance(result, BaseException):
        return True
    if isinstance(result, list):
        return any(is_failure(r) for r in result)
    if isinstance(result, dict):
        return result.get("error") is not None or result.get("gen_error") is not None
    return getattr(result, "error", None) is not None


def completion_tokens(result: Any) -> int:
    """Generated completion tokens of a result (attribute or dict key), summed over a list;
    0 for a cache replay (``cached`` true) and where there is no count."""
    if isinstance(result, list):
        return sum(completion_tokens(r) for r in result)
    cached = result.get("cached") if isinstance(result, dict) else getattr(result, "cached", None)
    if cached is True:  # a replay generated nothing
        return 0
    value = result.get("completion_tokens") if isinstance(result, dict) else None
    if value is None:
        value = getattr(result, "completion_tokens", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass
class Progress:
    """Counts finished items and reports done/total, failures, rates and ETA every 10 % and at
    least every ``log_every_s`` (the heartbeat in ``map_ordered`` calls ``tick``)."""

    total: int
    desc: str = ""
    log_every_s: float = 10.0
    log_fn: Callable[[str], None] | None = None
    started: float = field(default_factory=time.monotonic)
    done: int = 0
    errors: int = 0
    tokens: int = 0
    last_log: float = field(default_factory=time.monotonic)
    next_pct: int = 10
    usage: Callable[[], Any] | None = None  # a client's usage snapshot (pipelines.llm.Usage)

    def __post_init__(self) -> None:
        self._usage_start = self.usage() if self.usage is not None else None

    def tick(self) -> None:
        """Report if nothing was reported for ``log_every_s`` (called periodically)."""
        if time.monotonic() - self.last_log >= self.log_every_s:
            self.last_log = time.monotonic()
            self.log()

    def update(self, failed: bool, tokens: int = 0) -> None:
        self.done += 1
        self.errors += int(failed)
        self.tokens += tokens
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
        eta_text = f"{eta:.0f}s" if eta != float("inf") else "unknown"
        if self.usage is not None:
            used = self.usage() - self._usage_start
            speed = (f"{used.tokens_per_s:.1f} tokens/s generated"
                     if used.tokens_per_s is not None else "0 tokens generated")
            speed += f", {used.cache_hits} cache hits"
        else:
            speed = f"{self.tokens / elapsed:.1f} tokens/s"
        return (
            f"{self.desc or 'llm batch'}: {self.done}/{self.total} done "
            f"({100 * self.done // max(self.total, 1)}%), {self.errors} failed, "
            f"{rate:.1f} items/s, {speed}, {elapsed:.0f}s elapsed, eta {eta_text}"
        )

    def log(self) -> None:
        if self.log_fn is not None:
            self.log_fn(self.line())
        else:
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
    deadline_s: float | None = None,
    log: Callable[[str], None] | None = None,
    usage: Callable[[], Any] | None = None,
) -> list[T]:
    """``[await fn(x) for x in items]`` run by ``workers`` coroutines, in input order.

    An exception cancels the remaining work and is raised, unless ``return_exceptions`` (then
    it takes the item's place); exception types in ``fatal`` are always raised, and so is
    ``BatchTimeout`` once ``deadline_s`` has passed with items unfinished. Progress goes to
    ``log`` (default: the ``pipelines.llm`` logger) at least every ``log_every_s``; with
    ``usage`` (a callable returning a ``pipelines.llm.Usage`` snapshot) its tokens/s is
    generation only and cache hits are reported apart.
    """
    if not (isinstance(workers, int) and workers >= 1):
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    if deadline_s is not None and not deadline_s > 0:
        raise ValueError(f"deadline_s must be > 0 or None, got {deadline_s!r}")
    if not log_every_s > 0:
        raise ValueError(f"log_every_s must be > 0, got {log_every_s!r}")
    todo = list(items)
    results: list[Any] = [None] * len(todo)
    if not todo:
        return results
    progress = Progress(len(todo), desc, log_every_s, log, usage=usage)
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
            progress.update(is_failure(results[index]), completion_tokens(results[index]))

    async def heartbeat() -> None:
        while True:
            await asyncio.sleep(min(1.0, log_every_s))
            progress.tick()

    tasks = [asyncio.ensure_future(worker()) for _ in range(min(workers, len(todo)))]
    beat = asyncio.ensure_future(heartbeat())
    try:
        done, pending = await asyncio.wait(
            tasks, timeout=deadline_s, return_when=asyncio.FIRST_EXCEPTION
        )
        failed = [t for t in done if not t.cancelled() and t.exception() is not None]
        if failed:
            logger.warning(
                "%s (stopped by %s)", progress.line(), type(failed[0].exception()).__name__
            )
            raise failed[0].exception()  # type: ignore[misc]
        if pending:
            message = (
                f"{desc or 'llm batch'} exceeded its {deadline_s:g}s deadline with "
                f"{progress.total - progress.done} of {progress.total} items unfinished "
                f"({progress.errors} failed); finished calls are cached, so a re-run resumes. "
                "Raise batch_timeout_s if the batch is just slow."
            )
            progress.log()
            raise BatchTimeout(message)
    finally:
        beat.cancel()
        for task in tasks:
            task.cancel()
        await asyncio.gather(beat, *tasks, return_exceptions=True)
    return results
