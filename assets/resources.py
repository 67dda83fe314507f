"""Dagster resources over weft's plain classes: LLM endpoint, warehouse, grading pool.

Each resource is configuration plus a method returning the plain object, so scripts and tests
use the same classes without Dagster. ``GraderResource`` keeps one grading pool warm for a
run's steps. ``LLMResource`` with an empty ``base_url`` serves the
embedded model (or ``local_model_path``) on a local vLLM server, started on first use or reused
when one already serves it; a server it started is left running for the next step or run
unless ``stop_started_server`` is set (``python -m pipelines.serving stop`` stops it). With
``WEFT_SERVE_MODE=slurm`` that server is a Slurm job (``pipelines.slurm.serve``), cancelled when
the run ends unless ``WEFT_SLURM_SERVE_KEEP=1`` keeps it for the next run.

``LLMResource`` also holds the reliability settings every LLM stage uses: the per-request
deadline (``timeout_s``; None scales it to the request's ``max_tokens`` with
``pipelines.llm.default_timeout_s``), retries, how long refused connections are retried
after the endpoint was up (``connect_retry_window_s``), the per-response byte cap, the
whole-batch watchdog (``batch_timeout_s``; None: each wave of ``max_concurrency`` requests may
take the full retry schedule of one request) and how often batch progress is logged.
"""


import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from pipelines.serving import DEFAULT_PORT, LocalModelServer, serve_mode
from warehouse import Warehouse

BATCH_SLACK_S = 60.0


class LLMResource(dg.ConfigurableResource):
    """An OpenAI-compatible endpoint; empty ``base_url`` means the local embedded server."""

    base_url: str = ""
    model: str = ""
    api_key: str = ""
    max_concurrency: int = 8
    timeout_s: float | None = None  # per request; None: scaled to max_tokens
    max_retries: int = 4
    connect_retry_window_s: float = 30.0
    max_response_bytes: int = 8 * 1024 * 1024
    batch_timeout_s: float | None = None  # whole batch; None: derived from the batch size
    progress_every_s: float = 20.0
    local_port: int = DEFAULT_PORT
    local_model_path: str = ""
    stop_started_server: bool = False

    _server: LocalModelServer | None = PrivateAttr(default=None)
    _revive_lock: Any = PrivateAttr(default_factory=threading.Lock)

    def endpoint(self) -> tuple[str, str]:
        """(base_url, model id), starting or reusing the local server when needed."""
        if self.base_url:
            if not self.model:
                raise ValueError("LLMResource: set `model` together with `base_url`")
            return self.base_url.rstrip("/"), self.model
        if self._server is None:
            if serve_mode() == "slurm":  # a vLLM Slurm job, cancelled at teardown unless kept
                from pipelines.slurm.serve import server_from_env

                server = server_from_env(self.local_model_path or None)
            else:
                server = LocalModelServer(model_path=self.local_model_path or None,
                                          port=self.local_port)
            server.start()
            self._server = server
        return self._server.base_url, str(self._server.served_name)

    def request_timeout_s(self, max_tokens: int = 512, n: int = 1, prompt_chars: int = 0) -> float:
        """The per-request deadline: ``timeout_s`` when set, else scaled to ``max_tokens`` (and
        to ``prompt_chars``, the longest prompt expected)."""
        from pipelines.llm import default_timeout_s

        return (float(self.timeout_s) if self.timeout_s
                else default_timeout_s(max_tokens, n, prompt_chars))

    def batch_deadline_s(self, requests: int, max_tokens: int = 512,
                         max_concurrency: int | None = None, prompt_chars: int = 0) -> float:
        """The whole-batch watchdog: ``batch_timeout_s`` when set, else every wave of
        ``max_concurrency`` requests may use one request's full schedule (all attempts timing
        out plus the longest backoffs), plus ``BATCH_SLACK_S`` for start-up and queueing."""
        if self.batch_timeout_s:
            return float(self.batch_timeout_s)
        waves = math.ceil(max(requests, 1) / (max_concurrency or self.max_concurrency))
        one = ((self.max_retries + 1) * self.request_timeout_s(max_tokens, prompt_chars=prompt_chars)
               + 30.0 * self.max_retries)
        return waves * one + BATCH_SLACK_S

    def client_settings(self, max_tokens: int = 512, requests: int | None = None,
                        progress: Callable[[str], None] | None = None,
                        max_concurrency: int | None = None, *, prompt_chars: int = 0,
                        per_request_timeout: bool = False) -> dict[str, Any]:
        """LLMClient keyword arguments for calls of up to ``max_tokens``. With ``requests``
        (the batch size) the watchdog is derived from it (``batch_deadline_s``); without, it
        is ``batch_timeout_s`` as configured (None: none). ``progress`` receives progress
        lines. ``prompt_chars`` is the longest prompt expected (deadlines grow with it);
        ``per_request_timeout`` (stages with long prompts of varied length: the SxS judge, the
        MOSAIC agents) leaves the deadline to the client, which scales each request's to its
        own prompt and ``max_tokens``, unless ``timeout_s`` is set."""
        concurrency = max_concurrency or self.max_concurrency
        per_request = per_request_timeout and not self.timeout_s
        return {
            "max_concurrency": concurrency,
            "timeout_s": None if per_request
            else self.request_timeout_s(max_tokens, prompt_chars=prompt_chars),
            "max_retries": self.max_retries,
            "connect_retry_window_s": self.connect_retry_window_s,
            "max_response_bytes": self.max_response_bytes,
            "batch_timeout_s": (float(self.batch_timeout_s) if self.batch_timeout_s else None)
            if requests is None
            else self.batch_deadline_s(requests, max_tokens, concurrency, prompt_chars),
            "progress": progress,
            "log_every_s": self.progress_every_s,
        }

    def client_for(self, base_url: str, model: str, api_key: str | None = None,
                   **settings: Any):
        """A ``pipelines.llm.LLMClient`` for another endpoint (a served checkpoint, the MOSAIC
        actor's server) with this resource's reliability settings; ``settings`` are
        :meth:`client_settings`'s arguments (``max_tokens``, ``requests``, ``progress``,
        ``max_concurrency``, ``prompt_chars``, ``per_request_timeout``) plus LLMClient-only
        options passed through (e.g. ``json_mode``)."""
        from pipelines.llm import LLMClient

        names = ("max_tokens", "requests", "progress", "max_concurrency", "prompt_chars",
                 "per_request_timeout")
        chosen = {k: settings.pop(k) for k in names if k in settings}
        return LLMClient(base_url, model, api_key=api_key,
                         **self.client_settings(**chosen), **settings)

    def client(self, max_tokens: int = 512, **settings: Any):
        """A client for this resource's endpoint (starting the local server when needed; a
        local server this resource started and that dies mid-run is started again, see
        ``LocalModelServer.revive``); see :meth:`client_for` for ``settings``."""
        base_url, model = self.endpoint()
        if self._server is not None and "revive" not in settings:
            settings["revive"] = self._revive
        return self.client_for(base_url, model, self.api_key or None, max_tokens=max_tokens,
                               **settings)

    def _revive(self) -> bool:
        with self._revive_lock:  # the clients of concurrent workers restart it once
            return self._server is not None and (self._server.revive()
                                                 or self._server.is_ready())

    def model_label(self) -> str:
        """The model id results are recorded under, without starting anything."""
        if self.base_url:
            return self.model
        if self.local_model_path:
            from pathlib import Path

            return Path(self.local_model_path).name
        from pipelines.models import EMBEDDED_SERVED_NAME

        return EMBEDDED_SERVED_NAME

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        slurm_job = self._server is not None and not isinstance(self._server, LocalModelServer)
        if self._server is not None and (self.stop_started_server or slurm_job):
            self._server.stop()  # a Slurm job's stop leaves it running when it is kept


class WarehouseResource(dg.ConfigurableResource):
    """The Parquet + DuckDB warehouse; empty ``root`` means ``WEFT_HOME/warehouse``."""

    root: str = ""

    def get(self) -> Warehouse:
        """The warehouse of an asset: every read strict, SQL included (``strict_sql``), so
        that an asset whose inputs could not all be read fails naming the file instead of
        computing from the readable rest."""
        return Warehouse(self.root or None, strict_sql=True)


class GraderResource(dg.ConfigurableResource):
    """Process pool for grading (math-verify needs each worker's main thread).

    The pool is started on the first :meth:`pool` and kept warm for the rest of the resource's
    life: every later step of the run that grades reuses the same worker processes (a run that
    executes its steps in one process, as ``eval_job`` does, initializes its resources once;
    under the multiprocess executor each step process has its own). Leaving a ``pool()`` block
    does not stop the workers; the end of the run does (``teardown_after_execution``)."""

    processes: int = 2
    per_item_timeout_s: float = 10.0

    _pool: Any = PrivateAttr(default=None)
    _pool_lock: Any = PrivateAttr(default_factory=threading.Lock)

    @contextmanager
    def pool(self) -> Iterator[object]:
        """The run's warm ``eval.grading_pool.GradingPool`` (started on first use; workers
        warm up while the caller goes on). Steps running in threads of one process share it."""
        with self._pool_lock:
            if self._pool is None:
                from eval.grading_pool import GradingPool

                pool = GradingPool(processes=self.processes,
                                   per_item_timeout_s=self.per_item_timeout_s)
                pool.start()
                self._pool = pool
            pool = self._pool
        yield pool

    def warm(self) -> None:
        """Start the run's pool now without waiting for it: its workers start, and import
        math-verify (0.6-1.0 s on 2 cores), in the background while the caller goes on, e.g.
        generates the answers to grade (``GradingPool.start_background``)."""
        with self._pool_lock:
            if self._pool is None:
                from eval.grading_pool import GradingPool

                self._pool = GradingPool(processes=self.processes,
                                         per_item_timeout_s=self.per_item_timeout_s)
            pool = self._pool
        pool.start_background()

    def close(self) -> None:
        """Stop the pool's workers (a later :meth:`pool` starts a new one)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self.close()
