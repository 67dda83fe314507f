"""The host side of a jail's plumbing: reading its stdout/stderr while it runs (each stream
capped), descriptors holding a program or its stdin, and turning what happened (exit status,
the driver's error report, limits hit) into an :class:`ExecResult`.

Not guaranteed: exact classification of every limit (it is read from errno values and signals:
``[Errno 11]`` counts as the process limit, ``[Errno 28]`` as the disk limit, SIGXCPU as the CPU
limit, a SIGKILL only with the CPU time to show for it).
"""

from __future__ import annotations

import os
import re
import selectors
import time

from pipelines.sandbox.result import (
    LIMIT_CPU,
    LIMIT_DISK,
    LIMIT_FILE_SIZE,
    LIMIT_MEMORY,
    LIMIT_OPEN_FILES,
    LIMIT_OUTPUT,
    LIMIT_PROCESSES,
    LIMIT_RECURSION,
    LIMIT_WALL,
    ExecError,
    ExecResult,
    Limits,
)

CHUNK = 1 << 16
# The driver keeps the innermost 100 frames of a deep traceback and says how many it dropped.
_OMITTED_RE = re.compile(r"\[(\d+) outer frames omitted\]")
RUNAWAY_DEPTH = 1000  # a SystemError this many frames deep is a runaway recursion
SIGNAL_NAMES = {4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL",
                11: "SIGSEGV", 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ"}


class Capture:
    """Bytes of one stream, keeping at most ``cap`` and counting the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.buf = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.cap - len(self.buf)
        if room > 0:
            self.buf += data[:room]

    def take(self, new_cap: int | None = None) -> tuple[str, bool]:
        """(decoded text, truncated) and start afresh."""
        text = self.buf.decode("utf-8", "replace")
        truncated = self.total > self.cap
        self.buf = bytearray()
        self.total = 0
        if new_cap is not None:
            self.cap = new_cap
        return text, truncated


def read_available(fd: int) -> bytes | None:
    """What a non-blocking fd has now: bytes, b'' when nothing yet, None at EOF or error."""
    try:
        data = os.read(fd, CHUNK)
    except BlockingIOError:
        return b""
    except OSError:
        return None
    return data if data else None


class Pump:
    """One selector over a jail's stdout/stderr (read into captures) and control fds (returned
    to the caller by :meth:`poll` when they are ready)."""

    def __init__(self, streams: dict[int, Capture]) -> None:
        self.sel = selectors.DefaultSelector()
        self.streams = streams
        self.open: set[int] = set()
        for fd in streams:
            self.add(fd)

    def add(self, fd: int, events: int = selectors.EVENT_READ) -> None:
        os.set_blocking(fd, False)
        self.sel.register(fd, events)
        self.open.add(fd)

    def remove(self, fd: int) -> None:
        if fd in self.open:
            self.sel.unregister(fd)
            self.open.discard(fd)

    def poll(self, timeout: float) -> list[int]:
        """Wait up to ``timeout``; read ready streams; return ready control fds."""
        ready: list[int] = []
        for key, _ in self.sel.select(max(timeout, 0.0)):
            if key.fd in self.streams:
                self._read_stream(key.fd)
            else:
                ready.append(key.fd)
        return ready

    def _read_stream(self, fd: int) -> None:
        for _ in range(64):  # bounded, so a flood cannot starve the other fds
            data = read_available(fd)
            if data is None:
                self.remove(fd)
                return
            if not data:
                return
            self.streams[fd].feed(data)

    def drain_now(self) -> None:
        """Read whatever the streams already hold, without waiting."""
        while True:
            before = sum(c.total for c in self.streams.values())
            self.poll(0)
            if sum(c.total for c in self.streams.values()) == before:
                return

    def drain_to_eof(self, max_s: float) -> None:
        """Read the streams until every writer is gone (EOF), for at most ``max_s``."""
        end = time.monotonic() + max_s
        while any(fd in self.open for fd in self.streams):
            remaining = end - time.monotonic()
            if remaining <= 0:
                return
            self.poll(remaining)

    def close(self) -> None:
        self.sel.close()


def memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)
    write_all(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def as_bytes(stdin: str | bytes | None) -> bytes | None:
    if stdin is None or isinstance(stdin, bytes):
        return stdin
    if isinstance(stdin, str):
        return stdin.encode("utf-8")
    raise TypeError(f"stdin must be str, bytes or None, got {type(stdin).__name__}")


def check_code(code: str) -> str:
    if not isinstance(code, str):
        raise TypeError(f"code must be a str of Python source, got {type(code).__name__}")
    return code


def close_all(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


# ---------------------------------------------------------------------------------------------
# turning what happened into an ExecResult


def decode_fields(data: bytes) -> list[str]:
    fields, i = [], 0
    while i < len(data):
        colon = data.index(b":", i)
        size = int(data[i:colon])
        fields.append(data[colon + 1:colon + 1 + size].decode("utf-8", "replace"))
        i = colon + 1 + size
    return fields


def parse_report(data: bytes) -> tuple[ExecError | None, int | None]:
    """(error, the program's own exit status) from a once-mode report; both None when absent
    (the process died before writing them, or wrote garbage into the report pipe)."""
    error, status = None, None
    try:
        fields = decode_fields(data)
    except (ValueError, IndexError):
        return None, None
    i = 0
    while i < len(fields):
        if fields[i] == "error" and len(fields) - i >= 4:
            error = ExecError(fields[i + 1], fields[i + 2], fields[i + 3])
            i += 4
        elif fields[i] == "exit" and i + 1 < len(fields):
            try:
                status = int(fields[i + 1])
            except ValueError:
                return error, None
            i += 2
        else:
            return error, status
    return error, status


def error_from_fields(fields) -> ExecError | None:
    if not fields or len(fields) < 3:
        return None
    return ExecError(str(fields[0]), str(fields[1]), str(fields[2]))


def _traceback_depth(text: str) -> int:
    """Frames in a driver-formatted traceback (at least; repeated lines are not expanded)."""
    omitted = _OMITTED_RE.search(text or "")
    return (int(omitted.group(1)) if omitted else 0) + (text or "").count('\n  File "')


def classify(error: ExecError | None, exit_code: int | None) -> tuple[str | None, bool]:
    """(limit_exceeded, memory_exceeded) read from an error and an exit status."""
    if error is not None:
        value = error.value
        if error.name == "RecursionError" or (
                error.name == "SystemError" and _traceback_depth(error.traceback) >= RUNAWAY_DEPTH):
            return LIMIT_RECURSION, False
        if error.name == "MemoryError":
            return LIMIT_MEMORY, True
        if "[Errno 27]" in value or "File too large" in value:
            return LIMIT_FILE_SIZE, False
        if "[Errno 28]" in value or "No space left on device" in value:
            return LIMIT_DISK, False
        if "[Errno 11]" in value or "can't start new thread" in value:
            return LIMIT_PROCESSES, False
        if "[Errno 24]" in value or "Too many open files" in value:
            return LIMIT_OPEN_FILES, False
        if "[Errno 12]" in value or "Cannot allocate memory" in value:
            return LIMIT_MEMORY, True
    if exit_code == -24:  # SIGXCPU
        return LIMIT_CPU, False
    if exit_code == -25:  # SIGXFSZ
        return LIMIT_FILE_SIZE, False
    return None, False


def build_result(*, out: tuple[str, bool], err: tuple[str, bool], error: ExecError | None,
                 exit_code: int | None, wall: bool, cpu: bool, start: float, isolation: str,
                 limits: Limits, value: str | None = None,
                 restarted: bool = False) -> ExecResult:
    """One ExecResult from captured output, the reported error and the exit status; a wall or
    CPU limit becomes a ``TimeoutError``, death by a signal a ``ProcessKilled`` error."""
    limit, memory = classify(error, exit_code)
    cpu = cpu or exit_code == -24  # SIGXCPU: the soft CPU limit
    if cpu:
        limit = LIMIT_CPU
    if wall:
        limit = LIMIT_WALL
    if (wall or cpu) and (error is None or error.name != "TimeoutError"):
        what = (f"wall-clock limit of {limits.timeout_s:g} s" if wall
                else f"CPU time limit of {limits.cpu_seconds} s")
        error = ExecError("TimeoutError", f"execution exceeded the {what}")
    elif error is None and exit_code is not None and exit_code < 0:
        name = SIGNAL_NAMES.get(-exit_code, f"signal {-exit_code}")
        error = ExecError("ProcessKilled", f"the process was killed by {name}")
    truncated = out[1] or err[1]
    if truncated and limit is None:
        limit = LIMIT_OUTPUT
    return ExecResult(
        stdout=out[0], stderr=err[0], error=error, value=value, exit_code=exit_code,
        timed_out=wall or cpu, memory_exceeded=memory, output_truncated=truncated,
        limit_exceeded=limit, duration_s=time.monotonic() - start, isolation=isolation,
        restarted=restarted)


def read_to_eof_or_empty(fd: int) -> bytes | None:
    """Read what a non-blocking fd holds; None when it reached EOF with nothing new."""
    chunks = []
    while True:
        data = read_available(fd)
        if data is None:
            return b"".join(chunks) if chunks else None
        if not data:
            return b"".join(chunks)
        chunks.append(data)


def drain_fd(fd: int) -> bytes:
    chunks = []
    while True:
        data = read_available(fd)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


