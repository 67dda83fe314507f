"""Testing utility: an in-process fake OpenAI-compatible server, a test double, never a model.

The test suite and ``bench/llm_cache.py`` use it to exercise the client (``pipelines.llm``)
without a model server; no pipeline, asset or training code imports it, and it is not part of
the package's public API (import it from ``pipelines.llm.testing``).

``FakeLLMServer`` serves ``POST /v1/chat/completions`` and ``GET /v1/models`` on 127.0.0.1 from
a background thread, counts and records every request, and misbehaves on demand: push
actions onto ``plan`` and each chat request consumes one (``"500"``, ``"429"``,
``"429:2"`` for a Retry-After of 2 s, ``"400"``, ``"sleep:1.5"``, ``"drop"`` to close the
connection without answering, ``"garbage"`` for a 200 whose body is not JSON,
``"text:<content>"`` to answer with that content (``"text:"`` is an empty reply), ``"null"``
for a reply whose content is JSON null, ``"huge:<bytes>"`` for a reply whose content is that
many bytes, ``"hang"`` to hold the request open until the server stops); with the plan
empty it answers through ``responder`` (default: an echo of the last user message), except
that a share ``error_rate`` of those requests (drawn from ``random.Random(error_seed)``)
get a 500. ``GET /v1/models`` lists ``models``, each with ``root`` = ``model_root`` when that
is set (vLLM reports there the weights it loaded). ``refuse_for(seconds)`` closes the listening socket and reopens it on the same
port after that long, like a server restart: connections in between are refused.

``StandInServer`` is a ``pipelines.serving.LocalModelServer`` whose process is a
``FakeLLMServer`` listing the served name (no vLLM), so that starting, killing and restarting a
"server" take a second.

What this does not guarantee: it is not a model and not a faithful OpenAI server; it only
implements the fields weft's client reads. Token counts are whitespace word counts. Never
expose it beyond localhost.
"""

from __future__ import annotations

import json
import random
import socket
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from pipelines.serving import LocalModelServer

Responder = Callable[[dict, int], str]


def echo_responder(body: dict, index: int) -> str:
    """Echo the last user message with the seed and choice index; unseeded sampling adds a nonce."""
    user = [m.get("content") for m in body.get("messages", []) if m.get("role") == "user"]
    last = user[-1] if user else ""
    text = f"echo seed={body.get('seed')} i={index}: {last}"
    if float(body.get("temperature") or 0.0) > 0 and body.get("seed") is None:
        text += f" nonce={uuid.uuid4().hex[:8]}"
    return text


@dataclass
class FakeLLMServer:
    """Start with ``start()`` (or ``with FakeLLMServer() as s:``); ``base_url`` ends in ``/v1``."""

    responder: Responder = echo_responder
    latency_s: float = 0.0
    models: tuple[str, ...] = ("fake-model",)
    model_root: str | None = None  # listed as every model's ``root`` (what vLLM loaded) when set
    models_status: int = 200
    plan: deque = field(default_factory=deque)
    requests: list[dict] = field(default_factory=list)
    headers: list[dict] = field(default_factory=list)
    chat_count: int = 0
    models_count: int = 0
    error_rate: float = 0.0
    error_seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError(f"error_rate must be in [0, 1], got {self.error_rate!r}")
        self._rng = random.Random(self.error_seed)
        self._port: int | None = None
        self._conns: set[socket.socket] = set()  # open client connections, cut on stop()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("FakeLLMServer is not started; call start() first")
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeLLMServer:
        self._stop.clear()
        handler = _make_handler(self)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self._port or 0), handler)
        self._httpd.daemon_threads = True
        self._port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-llm",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop like a killed server: stop listening and cut every open connection."""
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def refuse_for(self, seconds: float) -> threading.Thread:
        """Stop listening now and listen again on the same port after ``seconds`` (a restart).
        Returns the thread that restarts it (join it to wait for the restart)."""
        if self._httpd is None:
            raise RuntimeError("FakeLLMServer is not started; call start() first")
        self.stop()

        def restart() -> None:
            time.sleep(seconds)
            for _ in range(50):  # the port may linger briefly after close
                try:
                    self.start()
                    return
                except OSError:
                    time.sleep(0.1)
            raise RuntimeError(f"could not listen on port {self._port} again")

        thread = threading.Thread(target=restart, name="fake-llm-restart", daemon=True)
        thread.start()
        return thread

    def is_listening(self) -> bool:
        with socket.socket() as sock:
            sock.settimeout(0.5)
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next_action(self) -> str:
        with self._lock:
            self.chat_count += 1
            if self.plan:
                return self.plan.popleft()
            if self.error_rate and self._rng.random() < self.error_rate:
                return "500"
            return "ok"

    def _completion(self, body: dict, content: str | None, null: bool = False) -> dict:
        n = int(body.get("n") or 1)
        texts = [content if content is not None else self.responder(body, i) for i in range(n)]
        if null:
            texts = [None] * n
        prompt_words = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake-model"),
            "choices": [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
                for i, text in enumerate(texts)
            ],
            "usage": {
                "prompt_tokens": prompt_words,
                "completion_tokens": sum(len((t or "").split()) for t in texts),
                "total_tokens": prompt_words + sum(len((t or "").split()) for t in texts),
            },
        }


def _make_handler(server: FakeLLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            with server._lock:
                server._conns.add(self.connection)

        def finish(self) -> None:
            with server._lock:
                server._conns.discard(self.connection)
            try:
                super().finish()
            except OSError:
                pass

        def log_message(self, format: str, *args: Any) -> None:  # silence stderr access logs
            return

        def _send(self, status: int, payload: Any, extra_headers: dict | None = None) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (extra_headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def do_GET(self) -> None:
            if self.path.rstrip("/") != "/v1/models":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            with server._lock:
                server.models_count += 1
            if server.models_status != 200:
                self._send(server.models_status, {"error": {"message": "models listing refused"}})
                return
            self._send(
                200,
                {"object": "list", "data": [
                    {"id": m, "object": "model",
                     **({"root": server.model_root} if server.model_root is not None else {})}
                    for m in server.models]},
            )

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                body = json.loads(raw)
            except ValueError:
                self._send(400, {"error": {"message": "request body is not JSON"}})
                return
            action = server._next_action()
            with server._lock:
                server.requests.append(body)
                server.headers.append({k.lower(): v for k, v in self.headers.items()})
            if server.latency_s:
                server._stop.wait(server.latency_s)
            kind, _, arg = action.partition(":")
            if kind == "sleep":
                server._stop.wait(float(arg))
                kind = "ok"
            if kind == "hang":
                server._stop.wait()
                self.close_connection = True
                return
            if kind == "drop":
                self.close_connection = True
                return
            if kind == "garbage":
                data = b"this is not json"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            if kind.isdigit():
                headers = {"Retry-After": arg} if arg else None
                self._send(
                    int(kind),
                    {"error": {"message": f"injected {kind}", "code": int(kind)}},
                    headers,
                )
                return
            if kind == "text":
                self._send(200, server._completion(body, arg))
                return
            if kind == "null":
                self._send(200, server._completion(body, None, null=True))
                return
            if kind == "huge":
                self._send(200, server._completion(body, "x" * int(arg)))
                return
            self._send(200, server._completion(body, None))

    return Handler


_STAND_IN = ("import sys, time\n"
             "from pipelines.llm.testing import FakeLLMServer\n"
             "server = FakeLLMServer(models=(sys.argv[2],))\n"
             "server._port = int(sys.argv[1])\n"
             "server.start()\n"
             "time.sleep(3600)\n")


class StandInServer(LocalModelServer):
    """A ``LocalModelServer`` whose process is a ``FakeLLMServer`` (no vLLM)."""

    def command(self) -> list[str]:
        return [sys.executable, "-c", _STAND_IN, str(self.port), str(self.served_name)]
