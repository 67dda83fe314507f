"""Calling model-written functions in the sandbox so that only their return values come back to
the host, as plain data, for the host to judge.

The pieces:

- a plain-data codec (:func:`plain_encode` / :func:`plain_decode`): tagged JSON for ``None``,
  ``bool``, ``int`` (any size), ``float`` (NaN and infinities too), ``str``, ``bytes``,
  ``bytearray``, ``complex``, ``list``, ``tuple``, ``set``, ``frozenset`` and ``dict``, checked
  by exact type (``type(v) is int``): an ``int`` or ``str`` subclass, or any other object, is
  *not* plain data and is reported as such instead of being encoded. numpy scalars and arrays
  are converted with ``tolist()`` first. The same functions run in the jail and on the host.
- :func:`relay_program`: the program the sandbox runs for a candidate. Its trusted part forks
  before any candidate code runs. The child points fds 0, 1 and 2 at ``/dev/null`` and a pipe
  the parent drains (keeping the first :data:`OUTPUT_KEEP_BYTES`), closes every other fd,
  executes the candidate's code as ``__main__``, calls the target function on each recorded
  argument tuple and writes one encoded result per call into a results pipe (in one write at
  the end). The parent
  (``prctl(PR_SET_DUMPABLE, 0)`` first, so the child cannot open its ``/proc/<pid>/fd`` or
  memory) reads the run's nonce from its stdin only after the fork, caps the results, and prints
  one line: marker + nonce + JSON payload.
- :func:`relay_request`: the same relay for a warm runner that preloaded this module
  (:func:`relay_module_source`, :data:`RELAY_MODULE`): the runner's fork server (sealed, the
  jail's pid 1) is then the trusted parent, forks the child before reading the request that
  carries the nonce, drains and caps its pipes and prints the same line; the child runs the
  same code. One fork and one program compile less per candidate
  (``SandboxPool.run_relay``).
- :func:`read_relay`: the host side; it never raises (a missing, cut, malformed, oversized or
  too deeply nested payload is a failed run with its reason).
- :func:`values_match`: equality with a float tolerance, for comparisons on the host.

Guarantees (local sandbox, bubblewrap jail): the candidate's process holds no test code and no
expected value, only its own code and its calls' arguments; it cannot write to the stdout the
host reads (its fds are replaced before its code runs, and every process holding the real one
is non-dumpable: the driver seals the jail's processes and the parent seals itself again, so
``/proc/<pid>/fd``, ``/proc/<pid>/mem`` and ``ptrace`` are refused), so no line it prints or
forges is ever read as a result; what comes back from it is decoded on the host into builtin
values only, so no object of its making is ever compared. Killing or stopping the parent only
loses the payload (a failed run). A parent that could not seal itself says so (``sealed``) and
its run fails.

The nonce never enters the candidate's memory: a cold ``LocalSandbox.run`` passes stdin as a
descriptor the driver never reads, and a warm runner forks each program's process before it
reads the request that carries its stdin; the parent reads it only after forking the child.
With :func:`relay_request` the fork server keeps the nonce and never writes it where the
child can read (the child's stdin is ``/dev/null``).

Not guaranteed: that a candidate on a warm runner finds nothing of the programs that runner
ran before (its heap keeps remnants, inherited by every program it forks: other candidates'
code and stale nonces; so the grader records the benchmark's tests in jails of their own). The
plain-subprocess fallback, where the candidate runs as the grading user when that user is
not root: it can then reach the host process itself (open ``/proc/<host pid>/fd/*``, which
includes the host's end of its output pipe), so a deliberate attack can forge a result there.
The E2B backend runs programs without the local driver: there the parent's own sealing (a run
whose parent could not seal itself fails) and the unlinking of its stdin file before it forks
carry the guarantees, untested here (no E2B account). That a candidate's results fit the cap
its program is given (over it, the run fails). A non-Linux host.
"""

from __future__ import annotations

import base64
import importlib.util
import inspect
import json
import marshal
import math
import secrets
import zlib
from dataclasses import dataclass, field
from typing import Any

MARKER_PREFIX = "__weft_result_"
OUTPUT_KEEP_BYTES = 4096  # of the candidate's own stdout/stderr, kept for the failure details
MAX_DEPTH = 100  # plain data nested deeper than this is not plain data
DIGEST_ABOVE = 100_000  # encodings longer than this cross as a sha256 (where digests are asked)
MAX_ERROR_CHARS = 300
# The largest int the host decodes: one whose decimal form stays within CPython's default
# int-to-str limit (4,300 digits), so the host can always render and compare it.
MAX_INT_DIGITS = 4300
INT_BOUND = 10 ** MAX_INT_DIGITS
MAX_INT_HEX = 3 + math.ceil(MAX_INT_DIGITS / math.log10(16))  # '-0x' and the hex digits
MAX_EQUAL_HASHES = 8  # members of one decoded set or dict that may share a hash value
NONCE_HEX = 32


# ---------------------------------------------------------------------------------------------
# the codec (these two functions are also copied into sandbox programs: standard library only,
# no module globals)


def plain_encode(value, digest_above=0,
                 _not_plain=type("NotPlain", (Exception,), {})):  # noqa: B008 - made once
    """``["ok", encoding]`` for plain data, else ``["bad", why]`` (``why`` names the type and
    starts the ``repr``). Dicts keep their order, sets are sorted; ``Counter``, ``OrderedDict``
    and ``defaultdict`` are encoded as the dicts they hold, numpy values via ``tolist()``. With ``digest_above`` > 0 an encoding longer than that crosses as
    ``{"t": "sha256", ...}`` of its canonical JSON (dict items sorted there too)."""
    import json

    # (its error class is made once, with the function, which is copied into sandbox programs
    # and can use no module global: a class made per call costs more than a small value)
    NotPlain = _not_plain

    def canon(x):
        return json.dumps(x, sort_keys=True)

    def enc(v, depth):
        if depth > 100:
            raise NotPlain("nested deeper than 100 levels")
        t = type(v)
        if v is None or t is bool or t is str:
            return v
        if t is int:
            return v if -(1 << 62) < v < (1 << 62) else {"t": "int", "v": hex(v)}
        if t is float:
            if v != v or v in (float("inf"), float("-inf")):  # noqa: PLR0124 - NaN
                return {"t": "float", "v": repr(v)}
            return v
        if t is list:
            return [enc(x, depth + 1) for x in v]
        if t is tuple:
            return {"t": "tuple", "v": [enc(x, depth + 1) for x in v]}
        if t is set or t is frozenset:
            items = sorted((enc(x, depth + 1) for x in v), key=canon)
            return {"t": "set" if t is set else "frozenset", "v": items}
        if t is dict:  # in insertion order: a function may depend on it
            return {"t": "dict", "v": [[enc(k, depth + 1), enc(x, depth + 1)]
                                       for k, x in v.items()]}
        if t is complex:
            return {"t": "complex", "v": [repr(v.real), repr(v.imag)]}
        if t is bytes or t is bytearray:
            return {"t": t.__name__, "v": v.hex()}
        if t in mappings:  # the stdlib's dict subclasses, as the dicts they hold
            return enc(dict(dict.items(v)), depth)
        if getattr(t, "__module__", None) == "numpy" and hasattr(v, "tolist"):
            return enc(v.tolist(), depth + 1)  # numpy scalars and arrays, as builtin values
        raise NotPlain(f"a {t.__module__}.{t.__qualname__} object"
                       if t.__module__ != "builtins" else f"a {t.__qualname__} object")

    import collections

    mappings = (collections.Counter, collections.OrderedDict, collections.defaultdict)
    try:
        out = enc(value, 0)
    except NotPlain as exc:
        try:
            text = repr(value)[:200]
        except Exception:  # noqa: BLE001 - its own repr may raise anything
            text = "?"
        return ["bad", f"returned {exc}, which is not plain data ({text})"]
    except RecursionError:
        return ["bad", "returned data nested too deeply"]
    if digest_above and not (out is None or type(out) in (bool, int, float)):
        text = canon(out)
        if len(text) > digest_above:
            def unordered(x):  # equal dicts give equal digests, whatever their order
                if type(x) is list:
                    return [unordered(y) for y in x]
                if type(x) is dict:
                    items = [unordered(y) for y in x["v"]]
                    return {"t": x["t"], "v": sorted(items, key=canon) if x["t"] == "dict"
                            else items}
                return x

            text = canon(unordered(out))
            import hashlib

            digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
            return ["ok", {"t": "sha256", "v": digest}]
    return ["ok", out]


def plain_decode(obj, on_digest=None):
    """Inverse of :func:`plain_encode`: only builtin values come out; anything malformed raises
    ``ValueError``. ``on_digest(hex)`` makes the value for a sha256 tag (else it is an error).
    Bounded: an int of more than 4,300 decimal digits, or a set or dict with more than 8
    members of one hash value, is malformed (see ``MAX_INT_DIGITS``, ``MAX_EQUAL_HASHES``)."""
    # copies of the module's constants (this function also runs in sandbox programs)
    max_int_digits, max_int_hex, max_equal_hashes = 4300, 3575, 8
    # (10 ** 4300).bit_length() is 14285: an int of fewer bits is within the bound, one of more
    # is outside it, and only one of exactly that many needs the power (too dear per call)
    bound_bits = 14285

    def dec(o, depth):
        if depth > 110:
            raise ValueError("value nested too deeply")
        t = type(o)
        if o is None or t is bool or t is int or t is float or t is str:
            return o
        if t is list:
            return [dec(x, depth + 1) for x in o]
        if t is not dict or set(o) != {"t", "v"}:
            raise ValueError(f"not an encoded value: {type(o).__name__}")
        tag, v = o["t"], o["v"]
        if tag in ("tuple", "set", "frozenset", "dict") and type(v) is not list:
            raise ValueError(f"malformed {tag}")
        if tag == "tuple":
            return tuple(dec(x, depth + 1) for x in v)
        if tag in ("set", "frozenset"):
            try:
                items = [dec(x, depth + 1) for x in v]
                spread(items)
                return set(items) if tag == "set" else frozenset(items)
            except TypeError as exc:
                raise ValueError(f"unhashable set member: {exc}") from None
        if tag == "dict":
            pairs = []
            for pair in v:
                if type(pair) is not list or len(pair) != 2:
                    raise ValueError("malformed dict item")
                pairs.append((dec(pair[0], depth + 1), dec(pair[1], depth + 1)))
            try:
                spread([key for key, _ in pairs])
                return dict(pairs)
            except TypeError as exc:
                raise ValueError(f"unhashable dict key: {exc}") from None
        if type(v) is str and tag == "int":
            number = int(v, 16) if len(v) <= max_int_hex else None
            bits = -1 if number is None else number.bit_length()
            if bits < 0 or bits > bound_bits or bits == bound_bits and not (
                    -10 ** max_int_digits < number < 10 ** max_int_digits):
                raise ValueError(f"an int of more than {max_int_digits:,} decimal digits")
            return number
        if type(v) is str and tag == "float" and v in ("nan", "inf", "-inf"):
            return float(v)
        if tag == "complex" and type(v) is list and len(v) == 2 and all(
                type(x) is str and len(x) < 40 for x in v):
            return complex(float(v[0]), float(v[1]))
        if type(v) is str and tag in ("bytes", "bytearray"):
            return (bytes if tag == "bytes" else bytearray).fromhex(v)
        if type(v) is str and tag == "sha256" and on_digest is not None:
            return on_digest(v)
        raise ValueError(f"unknown value tag {tag!r}")

    def spread(keys):
        # Members whose hashes are equal cost a comparison with each other on every insert and
        # look-up (ints that differ by multiples of 2**61 - 1 all hash alike): a set of n such
        # members costs O(n**2) host time. A real set or dict has almost none; refuse more.
        seen = {}
        for key in keys:
            h = hash(key)
            seen[h] = seen.get(h, 0) + 1
            if seen[h] > max_equal_hashes:
                raise ValueError("a set or dict whose members share one hash value")

    try:
        return dec(obj, 0)
    except RecursionError:
        raise ValueError("value nested too deeply") from None


def canonical_json(encoding: Any) -> str:
    """The canonical text of an encoding (what digests and argument checks compare)."""
    return json.dumps(encoding, sort_keys=True)


@dataclass(frozen=True)
class Digest:
    """A large value that crossed the sandbox boundary as the sha256 of its encoding (sets and
    dicts are encoded in a canonical order, so equal values give equal digests)."""

    sha256: str


def decode_value(obj: Any) -> Any:
    """An encoding back to builtin values on the host (sha256 tags become :class:`Digest`)."""
    return plain_decode(obj, on_digest=Digest)


def new_marker() -> str:
    """A fresh marker (prefix + random nonce + ``__``) for one program."""
    return f"{MARKER_PREFIX}{secrets.token_hex(NONCE_HEX // 2)}__"


def marker_nonce(marker: str) -> str:
    """The nonce in a marker: what :func:`relay_program`'s stdin must be."""
    return marker[len(MARKER_PREFIX):-2]


# ---------------------------------------------------------------------------------------------
# the relay program


_RELAY_SOURCE = r'''
def __weft_relay(source, target, calls, digest_above, digest_count, results_cap, keep):
    import json
    import os
    import select
    import sys

    sealed = False
    try:  # non-dumpable: the child can neither ptrace us nor open /proc/<our pid>/fd or mem
        import ctypes
        sealed = ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) == 0
    except Exception:
        pass
    try:  # a stdin that is a named file (E2B): take its name away before the child exists
        path = os.readlink("/proc/self/fd/0")
        if path.startswith("/") and os.path.isfile(path):
            os.unlink(path)
    except OSError:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    res_r, res_w = os.pipe()
    out_r, out_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        __weft_child(source, target, calls, digest_above, digest_count, res_w, out_w)
    os.close(res_w)
    os.close(out_w)
    nonce = b""
    while len(nonce) < 256:  # only now, so the nonce was never in the child's memory
        data = os.read(0, 256)
        if not data:
            break
        nonce += data
    nonce = "".join(c for c in nonce.decode("ascii", "replace") if c in "0123456789abcdef")
    results, out, out_total, overflow, status = bytearray(), bytearray(), 0, False, None
    open_fds = {res_r, out_r}
    for fd in open_fds:
        os.set_blocking(fd, False)

    def pump(fd):
        nonlocal overflow, out_total
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                open_fds.discard(fd)
                return
            if fd == res_r:
                if len(results) + len(data) > results_cap:
                    overflow = True
                else:
                    results.extend(data)
            else:
                out_total += len(data)
                if len(out) < keep:
                    out.extend(data[:keep - len(out)])

    while status is None:
        if open_fds:
            for fd in select.select(list(open_fds), [], [], 0.05)[0]:
                pump(fd)
            done, st = os.waitpid(pid, os.WNOHANG)
        else:
            done, st = os.waitpid(pid, 0)
        if done:
            status = os.waitstatus_to_exitcode(st)
            for fd in list(open_fds):  # what the child wrote before it ended
                pump(fd)
    parsed = []
    for line in bytes(results).split(b"\n"):
        if not line:
            continue
        try:
            parsed.append(json.loads(line))
        except (ValueError, RecursionError, MemoryError):
            parsed.append(["invalid", "an unreadable result"])
    payload = {"results": parsed, "overflow": overflow, "status": status, "sealed": sealed,
               "output": out.decode("utf-8", "replace"), "output_bytes": out_total}
    try:
        text = json.dumps(payload)
    except (ValueError, RecursionError):
        text = json.dumps(dict(payload, results=[], overflow=True))
    view = memoryview(("\n" + __WEFT_PREFIX + nonce + "__" + text + "\n").encode("ascii"))
    while view:
        view = view[os.write(1, view):]


def __weft_child(source, target, calls, digest_above, digest_count, res_w, out_w):
    import os
    import sys
    status = 0
    try:
        null = os.open("/dev/null", os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        import resource
        top = max(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 1024) + 1
        os.closerange(3, res_w)
        os.closerange(res_w + 1, top)

        pending = []

        def flush():  # one write at the end (or per MiB): no wake-up of the parent per call
            view = memoryview("".join(pending).encode("utf-8", "surrogatepass"))
            pending.clear()
            while view:
                view = view[os.write(res_w, view):]

        def send(record, size=[0]):
            import json
            pending.append(json.dumps(record) + "\n")
            size[0] += len(pending[-1])
            if size[0] > 1 << 20:
                size[0] = 0
                flush()

        def describe(exc):
            try:
                return (type(exc).__name__ + ": " + str(exc))[:300]
            except BaseException:
                return type(exc).__name__

        import builtins
        main = type(sys)("__main__")
        main.__builtins__ = builtins
        sys.modules["__main__"] = main
        sys.argv[:] = ["main.py"]
        try:
            exec(compile(source, "main.py", "exec"), main.__dict__)
        except SystemExit:
            send(["exit", "the program exited before its function was called"])
            flush()
            raise
        except BaseException as exc:
            send(["load", describe(exc)])
            flush()
            raise SystemExit(1)
        for i, call in enumerate(calls):
            try:
                args, kwargs = __weft_plain_decode(call)
                if target[0] == "method":
                    fn = getattr(main.__dict__[target[1]](), target[2])
                else:
                    fn = main.__dict__[target[1]]
                record = __weft_plain_encode(fn(*args, **kwargs),
                                             digest_above if i < digest_count else 0)
            except BaseException as exc:
                record = ["error", describe(exc)]
            send(record)
        flush()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        status = 1
    os._exit(status & 0xFF)
'''


def function_source(fn, name: str) -> str:
    return inspect.getsource(fn).replace(f"def {fn.__name__}(", f"def {name}(", 1)


_PRELUDE: list[str] = []
_MODULE_SOURCE: list[str] = []
# The name under which a warm runner preloads the relay module (see relay_module_source).
RELAY_MODULE = "__weft_relay__"


def relay_module_source() -> str:
    """The trusted part of every relay program as a module's source (the codec and the relay
    functions; standard library only, no candidate code, no secret). A warm runner may load it
    once, before it forks any program (``Runner(preload=...)``), and then run relays itself
    (:func:`relay_request`) with no program to send, compile or fork."""
    if not _MODULE_SOURCE:
        _MODULE_SOURCE.append("\n".join([
            function_source(plain_encode, "__weft_plain_encode"),
            function_source(plain_decode, "__weft_plain_decode"),
            f"__WEFT_PREFIX = {MARKER_PREFIX!r}", _RELAY_SOURCE]))
    return _MODULE_SOURCE[0]


def _relay_prelude() -> str:
    """The fixed part of every relay program that carries the relay module itself, built
    once per process. Compiling it costs a few ms per program, more than the rest of a small
    program's run, so it travels compiled (marshal) too and is used that way when the
    sandbox's interpreter has this one's bytecode (same magic number); otherwise the source is
    compiled there."""
    if not _PRELUDE:
        source = relay_module_source()
        code = marshal.dumps(compile(source, "weft-relay", "exec"))
        blob, text = (base64.b64encode(zlib.compress(x, 9)).decode("ascii")
                      for x in (code, source.encode("utf-8")))
        _PRELUDE.append(
            "def __weft_load():\n"
            "    import binascii, zlib\n"
            "    if __import__('_frozen_importlib_external').MAGIC_NUMBER == "
            f"{importlib.util.MAGIC_NUMBER!r}:\n"
            f"        return __import__('marshal').loads(zlib.decompress(binascii.a2b_base64("
            f"{blob!r})))\n"
            f"    return compile(zlib.decompress(binascii.a2b_base64({text!r})), 'weft-relay', "
            f"'exec')\n"
            "exec(__weft_load())\n")
    return _PRELUDE[0]


class EncodedCalls(list):
    """A list of encoded calls (:func:`encode_call`) that keeps its JSON text and each call's
    canonical text, so that a recording's calls, sent to every candidate of a task and checked
    in every replay, are encoded once. Not to be changed after it is made."""

    def __init__(self, calls: list) -> None:
        super().__init__(calls)
        self.json = json.dumps(calls)
        self._canonical: list[str] | None = None

    @property
    def canonical(self) -> list[str]:
        """:func:`canonical_json` of each call, computed on first use."""
        if self._canonical is None:
            self._canonical = [canonical_json(call) for call in self]
        return self._canonical


def relay_request(source: str, target: tuple, calls: list, *, results_cap: int,
                  digest_above: int = 0, digest_count: int | None = None) -> dict:
    """What a warm runner that preloaded the relay module (:data:`RELAY_MODULE`) needs to run
    the same relay as :func:`relay_program` with its fork server as the trusted parent
    (``Runner.run(..., relay=...)``; the run's stdin is the nonce, as for the program): one
    fork less per candidate and no program to compile. Same arguments and the same payload
    line, read with :func:`read_relay`."""
    if target[0] not in ("function", "method"):
        raise ValueError(f"unknown relay target {target!r}")
    return {"module": RELAY_MODULE, "prefix": MARKER_PREFIX, "source": source,
            "target": list(target),
            "calls": calls.json if isinstance(calls, EncodedCalls) else json.dumps(calls),
            "digest_above": int(digest_above),
            "digest_count": len(calls) if digest_count is None else int(digest_count),
            "results_cap": int(results_cap), "keep": OUTPUT_KEEP_BYTES}


def relay_program(source: str, target: tuple, calls: list, *, results_cap: int,
                  digest_above: int = 0, digest_count: int | None = None) -> str:
    """The program that runs ``source`` (the candidate's code) in a forked child and calls
    ``target`` on each call in ``calls`` (encoded ``(args_tuple, kwargs_dict)``, see
    :func:`encode_call`; an :class:`EncodedCalls` is not encoded again). ``target`` is
    ``("function", name)`` or ``("method", class, name)``
    (a fresh instance per call). Results of the first ``digest_count`` calls (all by default)
    longer than ``digest_above`` come back as digests; the child's results past
    ``results_cap`` bytes are dropped (the run then fails). Run it with the marker's nonce as
    stdin (:func:`marker_nonce`) and read it with :func:`read_relay`."""
    if target[0] not in ("function", "method"):
        raise ValueError(f"unknown relay target {target!r}")
    count = len(calls) if digest_count is None else int(digest_count)
    text = calls.json if isinstance(calls, EncodedCalls) else json.dumps(calls)
    call = (f"({source!r}, {tuple(target)!r}, __import__('json').loads({text!r}), "
            f"{int(digest_above)}, {count}, {int(results_cap)}, {OUTPUT_KEEP_BYTES})\n")
    return f"{_relay_prelude()}\n__weft_relay{call}"


def encode_call(args: tuple | list, kwargs: dict | None = None) -> Any:
    """The encoding of one call (what :func:`relay_program` takes)."""
    kind, enc = plain_encode((tuple(args), dict(kwargs or {})))
    if kind != "ok":
        raise ValueError(f"call arguments are not plain data: {enc}")
    return enc


# ---------------------------------------------------------------------------------------------
# reading payloads on the host


NOT_FOUND = object()


def read_payload(stdout: str, marker: str, max_chars: int | None = None) -> tuple[Any, str]:
    """(the JSON printed after the first ``marker``, "") or (``NOT_FOUND``, why). Never raises:
    a missing marker, a payload longer than ``max_chars``, bad JSON, nesting too deep for the
    parser or memory running out are reasons."""
    try:
        at = stdout.find(marker)
        if at < 0:
            return NOT_FOUND, "no result line was printed"
        start = at + len(marker)
        end = stdout.find("\n", start)
        end = len(stdout) if end < 0 else end
        if max_chars is not None and end - start > max_chars:
            return NOT_FOUND, f"the result line is longer than {max_chars} characters"
        return json.loads(stdout[start:end]), ""
    except RecursionError:
        return NOT_FOUND, "the result line is nested too deeply to parse"
    except MemoryError:
        return NOT_FOUND, "the result line is too large to parse"
    except ValueError as exc:
        return NOT_FOUND, f"the result line is not valid JSON ({str(exc)[:100]})"


def find_payload(stdout: str, marker: str, max_chars: int | None = None) -> Any:
    """The JSON payload printed after ``marker`` (its first occurrence), or ``NOT_FOUND``;
    never raises (see :func:`read_payload` for the reasons)."""
    return read_payload(stdout, marker, max_chars)[0]


def safe_repr(value: Any, limit: int = 200) -> str:
    """At most ``limit`` characters of ``repr(value)``; never raises (a value the host cannot
    render is named by its type)."""
    try:
        return repr(value)[:limit]
    except Exception:  # noqa: BLE001 - e.g. an int past the int-to-str digit limit
        return f"<a {type(value).__name__} the host cannot render>"


@dataclass(frozen=True)
class CallResult:
    """One call's outcome: ``kind`` is ``ok`` (``value`` is the decoded result), ``error``
    (the call raised; ``value`` says what), ``bad`` (not plain data), ``missing`` (no result
    came back) or ``invalid`` (an unreadable result)."""

    kind: str
    value: Any = None

    @property
    def ok(self) -> bool:
        return self.kind == "ok"

    def describe(self) -> str:
        if self.kind == "ok":
            return f"returned {safe_repr(self.value, 200)}"
        if self.kind == "error":
            return f"raised {self.value}"
        return str(self.value)


@dataclass(frozen=True)
class RelayOutcome:
    """What came back from a relay program: one :class:`CallResult` per call (``missing`` past
    the point the child stopped), ``problem`` (why the run as a whole failed, else ""), and the
    start of the candidate's own output."""

    results: list[CallResult] = field(default_factory=list)
    problem: str = ""
    output: str = ""


def read_relay(stdout: str, marker: str, n_calls: int, max_chars: int | None = None,
               on_digest=Digest) -> RelayOutcome:
    """Decode a relay program's line; never raises."""
    missing = [CallResult("missing", "no result came back for this call")] * n_calls
    payload, why = read_payload(stdout, marker, max_chars)
    if payload is NOT_FOUND:
        return RelayOutcome(missing, why)
    if not isinstance(payload, dict) or not isinstance(payload.get("results"), list):
        return RelayOutcome(missing, "the result line has the wrong shape")
    output = payload.get("output") if isinstance(payload.get("output"), str) else ""
    raw = payload["results"]
    problem = ""
    if payload.get("sealed") is not True:
        problem = "the sandbox could not make the grading process non-dumpable"
    elif payload.get("overflow"):
        problem = "its results were larger than the grader accepts"
    head = raw[0] if raw else None
    if isinstance(head, list) and len(head) == 2 and head[0] in ("load", "exit"):
        what = head[1] if isinstance(head[1], str) else ""
        problem = problem or (f"the code failed to load: {what}" if head[0] == "load" else what)
        raw = []
    results = [call_result(item, on_digest) for item in raw[:n_calls]]
    if len(results) < n_calls and not problem:
        status = payload.get("status")
        problem = (f"the process running it ended (status {status}) after "
                   f"{len(results)} of {n_calls} calls")
    return RelayOutcome(results + missing[len(results):], problem, output)


def call_result(item: Any, on_digest=Digest) -> CallResult:
    """One encoded ``[kind, value]`` result as a :class:`CallResult`; never raises."""
    if not (isinstance(item, list) and len(item) == 2 and item[0] in ("ok", "error", "bad")):
        return CallResult("invalid", "an unreadable result")
    kind, value = item
    if kind != "ok":
        return CallResult(kind, value if isinstance(value, str) else "?")
    try:
        return CallResult("ok", plain_decode(value, on_digest=on_digest))
    except (ValueError, TypeError, MemoryError) as exc:
        return CallResult("invalid", f"an unreadable result ({str(exc)[:100]})")


# ---------------------------------------------------------------------------------------------
# comparisons


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
    same container types and lengths. Meant for decoded plain data (builtin values only)."""
    if isinstance(out, Digest) or isinstance(exp, Digest):
        return out == exp
    try:
        if out == exp:
            return True
        if not atol and _contains_float(exp):
            atol = 1e-6
        return bool(atol) and _close(out, exp, float(atol))
    except (RecursionError, OverflowError, TypeError, ValueError):
        return False
