"""Where the LLM lives: endpoint config, the reachability probe, and the "unreachable" error.

``Endpoint`` names a base URL, a model id and the *name* of the environment variable holding
the API key (never the key itself). ``get_models``/``list_models`` call ``GET {base_url}/models``
with a short timeout using only the standard library, so a missing server is detected in
seconds; ``EndpointUnreachable`` carries a message naming the URL and how to fix it.

``ReachabilityProbe`` answers "is the server still there?" after a failed request, for all
concurrent callers at once: it probes ``/models``, and during an outage of an endpoint that was
up it keeps probing with backoff for a window (a restarting server comes back in seconds)
before giving up with ``EndpointUnreachable``.

``limit_response_bytes`` is an httpx response hook that caps how many bytes of one response
body the client reads: a declared ``Content-Length`` over the cap is refused before the body
is read, and a body streamed without one is cut off once the cap is passed, with
``ResponseTooLarge``. Client memory per response is thus bounded by the cap (plus one chunk),
instead of by whatever the server sends.

Not guaranteed: a server that answers ``/models`` can still fail chat requests (wrong model id,
overload); some hosted APIs do not implement ``/models`` at all, which ``list_models`` reports
as unreachable (``get_models`` only fails when no HTTP answer arrives). The byte cap counts
bytes as received (compressed, when the server compresses), not decoded characters.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

try:  # the openai SDK's HTTP stack (a fork of httpx); plain httpx for older SDKs
    import httpx2 as _httpx
except ImportError:  # pragma: no cover - depends on the installed openai version
    import httpx as _httpx  # type: ignore[no-redef]

ENV_BASE_URL = "WEFT_LLM_BASE_URL"
ENV_MODEL = "WEFT_LLM_MODEL"
ENV_API_KEY = "WEFT_LLM_API_KEY"
DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
LOCAL_API_KEY = "EMPTY"
PROBE_TIMEOUT_S = 3.0


DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024
CONNECT_RETRY_WINDOW_S = 30.0
PROBE_REUSE_S = 2.0  # one probe answers every caller that failed within this long of it
PROBE_POLL_MAX_S = 2.0  # longest pause between probes while waiting for a restarting server

logger = logging.getLogger("pipelines.llm")


class EndpointUnreachable(ConnectionError):
    """Nothing usable answers at the configured base URL (refused, unresolvable, silent)."""


class ResponseTooLarge(Exception):
    """A response body passed the configured byte cap; it was not read any further."""

    def __init__(self, limit: int, seen: int, declared: bool) -> None:
        how = "declared Content-Length" if declared else "body read so far"
        super().__init__(
            f"response larger than the {limit}-byte cap ({how}: {seen} bytes); raise "
            "max_response_bytes if such replies are expected, or lower max_tokens / n"
        )
        self.limit, self.seen = limit, seen


class _CappedStream(_httpx.AsyncByteStream):
    """Passes chunks through until more than ``limit`` bytes went by, then raises."""

    def __init__(self, inner: Any, limit: int) -> None:
        self._inner, self._limit, self._seen = inner, limit, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._seen += len(chunk)
            if self._seen > self._limit:
                raise ResponseTooLarge(self._limit, self._seen, declared=False)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def limit_response_bytes(limit: int) -> Callable[[Any], Awaitable[None]]:
    """An async httpx ``response`` event hook capping each response body at ``limit`` bytes.
    Hooks run before the body is read, so the cap applies to the read itself."""
    if not (isinstance(limit, int) and limit >= 1):
        raise ValueError(f"max_response_bytes must be a positive int, got {limit!r}")

    async def hook(response: Any) -> None:
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await response.aclose()
            raise ResponseTooLarge(limit, int(declared), declared=True)
        response.stream = _CappedStream(response.stream, limit)

    return hook


@dataclass(frozen=True)
class Endpoint:
    """Where to send requests. The key is read from the environment variable ``api_key_env``
    when a client is built, so configs and records hold only the variable's name."""

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"

    def api_key(self) -> str:
        return os.environ.get(self.api_key_env) or LOCAL_API_KEY


def redact_url(url: str) -> str:
    """The URL without any ``user:password@`` part, safe for logs and records."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def unreachable_message(base_url: str, detail: str) -> str:
    return (
        f"LLM endpoint {redact_url(base_url)} is unreachable ({detail}). Start an OpenAI-compatible "
        f"server there (e.g. `vllm serve <model> --port 8000` serves {DEFAULT_BASE_URL}) or point "
        f"weft at a running one by setting {ENV_BASE_URL} (and {ENV_MODEL}, {ENV_API_KEY})."
    )


def get_models(
    base_url: str, api_key: str, timeout_s: float = PROBE_TIMEOUT_S
) -> tuple[int, bytes]:
    """(HTTP status, body) of ``GET {base_url}/models``. Raises EndpointUnreachable only when no
    HTTP answer arrives at all (refused, unresolvable, timed out)."""
    request = urllib.request.Request(
        f"{base_url.rstrip('/')}/models", headers={"Authorization": f"Bearer {api_key}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise EndpointUnreachable(
            unreachable_message(base_url, f"{type(reason).__name__}: {reason}")
        ) from None


def list_models(base_url: str, api_key: str, timeout_s: float = PROBE_TIMEOUT_S) -> list[str]:
    """The model ids served at ``base_url``. Raises EndpointUnreachable when nothing answers or
    the answer is not an OpenAI-style model list (wrong path, refused key)."""
    status, body = get_models(base_url, api_key, timeout_s)
    if status != 200:
        hint = " (does the base URL end with /v1?)" if status == 404 else ""
        hint = f" (check {ENV_API_KEY})" if status in (401, 403) else hint
        raise EndpointUnreachable(
            unreachable_message(base_url, f"GET /models answered HTTP {status}{hint}")
        )
    try:
        data = json.loads(body).get("data", [])
        return [str(item.get("id")) for item in data if isinstance(item, dict)]
    except (ValueError, AttributeError):
        raise EndpointUnreachable(
            unreachable_message(base_url, "GET /models did not return an OpenAI-style model list")
        ) from None


def model_entry(base_url: str, api_key: str, model: str,
                timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """The ``GET {base_url}/models`` entry whose id is ``model`` (vLLM's carries ``root``, the
    weights it loaded, and ``max_model_len``); {} when the server answers with an error status,
    with no model list or without that model. Raises EndpointUnreachable only when no HTTP
    answer arrives at all."""
    status, body = get_models(base_url, api_key, timeout_s)
    if status != 200:
        return {}
    try:
        data = json.loads(body).get("data", [])
    except (ValueError, AttributeError):
        return {}
    if not isinstance(data, list):
        return {}
    return next((dict(item) for item in data
                 if isinstance(item, dict) and item.get("id") == model), {})


class ReachabilityProbe:
    """Outage state of one endpoint within one event loop (one waiter probes for everyone).

    ``wait(failed_at, window_s)`` returns once ``GET /models`` gets any HTTP answer: True when
    an outage ended after ``failed_at`` (the caller's attempt failed because of it). While
    nothing answers it probes with backoff until the outage has lasted ``window_s`` (0: give up
    at the first failed probe), then raises EndpointUnreachable; probes within
    ``PROBE_REUSE_S`` of each other are shared. ``revive`` (optional) is called once per outage
    at its first failed probe: True means it started the server again (a local server that
    died), and the probe tries again at once."""

    def __init__(self, base_url: str, api_key: str,
                 revive: Callable[[], bool] | None = None) -> None:
        self.base_url, self._api_key = base_url, api_key
        self.revive = revive
        self._revive_tried = False  # revive is asked once per outage
        self._lock = asyncio.Lock()
        self.probe_at = -1e9
        self.error: str | None = None
        self.down_since: float | None = None  # first failed probe of the current outage
        self.up_again_at = -1e9  # when the last outage ended

    async def _probe(self) -> None:
        try:  # any HTTP answer, even an error status, means the server is there
            await asyncio.to_thread(get_models, self.base_url, self._api_key, PROBE_TIMEOUT_S)
            self.error = None
        except EndpointUnreachable as exc:
            self.error = str(exc)
        self.probe_at = time.monotonic()

    async def wait(self, failed_at: float, window_s: float) -> bool:
        async with self._lock:
            polls = 0
            while True:
                if polls or time.monotonic() - self.probe_at > PROBE_REUSE_S:
                    await self._probe()
                now = time.monotonic()
                if self.error is None:
                    if self.down_since is not None:
                        logger.warning("LLM endpoint %s answers again after %.1fs",
                                       redact_url(self.base_url), now - self.down_since)
                        self.down_since, self.up_again_at = None, now
                    self._revive_tried = False
                    return self.up_again_at >= failed_at
                if self.down_since is None:
                    self.down_since = now
                    if window_s > 0:
                        logger.warning("LLM endpoint %s refuses connections; retrying for up to "
                                       "%gs", redact_url(self.base_url), window_s)
                if self.revive is not None and not self._revive_tried:
                    # a local server this process started may have died: start it again at
                    # once instead of waiting out the window (revive is False otherwise)
                    self._revive_tried = True
                    if await asyncio.to_thread(self.revive):
                        polls += 1  # probe again at once
                        continue
                down_for = now - self.down_since
                if down_for >= window_s:
                    raise EndpointUnreachable(
                        self.error + (f" (down for {down_for:.1f}s)" if window_s > 0 else ""))
                await asyncio.sleep(min(PROBE_POLL_MAX_S, 0.25 * 2**polls, window_s - down_for))
                polls += 1
