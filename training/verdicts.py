"""Correctness verdicts for RL rewards: each completion graded once per step, in worker
processes, with answer extraction and verification under one time limit.

The rewards that need to know whether a completion is right (``training.rewards``: outcome,
budget, length penalty, granularity) ask a :class:`Verdicts` object; the rewards made by one
``build_rewards`` call share one, so a completion is graded once per training step however many
of them read its verdict.

Guarantees:

- The grading is evaluation's: ``eval.graders.grade_output`` takes the format's answer region
  (``pipelines.formats.answer_region``) and applies the registered grader the recipe names
  (``"math"`` by default, ``"choice"`` for multiple choice: the benchmark's own grader).
- It runs in a process-wide warm ``eval.grading_pool.shared_pool`` (started on first use, reused
  across steps and by every ``Verdicts`` of the process, closed at exit), each worker on its own
  main thread, so math-verify's inner timeouts work whatever thread the trainer calls from.
  Region-finding, answer extraction and verification of one completion run together under one
  wall-clock limit per item, ``L = ITEM_LIMIT_FACTOR * timeout_s`` (``timeout_s``: math-verify's
  own limit per parse or comparison; grading one completion makes a few such calls).
- Bound: one :meth:`Verdicts.verdicts` call over ``n`` completions not graded yet this step
  returns within :func:`call_bound_s` = ``(ceil(n / P) + 1) * L`` seconds, plus about one second
  to kill workers still busy at that point, from any thread; ``P`` is the pool's process
  count. ``ceil(n / P) * L`` covers n items that each use their whole limit on P workers; the
  extra ``L`` covers restarting workers killed on the way and the pool's scheduling. The pool
  enforces it (``call_timeout_s``): an item still unfinished then is graded wrong and recorded
  in the log. The first call of a process also waits for the workers to start (at most
  ``eval.grading_pool.START_TIMEOUT_S``; 1-3 s measured), which is not counted.
  With the defaults (timeout_s 5, so L = 10 s; P = 2 on a 2-core machine) a group of 8
  completions returns within 50 s even if all 8 are sympy bombs.
- One verdict per (completion text, gold answer, answer format, grader kind, timeout) per
  training step: verdicts are cached, and the cache is emptied when TRL's
  ``trainer_state.global_step`` changes and whenever it holds more than :data:`MAX_CACHED`
  verdicts (calls without a trainer state), so it cannot grow without bound. Identical
  completions in one call are graded once.
- A missing or empty gold answer gives None ("not scorable") without grading; so does a gold the
  grader rejects (a ValueError from it: ``"$$"`` for math, ``"Z"`` for choice), with a warning.

Not guaranteed: that a completion graded wrong because its call ran out of time was wrong (this
happens only when other completions of the call used up their limits, or when workers killed on
the way restart slowly: a new worker re-imports the trainer's main module, about 3 s for
``training.grpo`` on a 2-core machine, which the extra ``L`` absorbs once or twice per worker);
math-verify's inner limits usually end a bomb first (no kill, no restart). The bound in a daemonic
process (``multiprocessing`` workers cannot start pools): there grading runs in-process with
``eval.graders.grade_many_serial``, each completion under the same per-item limit ``L`` (a
signal, so on the main thread only, and work inside one C call finishes first), one at a time,
so n completions take up to ``n * L``; a warning says so.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import math
import multiprocessing
import os
import threading
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)

ITEM_LIMIT_FACTOR = 2  # per-item wall-clock limit, in units of math-verify's inner timeout
MAX_PROCESSES = 4  # grading processes per trainer process (fewer on smaller machines)
MAX_CACHED = 65_536  # verdicts kept before the cache is emptied (when no step is known)
DEFAULT_TIMEOUT_S = 5

_warned_daemon = threading.Event()


def default_processes() -> int:
    """Grading processes for a trainer: the usable cores, at most :data:`MAX_PROCESSES`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_PROCESSES, cores))


def item_limit_s(timeout_s: int) -> float:
    """Wall-clock seconds one completion may take (region, extraction and verification)."""
    return float(ITEM_LIMIT_FACTOR * timeout_s)


def call_bound_s(n: int, processes: int, timeout_s: int) -> float:
    """Seconds within which grading ``n`` completions on ``processes`` workers returns, once the
    workers are up (see the module docstring): ``(ceil(n / processes) + 1) * L``."""
    return (math.ceil(n / max(1, processes)) + 1) * item_limit_s(timeout_s)


def check_grader(kind: str) -> str:
    """``kind`` if it is a registered grader (``eval.graders.GRADERS``); ValueError otherwise."""
    from eval.graders import get_grader

    get_grader(kind)
    return kind


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class Verdicts:
    """Correct / wrong / unscorable verdicts for completions, graded once per training step.

    ``Verdicts(processes=None)``; ``processes`` defaults to :func:`default_processes`.
    ``graded`` counts the completions actually sent to the grader over this object's life.
    """

    def __init__(self, processes: int | None = None) -> None:
        if processes is not None and (isinstance(processes, bool) or not isinstance(processes, int)
                                      or processes < 1):
            raise ValueError(f"processes must be a positive int or None, got {processes!r}")
        self.processes = processes or default_processes()
        self.graded = 0
        self._cache: dict[tuple, bool | None] = {}
        self._step: Any = None
        self._lock = threading.Lock()

    def warm_up(self, timeout_s: int = DEFAULT_TIMEOUT_S) -> bool:
        """Start the grading pool that :meth:`verdicts` will use (its workers start in the
        background; nothing waits), so a training run's first reward call finds it warm.
        False in a daemonic process, which grades in-process and has no pool."""
        if multiprocessing.current_process().daemon:
            return False
        from eval.grading_pool import shared_pool

        shared_pool(self.processes, item_limit_s(timeout_s)).start_background()
        return True

    def verdicts(self, texts: Sequence[str], golds: Sequence[Any], *, answer_format: str,
                 grader: str = "math", timeout_s: int = DEFAULT_TIMEOUT_S,
                 trainer_state: Any = None) -> list[bool | None]:
        """One verdict per text: True (correct), False (wrong, or not graded in time), None
        (missing, empty or unusable gold). ``trainer_state`` is TRL's; its ``global_step``
        scopes the cache."""
        if len(texts) != len(golds):
            raise ValueError(f"{len(texts)} completions for {len(golds)} gold answers")
        step = getattr(trainer_state, "global_step", None)
        out: list[bool | None] = [None] * len(texts)
        with self._lock:
            if (step is not None and step != self._step) or len(self._cache) > MAX_CACHED:
                self._cache.clear()
                self._step = step
            todo: dict[tuple, list[int]] = {}
            for i, (text, gold) in enumerate(zip(texts, golds)):
                if gold is None or not str(gold).strip():
                    continue
                key = (_digest(text), str(gold), answer_format, grader, timeout_s)
                if key in self._cache:
                    out[i] = self._cache[key]
                else:
                    todo.setdefault(key, []).append(i)
            if not todo:
                return out
            keys = list(todo)
            items = [(texts[todo[k][0]], k[1]) for k in keys]
            self.graded += len(items)
            for key, result in zip(keys, self._grade_batch(items, answer_format, grader,
                                                           timeout_s)):
                verdict = self._verdict(result, key[1], grader)
                self._cache[key] = verdict
                for i in todo[key]:
                    out[i] = verdict
        return out

    @staticmethod
    def _verdict(result: Any, gold: str, grader: str) -> bool | None:
        from eval.graders import is_input_error
        from eval.grading_pool import NOT_GRADED, TIMED_OUT

        if is_input_error(result):
            log.warning("reward: the %s grader cannot use gold %r: %s; not scorable", grader,
                        gold, result.error)
            return None
        if result.error in (TIMED_OUT, NOT_GRADED):
            log.warning("reward: a completion is graded wrong (%s)", result.error)
        return bool(result.correct)

    def _grade_batch(self, items: list[tuple[str, str]], answer_format: str, grader: str,
                     timeout_s: int) -> list[Any]:
        """Grade ``(output, gold)`` pairs in the warm pool under :func:`call_bound_s`."""
        from eval.graders import get_grader, grade_many_serial

        kw: dict[str, Any] = {}
        if "timeout_s" in inspect.signature(get_grader(grader)).parameters:
            kw["timeout_s"] = timeout_s
        if multiprocessing.current_process().daemon:  # cannot start worker processes here
            if not _warned_daemon.is_set():
                _warned_daemon.set()
                log.warning("grading rewards in a daemonic process: in-process, one item at a "
                            "time under the per-item limit (no parallelism, no kill)")
            return grade_many_serial(items, kind=grader, answer_format=answer_format,
                                     item_limit_s=item_limit_s(timeout_s), **kw)
        from eval.grading_pool import shared_pool

        pool = shared_pool(self.processes, item_limit_s(timeout_s))
        return pool.grade_many(items, kind=grader, answer_format=answer_format,
                               call_timeout_s=call_bound_s(len(items), self.processes,
                                                           timeout_s), **kw)


_default: Verdicts | None = None
_default_lock = threading.Lock()


def default_verdicts() -> Verdicts:
    """The process's shared :class:`Verdicts` for rewards made outside ``build_rewards``."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Verdicts()
        return _default
