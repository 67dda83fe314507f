"""Grading in worker processes with a wall-clock kill per item (math-verify needs main threads).

math-verify bounds its work with ``signal.alarm``, which only works on a process's main thread
and cannot interrupt long C-level work. :class:`GradingPool` runs any registered grader
(``eval.graders.GRADERS``) in its own worker processes, sends items in batches, gets results
back per item, and kills a worker that spends longer than ``per_item_timeout_s`` on one item:
that item is recorded as incorrect with error ``"grading timed out"``, the worker is replaced,
and the rest of its batch is graded by the pool as usual. ``grade_many(..., answer_format=...)``
takes whole model outputs and finds their answer regions inside the workers, so extraction and
verification run under the one per-item limit; ``call_timeout_s`` bounds a whole call.

Each gold answer has a home worker (a stable hash of the gold), in every call: a worker parses
a gold once and keeps it (``eval.graders`` caches parsed golds per process), so the pool
parses each gold about as often as one process would, instead of once per worker that happens
to meet it (on real benchmark golds, parsing a gold took 5.9 ms, the rest of a pair 2.7 ms). A
worker whose own items are done takes batches from the end of the longest other queue, so the
work stays balanced; queues hold the longest golds first and batches hold at most
:data:`MAX_BATCH` items, so a slow pair (one symbolic comparison can take math-verify's whole
5 s) starts early and no worker is left alone with a long batch at the end of a call.

Not guaranteed: ordering of work between workers (results are always returned in input
order); that graders registered at run time (not at import of their module) exist in the
workers; use from a script file without an ``if __name__ == "__main__":`` guard when a grader
lives in that script (workers then re-import the main module under the forkserver and spawn
start methods).

The main module: workers re-import it only when a grader or its arguments come from it
(:func:`_main_hidden`). Re-importing it costs what the main program's imports cost, in every
worker, and weft's entry points (``python -m cli.launcher``, Dagster's run worker) import
Dagster: about a second of CPU per worker that a grading worker never uses. A pool whose
workers started without it restarts them with it at the first call that sends something from
the main module. A main module that has no file to re-import (a script read from standard
input, ``python - <<EOF``) is never re-imported, as with ``python -c`` and notebooks.
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import astuple
from typing import Any, Self

from eval.graders import (
    DEFAULT_ITEM_LIMIT_S,
    GRADERS,
    TIMED_OUT,
    Grader,
    GradeResult,
    check_pairs,
    get_grader,
    grade_math,
    grade_output,
    grade_recorded,
)

log = logging.getLogger(__name__)

NOT_GRADED = "not graded: the call ran out of time"
START_TIMEOUT_S = 120.0
# workers a signal may end during start-up (SIGKILL from the OOM killer or an operator) before
# the pool takes it for a machine that cannot start one: each is replaced until then
START_KILLS_TOLERATED = 4
# Most items per batch: a busy worker's batch cannot be taken over by an idle one, so a small
# batch keeps the end of a call balanced (results come back per item whatever the size)
MAX_BATCH = 16
_READY = "ready"


def _worker_main(conn: multiprocessing.connection.Connection) -> None:
    """Worker loop: say "ready", then take ``(grader, kwargs, [(index, pred, gold), ...])`` batches
    and reply ``(index, result fields)`` per item."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and kills us
    try:
        grade_math("\\boxed{1/2}", "\\frac{1}{2}")  # warm math-verify's lazy imports
    except Exception:  # a broken install shows up on the first real item
        log.debug("grading worker warm-up failed", exc_info=True)
    conn.send(_READY)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        fn, kw, batch = message
        for index, prediction, gold in batch:
            conn.send((index, astuple(grade_recorded(fn, prediction, gold, kw))))


def home_slot(gold: str, processes: int) -> int:
    """The worker slot (0 .. processes-1) whose queue items with this gold join: the same for
    a given gold and pool size in every call and every process (CRC-32 of its UTF-8 bytes)."""
    return zlib.crc32(gold.encode("utf-8", "surrogatepass")) % processes


def _default_processes() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _pick_context(start_method: str | None) -> multiprocessing.context.BaseContext:
    methods = multiprocessing.get_all_start_methods()
    if start_method is None:
        start_method = "forkserver" if "forkserver" in methods else "spawn"
    if start_method not in methods:
        raise ValueError(f"start_method {start_method!r} is not available here; use one of {methods}")
    ctx = multiprocessing.get_context(start_method)
    if start_method == "forkserver":
        # The server imports these once; every worker forked from it starts warm.
        ctx.set_forkserver_preload(["eval.grading_pool", "math_verify"])
    return ctx


def _start_failure(worker: _Worker) -> RuntimeError:
    return RuntimeError(
        f"a grading worker exited during start-up (exit code {worker.process.exitcode}). "
        "Workers re-import the main module: in a script, create the pool under "
        "`if __name__ == '__main__':`; and check that `eval.graders` and math-verify import from "
        "the project root")


def _graders_in_main() -> bool:
    """Whether a registered grader is a function of the main module (workers then need it)."""
    return any(getattr(fn, "__module__", None) == "__main__" for fn in GRADERS.values())


@contextlib.contextmanager
def _main_hidden(hide: bool) -> Iterator[None]:
    """While a worker starts, hide the main module from multiprocessing (so the worker does
    not re-import it) when ``hide`` is set, or when it names no file (``<stdin>``):
    multiprocessing would hand that path to the worker, which then fails to run it. Hiding
    takes ``__spec__`` and ``__file__`` off the module for the start only; the module object
    itself stays in place, so other threads still find its functions."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    no_file = (path is not None and getattr(main, "__spec__", None) is None
               and not os.path.isfile(path))
    if main is None or not (hide or no_file):
        yield
        return
    names = ("__spec__", "__file__")
    saved = {name: main.__dict__[name] for name in names if name in main.__dict__}
    main.__spec__ = None
    main.__dict__.pop("__file__", None)
    try:
        yield
    finally:
        for name in names:
            if name in saved:
                main.__dict__[name] = saved[name]
            else:
                main.__dict__.pop(name, None)


class _Worker:
    def __init__(self, ctx: multiprocessing.context.BaseContext, with_main: bool) -> None:
        parent_end, child_end = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_worker_main, args=(child_end,), daemon=True,
                                   name="weft-grader")
        with _main_hidden(not with_main):
            self.process.start()
        child_end.close()
        self.conn = parent_end
        self.started = time.monotonic()
        self.ready = False
        self.batch: list[tuple[int, str, str]] = []
        self.done = 0
        self.last_progress = 0.0

    @property
    def busy(self) -> bool:
        return self.done < len(self.batch)

    def assign(self, message: tuple, batch: list[tuple[int, str, str]]) -> None:
        self.conn.send(message)
        self.batch, self.done, self.last_progress = batch, 0, time.monotonic()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class GradingPool:
    """A pool of grading processes with a wall-clock limit per item.

    ``with GradingPool(processes=2) as pool: results = pool.grade_many(pairs, kind="math")``.
    Items are sent in batches (fewer messages), grouped by gold answer and queued for the
    gold's home worker (:func:`home_slot`), so that a gold is parsed once in the pool across
    calls; an idle worker whose queue is empty takes the last batch of the longest other queue.
    Results come back per item so the parent always knows which item a worker is on. A worker silent for ``per_item_timeout_s`` on one
    item is killed and replaced; that item gets ``error="grading timed out"`` and the rest of
    its batch is re-queued. A worker that dies mid-batch is replaced and its item retried once;
    an item that kills a second worker is recorded as ``"grading worker died ..."``. A worker
    that a signal ends while it starts (killed from outside) is replaced, up to
    ``START_KILLS_TOLERATED`` per pool; one that exits on its own before it is ready (an import
    error) raises RuntimeError. Workers warm up before they take work, so start-up time never counts against
    an item. The parent uses no signals, so the pool works from any thread (a Dagster op,
    pytest); one ``grade_many`` runs at a time per pool. Workers start with ``forkserver``
    (``spawn`` where missing); ``fork`` may be chosen but is unsafe in a process with threads.
    """

    def __init__(self, processes: int | None = None,
                 per_item_timeout_s: float = DEFAULT_ITEM_LIMIT_S,
                 batch_size: int | None = None, start_method: str | None = None) -> None:
        if processes is not None and (isinstance(processes, bool) or not isinstance(processes, int)
                                      or processes < 1):
            raise ValueError(f"processes must be a positive int or None, got {processes!r}")
        if isinstance(per_item_timeout_s, bool) or not isinstance(per_item_timeout_s, (int, float)) \
                or not per_item_timeout_s > 0:
            raise ValueError(f"per_item_timeout_s must be > 0 seconds, got {per_item_timeout_s!r}")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be a positive int or None, got {batch_size!r}")
        self.processes = processes or _default_processes()
        self.per_item_timeout_s = float(per_item_timeout_s)
        self.batch_size = batch_size
        self._ctx = _pick_context(start_method)
        self._workers: list[_Worker] = []
        # held by a call, a start and a start in the background (re-entrant: a call starts
        # the workers it needs while holding it)
        self._lock = threading.RLock()
        self._starter: threading.Thread | None = None  # a start in the background
        self._starter_lock = threading.Lock()
        self.timeouts = 0  # items killed by the outer limit, over the pool's life
        self.deaths = 0  # workers found dead (not killed by the pool)
        self.start_kills = 0  # of those, ended by a signal before they were ready
        self.with_main = False  # whether the workers re-imported the main module

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110 - interpreter shutdown: nothing left to report to
            pass

    def start(self, wait: bool = False) -> None:
        """Start the workers (done by ``with`` or the first :meth:`grade_many`); with ``wait``,
        also wait until every worker has warmed up (RuntimeError when one cannot start within
        ``START_TIMEOUT_S``), so that a later call's time is grading only."""
        if multiprocessing.current_process().daemon:
            raise RuntimeError(
                "GradingPool cannot start worker processes from a daemonic process (e.g. a "
                "multiprocessing.Pool worker); use eval.graders.grade_many_serial there"
            )
        with self._lock:
            if not self._workers:
                self.with_main = self.with_main or _graders_in_main()
            while len(self._workers) < self.processes:
                self._workers.append(_Worker(self._ctx, self.with_main))
        if wait:
            try:
                with self._lock:
                    self._await_ready()
            except BaseException:
                self.close()  # no worker outlives a failed start
                raise

    def start_background(self) -> None:
        """:meth:`start` in a thread of its own, so the caller goes on at once. Starting the
        workers blocks until the forkserver has imported math-verify (0.6-1.0 s on 2 cores):
        a caller that warms the pool before other work would otherwise wait that long. A call
        (or :meth:`start`) made meanwhile waits for this start and finds the workers there; a
        call already holding the pool starts them itself. A start that fails here is logged
        and fails again, with its error, where the pool is first used."""
        def run() -> None:
            if not self._lock.acquire(blocking=False):
                return  # a call holds the pool: it starts the workers it needs itself
            try:
                self.start()
            except Exception as exc:  # noqa: BLE001 - the first call raises it again
                log.warning("the grading pool did not start in the background: %s", exc)
            finally:
                self._lock.release()

        with self._starter_lock:
            if self._workers or (self._starter is not None and self._starter.is_alive()):
                return
            self._starter = threading.Thread(target=run, name="weft-grading-start", daemon=True)
            self._starter.start()

    def close(self) -> None:
        """Stop all workers: ask politely, then kill what is still running."""
        self._wait_for_start()  # a start in the background ends first: none of its workers leaks
        workers, self._workers = self._workers, []
        for w in workers:
            try:
                w.conn.send(None)
            except (OSError, ValueError):
                pass
        for w in workers:
            w.process.join(timeout=1)
            w.kill()

    def worker_pids(self) -> list[int]:
        """Process ids of the current workers (tests and monitoring), once a start in the
        background (:meth:`start_background`) has made them."""
        self._wait_for_start()
        return [w.process.pid for w in self._workers if w.process.pid is not None]

    def _wait_for_start(self) -> None:
        """Wait for a start in the background to end (unless called from that start)."""
        starter = self._starter
        if starter is not None and starter is not threading.current_thread():
            starter.join()

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        self._workers[self._workers.index(worker)] = _Worker(self._ctx, self.with_main)

    def grade_many(self, items: Sequence[tuple[str, str]], kind: str = "math", *,
                   answer_format: str | None = None, call_timeout_s: float | None = None,
                   **kw: Any) -> list[GradeResult]:
        """Grade ``(prediction, gold)`` pairs with grader ``kind``; results in input order.

        ``kw`` goes to the grader (``policy=``, ``timeout_s=`` for math; ``letters=`` for
        choice). With ``answer_format`` the predictions are whole model outputs and each worker
        first finds the answer region (``eval.graders.grade_output``), so that extraction counts
        against the item's limit too. Grader exceptions are recorded per item (``error``), never
        raised; a worker that cannot start at all raises RuntimeError.

        ``call_timeout_s`` bounds the whole call once the workers are up: when it runs out, the
        items still being graded are recorded as ``"grading timed out"`` (their workers are
        killed and replaced) and those not yet started as :data:`NOT_GRADED`, all incorrect.
        The call then returns within about a second (killing and joining the busy workers).
        Waiting for workers to start (the first call, or after :meth:`close`) is not counted:
        it is bounded by ``START_TIMEOUT_S`` on its own.
        """
        if call_timeout_s is not None and not (isinstance(call_timeout_s, (int, float))
                                               and not isinstance(call_timeout_s, bool)
                                               and call_timeout_s > 0):
            raise ValueError(f"call_timeout_s must be > 0 seconds or None, got {call_timeout_s!r}")
        get_grader(kind)  # unknown kinds fail here, in the caller
        if answer_format is not None:
            from pipelines.formats import check_format

            check_format(answer_format)
            fn: Grader = grade_output
            kw = {**kw, "kind": kind, "answer_format": answer_format}
        else:
            fn = get_grader(kind)
        try:
            sent = pickle.dumps((fn, kw))
        except Exception as exc:
            raise TypeError(
                f"grader {kind!r} or its arguments cannot be sent to worker processes ({exc}); "
                "register a module-level function and pass picklable arguments"
            ) from exc
        pairs = check_pairs(items)
        if not pairs:
            return []
        with self._lock:
            from_main = (b"__main__" in sent
                         or getattr(get_grader(kind), "__module__", None) == "__main__")
            if from_main and not self.with_main:
                # A grader (or an argument) from the main module: workers started without it
                # could not unpickle or find it. Start them (again) with it, once.
                if self._workers:
                    log.info("grading pool: restarting its workers with the main module, "
                             "which grader %r or its arguments come from", kind)
                    self.close()
                self.with_main = True
            try:
                return self._run(fn, kw, pairs, call_timeout_s)
            except BaseException:
                # Results still in flight would be read by the next call as its own: start clean.
                self.close()
                raise

    def _await_ready(self) -> None:
        """Wait until every worker has warmed up (at most START_TIMEOUT_S after its start)."""
        slot = 0
        while slot < len(self._workers):
            w = self._workers[slot]
            if w.ready:
                slot += 1
                continue
            left = w.started + START_TIMEOUT_S - time.monotonic()
            try:
                if not w.conn.poll(max(0.0, left)):
                    raise RuntimeError(f"a grading worker did not start within {START_TIMEOUT_S:.0f}s")
                w.ready = w.conn.recv() == _READY
            except (EOFError, OSError):
                w.process.join(timeout=1)
                if self._replace_killed_at_start(w):
                    continue  # wait for its replacement in the same slot
                raise _start_failure(w) from None
            slot += 1

    def _replace_killed_at_start(self, worker: _Worker) -> bool:
        """Replace ``worker``, which ended before it was ready, when a signal ended it (exit
        code < 0: killed from outside, which says nothing about whether workers can start) and
        fewer than ``START_KILLS_TOLERATED`` have; False for any other exit (an import error,
        a crash), which the caller raises as a start-up failure."""
        code = worker.process.exitcode
        if code is None or code >= 0 or self.start_kills >= START_KILLS_TOLERATED:
            return False
        self.start_kills += 1
        self.deaths += 1
        log.warning("grading worker killed by signal %d during start-up; starting another",
                    -code)
        self._replace(worker)
        return True

    def _run(self, fn: Grader, kw: dict[str, Any], pairs: list[tuple[str, str]],
             call_timeout_s: float | None = None) -> list[GradeResult]:
        self.start()
        call_deadline = None
        if call_timeout_s is not None:
            self._await_ready()  # start-up is not the call's time
            call_deadline = time.monotonic() + call_timeout_s
        size = self.batch_size or max(1, min(MAX_BATCH, math.ceil(len(pairs) / (4 * self.processes))))
        # Items sharing a gold go to the same batch of the gold's home worker, so the pool
        # parses a gold once (each worker caches the golds it parsed, across calls). Longest
        # golds first: a long gold is the likeliest to be slow to parse and compare (one
        # symbolic pair can take math-verify's whole 5 s), and started early it overlaps the
        # other workers' queues instead of running alone at the end of the call.
        slots = len(self._workers)
        homes: list[list[int]] = [[] for _ in range(slots)]
        for i in sorted(range(len(pairs)), key=lambda i: (-len(pairs[i][1]), pairs[i][1])):
            homes[home_slot(pairs[i][1], slots)].append(i)
        queues: list[deque[list[tuple[int, str, str]]]] = [
            deque([(i, pairs[i][0], pairs[i][1]) for i in order[s:s + size]]
                  for s in range(0, len(order), size))
            for order in homes
        ]

        def take(slot: int) -> list[tuple[int, str, str]] | None:
            """The slot's next batch, else the last batch of the longest other queue."""
            if queues[slot]:
                return queues[slot].popleft()
            donor = max(queues, key=len)
            return donor.pop() if donor else None

        results: list[GradeResult | None] = [None] * len(pairs)
        remaining = len(pairs)

        died_once: set[int] = set()

        def fail_current(worker: _Worker, error: str, retry: bool = False) -> None:
            """Record the worker's current item as failed (or retry it once), re-queue the rest."""
            nonlocal remaining
            index = worker.batch[worker.done][0]
            queue = queues[self._workers.index(worker)]
            if retry and index not in died_once:  # maybe killed from outside: give it one more go
                died_once.add(index)
                queue.appendleft(worker.batch[worker.done:])
            else:
                results[index] = GradeResult(False, None, "none", None, None, error)
                remaining -= 1
                if worker.done + 1 < len(worker.batch):
                    queue.appendleft(worker.batch[worker.done + 1:])
            worker.batch, worker.done = [], 0
            self._replace(worker)

        while remaining:
            if call_deadline is not None and time.monotonic() >= call_deadline:
                remaining -= self._give_up(queues, results)
                break
            for slot, w in enumerate(self._workers):
                if w.ready and not w.busy:
                    batch = take(slot)
                    if batch is None:
                        continue
                    try:
                        w.assign((fn, kw, batch), batch)
                    except (OSError, ValueError):  # died while idle: replace, retry the batch
                        self.deaths += 1
                        queues[slot].appendleft(batch)
                        self._replace(w)
            watched = [w for w in self._workers if w.busy or not w.ready]
            if not watched:  # cannot happen: every unfinished item is queued or with a worker
                raise RuntimeError("GradingPool lost track of its work; please report this")
            now = time.monotonic()
            deadlines = [w.last_progress + self.per_item_timeout_s if w.ready
                         else w.started + START_TIMEOUT_S for w in watched]
            if call_deadline is not None:
                deadlines.append(call_deadline)
            ready = multiprocessing.connection.wait([w.conn for w in watched],
                                                    max(0.0, min(deadlines) - now))
            for w in [w for w in watched if w.conn in ready]:
                try:
                    if not w.ready:
                        w.ready = w.conn.recv() == _READY
                        continue
                    while w.busy and w.conn.poll():
                        index, fields = w.conn.recv()
                        results[index] = GradeResult(*fields)
                        remaining -= 1
                        w.done += 1
                        w.last_progress = time.monotonic()
                except (EOFError, OSError):
                    w.process.join(timeout=1)
                    if not w.ready:
                        if self._replace_killed_at_start(w):
                            continue
                        raise _start_failure(w) from None
                    self.deaths += 1
                    fail_current(w, f"grading worker died (exit code {w.process.exitcode})",
                                 retry=True)
            now = time.monotonic()
            for w in [w for w in self._workers if w.busy or not w.ready]:
                if w.conn.poll():
                    continue  # an answer arrived just now: read it first
                if not w.ready and now - w.started >= START_TIMEOUT_S:
                    raise RuntimeError(f"a grading worker did not start within {START_TIMEOUT_S:.0f}s")
                if w.ready and now - w.last_progress >= self.per_item_timeout_s:
                    self.timeouts += 1
                    log.warning("grading item %d timed out after %.1fs; worker killed",
                                w.batch[w.done][0], self.per_item_timeout_s)
                    fail_current(w, TIMED_OUT)
        assert remaining == 0 and all(r is not None for r in results)
        return results  # type: ignore[return-value]

    def _give_up(self, queues: list[deque], results: list[GradeResult | None]) -> int:
        """The call's time is up: keep answers already sent, record every other unfinished item
        as failed, kill and replace the busy workers (their late answers must not reach the
        next call). Returns how many items this settled (the caller's open count drops by it)."""
        settled = 0
        for w in list(self._workers):
            try:
                while w.busy and w.conn.poll():  # answers that arrived in time still count
                    index, fields = w.conn.recv()
                    results[index] = GradeResult(*fields)
                    w.done += 1
                    settled += 1
            except (EOFError, OSError):
                pass  # died: its current item fails below like a busy one's
            if not w.busy:
                continue
            index = w.batch[w.done][0]
            results[index] = GradeResult(False, None, "none", None, None, TIMED_OUT)
            self.timeouts += 1
            log.warning("grading item %d stopped: the call ran out of time; worker killed", index)
            queues[0].appendleft(w.batch[w.done + 1:])
            w.batch, w.done = [], 0
            self._replace(w)
            settled += 1
        for queue in queues:
            for batch in queue:
                for index, _, _ in batch:
                    results[index] = GradeResult(False, None, "none", None, None, NOT_GRADED)
                    settled += 1
            queue.clear()
        return settled


# ---------------------------------------------------------------------------------------------
# process-wide warm pools (RL rewards, evaluation without a pool of its own)

_shared: dict[tuple[int, float], GradingPool] = {}
_shared_lock = threading.Lock()


def shared_pool(processes: int | None = None,
                per_item_timeout_s: float = DEFAULT_ITEM_LIMIT_S) -> GradingPool:
    """The process-wide warm pool for these settings: made on first use, reused by every later
    caller of the process (its ``grade_many`` calls take turns), closed at interpreter exit or
    by :func:`close_shared_pools`."""
    key = (processes or _default_processes(), float(per_item_timeout_s))
    with _shared_lock:
        pool = _shared.get(key)
        if pool is None:
            if not _shared:
                import atexit

                atexit.register(close_shared_pools)
            pool = _shared[key] = GradingPool(processes=key[0], per_item_timeout_s=key[1])
        return pool


def close_shared_pools() -> None:
    """Stop every pool :func:`shared_pool` made (also run at interpreter exit)."""
    with _shared_lock:
        pools = list(_shared.values())
        _shared.clear()
    for pool in pools:
        pool.close()
