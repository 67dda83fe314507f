"""Building blocks for programs that call a function inside the sandbox and bring its return
values back to the host: a value codec (tagged JSON that keeps tuples, sets, dicts with any
keys, big ints, bytes, complex and NaN), a per-program random marker, and a comparison with a
float tolerance.

Comparisons happen on the host, after the candidate's process has ended, so a candidate can
only influence its verdict by printing the marker line with the right content; the marker
carries a random nonce, and programs that exit early (``sys.exit(0)`` before the tests) never
print it.

Not guaranteed: that a candidate cannot read the nonce out of its own interpreter (it runs in
the same process as the harness; the nonce defeats early exits and accidental output, not a
program written to attack the harness); equality for objects that are neither builtin values
nor containers of them (they are compared by type name and ``repr``).
"""

from __future__ import annotations

import json
import math
import secrets
from dataclasses import dataclass
from typing import Any

MARKER_PREFIX = "__weft_result_"

# Source placed into harness programs (stdlib only; runs on the jail's python3).
CODEC_SOURCE = r'''
def __weft_sorted(items):
    import json as _json
    return sorted(items, key=lambda x: _json.dumps(x, sort_keys=True))


def __weft_enc(v, depth=0):
    if depth > 200:
        return {"t": "repr", "type": type(v).__name__, "v": repr(v)[:2000]}
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return v if -2**62 < v < 2**62 else {"t": "int", "v": hex(v)}
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return {"t": "float", "v": repr(v)}
        return v
    if isinstance(v, list):
        return [__weft_enc(x, depth + 1) for x in v]
    if isinstance(v, tuple):
        return {"t": "tuple", "v": [__weft_enc(x, depth + 1) for x in v]}
    if isinstance(v, (set, frozenset)):
        return {"t": "frozenset" if isinstance(v, frozenset) else "set",
                "v": __weft_sorted([__weft_enc(x, depth + 1) for x in v])}
    if isinstance(v, dict):
        pairs = [[__weft_enc(k, depth + 1), __weft_enc(x, depth + 1)] for k, x in v.items()]
        return {"t": "dict", "v": __weft_sorted(pairs)}
    if isinstance(v, complex):
        return {"t": "complex", "v": [repr(v.real), repr(v.imag)]}
    if isinstance(v, (bytes, bytearray)):
        return {"t": "bytes", "v": bytes(v).hex()}
    if type(v).__module__ == "numpy" and hasattr(v, "tolist"):  # numpy scalars and arrays
        return __weft_enc(v.tolist(), depth + 1)
    return {"t": "repr", "type": type(v).__name__, "v": repr(v)[:2000]}


def __weft_pack(v, limit=__WEFT_DIGEST_ABOVE__):
    """A value's encoding, or the sha256 of it when the encoding is large."""
    import hashlib as _hashlib
    import json as _json
    enc = __weft_enc(v)
    text = _json.dumps(enc, sort_keys=True)
    if len(text) > limit:
        digest = _hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        return {"t": "sha256", "v": digest}
    return enc


def __weft_emit(marker, payload):
    import json as _json
    import sys as _sys
    try:
        _sys.stdout.flush()
    except Exception:
        pass
    _sys.stdout = _sys.__stdout__
    print("\n" + marker + _json.dumps(payload), flush=True)
'''.replace("__WEFT_DIGEST_ABOVE__", "100000")


@dataclass(frozen=True)
class Digest:
    """A large value that crossed the sandbox boundary as the sha256 of its encoding (sets and
    dicts are encoded in a canonical order, so equal values give equal digests)."""

    sha256: str


@dataclass(frozen=True)
class Opaque:
    """A value that crossed the sandbox boundary only as its type name and ``repr``."""

    type_name: str
    text: str


def new_marker() -> str:
    """A fresh marker (prefix + random nonce) for one program."""
    return f"{MARKER_PREFIX}{secrets.token_hex(8)}__"


def decode_value(obj: Any) -> Any:
    """Inverse of the in-sandbox ``__weft_enc``: tagged JSON back to Python values."""
    if isinstance(obj, list):
        return [decode_value(x) for x in obj]
    if not isinstance(obj, dict):
        return obj
    tag, payload = obj.get("t"), obj.get("v")
    if tag == "tuple":
        return tuple(decode_value(x) for x in payload)
    if tag in ("set", "frozenset"):
        items = [_hashable(decode_value(x)) for x in payload]
        return set(items) if tag == "set" else frozenset(items)
    if tag == "dict":
        return {_hashable(decode_value(k)): decode_value(v) for k, v in payload}
    if tag == "int":
        return int(payload, 16)
    if tag == "float":
        return float(payload)
    if tag == "complex":
        return complex(float(payload[0]), float(payload[1]))
    if tag == "bytes":
        return bytes.fromhex(payload)
    if tag == "repr":
        return Opaque(str(obj.get("type")), str(payload))
    if tag == "sha256":
        return Digest(str(payload))
    raise ValueError(f"unknown value tag {tag!r} in sandbox output")


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(x) for x in value)
    if isinstance(value, set):
        return frozenset(value)
    if isinstance(value, dict):
        return tuple(sorted((repr(k), _hashable(v)) for k, v in value.items()))
    return value


NOT_FOUND = object()


def find_payload(stdout: str, marker: str) -> Any:
    """The JSON payload printed after ``marker`` (its first occurrence), or ``NOT_FOUND``."""
    at = stdout.find(marker)
    if at < 0:
        return NOT_FOUND
    line = stdout[at + len(marker):].split("\n", 1)[0]
    try:
        return json.loads(line)
    except ValueError:
        return NOT_FOUND


def _contains_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_contains_float(x) for x in value)
    if isinstance(value, dict):
        return any(_contains_float(x) for x in value.values())
    return False


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _close(out: Any, exp: Any, atol: float) -> bool:
    if _is_number(out) and _is_number(exp):
        if isinstance(out, float) and isinstance(exp, float) and math.isnan(out):
            return math.isnan(exp)
        return math.isclose(out, exp, rel_tol=1e-7, abs_tol=atol)
    if type(out) is not type(exp):
        return False
    if isinstance(exp, (list, tuple)):
        return len(out) == len(exp) and all(_close(a, b, atol) for a, b in zip(out, exp))
    if isinstance(exp, dict):
        return out.keys() == exp.keys() and all(_close(out[k], exp[k], atol) for k in exp)
    return out == exp


def values_match(out: Any, exp: Any, atol: float = 0.0) -> bool:
    """Equality as code benchmarks use it: exact, else (when ``atol`` is set or the expected
    value holds floats, then with atol 1e-6) numbers within ``atol`` / relative 1e-7, with the
    same container types and lengths."""
    if isinstance(out, Digest) or isinstance(exp, Digest):
        return out == exp
    try:
        if out == exp:
            return True
    except Exception:  # noqa: BLE001 - exotic __eq__
        return False
    if not atol and _contains_float(exp):
        atol = 1e-6
    return bool(atol) and _close(out, exp, float(atol))
