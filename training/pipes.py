"""Reporting from a training script to Dagster through Pipes, and a no-op when there is none.

:func:`open_reporter` gives a :class:`Reporter`. When the process was launched by a Dagster
Pipes client (``PipesSubprocessClient`` locally, a Kubernetes Pipes client on a cluster) it
streams log lines, progress messages and the final asset materialization (checkpoint path and
metrics) back to the orchestrator; when the script is run by hand (or on a non-zero rank under
``accelerate launch``) every call does nothing and no warning is printed.

Only ``dagster_pipes`` (a small dependency-free package) is imported, never ``dagster``.
Not guaranteed: delivery of messages after the orchestrator stopped listening.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any


def process_rank() -> int:
    """Global rank under torchrun/accelerate (``RANK``), 0 otherwise."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def launched_by_pipes() -> bool:
    from dagster_pipes import PipesEnvVarParamsLoader

    return PipesEnvVarParamsLoader().is_dagster_pipes_process()


class Reporter:
    """Does nothing: the script was not launched by Dagster (or this is not rank 0)."""

    active = False
    run_id: str | None = None
    asset_key: str | None = None

    def log(self, message: str) -> None:
        pass

    def progress(self, payload: Mapping[str, Any]) -> None:
        pass

    def materialization(self, metadata: Mapping[str, Any]) -> None:
        pass


class PipesReporter(Reporter):
    """Sends everything to the Dagster run through the Pipes context."""

    active = True

    def __init__(self, context: Any):
        self._context = context
        self.run_id = context.run_id
        try:
            self.asset_key = context.asset_key
        except Exception:  # noqa: BLE001 - several assets or none in scope
            self.asset_key = None

    def log(self, message: str) -> None:
        self._context.log.info(message)

    def progress(self, payload: Mapping[str, Any]) -> None:
        self._context.report_custom_message(dict(payload))

    def materialization(self, metadata: Mapping[str, Any]) -> None:
        self._context.report_asset_materialization(metadata=dict(metadata))


@contextmanager
def open_reporter() -> Iterator[Reporter]:
    """A live :class:`PipesReporter` under Dagster Pipes on rank 0, else a no-op Reporter."""
    if process_rank() != 0 or not launched_by_pipes():
        yield Reporter()
        return
    from dagster_pipes import open_dagster_pipes

    with open_dagster_pipes() as context:
        yield PipesReporter(context)


def md(text: str) -> dict[str, Any]:
    return {"raw_value": text, "type": "md"}


def path_value(path: str) -> dict[str, Any]:
    return {"raw_value": str(path), "type": "path"}


def json_value(value: Any) -> dict[str, Any]:
    return {"raw_value": value, "type": "json"}
