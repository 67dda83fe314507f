"""Dagster resources over weft's plain classes: LLM endpoint, warehouse, grading pool.

Each resource is configuration plus a method returning the plain object, so scripts and tests
use the same classes without Dagster. ``LLMResource`` with an empty ``base_url`` serves the
embedded model (or ``local_model_path``) on a local vLLM server, started on first use or reused
when one already serves it; a server it started is left running for the next step or run
unless ``stop_started_server`` is set (``python -m pipelines.serving stop`` stops it).
"""


from contextlib import contextmanager
from typing import Iterator, Optional

import dagster as dg
from pydantic import PrivateAttr

from pipelines.serving import DEFAULT_PORT, LocalModelServer
from warehouse import Warehouse


class LLMResource(dg.ConfigurableResource):
    """An OpenAI-compatible endpoint; empty ``base_url`` means the local embedded server."""

    base_url: str = ""
    model: str = ""
    api_key: str = ""
    max_concurrency: int = 8
    timeout_s: float = 600.0
    max_retries: int = 4
    local_port: int = DEFAULT_PORT
    local_model_path: str = ""
    stop_started_server: bool = False

    _server: Optional[LocalModelServer] = PrivateAttr(default=None)

    def endpoint(self) -> tuple[str, str]:
        """(base_url, model id), starting or reusing the local server when needed."""
        if self.base_url:
            if not self.model:
                raise ValueError("LLMResource: set `model` together with `base_url`")
            return self.base_url.rstrip("/"), self.model
        if self._server is None:
            server = LocalModelServer(model_path=self.local_model_path or None, port=self.local_port)
            server.start()
            self._server = server
        return self._server.base_url, str(self._server.served_name)

    def client(self):
        from pipelines.llm import LLMClient

        base_url, model = self.endpoint()
        return LLMClient(
            base_url, model, api_key=self.api_key or None, max_concurrency=self.max_concurrency,
            timeout_s=self.timeout_s, max_retries=self.max_retries,
        )

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
        if self.stop_started_server and self._server is not None:
            self._server.stop()


class WarehouseResource(dg.ConfigurableResource):
    """The Parquet + DuckDB warehouse; empty ``root`` means ``WEFT_HOME/warehouse``."""

    root: str = ""

    def get(self) -> Warehouse:
        return Warehouse(self.root or None)


class GraderResource(dg.ConfigurableResource):
    """Process pool for grading (math-verify needs each worker's main thread)."""

    processes: int = 2
    per_item_timeout_s: float = 10.0

    @contextmanager
    def pool(self) -> Iterator[object]:
        from eval.graders import GradingPool

        with GradingPool(processes=self.processes, per_item_timeout_s=self.per_item_timeout_s) as pool:
            yield pool
