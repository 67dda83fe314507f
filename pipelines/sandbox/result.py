"""The sandbox's shared vocabulary: per-call limits, the result of one execution, and the one
deterministic rendering of a result as the interpreter observation that goes into a trajectory.

Every backend (bubblewrap jail, plain-subprocess fallback, E2B) returns an :class:`ExecResult`,
for a stateless run and for a session cell alike. ``stderr`` holds only what the code itself
wrote there; an uncaught exception is reported in ``error`` (name, value, traceback text)
instead of being printed, so an observation never shows the same traceback twice.

Not guaranteed: that a traceback produced by the E2B backend (a Jupyter kernel) looks exactly
like a local one (ANSI colours are stripped, frame layout is Jupyter's); that ``stdout`` is the
exact byte stream (it is decoded as UTF-8 with invalid bytes replaced).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

ISOLATION_BWRAP = "bwrap"
ISOLATION_SUBPROCESS = "subprocess"
ISOLATION_E2B = "e2b"
ISOLATION_LEVELS = (ISOLATION_BWRAP, ISOLATION_SUBPROCESS, ISOLATION_E2B)

# Which limit ended (or clipped) an execution; ``ExecResult.limit_exceeded``.
LIMIT_WALL = "wall_time"
LIMIT_CPU = "cpu_time"
LIMIT_MEMORY = "memory"
LIMIT_FILE_SIZE = "file_size"
LIMIT_DISK = "disk"
LIMIT_PROCESSES = "processes"
LIMIT_OPEN_FILES = "open_files"
LIMIT_OUTPUT = "output"
# Runaway recursion: a RecursionError, or CPython 3.11's "SystemError: error return without
# exception set" when the frame stack can no longer grow (thousands of frames deep).
LIMIT_RECURSION = "recursion"

# ``ExecError.name`` values the sandbox itself reports (besides the code's own exceptions and
# ``TimeoutError`` for the time limits):
# a session's interpreter died, or its reply was unreadable or not for this cell (code wrote
# into the reply channel): it is treated as dead either way and a fresh one is started
ERROR_KERNEL_DIED = "KernelDied"
ERROR_SANDBOX_DIED = "SandboxDied"  # a warm runner's fork server died during the program
ERROR_PROCESS_KILLED = "ProcessKilled"  # the program was killed by a signal

DEFAULT_OBSERVATION_CHARS = 4000
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_TRACEBACK_HEAD = "Traceback (most recent call last):"


@dataclass(frozen=True)
class Limits:
    """Resource limits for one run or one session cell.

    ``timeout_s`` is wall-clock time enforced from outside the jail; ``cpu_s`` (default: the
    timeout rounded up) is CPU seconds; ``memory_mb`` caps the address space; ``file_size_mb``
    caps any single file; ``disk_mb`` is the size of the private writable work dir (``/tmp``);
    ``disk_files`` caps how many files and directories it may hold (each costs host kernel
    memory that no other limit counts; enforced by the jail when the host runs as root);
    ``processes`` caps processes+threads of the jail's user; ``max_output_bytes`` caps what is
    kept of each of stdout and stderr (the rest is read and dropped, ``output_truncated``).
    """

    timeout_s: float = 10.0
    cpu_s: int | None = None
    memory_mb: int = 1024
    file_size_mb: int = 32
    disk_mb: int = 64
    disk_files: int = 10_000
    open_files: int = 256
    processes: int = 64
    max_output_bytes: int = 1_000_000

    def __post_init__(self) -> None:
        checks = {
            "timeout_s": self.timeout_s, "memory_mb": self.memory_mb,
            "file_size_mb": self.file_size_mb, "disk_mb": self.disk_mb,
            "disk_files": self.disk_files, "open_files": self.open_files,
            "processes": self.processes,
            "max_output_bytes": self.max_output_bytes,
        }
        if self.cpu_s is not None:
            checks["cpu_s"] = self.cpu_s
        for name, value in checks.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise ValueError(f"Limits.{name} must be a positive number, got {value!r}")
        if self.memory_mb < 64:
            raise ValueError(f"Limits.memory_mb={self.memory_mb} is too small for a Python "
                             "interpreter; use at least 64 (256+ if the code imports numpy)")
        if self.open_files < 16:
            raise ValueError(f"Limits.open_files={self.open_files}: use at least 16 (the "
                             "interpreter itself needs a few)")
        if self.disk_files < 16:
            raise ValueError(f"Limits.disk_files={self.disk_files}: use at least 16")
        if self.processes < 4:
            raise ValueError(f"Limits.processes={self.processes}: use at least 4")

    @property
    def cpu_seconds(self) -> int:
        """The CPU limit in whole seconds (the kernel's RLIMIT_CPU granularity)."""
        if self.cpu_s is not None:
            return max(1, math.ceil(self.cpu_s))
        return max(1, math.ceil(self.timeout_s))

    def with_(self, **changes) -> Limits:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)


@dataclass(frozen=True)
class ExecError:
    """An uncaught exception (or a limit, reported as the error the code would have seen)."""

    name: str
    value: str
    traceback: str = ""

    def render(self) -> str:
        """The traceback text when there is one, else ``Name: value``."""
        head = f"{self.name}: {self.value}" if self.value else self.name
        if self.traceback.strip():
            text = self.traceback.rstrip("\n")
            return text if text.endswith(head) else f"{text}\n{head}"
        return head


@dataclass(frozen=True)
class ExecResult:
    """What one execution did. ``exit_code`` is None for a session cell whose kernel survived;
    negative values mean the process was killed by that signal. ``restarted`` says the session
    lost its state during this call (its kernel died or was killed and a fresh one started)."""

    stdout: str = ""
    stderr: str = ""
    error: ExecError | None = None
    value: str | None = None
    exit_code: int | None = 0
    timed_out: bool = False
    memory_exceeded: bool = False
    output_truncated: bool = False
    limit_exceeded: str | None = None
    duration_s: float = 0.0
    isolation: str = ISOLATION_BWRAP
    restarted: bool = False

    @property
    def ok(self) -> bool:
        """Ran to completion without an error, a limit or a non-zero exit status."""
        return (self.error is None and not self.timed_out and not self.memory_exceeded
                and self.exit_code in (0, None))

    def observation(self, max_chars: int = DEFAULT_OBSERVATION_CHARS) -> str:
        """Shortcut for :func:`render_observation`."""
        return render_observation(self, max_chars=max_chars)


def strip_ansi(text: str) -> str:
    """Remove terminal colour codes (Jupyter tracebacks carry them)."""
    return _ANSI_RE.sub("", text or "")


def truncate_middle(text: str, max_chars: int) -> str:
    """Keep the head and the tail of ``text`` with a marker saying how much was cut."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    marker_room = 60
    keep = max(max_chars - marker_room, 20)
    head = keep * 2 // 3
    tail = keep - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n... [{cut} characters truncated] ...\n{text[len(text) - tail:]}"


def render_observation(result: ExecResult, max_chars: int = DEFAULT_OBSERVATION_CHARS) -> str:
    """The interpreter's answer as a model sees it: stdout, stderr the code wrote, the value of
    a trailing expression, then the error with its traceback and notes on limits or restarts.

    Deterministic: the same result always renders to the same text. Long text keeps its head
    and tail around a ``[N characters truncated]`` marker; the total is at most ``max_chars``
    (plus the length of the fixed notes).
    """
    parts: list[str] = []
    if result.stdout:
        parts.append(result.stdout.rstrip("\n"))
    if result.stderr and result.stderr.strip():
        parts.append(result.stderr.rstrip("\n"))
    if result.value is not None:
        parts.append(result.value)
    if result.error is not None:
        parts.append(result.error.render())
    body = truncate_middle("\n".join(parts), max_chars)
    notes: list[str] = []
    if result.output_truncated:
        notes.append("[output truncated: the program printed more than the sandbox keeps]")
    if result.restarted:
        notes.append("[the interpreter was restarted; all variables were lost]")
    if not body and not notes:
        return "" if result.ok else f"[process exited with status {result.exit_code}]"
    return "\n".join(p for p in [body, *notes] if p)


def parse_traceback_tail(stderr: str) -> ExecError | None:
    """Recover an :class:`ExecError` from text Python printed for an uncaught exception.

    Used where only stderr is available (the E2B stateless path). Returns None when the text
    has no ``Traceback (most recent call last):`` block or no final ``Name: value`` line.
    """
    text = strip_ansi(stderr or "")
    start = text.rfind(_TRACEBACK_HEAD)
    if start < 0:
        # A SyntaxError before execution prints no "Traceback" header, only File/caret lines.
        lines = [ln for ln in text.rstrip().splitlines() if ln.strip()]
        if lines and lines[-1].startswith(("SyntaxError", "IndentationError", "TabError")):
            name, _, value = lines[-1].partition(":")
            return ExecError(name=name.strip(), value=value.strip(), traceback=text.rstrip())
        return None
    block = text[start:].rstrip()
    last = block.splitlines()[-1]
    if last.startswith(" "):
        return None
    name, sep, value = last.partition(":")
    if not re.fullmatch(r"[A-Za-z_][\w.]*", name.strip()):
        return None
    return ExecError(name=name.strip(), value=value.strip() if sep else "", traceback=block)
