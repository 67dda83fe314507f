"""The async LLM client every weft stage uses, for any OpenAI-compatible endpoint.

``LLMClient`` wraps ``openai.AsyncOpenAI`` with what long synthesis and evaluation runs need:
bounded concurrency, a per-request deadline, retries with exponential backoff and jitter on
429 / 5xx / timeouts / dropped connections (never on other 4xx), a persistent
content-addressed response cache (``pipelines.llm.cache``) so a re-run replays without
requests (keyed by the endpoint, the served name and the model root the server reports, so a
different model behind the same name is never answered from another's entries), structured
JSON output with one repair round (``chat_json``), one accounting record per call for the
warehouse table ``llm_calls`` and a batch helper that logs progress.

Guarantees: ``chat`` and ``chat_json`` never raise for a bad response or a failed request, they
return results with ``error`` set; the one exception is ``EndpointUnreachable``, raised within
seconds when nothing answers at a base URL that never answered this client, and after
``connect_retry_window_s`` of refused connections at one that did (a server restart takes
seconds, so requests wait for it with backoff instead of aborting the run). A cancelled call
frees its concurrency slot and writes no cache entry. A cache that fails (a full disk:
"database or disk is full", a file that cannot be opened) never fails a call: the first
failure of a write logs one warning and the client answers without writing the cache from then
on; a failed lookup is a miss (one warning per client). Records never contain the API key.
Unusable replies are failures, never cached successes: a reply with no content (null or empty
and no reasoning) is retried like a 5xx, a response body over ``max_response_bytes`` is an
error of its row (not retried: the same request would produce it again), and a ``chat_json``
reply still invalid after the repair round has its cache entries flagged failed, so a re-run
asks the server again (``pipelines.llm.cache``). ``map`` logs progress (done/total, failures,
generated tokens/s, cache hits, ETA) to ``progress`` or the module logger at least every
``log_every_s``, also while nothing finishes, and with ``batch_timeout_s`` stops a batch that
runs longer with ``BatchTimeout`` (the calls that completed stay cached and recorded).

Model identity: before its first cache lookup the client reads ``GET {base_url}/models`` once
and takes the ``root`` of its model's entry (vLLM: the weights loaded under the served name;
None where the server does not say). Until the endpoint has answered that, calls neither read
nor write the cache: a replay needs the endpoint to say which model it serves.

Throughput: ``usage()`` counts generated calls and tokens, the wall-clock time spent waiting on
the server, and cache hits apart from them, so a cached re-run reports no generation speed
instead of replayed tokens over lookup time (``pipelines.llm.types.Usage``).

Not guaranteed: identical requests issued concurrently in one run are both sent (the cache
keeps the first answer); a model redeployed under the same name from the same ``root`` path
(weights overwritten in place) is taken for the same model; replayed responses are only as
deterministic as what was stored; a server that ignores ``seed`` still gets distinct cache
entries per ``sample_index``. With n > 1, one empty choice fails the whole request.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self, TypeVar

from pipelines.llm.batch import map_ordered, on_loop_exit
from pipelines.llm.cache import CacheUnavailable, ResponseCache, cache_key
from pipelines.llm.endpoint import (
    CONNECT_RETRY_WINDOW_S,
    DEFAULT_BASE_URL,
    DEFAULT_MAX_RESPONSE_BYTES,
    ENV_API_KEY,
    ENV_BASE_URL,
    ENV_MODEL,
    LOCAL_API_KEY,
    PROBE_TIMEOUT_S,
    Endpoint,
    EndpointUnreachable,
    ReachabilityProbe,
    ResponseTooLarge,
    limit_response_bytes,
    list_models,
    model_entry,
    redact_url,
)
from pipelines.llm.structured import (
    check_schema,
    parse_reply,
    repair_message,
    response_format,
    schema_instruction,
)
from pipelines.llm.types import (
    ChatResult,
    JsonResult,
    SamplingParams,
    Usage,
    backoff_delay,
    check_messages,
    default_timeout_s,
    empty_choices,
    payload_from_completion,
    prompt_chars,
    results_from_payload,
    shorten,
)
from pipelines.settings import cache_dir


def _sdk() -> Any:
    """The openai SDK, imported on first use: it is about a quarter of the time it takes to
    import the pipeline's definitions, and many processes that import this module (the UI's
    code server, a run replayed from the cache) never send a request."""
    import openai

    return openai


logger = logging.getLogger("pipelines.llm")  # shared with the batch and endpoint helpers

T = TypeVar("T")

DEFAULT_PARAMS = SamplingParams()  # frozen, so one shared default is safe
CACHE_FILENAME = "llm_cache.sqlite"
JSON_MODES = ("schema", "object", "prompt")
# What a failing cache raises (a full disk, a file that cannot be opened): never a call's error.
CACHE_ERRORS = (sqlite3.Error, OSError, CacheUnavailable)
CONNECT_TIMEOUT_S = 5.0
# The deadline that follows the server's pace (LLMClient.request_timeout_s): the slowest rate of
# the last RATE_WINDOW answered requests of at least RATE_MIN_TOKENS tokens (shorter answers
# time mostly queueing and prefill), with RATE_SAFETY times the time that rate needs.
RATE_WINDOW = 16
RATE_MIN_TOKENS = 16
RATE_SAFETY = 3.0


@dataclass
class _LoopState:
    """Objects bound to one event loop: the HTTP client, the semaphore, the outage probe."""

    loop: asyncio.AbstractEventLoop
    client: Any  # openai.AsyncOpenAI
    semaphore: asyncio.Semaphore
    probe: ReachabilityProbe


@dataclass
class _Attempt:
    """What one HTTP attempt produced: a response, or an error and whether to retry it."""

    response: Any = None
    error: str | None = None
    retryable: bool = False
    check_endpoint: bool = False
    retry_after_s: float | None = None


class LLMClient:
    """Async client for one model behind one OpenAI-compatible base URL (see module docstring).

    ``cache_path`` None means ``cache_dir()/llm_cache.sqlite`` (resolved when constructed);
    ``use_cache=False`` disables the cache. ``json_mode`` picks how ``chat_json`` asks for JSON:
    "schema" (``response_format`` json_schema, strict; vLLM guided decoding), "object"
    (``json_object`` plus the schema in the prompt) or "prompt" (the schema in the prompt only).
    ``extra_body`` is merged into every request (e.g. vLLM's ``chat_template_kwargs``) and is
    part of the cache key. ``timeout_s`` is every request's deadline; None gives each request
    its own, ``default_timeout_s`` of its prompt length, ``max_tokens`` and ``n``.
    ``connect_retry_window_s`` is how long refused connections are retried once the endpoint
    has answered (0: fail at the first refusal); ``max_response_bytes`` caps each response
    body; ``batch_timeout_s`` (None: none) is ``map``'s whole-batch watchdog and ``progress``
    (None: the module logger) receives its progress lines. ``revive`` (None: none) is called
    once per outage, when the endpoint stops answering: it may start a local server that died
    again and say True (``LocalModelServer.revive``), so the request is retried at once.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        max_concurrency: int = 8,
        timeout_s: float | None = 120.0,
        max_retries: int = 4,
        cache_path: str | Path | None = None,
        use_cache: bool = True,
        json_mode: str = "schema",
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 30.0,
        extra_body: Mapping[str, Any] | None = None,
        connect_retry_window_s: float = CONNECT_RETRY_WINDOW_S,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        batch_timeout_s: float | None = None,
        progress: Callable[[str], None] | None = None,
        log_every_s: float = 10.0,
        revive: Callable[[], bool] | None = None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"base_url must be an http(s) URL such as {DEFAULT_BASE_URL}, got {base_url!r}"
            )
        if not isinstance(model, str) or not model:
            raise ValueError(
                f"model must be the served model id (see GET {base_url}/models), got {model!r}"
            )
        if not (isinstance(max_concurrency, int) and max_concurrency >= 1):
            raise ValueError(f"max_concurrency must be a positive int, got {max_concurrency!r}")
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 (or None for the default), got {timeout_s!r}")
        if not connect_retry_window_s >= 0:
            raise ValueError(
                f"connect_retry_window_s must be >= 0, got {connect_retry_window_s!r}"
            )
        if batch_timeout_s is not None and not batch_timeout_s > 0:
            raise ValueError(f"batch_timeout_s must be > 0 or None, got {batch_timeout_s!r}")
        if not log_every_s > 0:
            raise ValueError(f"log_every_s must be > 0, got {log_every_s!r}")
        self._response_hook = limit_response_bytes(max_response_bytes)
        if not (isinstance(max_retries, int) and max_retries >= 0):
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        if json_mode not in JSON_MODES:
            raise ValueError(f"json_mode must be one of {JSON_MODES}, got {json_mode!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key = api_key or LOCAL_API_KEY
        self.max_concurrency = max_concurrency
        self.timeout_s = None if timeout_s is None else float(timeout_s)
        self.max_retries = max_retries
        self.json_mode = json_mode
        self.backoff_base_s = float(backoff_base_s)
        self.backoff_max_s = float(backoff_max_s)
        self.extra_body = dict(extra_body) if extra_body else None
        self.connect_retry_window_s = float(connect_retry_window_s)
        self.max_response_bytes = max_response_bytes
        self.batch_timeout_s = batch_timeout_s
        self.progress = progress
        self.log_every_s = float(log_every_s)
        self.revive = revive
        self._seen_up = False  # the endpoint has answered this client at least once
        # completion tokens per second of this client's recent answered requests (one entry
        # per request, the newest last): the deadline follows the slowest of them
        self._rates: list[float] = []
        # what the server loaded under ``model`` (GET /models ``root``), part of the cache key
        self.model_root: str | None = None
        self._identity_known = False
        self._identity_lock = threading.Lock()
        self._usage = Usage()
        self._usage_lock = threading.Lock()
        self._in_flight = 0  # requests waiting on the server now
        self._busy_since = 0.0  # when the current stretch with requests in flight began
        self.cache: ResponseCache | None = None
        self._cache_writes = True  # off after the first failed write (a full disk)
        self._cache_warned: set[str] = set()
        if use_cache:
            self.cache = ResponseCache(
                Path(cache_path) if cache_path is not None else cache_dir() / CACHE_FILENAME
            )
        self._records: list[dict] = []
        self._records_lock = threading.Lock()
        self._state: _LoopState | None = None
        self._sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    def __repr__(self) -> str:
        return f"LLMClient(base_url={redact_url(self.base_url)!r}, model={self.model!r}, cache={self.cache!r})"

    @classmethod
    def from_endpoint(cls, endpoint: Endpoint, **kwargs: Any) -> LLMClient:
        return cls(endpoint.base_url, endpoint.model, api_key=endpoint.api_key(), **kwargs)

    @classmethod
    def from_env(cls, **kwargs: Any) -> LLMClient:
        """Build from ``WEFT_LLM_BASE_URL`` (default local vLLM), ``WEFT_LLM_MODEL`` (required)
        and ``WEFT_LLM_API_KEY`` (else ``OPENAI_API_KEY``, else "EMPTY"); kwargs override."""
        base_url = kwargs.pop("base_url", None) or os.environ.get(ENV_BASE_URL) or DEFAULT_BASE_URL
        model = kwargs.pop("model", None) or os.environ.get(ENV_MODEL)
        if not model:
            raise ValueError(
                f"No model configured: set {ENV_MODEL} to the model id served at {redact_url(base_url)} "
                f"(list them with: curl {redact_url(base_url).rstrip('/')}/models)"
            )
        api_key = (
            kwargs.pop("api_key", None)
            or os.environ.get(ENV_API_KEY)
            or os.environ.get("OPENAI_API_KEY")
        )
        return cls(base_url, model, api_key=api_key, **kwargs)

    # ----------------------------------------------------------------- reachability
    def ping(self, timeout_s: float = PROBE_TIMEOUT_S) -> list[str]:
        """GET {base_url}/models; the served model ids. Raises EndpointUnreachable when nothing
        answers or the answer is not a model list (wrong path, refused key)."""
        return list_models(self.base_url, self._api_key, timeout_s)

    def check_reachable(self, timeout_s: float = PROBE_TIMEOUT_S) -> None:
        """Raise EndpointUnreachable unless the endpoint answers; warn when the model is not listed."""
        served = self.ping(timeout_s)
        self._seen_up = True
        if served and self.model not in served:
            logger.warning(
                "model %r is not among the models served at %s: %s",
                self.model,
                redact_url(self.base_url),
                served,
            )

    async def _ensure_reachable(self, state: _LoopState, failed_at: float) -> bool:
        """After a connection error or timeout of an attempt sent at ``failed_at``: return once
        the server answers (True when it was down meanwhile, so the attempt deserves a fresh
        try), or raise EndpointUnreachable (at once if it never answered this client, else
        after ``connect_retry_window_s``); see ``ReachabilityProbe``."""
        window = self.connect_retry_window_s if self._seen_up else 0.0
        outage_over = await state.probe.wait(failed_at, window)
        self._seen_up = True
        return outage_over

    # ----------------------------------------------------------------- internals
    def _loop_state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        if self._state is None or self._state.loop is not loop:
            # the deadline itself is per request (``_attempt``); this is the pool's default
            longest = self.timeout_s or default_timeout_s(DEFAULT_PARAMS.max_tokens)
            timeout = _sdk().Timeout(longest + 5.0, connect=min(CONNECT_TIMEOUT_S, longest))
            client = _sdk().AsyncOpenAI(
                api_key=self._api_key,
                base_url=self.base_url,
                max_retries=0,
                timeout=timeout,
                # Our own pool (SDK defaults): the SDK's wrapper would, when a client left over
                # from a finished loop is garbage-collected, schedule its close on the new loop.
                # The response hook caps the bytes read per response.
                http_client=_sdk().DefaultAsyncHttpxClient(
                    timeout=timeout, event_hooks={"response": [self._response_hook]}
                ),
            )
            probe = ReachabilityProbe(self.base_url, self._api_key, self.revive)
            self._state = _LoopState(loop, client, asyncio.Semaphore(self.max_concurrency), probe)
            on_loop_exit(self._close_http)
        return self._state

    async def _close_http(self) -> None:
        """Close the HTTP client bound to the running loop (``run`` calls this at loop exit)."""
        state = self._state
        if state is not None and state.loop is asyncio.get_running_loop():
            self._state = None
            await state.client.close()

    def _scrub(self, text: str) -> str:
        if self._api_key and self._api_key != LOCAL_API_KEY and len(self._api_key) >= 4:
            text = text.replace(self._api_key, "***")
        return text

    def _record(self, **fields: Any) -> None:
        record = {
            "call_id": uuid.uuid4().hex,
            "tag": fields.get("tag", ""),
            "base_url": redact_url(self.base_url),
            "model": self.model,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "latency_s": 0.0,
            "cached": False,
            "attempts": 0,
            "status": "ok",
            "error": None,
            "finish_reason": None,
            "cache_key": None,
            "created_at": datetime.now(UTC),
        }
        record.update(fields)
        if record["error"] is not None:
            record["error"] = self._scrub(str(record["error"]))
        with self._records_lock:
            self._records.append(record)

    def _record_error(self, tag: str, key: str, attempts: int, started: float, error: str) -> None:
        self._record(
            tag=tag,
            cache_key=key,
            attempts=attempts,
            status="error",
            error=error,
            latency_s=time.monotonic() - started,
        )

    # ----------------------------------------------------------------- the cache, degrading
    async def _cache_get(self, key: str) -> dict | None:
        """The cached payload of ``key``; None on a miss or when the cache cannot be read."""
        try:
            return await asyncio.to_thread(self.cache.get, key)
        except CACHE_ERRORS as exc:
            self._cache_trouble("read", exc, "this call and others like it go to the server")
            return None

    async def _cache_write(self, method: Callable[..., Any], *args: Any) -> None:
        """Call the cache's ``method`` (put, mark_failed) unless writes are off; the first
        failure turns them off for this client, with one warning."""
        if not self._cache_writes:
            return
        try:
            await asyncio.to_thread(method, *args)
        except CACHE_ERRORS as exc:
            self._cache_writes = False
            self._cache_trouble("write", exc, "answering without caching from now on (a re-run "
                                "asks the server again); free disk space, or point the client "
                                "at another cache_path")

    def _cache_trouble(self, what: str, exc: BaseException, consequence: str) -> None:
        with self._usage_lock:
            if what in self._cache_warned:
                return
            self._cache_warned.add(what)
        logger.warning("LLM cache %s: %s failed (%s: %s); %s", self.cache.path if self.cache
                       else None, what, type(exc).__name__, exc, consequence)

    # ----------------------------------------------------------------- identity and usage
    def _resolve_identity(self) -> bool:
        """Learn the model root once per client (``GET /models``); False while the endpoint
        gives no HTTP answer (then the caller skips the cache for this call)."""
        with self._identity_lock:
            if self._identity_known:
                return True
            try:
                entry = model_entry(self.base_url, self._api_key, self.model)
            except EndpointUnreachable:
                return False
            root = entry.get("root")
            self.model_root = root if isinstance(root, str) and root else None
            self._identity_known = True
            return True

    def usage(self) -> Usage:
        """A snapshot of this client's generated and cached calls since it was built (see
        ``pipelines.llm.types.Usage``); a stretch still in flight counts up to now."""
        with self._usage_lock:
            usage = self._usage
            if self._in_flight:
                usage = replace(usage, generating_s=usage.generating_s
                                + time.monotonic() - self._busy_since)
            return usage

    def _count_cache_hit(self, completion_tokens: int) -> None:
        with self._usage_lock:
            self._usage = replace(self._usage, cache_hits=self._usage.cache_hits + 1,
                                  cached_tokens=self._usage.cached_tokens + completion_tokens)

    def _request_started(self) -> None:
        with self._usage_lock:
            if self._in_flight == 0:
                self._busy_since = time.monotonic()
            self._in_flight += 1

    def _request_ended(self, completion_tokens: int | None) -> None:
        """One request to the server ended: with its completion tokens, or None (failed)."""
        with self._usage_lock:
            self._in_flight -= 1
            u = self._usage
            busy = u.generating_s
            if self._in_flight == 0:
                busy += time.monotonic() - self._busy_since
            if completion_tokens is None:
                self._usage = replace(u, generating_s=busy, failed_calls=u.failed_calls + 1)
            else:
                self._usage = replace(u, generating_s=busy, generated_calls=u.generated_calls + 1,
                                      generated_tokens=u.generated_tokens + completion_tokens)

    def drain_records(self) -> list[dict]:
        """Accounting records (one per ``chat`` call, cache hits included) since the last drain."""
        with self._records_lock:
            records, self._records = self._records, []
        return records

    def request_timeout_s(self, messages: list[dict], params: SamplingParams) -> float:
        """The deadline of one request's first attempt: the client's ``timeout_s``, else the
        larger of ``default_timeout_s`` (this prompt's length, ``max_tokens`` and ``n``) and the
        time the server would need at the slowest rate it showed this client recently
        (:meth:`observed_rate`), with :data:`RATE_SAFETY` to spare: a server slowed by other
        load gets the time it needs instead of a deadline it cannot meet. A timed-out attempt's
        retry gets twice the deadline (:meth:`_call`), so a request that was still generating is
        not restarted under the deadline it just missed."""
        if self.timeout_s is not None:
            return self.timeout_s
        base = default_timeout_s(params.max_tokens, params.n, prompt_chars(messages))
        rate = self.observed_rate()
        if rate is None:
            return base
        from pipelines.llm import types

        return max(base, types.TIMEOUT_BASE_S + RATE_SAFETY * params.n * params.max_tokens / rate)

    def observed_rate(self) -> float | None:
        """The slowest completion tokens per second among this client's last
        :data:`RATE_WINDOW` answered requests of at least :data:`RATE_MIN_TOKENS` tokens (the
        server's pace as a request sees it, concurrency included), None before any."""
        with self._records_lock:
            rates = list(self._rates)
        return min(rates) if rates else None

    def _observe(self, completion_tokens: int, seconds: float) -> None:
        if completion_tokens < RATE_MIN_TOKENS or seconds <= 0:
            return
        with self._records_lock:
            self._rates.append(completion_tokens / seconds)
            del self._rates[:-RATE_WINDOW]

    async def _attempt(self, state: _LoopState, kwargs: dict, timeout_s: float) -> _Attempt:
        """One HTTP request. On timeout or cancellation the SDK's HTTP stack closes the
        connection mid-request; vLLM's OpenAI server takes the disconnect as an abort and frees
        the request's compute (``tests/pipelines/test_serving.py`` checks it)."""
        try:
            async with state.semaphore:
                async with asyncio.timeout(timeout_s):
                    http_timeout = _sdk().Timeout(
                        timeout_s + 5.0, connect=min(CONNECT_TIMEOUT_S, timeout_s)
                    )
                    response = await state.client.chat.completions.create(
                        **kwargs, timeout=http_timeout
                    )
                    return _Attempt(response=response)
        except (TimeoutError, _sdk().APITimeoutError):
            return _Attempt(
                error=f"timeout after {timeout_s:g}s", retryable=True, check_endpoint=True
            )
        except _sdk().APIConnectionError as exc:
            cause = exc.__cause__ or exc
            return _Attempt(
                error=f"connection error: {type(cause).__name__}: {cause}",
                retryable=True,
                check_endpoint=True,
            )
        except _sdk().APIStatusError as exc:
            status = exc.status_code
            message = re.sub(r"^Error code: \d+ - ", "", str(exc.message))
            error = f"HTTP {status}: {shorten(message)}"
            retry_after = None
            if status == 429:
                try:
                    retry_after = float(exc.response.headers.get("retry-after", ""))
                except ValueError:
                    retry_after = None
            return _Attempt(
                error=error, retryable=status == 429 or status >= 500, retry_after_s=retry_after
            )
        except ResponseTooLarge as exc:  # the same request would get the same reply: no retry
            return _Attempt(error=f"bad response: {exc}")
        except (_sdk().APIError, ValueError) as exc:  # e.g. a 200 whose body is not JSON
            return _Attempt(error=f"bad response: {type(exc).__name__}: {shorten(str(exc))}")

    def _request_kwargs(
        self, messages: list[dict], params: SamplingParams, fmt: dict | None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> dict:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "n": params.n,
        }
        if params.seed is not None:
            kwargs["seed"] = params.seed
        if params.stop:
            kwargs["stop"] = list(params.stop)
        if fmt is not None:
            kwargs["response_format"] = fmt
        body = {**(self.extra_body or {}), **(extra_body or {})}
        if body:
            kwargs["extra_body"] = body
        return kwargs

    async def _complete(
        self,
        messages: list[dict],
        params: SamplingParams,
        fmt: dict | None,
        tag: str,
        sample_index: int,
        extra_body: Mapping[str, Any] | None = None,
    ) -> list[ChatResult]:
        check_messages(messages)
        cacheable = self.cache is not None and (
            self._identity_known or await asyncio.to_thread(self._resolve_identity)
        )
        key = cache_key(
            self.model,
            messages,
            endpoint=self.base_url,
            model_root=self.model_root,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_tokens,
            stop=params.stop,
            seed=params.seed,
            n=params.n,
            response_format=fmt,
            extra_body={**(self.extra_body or {}), **(extra_body or {})} or None,
            sample_index=sample_index,
        )
        started = time.monotonic()
        if cacheable:
            payload = await self._cache_get(key)
            # an empty reply stored by an older version is a miss: ask again
            if (
                payload is not None
                and len(payload.get("choices", [])) == params.n
                and not empty_choices(payload)
            ):
                results = results_from_payload(payload, cached=True, key=key)
                self._count_cache_hit(int(payload.get("completion_tokens", 0) or 0))
                self._record(
                    tag=tag,
                    cached=True,
                    cache_key=key,
                    latency_s=time.monotonic() - started,
                    prompt_tokens=payload.get("prompt_tokens", 0),
                    completion_tokens=payload.get("completion_tokens", 0),
                    finish_reason=results[0].finish_reason if results else None,
                )
                return results
        state = self._loop_state()
        kwargs = self._request_kwargs(messages, params, fmt, extra_body)
        timeout_s = self.request_timeout_s(messages, params)
        attempts, retry, outcome = 0, 0, _Attempt(error="not attempted")
        generated: int | None = None  # completion tokens once the server has answered
        self._request_started()
        try:
            while True:
                attempts += 1
                sent = time.monotonic()
                outcome = await self._attempt(state, kwargs, timeout_s)
                if outcome.error is None:
                    outcome, payload = self._check_payload(outcome, params, sent)
                if outcome.error is None:
                    self._seen_up = True
                    generated = int(payload["completion_tokens"] or 0)
                    self._observe(generated, time.monotonic() - sent)
                    if cacheable:
                        await self._cache_write(self.cache.put, key, self.model, payload)
                    results = results_from_payload(payload, cached=False, key=key)
                    self._record(
                        tag=tag,
                        cache_key=key,
                        attempts=attempts,
                        latency_s=time.monotonic() - started,
                        prompt_tokens=payload["prompt_tokens"],
                        completion_tokens=payload["completion_tokens"],
                        finish_reason=results[0].finish_reason,
                    )
                    return results
                if outcome.check_endpoint and await self._ensure_reachable(state, sent):
                    continue  # failed during an outage that is over: a fresh try, not a retry
                if not outcome.retryable or retry >= self.max_retries:
                    break
                delay = backoff_delay(retry, self.backoff_base_s, self.backoff_max_s)
                if outcome.retry_after_s is not None:
                    delay = max(delay, min(outcome.retry_after_s, self.backoff_max_s))
                logger.debug(
                    "retrying %s in %.2fs after %s", tag or "llm call", delay, outcome.error
                )
                retry += 1
                if outcome.error.startswith("timeout") and self.timeout_s is None:
                    timeout_s *= 2  # it may have been generating: more time, not the same
                await self._sleep(delay)
        except asyncio.CancelledError:
            self._record_error(tag, key, attempts, started, "cancelled")
            raise
        except EndpointUnreachable as exc:
            self._record_error(tag, key, attempts, started, str(exc))
            raise
        finally:
            self._request_ended(generated)
        error = self._scrub(
            f"{outcome.error} (after {attempts} attempt{'s' if attempts > 1 else ''})"
        )
        self._record_error(tag, key, attempts, started, error)
        latency = time.monotonic() - started
        return [
            ChatResult("", None, 0, 0, latency, False, error=error, cache_key=key)
            for _ in range(params.n)
        ]

    @staticmethod
    def _check_payload(
        outcome: _Attempt, params: SamplingParams, sent: float
    ) -> tuple[_Attempt, dict]:
        """The payload of a successful attempt, or the attempt turned into an error when the
        reply is not a usable chat completion (wrong shape, wrong choice count, no content)."""
        try:
            payload = payload_from_completion(outcome.response, params.n, time.monotonic() - sent)
        except (AttributeError, TypeError, ValueError) as exc:
            error = f"bad response: not a chat completion ({type(exc).__name__}: {exc})"
            return _Attempt(error=error), {}
        if len(payload["choices"]) != params.n:
            error = f"server returned {len(payload['choices'])} choices, asked for n={params.n}"
            return _Attempt(error=error), {}
        empty = empty_choices(payload)
        if empty:  # a null/empty reply is a server hiccup until proven otherwise: retry it
            error = f"empty reply: choice {empty[0]} has no content"
            return _Attempt(error=error, retryable=True), payload
        return outcome, payload

    # ----------------------------------------------------------------- public calls
    async def chat(
        self,
        messages: list[dict],
        params: SamplingParams = DEFAULT_PARAMS,
        *,
        tag: str = "",
        sample_index: int = 0,
        extra_body: Mapping[str, Any] | None = None,
    ) -> list[ChatResult]:
        """``params.n`` results; failures come back with ``error`` set (never raised), except
        ``EndpointUnreachable``. ``sample_index`` separates cache entries of repeated samples.
        ``extra_body`` is merged over the client's for this request (and its cache key), e.g.
        vLLM's ``continue_final_message`` to continue a partial assistant message."""
        return await self._complete(messages, params, None, tag, sample_index, extra_body)

    async def samples(
        self,
        messages: list[dict],
        params: SamplingParams,
        k: int,
        *,
        tag: str = "",
        per_request: bool = False,
    ) -> list[ChatResult]:
        """k samples of one prompt, each its own cache entry: one request with ``n=k``, or (with
        ``per_request``) k requests with seeds ``seed+i`` (when seeded) and ``sample_index=i``."""
        if not (isinstance(k, int) and k >= 1):
            raise ValueError(f"k must be a positive int, got {k!r}")
        if not per_request:
            return await self.chat(messages, replace(params, n=k), tag=tag)
        calls = [
            self.chat(
                messages,
                replace(params, n=1, seed=None if params.seed is None else params.seed + i),
                tag=tag,
                sample_index=i,
            )
            for i in range(k)
        ]
        return [result for group in await asyncio.gather(*calls) for result in group]

    async def chat_json(
        self,
        messages: list[dict],
        schema: dict,
        params: SamplingParams = DEFAULT_PARAMS,
        *,
        validate: Callable[[Any], Any] | None = None,
        tag: str = "",
        sample_index: int = 0,
    ) -> JsonResult:
        """Ask for JSON matching ``schema``; parse, validate (schema subset, then ``validate``),
        and on failure retry once with the bad reply and the error appended. Never raises for
        bad output. If ``validate`` returns something other than None, that becomes the value.
        """
        check_schema(schema)
        if params.n != 1:
            raise ValueError(
                "chat_json makes one JSON value per call; use n=1 and vary sample_index for more"
            )
        check_messages(messages)
        fmt = response_format(schema, self.json_mode)
        conversation = [dict(m) for m in messages]
        if self.json_mode != "schema":
            last = conversation[-1]
            if isinstance(last.get("content"), str):
                last["content"] = last["content"] + schema_instruction(schema)
            else:
                conversation.append({"role": "user", "content": schema_instruction(schema).strip()})
        raw: list[str] = []
        keys: list[str] = []
        error = "no attempt made"
        for attempt in (1, 2):
            result = (await self._complete(conversation, params, fmt, tag, sample_index))[0]
            if result.cache_key is not None:
                keys.append(result.cache_key)
            if result.error is not None:
                hint = ""
                if self.json_mode != "prompt" and "HTTP 400" in result.error:
                    hint = " (if the server rejects response_format, use json_mode='object' or 'prompt')"
                return JsonResult(None, raw, attempt, f"request failed: {result.error}{hint}")
            raw.append(result.text)
            value, error = parse_reply(result.text, schema, validate)
            if error is None:
                return JsonResult(value, raw, attempt, None)
            if result.finish_reason == "length":
                error += " (the reply was cut off at max_tokens)"
            conversation = conversation + [
                {"role": "assistant", "content": result.text},
                {"role": "user", "content": repair_message(error)},
            ]
        if self.cache is not None:  # a re-run must ask again, not replay the invalid replies
            for key in keys:
                await self._cache_write(self.cache.mark_failed, key, f"invalid JSON: {error}")
        return JsonResult(None, raw, 2, error)

    async def map(
        self,
        fn: Callable[[Any], Awaitable[T]],
        items: Iterable[Any],
        *,
        desc: str = "",
        return_exceptions: bool = False,
        log_every_s: float | None = None,
    ) -> list[T]:
        """``await fn(item)`` for every item concurrently, results in input order, with progress
        (done/total, failures, items/s, generated tokens/s and cache hits from ``usage()``,
        ETA) sent to the client's ``progress`` (or logged) every ``log_every_s`` (None: the
        client's), even while nothing finishes. HTTP concurrency is bounded by the client's semaphore inside ``chat``; ``map`` keeps a few
        times that many items in flight. An exception from ``fn`` cancels the rest and is
        raised, unless ``return_exceptions`` (then it takes the item's place); EndpointUnreachable
        always raises, and so does ``BatchTimeout`` when the batch outlives the client's
        ``batch_timeout_s`` (its in-flight calls are cancelled and recorded as such).
        """
        return await map_ordered(
            fn,
            items,
            workers=max(4 * self.max_concurrency, 16),
            desc=desc,
            return_exceptions=return_exceptions,
            log_every_s=self.log_every_s if log_every_s is None else log_every_s,
            fatal=(EndpointUnreachable,),
            deadline_s=self.batch_timeout_s,
            log=self.progress,
            usage=self.usage,
        )

    async def aclose(self) -> None:
        """Close the HTTP client (for the current loop) and the cache connection."""
        await self._close_http()
        self._state = None
        if self.cache is not None:
            self.cache.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
