"""Safe, fast execution of model-written Python: one interface, several backends.

Two operations, the same on every backend:

- ``run(code, stdin=None, limits=None) -> ExecResult``: a program in a fresh process.
- ``session(limits=None)`` -> an object with ``execute(cell) -> ExecResult`` (cells share one
  namespace, like notebook cells), ``restart()`` and ``close()``; a context manager.

Backends: :class:`LocalSandbox` (a bubblewrap jail; where bubblewrap cannot run it refuses to
start unless the caller opts in to a plain-subprocess fallback, taken with a loud warning) and
:class:`E2BSandbox` (E2B's cloud code interpreter, optional extra ``weft[e2b]``).
:func:`make_sandbox` picks one by name; :class:`SandboxPool` keeps workers warm. Results render
to the observation a model sees with :func:`render_observation`.

Not guaranteed: see each backend's module docstring (what the jail does and does not contain).
"""

from __future__ import annotations

import os
from typing import Protocol, runtime_checkable

from pipelines.sandbox.e2b_backend import API_KEY_ENV, E2BSandbox, E2BSession, E2BUnavailable
from pipelines.sandbox.jail import SandboxUnavailable
from pipelines.sandbox.local import LocalSandbox, LocalSession, Runner, SandboxError
from pipelines.sandbox.pool import RunJob, SandboxPool
from pipelines.sandbox.result import (
    ISOLATION_BWRAP,
    ISOLATION_E2B,
    ISOLATION_SUBPROCESS,
    ExecError,
    ExecResult,
    Limits,
    render_observation,
)

BACKENDS = ("auto", "local", "e2b")

__all__ = [
    "BACKENDS", "ISOLATION_BWRAP", "ISOLATION_E2B", "ISOLATION_SUBPROCESS", "E2BSandbox",
    "E2BSession", "E2BUnavailable", "ExecError", "ExecResult", "Limits", "LocalSandbox",
    "LocalSession", "RunJob", "Runner", "Sandbox", "SandboxError", "SandboxPool",
    "SandboxUnavailable", "Session", "make_sandbox", "render_observation",
]


@runtime_checkable
class Session(Protocol):
    def execute(self, cell: str, limits: Limits | None = None) -> ExecResult: ...

    def restart(self) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class Sandbox(Protocol):
    isolation: str

    def run(self, code: str, stdin: str | bytes | None = None,
            limits: Limits | None = None) -> ExecResult: ...

    def session(self, limits: Limits | None = None) -> Session: ...


def make_sandbox(backend: str = "auto", limits: Limits | None = None, *,
                 isolation: str = "auto", python: str | None = None,
                 e2b_api_key: str | None = None, e2b_template: str | None = None,
                 allow_unjailed: bool = False):
    """A sandbox by name: ``local``, ``e2b``, or ``auto`` (E2B when an API key is given or
    ``E2B_API_KEY`` is set, else local). ``isolation``, ``python`` and ``allow_unjailed`` (accept
    the plain-subprocess fallback where bubblewrap cannot run) apply to the local one."""
    if backend not in BACKENDS:
        raise ValueError(f"sandbox backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        backend = "e2b" if (e2b_api_key or os.environ.get(API_KEY_ENV)) else "local"
    if backend == "e2b":
        return E2BSandbox(limits, api_key=e2b_api_key, template=e2b_template)
    kwargs = {"python": python} if python else {}
    return LocalSandbox(limits, isolation=isolation, allow_unjailed=allow_unjailed, **kwargs)
