"""Where the LLM lives: endpoint config, the reachability probe, and the "unreachable" error.

``Endpoint`` names a base URL, a model id and the *name* of the environment variable holding
the API key (never the key itself). ``get_models``/``list_models`` call ``GET {base_url}/models``
with a short timeout using only the standard library, so a missing server is detected in
seconds; ``EndpointUnreachable`` carries a message naming the URL and how to fix it.

Not guaranteed: a server that answers ``/models`` can still fail chat requests (wrong model id,
overload); some hosted APIs do not implement ``/models`` at all, which ``list_models`` reports
as unreachable (``get_models`` only fails when no HTTP answer arrives).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

ENV_BASE_URL = "WEFT_LLM_BASE_URL"
ENV_MODEL = "WEFT_LLM_MODEL"
ENV_API_KEY = "WEFT_LLM_API_KEY"
DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
LOCAL_API_KEY = "EMPTY"
PROBE_TIMEOUT_S = 3.0


class EndpointUnreachable(ConnectionError):
    """Nothing usable answers at the configured base URL (refused, unresolvable, silent)."""


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
