"""What a long command prints: its own story on the terminal, everything else in one log file.

:class:`Console` is a context manager for a command such as ``make demo`` that runs libraries
and subprocesses which print a lot (Dagster's event lines, TRL's metric dicts, tqdm bars,
version warnings, training scripts launched through Dagster Pipes). Inside it:

- file descriptors 1 and 2 of this process point at the log file, so every write to them (this
  process's ``print``, ``logging``, ``warnings``, and every child process that inherits them,
  e.g. ``PipesSubprocessClient`` launches) lands in the log, in the order it was written (the
  log is opened for appending by every writer);
- :meth:`Console.say` writes the command's own lines to the terminal (the descriptors that were
  1 and 2 on entry) and to the log, so the log holds the whole run;
- ``follow`` (a callback given each new complete line of the log while the command runs) turns
  chosen library lines into short terminal lines, e.g. one per finished training step;
- :meth:`Console.fail` shows an error in full on the terminal: the exception's traceback, the
  last traceback that reached the log since the last :meth:`Console.stage` (a child's error),
  and where the log is.

On exit the descriptors are restored. With ``log_path=None`` (``--verbose``) nothing is
redirected: :meth:`Console.say` is ``print`` and library output stays on the terminal.

Not guaranteed: output written to a terminal device opened by name (``/dev/tty``) rather than
through descriptors 1 and 2; lines a child keeps writing after the context has exited land in
the log, not on the terminal.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import traceback
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TextIO

from pipelines.settings import logs_dir

ENV_VERBOSE = "WEFT_VERBOSE"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")
EXCERPT_LINES = 60  # at most this many log lines are repeated on the terminal after a failure
TRACEBACK_START = "Traceback (most recent call last):"


def verbose_from_env(flag: bool = False) -> bool:
    """``flag`` (a ``--verbose`` option) or ``WEFT_VERBOSE`` set to 1/true/yes/on.

    Raises ValueError for any other value of the variable, naming the accepted ones."""
    raw = os.environ.get(ENV_VERBOSE, "").strip().lower()
    if raw not in _TRUE + _FALSE:
        raise ValueError(f"{ENV_VERBOSE} must be 1 or 0 (also true/false, yes/no, on/off), got "
                         f"{os.environ[ENV_VERBOSE]!r}")
    return flag or raw in _TRUE


def run_log_path(command: str, when: datetime | None = None) -> Path:
    """``WEFT_HOME/logs/<command>-<YYYYmmdd-HHMMSS>.log`` (local time of ``when``, default now);
    a ``-2``, ``-3`` ... suffix when that file exists already."""
    stamp = (when or datetime.now()).strftime("%Y%m%d-%H%M%S")
    path = logs_dir() / f"{command}-{stamp}.log"
    n = 2
    while path.exists():
        path = logs_dir() / f"{command}-{stamp}-{n}.log"
        n += 1
    return path


def last_traceback(text: str, max_lines: int = EXCERPT_LINES) -> list[str]:
    """The last Python traceback in ``text`` (from its ``Traceback (most recent call last):``
    line to the exception line that ends it), at most ``max_lines`` lines (the last ones);
    ``[]`` when ``text`` holds none."""
    start = text.rfind(TRACEBACK_START)
    if start < 0:
        return []
    lines = text[start:].splitlines()
    end = len(lines)
    for i, line in enumerate(lines[1:], start=1):
        # frames and source lines are indented; the first unindented line is the exception
        if line and not line[0].isspace():
            end = i + 1
            break
    return lines[:end][-max_lines:]


_RECORD_START = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d")


def last_error_record(text: str, max_lines: int = EXCERPT_LINES) -> list[str]:
    """The last ERROR record of a log in ``text`` (a line with `` - ERROR - `` and the lines
    after it up to the next timestamped record), preferring Dagster's failed-step records
    (``STEP_FAILURE``, which name the step and its error) over its run-failure summary; at most
    ``max_lines`` lines (the first ones); ``[]`` when there is none."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if " - ERROR - " in line]
    starts = [i for i in starts if "STEP_FAILURE" in lines[i]] or starts
    if not starts:
        return []
    block = [lines[starts[-1]]]
    for line in lines[starts[-1] + 1:]:
        if _RECORD_START.match(line):
            break
        block.append(line)
    while block and not block[-1].strip():
        block.pop()
    return block[:max_lines]


class Console:
    """Story lines to the terminal, library output to ``log_path`` (see the module docstring).

    ``follow`` is called from a background thread with each new complete line of the log
    (without its line ending), except lines this console wrote itself; it may call
    :meth:`say`. Use as ``with Console(path) as console: ...``; one at a time per process."""

    def __init__(self, log_path: Path | None, follow: Callable[[str], None] | None = None,
                 poll_s: float = 0.5, prefix: str = "[demo]"):
        self.log_path = log_path
        self.prefix = prefix
        self.follow = follow
        self.poll_s = poll_s
        self.active = False
        self._lock = threading.Lock()
        self._out: TextIO = sys.stdout
        self._err: TextIO = sys.stderr
        self._log: TextIO | None = None
        self._saved: list[int] = []
        self._mark = 0
        self._own: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- entering and leaving ---------------------------------------------------------
    def __enter__(self) -> Console:
        global _ACTIVE
        if self.log_path is None:
            _ACTIVE = self
            return self
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = [os.dup(1), os.dup(2)]
        self._out = os.fdopen(os.dup(self._saved[0]), "w", buffering=1, encoding="utf-8",
                              errors="replace")
        self._err = os.fdopen(os.dup(self._saved[1]), "w", buffering=1, encoding="utf-8",
                              errors="replace")
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        self._log = open(self.log_path, "a", buffering=1, encoding="utf-8",
                         errors="replace")
        self.active = True
        _ACTIVE = self
        if self.follow is not None:
            self._thread = threading.Thread(target=self._follow_loop, name="console-follow",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        global _ACTIVE
        _ACTIVE = None
        if not self.active:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=10)
        os.dup2(self._saved[0], 1)
        os.dup2(self._saved[1], 2)
        for fd in self._saved:
            os.close(fd)
        for stream in (self._out, self._err, self._log):
            if stream is not None:
                stream.close()
        self._out, self._err, self._log = sys.stdout, sys.stderr, None
        self.active = False

    # ---- writing ------------------------------------------------------------------------
    def say(self, text: str = "", *, error: bool = False) -> None:
        """Write ``text`` (one or more lines) to the terminal (stderr when ``error``) and to
        the log."""
        with self._lock:
            if not self.active:
                print(text, file=sys.stderr if error else sys.stdout, flush=True)
                return
            sys.stdout.flush()
            sys.stderr.flush()
            stream = self._err if error else self._out
            stream.write(text + "\n")
            stream.flush()
            assert self._log is not None
            self._own.update(text.splitlines())
            self._log.write(text + "\n")
            self._log.flush()

    def stage(self, text: str) -> None:
        """Start a stage: say ``text`` and remember where the log stood, so that
        :meth:`fail` repeats only what this stage wrote."""
        self.say(text)
        self._mark = self._log_size()

    def fail(self, exc: BaseException | None = None, what: str = "failed") -> None:
        """Show a failure in full on the terminal (stderr): ``exc``'s traceback when given, then
        what the log received since the current stage began that tells why (its last Python
        traceback, e.g. a child process's, and its last ERROR record, e.g. Dagster's failed
        step), then the log's path."""
        lines = [f"{self.prefix} {what}"]
        if exc is not None:
            lines += "".join(traceback.format_exception(exc)).rstrip().splitlines()
        if self.active:
            sys.stdout.flush()
            sys.stderr.flush()
            text = self._read_log(self._mark)
            for excerpt in (last_traceback(text), last_error_record(text)):
                if excerpt and not set(excerpt) <= set(lines):
                    lines += [f"{self.prefix} from the log:", *excerpt]
            lines.append(f"{self.prefix} everything this run printed is in {self.log_path}")
        self.say("\n".join(lines), error=True)

    def include(self, path: Path, offset: int, title: str) -> None:
        """Copy what ``path`` (another process's own log, e.g. a model server's) received from
        byte ``offset`` on into this log, between marker lines naming ``title`` and ``path``;
        nothing on the terminal, nothing when no log is kept or the file cannot be read."""
        if not self.active or self._log is None:
            return
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                text = fh.read().decode("utf-8", errors="replace")
        except OSError:
            return
        with self._lock:
            self._log.write(f"----- {title} ({path}, from byte {offset}) -----\n{text}")
            if text and not text.endswith("\n"):
                self._log.write("\n")
            self._log.write(f"----- end of {title} -----\n")
            self._log.flush()

    # ---- the log --------------------------------------------------------------------------
    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size if self.log_path else 0
        except OSError:
            return 0

    def _read_log(self, offset: int) -> str:
        if self.log_path is None:
            return ""
        with open(self.log_path, "rb") as fh:
            fh.seek(offset)
            return fh.read().decode("utf-8", errors="replace")

    def _follow_loop(self) -> None:
        assert self.log_path is not None and self.follow is not None
        offset, partial = self._log_size(), b""
        while True:
            stopping = self._stop.is_set()
            with open(self.log_path, "rb") as fh:
                fh.seek(offset)
                chunk = fh.read()
            offset += len(chunk)
            *complete, partial = (partial + chunk).split(b"\n")
            for raw in complete:
                line = raw.decode("utf-8", errors="replace").rstrip("\r")
                with self._lock:
                    own = line in self._own
                if own:
                    continue
                try:
                    self.follow(line)
                except Exception as exc:  # noqa: BLE001 - a bad callback must not stop the run
                    self.say(f"{self.prefix} (could not summarise a log line: {exc!r})",
                             error=True)
            if stopping:
                return
            self._stop.wait(self.poll_s)


_ACTIVE: Console | None = None


def say(text: str = "") -> None:
    """:meth:`Console.say` on the console in use, else ``print`` (no console: tests, scripts)."""
    if _ACTIVE is not None:
        _ACTIVE.say(text)
    else:
        print(text, flush=True)


def stage(text: str) -> None:
    """:meth:`Console.stage` on the console in use, else ``print``."""
    if _ACTIVE is not None:
        _ACTIVE.stage(text)
    else:
        print(text, flush=True)



def include(path: Path, offset: int, title: str) -> None:
    """:meth:`Console.include` on the console in use; nothing without one."""
    if _ACTIVE is not None:
        _ACTIVE.include(path, offset, title)


def run_logged(work: Callable[[], int], log_path: Path | None, *,
               follow: Callable[[str], None] | None = None, prefix: str = "[demo]") -> int:
    """Run ``work`` (returns an exit status) inside a :class:`Console` on ``log_path`` and
    return its status: the first terminal line names the log, the last one names it again
    on success; a non-zero status, an exception (status 1) or an interrupt (status 130) is
    shown with :meth:`Console.fail`. ``log_path=None`` runs ``work`` with nothing redirected."""
    with Console(log_path, follow=follow, prefix=prefix) as con:
        if log_path is not None:
            con.say(f"{prefix} library output (Dagster events, subprocesses, warnings, progress "
                    f"bars) goes to {log_path}; --verbose or {ENV_VERBOSE}=1 shows it here")
        try:
            status = work()
        except KeyboardInterrupt:
            con.fail(None, "interrupted")
            return 130
        except Exception as exc:  # noqa: BLE001 - shown in full on the terminal
            con.fail(exc, "failed:")
            return 1
        if status != 0:
            con.fail(None, f"failed (exit status {status})")
        elif log_path is not None:
            con.say(f"{prefix} full log: {log_path}")
        return status
