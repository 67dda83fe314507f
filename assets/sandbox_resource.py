"""The sandbox as a Dagster resource: configuration in, a plain sandbox (and a warm pool) out.

``backend``: ``local`` (bubblewrap jail; where bubblewrap cannot run, resolving the sandbox
fails with instructions to install it, unless ``allow_unjailed=True`` opts in to the much weaker
plain-subprocess fallback), ``e2b`` (E2B's cloud interpreter; needs ``e2b_api_key`` or
``E2B_API_KEY`` and the ``weft[e2b]`` extra) or ``auto`` (E2B when a key is configured, else
local). Limits are the defaults of every run and session; code may pass tighter ones per call.
The pool is created on first use and closed when the step finishes.

Not guaranteed: anything beyond :mod:`pipelines.sandbox` itself (this module only wires it).
"""

from __future__ import annotations

import threading

import dagster as dg
from pydantic import PrivateAttr

from pipelines.sandbox import BACKENDS, Limits, SandboxPool, make_sandbox


class SandboxResource(dg.ConfigurableResource):
    """Where model-written code runs. Use ``get_pool()`` for concurrent work (warm workers),
    ``get_sandbox()`` for the plain backend."""

    backend: str = "auto"
    isolation: str = "auto"
    python: str = "/usr/bin/python3"
    timeout_s: float = 10.0
    cpu_s: int | None = None
    memory_mb: int = 1024
    file_size_mb: int = 32
    disk_mb: int = 64
    disk_files: int = 10_000
    processes: int = 64
    open_files: int = 256
    max_output_bytes: int = 1_000_000
    workers: int = 2
    warm_sessions: int = 0
    e2b_api_key: str = ""
    e2b_template: str = ""
    allow_unjailed: bool = False

    _pool: SandboxPool | None = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def limits(self) -> Limits:
        return Limits(timeout_s=self.timeout_s, cpu_s=self.cpu_s, memory_mb=self.memory_mb,
                      file_size_mb=self.file_size_mb, disk_mb=self.disk_mb,
                      disk_files=self.disk_files, processes=self.processes,
                      open_files=self.open_files,
                      max_output_bytes=self.max_output_bytes)

    def get_sandbox(self):
        """The configured backend (``LocalSandbox`` or ``E2BSandbox``)."""
        if self.backend not in BACKENDS:
            raise ValueError(f"SandboxResource.backend must be one of {BACKENDS}, "
                             f"got {self.backend!r}")
        return make_sandbox(self.backend, self.limits(), isolation=self.isolation,
                            python=self.python, e2b_api_key=self.e2b_api_key or None,
                            e2b_template=self.e2b_template or None,
                            allow_unjailed=self.allow_unjailed)

    def get_pool(self) -> SandboxPool:
        """The step's pool of warm workers over the configured backend (created once)."""
        with self._lock:
            if self._pool is None:
                self._pool = SandboxPool(self.get_sandbox(), workers=self.workers,
                                         warm_sessions=self.warm_sessions, limits=self.limits())
            return self._pool

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self.close()
