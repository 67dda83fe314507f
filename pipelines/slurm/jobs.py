"""Slurm's commands from Python: submit a batch script, read a job's state, cancel it.

:class:`SlurmCommands` runs ``sbatch``, ``squeue``, ``scontrol``, ``sacct`` and ``scancel`` as
subprocesses (with extra environment variables, e.g. ``SLURM_CONF`` for a private cluster) and
parses what they print (the parsers are pure functions). :meth:`SlurmCommands.state` asks, in
order: ``scontrol show job`` (state, reason, exit code, nodes: the controller's view while it
remembers the job), ``sacct`` (accounting: the controller forgets a finished job after
``MinJobAge``, 300 s by default) and ``sacct --completion`` (the job completion log of clusters
without an accounting database). A job that none of them knows comes back as ``UNKNOWN`` with
``source="none"``; the caller decides what that means. :meth:`SlurmCommands.queue` is the
lighter ``squeue`` view (state and reason, no exit code) of jobs still in the queue.

Guarantees: a command that is missing, refuses, or does not answer within ``timeout_s`` raises
:class:`SlurmError` with its output and what to check; ``cancel`` of a job that already ended is
not an error.
Not guaranteed: the states of job steps (only the allocation's state is read) or of other
clusters in a federation.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# States of a job that has not ended (it may still run, or run again after a requeue).
ACTIVE_STATES = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_FED",
    "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD",
    "SPECIAL_EXIT"})
COMPLETED = "COMPLETED"
UNKNOWN = "UNKNOWN"
# What a failed end means, for error messages.
FAILED_STATES = {
    "FAILED": "the job's script exited with a non-zero status",
    "CANCELLED": "the job was cancelled: by scancel, an administrator or the launcher's own "
                 "time limit",
    "TIMEOUT": "the job ran past its time limit and Slurm ended it",
    "OUT_OF_MEMORY": "the job used more memory than it asked for (raise mem)",
    "NODE_FAIL": "a node of the job failed",
    "BOOT_FAIL": "a node of the job failed to boot",
    "PREEMPTED": "a higher-priority job preempted it",
    "DEADLINE": "the job reached its deadline before it could run",
    "REVOKED": "a sibling cluster started the job (federation)",
}
COMMAND_TIMEOUT_S = 60.0
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9:_/]*)=(.*?)(?=\s[A-Za-z][A-Za-z0-9:_/]*=|$)")


class SlurmError(RuntimeError):
    """A Slurm command was missing, refused, or did not answer."""


@dataclass(frozen=True)
class JobState:
    """One job's state as Slurm reports it. ``state`` is Slurm's name (``RUNNING``,
    ``COMPLETED``, ``TIMEOUT``, ...) or ``UNKNOWN``; ``exit_code`` is ``exit:signal``;
    ``source`` says which command answered (``scontrol``, ``squeue``, ``sacct``,
    ``sacct-completion`` or ``none``)."""

    job_id: str
    state: str
    reason: str = ""
    exit_code: str = ""
    nodes: str = ""
    source: str = ""

    @property
    def finished(self) -> bool:
        return self.state not in ACTIVE_STATES and self.state != UNKNOWN

    @property
    def succeeded(self) -> bool:
        return self.state == COMPLETED

    def describe(self) -> str:
        """One line for logs and errors: state, exit code, reason, what the state means."""
        parts = [f"Slurm job {self.job_id}: {self.state}"]
        if self.exit_code and self.exit_code != "0:0":
            parts.append(f"exit code {self.exit_code}")
        if self.reason and self.reason not in ("None", "(null)"):
            parts.append(f"reason {self.reason}")
        text = ", ".join(parts)
        meaning = FAILED_STATES.get(self.state)
        return f"{text} ({meaning})" if meaning else text


def normalize_state(raw: str) -> str:
    """Slurm's state word: ``CANCELLED by 0`` → ``CANCELLED``, ``COMPLETED+`` → ``COMPLETED``."""
    word = raw.strip().split(" ", 1)[0].rstrip("+")
    return word.upper() or UNKNOWN


def parse_scontrol(text: str) -> dict[str, str]:
    """The ``Key=Value`` fields of one ``scontrol show job -o`` line (values may hold ``=``)."""
    return {m.group(1): m.group(2).strip() for m in _FIELD.finditer(text.strip())}


def state_from_scontrol(job_id: str, text: str) -> JobState | None:
    fields = parse_scontrol(text)
    if "JobState" not in fields:
        return None
    return JobState(job_id, normalize_state(fields["JobState"]), fields.get("Reason", ""),
                    fields.get("ExitCode", ""), fields.get("NodeList", ""), "scontrol")


def state_from_sacct(job_id: str, text: str, source: str = "sacct") -> JobState | None:
    """The allocation's row of ``sacct -X -n -P -o JobID,State,ExitCode,NodeList`` output (the
    last one: a requeued job has one row per start)."""
    found = None
    for line in text.splitlines():
        cols = line.split("|")
        if len(cols) >= 3 and cols[0].split(".")[0].split("_")[0] == job_id:
            found = JobState(job_id, normalize_state(cols[1]), "", cols[2],
                             cols[3] if len(cols) > 3 else "", source)
    return found


def state_from_squeue(job_id: str, text: str) -> JobState | None:
    """A row of ``squeue -h -o %i|%T|%r|%N``."""
    for line in text.splitlines():
        cols = line.split("|")
        if len(cols) >= 2 and cols[0].strip() == job_id:
            return JobState(job_id, normalize_state(cols[1]), cols[2] if len(cols) > 2 else "",
                            "", cols[3] if len(cols) > 3 else "", "squeue")
    return None


def parse_job_id(sbatch_output: str) -> str:
    """The job id of ``sbatch --parsable`` (``123`` or ``123;cluster``)."""
    text = sbatch_output.strip().splitlines()[-1] if sbatch_output.strip() else ""
    job_id = text.split(";", 1)[0].strip()
    if not job_id.isdigit():
        raise SlurmError(f"sbatch printed no job id (got {sbatch_output!r})")
    return job_id


def log_tail(path: str | Path, lines: int = 40, max_chars: int = 6000) -> str:
    """The last ``lines`` lines of a job's log ('' when it does not exist yet)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])[-max_chars:]


class SlurmCommands:
    """Slurm's client commands, run with ``env`` added to this process's environment."""

    def __init__(self, env: Mapping[str, str] | None = None,
                 timeout_s: float = COMMAND_TIMEOUT_S):
        self.env = dict(env or {})
        self.timeout_s = timeout_s

    def run(self, argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess:
        try:
            done = subprocess.run(list(argv), check=False, capture_output=True, text=True,
                                  timeout=self.timeout_s, env={**os.environ, **self.env})
        except FileNotFoundError as exc:
            raise SlurmError(f"`{argv[0]}` is not on PATH: run weft where Slurm's client "
                             "commands work (a login node), or install them (Debian: "
                             "apt-get install slurm-client)") from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmError(f"`{' '.join(argv[:3])}` did not answer in {self.timeout_s:.0f} s: "
                             "is slurmctld up (sinfo)?") from exc
        if check and done.returncode != 0:
            raise SlurmError(f"`{' '.join(argv)}` failed ({done.returncode}): "
                             f"{(done.stderr or done.stdout).strip()}")
        return done

    def submit(self, script: str | Path, args: Sequence[str] = ()) -> str:
        """``sbatch --parsable [args] script``: the job id; SlurmError with sbatch's reason
        (e.g. an unknown partition, an impossible request) when it refuses."""
        done = self.run(["sbatch", "--parsable", *args, str(script)], check=False)
        if done.returncode != 0:
            raise SlurmError(f"sbatch refused the job: {(done.stderr or done.stdout).strip()}")
        return parse_job_id(done.stdout)

    def queue(self, job_id: str) -> JobState | None:
        """``squeue``'s view of a job still in the queue (None once it has left)."""
        done = self.run(["squeue", "-h", "-j", job_id, "-o", "%i|%T|%r|%N"], check=False)
        return state_from_squeue(job_id, done.stdout) if done.returncode == 0 else None

    def state(self, job_id: str) -> JobState:
        """The job's state from scontrol, then sacct, then sacct's completion log."""
        done = self.run(["scontrol", "show", "job", "-o", job_id], check=False)
        if done.returncode == 0:
            found = state_from_scontrol(job_id, done.stdout)
            if found is not None:
                return found
        elif "Invalid job id" not in (done.stderr + done.stdout):
            raise SlurmError(f"scontrol show job {job_id} failed: {done.stderr.strip()}")
        columns = ["-X", "-n", "-P", "-j", job_id, "-o", "JobID,State,ExitCode,NodeList"]
        for flags, source in (([], "sacct"), (["--completion"], "sacct-completion")):
            done = self.run(["sacct", *flags, *columns], check=False)
            if done.returncode == 0:
                found = state_from_sacct(job_id, done.stdout, source)
                if found is not None:
                    return found
        return JobState(job_id, UNKNOWN, "neither scontrol nor sacct knows the job", source="none")

    def cancel(self, job_id: str, signal: str = "") -> None:
        """``scancel`` (with ``--signal`` when given); a job that already ended is fine."""
        argv = ["scancel", *([f"--signal={signal}"] if signal else []), job_id]
        done = self.run(argv, check=False)
        text = (done.stderr + done.stdout).lower()
        if done.returncode != 0 and "already completing or completed" not in text \
                and "invalid job id" not in text:
            raise SlurmError(f"scancel {job_id} failed: {done.stderr.strip()}")
