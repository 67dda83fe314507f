"""The LLM client every weft stage uses, for any OpenAI-compatible endpoint.

:class:`LLMClient` sends chat requests with bounded concurrency, per-request deadlines,
retries, a persistent response cache and structured JSON output; failures come back as values
(``ChatResult.error``, ``JsonResult.error``) and only an unreachable endpoint raises
(:class:`EndpointUnreachable`). Each module's docstring says what it guarantees.

Modules:

- ``client``: :class:`LLMClient` (``chat``, ``chat_json``, ``map``, call records).
- ``types``: :class:`SamplingParams`, :class:`ChatResult`, :class:`JsonResult`,
  :class:`Usage` (generated vs cached calls and tokens, time spent generating), the stored
  payload format and the default per-request timeout.
- ``batch``: :func:`map_ordered` (ordered concurrent map with progress logs and a batch
  deadline) and :func:`run` (drive a coroutine from synchronous code).
- ``cache``: the content-addressed SQLite response cache (keyed by endpoint, served name and
  model root too).
- ``endpoint``: :class:`Endpoint`, the ``/models`` probe and :class:`EndpointUnreachable`.
- ``structured``: finding JSON in model text and checking it against a JSON Schema subset.
- ``testing``: ``FakeLLMServer``, a fake OpenAI-compatible server for tests and benchmarks
  (a test double, never a model); not re-exported here.

Import public names from ``pipelines.llm``; the submodules import each other directly.
"""

from __future__ import annotations

from pipelines.llm.batch import BatchTimeout, map_ordered, run
from pipelines.llm.client import LLMClient
from pipelines.llm.endpoint import (
    DEFAULT_BASE_URL,
    ENV_API_KEY,
    ENV_BASE_URL,
    ENV_MODEL,
    Endpoint,
    EndpointUnreachable,
    get_models,
    list_models,
    redact_url,
    unreachable_message,
)
from pipelines.llm.types import (
    ChatResult,
    JsonResult,
    SamplingParams,
    Usage,
    backoff_delay,
    default_timeout_s,
)

__all__ = [
    "DEFAULT_BASE_URL",
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_MODEL",
    "BatchTimeout",
    "ChatResult",
    "Endpoint",
    "EndpointUnreachable",
    "JsonResult",
    "LLMClient",
    "SamplingParams",
    "Usage",
    "backoff_delay",
    "default_timeout_s",
    "get_models",
    "list_models",
    "map_ordered",
    "redact_url",
    "run",
    "unreachable_message",
]
