"""In-jail driver of weft's sandbox: the first (and only trusted) code the jailed interpreter runs.

The host never imports this module: it reads its source and starts the jailed interpreter with
``python3 -s -P -c <source> MODE ...``, so it must run on the plain system ``python3`` with the
standard library only. In the bubblewrap jail the driver is pid 1. In every mode it first makes
itself non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``, inherited by what it forks), so code it
runs can neither ptrace it nor open its ``/proc/<pid>/mem`` or ``/proc/<pid>/fd/*``: a program
cannot rewrite the warm worker for the programs after it, nor write into its reply channel
Modes:

- ``once CODE_FD REPORT_FD LIMITS``: read a program from CODE_FD, fork, and in the child apply
  the rlimits and run it as ``__main__``; if it raises, write the error (name, value,
  traceback) to REPORT_FD instead of printing it. The exit status follows Python's own rules;
  a death by signal N is passed on as status 128 + N.
- ``serve REQUEST_FD REPLY_FD LIMITS JAILED ROLE``: a kernel answering length-prefixed JSON
  requests on REQUEST_FD with replies on REPLY_FD; each reply echoes the request's ``nonce``.
  ROLE ``session`` runs cells in one persistent namespace (a trailing expression's ``repr``
  is returned as the value, like a notebook; inside the jail, processes a cell started are
  killed when it ends; after a timed-out cell the reply says how many threads are still
  running, ``threads_left``, and the host then replaces the kernel). ROLE ``runner`` (a warm
  "fork server") first forks a *template* that never reads a request, then serves: in the
  jail, each program is cloned from the template into mount, IPC and pid namespaces of its
  own, as the driver's child, under a holder (its pid namespace's init, a clone of the
  template that only sleeps; see ``_fork_isolated``); where that is refused, and outside the
  jail, a Python init is started first and forks the program. Optional argument MOUNTS gives
  the sizes of the fresh ``/tmp`` and ``/dev/shm`` each candidate mounts before dropping every
  capability. So no program inherits a byte of an earlier one's code, input, output or
  results, and the end of its namespace's init ends everything it left. This driver enforces
  the wall-clock limit and answers. The child is forked before its request is read and gets
  its code over a pipe and its stdin in a memfd, so the request's stdin (a grader's secret
  nonce) is never in the program's memory.
  A ``preload`` request (from the host, before any program: trusted code such as the
  grader's relay module) is executed once in the template as a module of the given name, and
  every program forked after it finds that module in ``sys.modules`` already loaded.
  A spawn request with ``relay`` runs a candidate function for the grader with this driver as
  its trusted parent (the role the relay program's own parent plays elsewhere, see
  ``pipelines.sandbox.harness``): the forked child points fds 0, 1 and 2 at ``/dev/null`` and
  a pipe this driver drains, keeps only its results pipe, and runs the preloaded relay
  module's child part; this driver caps the results and the output, and prints the payload
  line with the request's nonce. The nonce (the request's ``stdin``) is never written where
  the child could read it, and the child was forked before the request was read.

``sys.setrecursionlimit`` is capped at ``MAX_RECURSION_LIMIT`` (a departure from plain CPython,
which accepts any limit): a runaway recursion then ends in a RecursionError within seconds,
where an uncapped one fills the address space first and ends, often after the time limit, in
CPython 3.11's "SystemError: error return without exception set".

Not guaranteed: protection against code that deliberately breaks the driver from inside its own
process (a session cell shares the kernel's process: it can find the current nonce in memory
and forge its own cell's reply, or garble the channel; the host then sees a stray or
mismatched reply and replaces the kernel, so later cells are never shifted); joining non-daemon
threads of a runner child that never end; a program that restores the uncapped
``setrecursionlimit`` (its deep recursion is still classified on the host); reading
``/proc/self/environ`` or ``/proc/self/mem`` from a program (non-dumpable processes' own
``/proc`` files belong to root).
"""

# ruff: noqa: BLE001, S110
# (This driver runs untrusted code in its own process: it must survive whatever that code
# raises, and a failed flush or report of a dying program has nowhere better to go.)

import os
import sys

_SELF = "<string>"  # co_filename of this driver when started with -c
_MAX_TRACEBACK = 50_000
_MAX_VALUE = 20_000
_MAX_FRAMES = 100
_HEADER = 10  # ASCII digits of a frame length
_PR_SET_DUMPABLE = 4
# Python frames a program may nest: ``sys.setrecursionlimit`` above this sets this. A runaway
# recursion then ends in a RecursionError within ~1-2 s instead of filling the address space
# (CPython 3.11 then raises "SystemError: error return without exception set", often after
# the wall-clock limit).
MAX_RECURSION_LIMIT = 1_000_000


def _set_limits(spec):
    """Apply rlimits from 'as_bytes,cpu_soft,cpu_hard,fsize,nofile,nproc' (-1 keeps a limit)."""
    import resource as r

    as_b, cpu_soft, cpu_hard, fsize, nofile, nproc = (int(x) for x in spec.split(","))
    wanted = [(r.RLIMIT_CORE, 0, 0)]
    if as_b > 0:
        wanted.append((r.RLIMIT_AS, as_b, as_b))
    if cpu_soft > 0:
        wanted.append((r.RLIMIT_CPU, cpu_soft, cpu_hard if cpu_hard > 0 else r.RLIM_INFINITY))
    if fsize > 0:
        wanted.append((r.RLIMIT_FSIZE, fsize, fsize))
    if nofile > 0:
        wanted.append((r.RLIMIT_NOFILE, nofile, nofile))
    if nproc > 0:
        wanted.append((r.RLIMIT_NPROC, nproc, nproc))
    for res, soft, hard in wanted:
        cur_hard = r.getrlimit(res)[1]
        if cur_hard != r.RLIM_INFINITY:
            hard = cur_hard if hard == r.RLIM_INFINITY else min(hard, cur_hard)
            soft = min(soft, hard) if soft != r.RLIM_INFINITY else hard
        r.setrlimit(res, (soft, hard))


def _read_all(fd):
    chunks = []
    while True:
        data = os.read(fd, 1 << 20)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _move_high(fd):
    """Re-number a protocol fd above the usual range and make it close-on-exec."""
    import fcntl

    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100)
    os.close(fd)
    return new


def _seal_process():
    """Make this process non-dumpable (prctl PR_SET_DUMPABLE 0): then no process without
    CAP_SYS_PTRACE (nothing in the jail has it) can ptrace it, use process_vm_readv/writev on
    it, or open its /proc/<pid>/mem, /proc/<pid>/fd or /proc/<pid>/environ. Forked children
    inherit the flag; an exec'ed program gets its own (dumpable) one. Fails closed: a driver that
    cannot seal itself exits before running anything."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        sys.stderr.write("weft sandbox driver: prctl(PR_SET_DUMPABLE, 0) failed: errno "
                         f"{ctypes.get_errno()}\n")
        os._exit(71)


def _cap_recursion():
    """Cap the recursion limit a program may set (see MAX_RECURSION_LIMIT)."""
    real = sys.setrecursionlimit

    def setrecursionlimit(limit, /):
        real(limit)  # the interpreter's own checks (type, minimum) and errors first
        if limit > MAX_RECURSION_LIMIT:
            real(MAX_RECURSION_LIMIT)

    setrecursionlimit.__doc__ = real.__doc__
    sys.setrecursionlimit = setrecursionlimit


def _trim(te, seen=None):
    """Drop this driver's frames (and, for a SyntaxError, the parser's leading stdlib frames)
    from a TracebackException and from the exceptions chained to it."""
    seen = set() if seen is None else seen
    if te is None or id(te) in seen:
        return
    seen.add(id(te))
    frames = list(te.stack)
    stdlib = os.path.dirname(os.__file__) + os.sep
    syntax = te.exc_type is not None and issubclass(te.exc_type, SyntaxError)
    while frames and (frames[0].filename == _SELF
                      or (syntax and frames[0].filename.startswith(stdlib))):
        frames.pop(0)
    while frames and frames[-1].filename == _SELF:
        frames.pop()
    te.stack.clear()
    te.stack.extend(frames)
    _trim(te.__cause__, seen)
    _trim(te.__context__, seen)


def _describe(exc, filename, source):
    """(name, value, traceback text) of an exception, without this driver's own frames."""
    cls = type(exc)
    name = cls.__qualname__
    if cls.__module__ not in ("builtins", "__main__"):
        name = cls.__module__ + "." + name
    try:
        value = str(exc)
    except BaseException:
        value = "<exception str() failed>"
    text = ""
    try:
        import linecache
        import traceback

        if source is not None:
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        tb, depth = exc.__traceback__, 0
        node = tb
        while node is not None:
            depth += 1
            node = node.tb_next
        prefix = ""
        if depth > _MAX_FRAMES:  # very deep recursion: keep the innermost frames only
            for _ in range(depth - _MAX_FRAMES):
                tb = tb.tb_next
            omitted = depth - _MAX_FRAMES
            prefix = (f"Traceback (most recent call last):\n  ... [{omitted} outer frames "
                      "omitted] ...\n")
        te = traceback.TracebackException(cls, exc, tb)
        _trim(te)
        text = "".join(te.format())
        if prefix and text.startswith("Traceback (most recent call last):\n"):
            text = prefix + text[len("Traceback (most recent call last):\n"):]
    except BaseException:
        text = ""
    if len(text) > _MAX_TRACEBACK:
        half = _MAX_TRACEBACK // 2
        text = text[:half] + "\n... [traceback truncated] ...\n" + text[-half:]
    return name, value, text


def _encode_fields(fields):
    out = []
    for field in fields:
        data = field.encode("utf-8", "backslashreplace")
        out.append(b"%d:" % len(data) + data)
    return b"".join(out)


def _exit_status(code):
    """Python's own mapping of ``SystemExit.code`` to a process exit status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(str(code) + "\n")
    except BaseException:
        pass
    return 1


def _fresh_main(filename):
    import builtins

    main = type(sys)("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    sys.argv[:] = [filename]
    return main


def _run_program(source, filename, report_fd):
    """Run a whole program as __main__; report an uncaught exception to report_fd as an
    ``error`` record (name, value, traceback)."""
    main = _fresh_main(filename)
    _cap_recursion()
    try:
        code = compile(source, filename, "exec")
        exec(code, main.__dict__)  # noqa: S102 - running the program is the point
        return 0
    except SystemExit as exc:
        return _exit_status(exc.code)
    except BaseException as exc:
        try:
            _write_all(report_fd, _encode_fields(("error",) + _describe(exc, filename, source)))
        except BaseException:
            pass
        return 1


def _once(code_fd, report_fd, spec):
    """Seal this process, fork the program from it and wait. The program's parent is then this
    non-dumpable driver (pid 1 of the jail), never a process it could write into."""
    source = _read_all(code_fd).decode("utf-8", "surrogateescape")
    os.close(code_fd)
    report = _move_high(report_fd)
    _seal_process()
    pid = _fork()
    if pid == 0:  # child: becomes the program
        status = 70
        try:
            _set_limits(spec)
            status = _run_program(source, "main.py", report)
            try:  # tells the host this status is the program's own, not a signal's
                _write_all(report, _encode_fields(("exit", str(status))))
            except BaseException:
                pass
            _finish_child()
        finally:
            os._exit(status)
    os.close(report)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    # A death by signal N is reported the way bubblewrap reports it: exit status 128 + N.
    os._exit(code if code >= 0 else 128 - code)


# ---------------------------------------------------------------------------------------------
# serve mode: framing


def _recv(fd):
    import json

    head = b""
    while len(head) < _HEADER:
        chunk = os.read(fd, _HEADER - len(head))
        if not chunk:
            return None
        head += chunk
    size = int(head)
    body = bytearray()
    while len(body) < size:
        chunk = os.read(fd, min(size - len(body), 1 << 20))
        if not chunk:
            return None
        body += chunk
    return json.loads(body.decode("utf-8"))


_OWNER = []  # pid of the process allowed to answer the host (set when serving starts)


def _send(fd, message):
    import json

    if _OWNER and os.getpid() != _OWNER[0]:
        # A process forked by user code has unwound into the driver: it must never speak
        # for the kernel.
        os._exit(0)

    body = json.dumps(message).encode("utf-8", "surrogatepass")
    _write_all(fd, b"%010d" % len(body) + body)


# ---------------------------------------------------------------------------------------------
# serve mode: session kernel


class _CellTimeout(BaseException):
    pass


class _CellCpuLimit(BaseException):
    pass


class _Session:
    def __init__(self):
        import builtins
        import fcntl
        import io
        import signal

        self.io = io
        self.signal = signal
        self.count = 0
        self.in_cell = False
        self.main = type(sys)("__main__")
        self.main.__builtins__ = builtins
        sys.modules["__main__"] = self.main
        sys.argv[:] = [""]
        _cap_recursion()
        self.saved = {1: fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 100),
                      2: fcntl.fcntl(2, fcntl.F_DUPFD_CLOEXEC, 100)}
        self.streams = {1: sys.stdout, 2: sys.stderr}

    def _on_alarm(self, signum, frame):
        if self.in_cell:
            raise _CellTimeout()

    def _on_xcpu(self, signum, frame):
        if self.in_cell:
            raise _CellCpuLimit()

    def _arm(self, timeout_s, cpu_s):
        import resource as r

        sig = self.signal
        sig.signal(sig.SIGALRM, self._on_alarm)
        sig.signal(sig.SIGXCPU, self._on_xcpu)
        sig.signal(sig.SIGINT, sig.default_int_handler)
        if cpu_s > 0:
            use = r.getrusage(r.RUSAGE_SELF)
            used = use.ru_utime + use.ru_stime + cpu_s
            soft = int(used) + (1 if used > int(used) else 0)  # whole seconds, rounded up
            try:
                r.setrlimit(r.RLIMIT_CPU, (soft, r.getrlimit(r.RLIMIT_CPU)[1]))
            except (ValueError, OSError):
                pass
        if timeout_s > 0:
            sig.setitimer(sig.ITIMER_REAL, timeout_s)

    def _disarm(self):
        import resource as r

        self.signal.setitimer(self.signal.ITIMER_REAL, 0)
        try:
            hard = r.getrlimit(r.RLIMIT_CPU)[1]
            r.setrlimit(r.RLIMIT_CPU, (hard, hard))
        except (ValueError, OSError):
            pass

    def _restore_stdio(self):
        for stream in (sys.stdout, sys.stderr, self.streams[1], self.streams[2]):
            try:
                stream.flush()
            except BaseException:
                pass
        for fd in (1, 2):
            os.dup2(self.saved[fd], fd)
            if getattr(self.streams[fd], "closed", True):
                raw = self.io.FileIO(fd, "w", closefd=False)
                self.streams[fd] = self.io.TextIOWrapper(
                    self.io.BufferedWriter(raw), encoding="utf-8", errors="backslashreplace",
                    line_buffering=False)
        sys.stdout, sys.stderr = self.streams[1], self.streams[2]

    def execute(self, req):
        import ast
        import linecache

        self.count += 1
        filename = f"<cell-{self.count}>"
        source = req["code"]
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        reply = {"error": None, "value": None, "flag": None}
        try:
            tree = ast.parse(source, filename)
            tail = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                tail = ast.Expression(tree.body.pop().value)
            body = compile(tree, filename, "exec")
            tail_code = compile(tail, filename, "eval") if tail is not None else None
        except BaseException as exc:
            reply["error"] = _describe(exc, filename, source)
            return reply
        timeout_s, cpu_s = float(req.get("timeout_s", 0)), int(req.get("cpu_s", 0))
        try:
            try:
                self._arm(timeout_s, cpu_s)
                self.in_cell = True
                exec(body, self.main.__dict__)  # noqa: S102 - running the cell is the point
                if tail_code is not None:
                    value = eval(tail_code, self.main.__dict__)
                    if value is not None:
                        text = repr(value)
                        if len(text) > _MAX_VALUE:
                            text = text[:_MAX_VALUE] + "... [value truncated]"
                        reply["value"] = text
            finally:
                self.in_cell = False
                self._disarm()
        except _CellTimeout as exc:
            reply["flag"] = "wall_time"
            reply["error"] = self._limit_error(
                exc, f"the cell exceeded its wall-clock limit of {timeout_s:g} s", source)
        except _CellCpuLimit as exc:
            reply["flag"] = "cpu_time"
            reply["error"] = self._limit_error(
                exc, f"the cell exceeded its CPU time limit of {cpu_s} s", source)
        except SystemExit as exc:
            reply["error"] = ("SystemExit", "" if exc.code is None else str(exc.code), "")
        except BaseException as exc:
            reply["error"] = _describe(exc, filename, source)
        finally:
            self._restore_stdio()
        return reply

    def _limit_error(self, exc, message, source):
        _, _, text = _describe(exc, f"<cell-{self.count}>", source)
        lines = text.rstrip("\n").splitlines()
        if lines:
            lines[-1] = "TimeoutError: " + message
        return ("TimeoutError", message, "\n".join(lines) + "\n" if lines else "")


def _kill_others():
    """Kill every process of the jail except this kernel and the jail's init (pid 1), and
    reap the kernel's own children. Only inside the jail's pid namespace."""
    import signal

    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        return
    try:
        while True:
            os.waitpid(-1, 0)
    except ChildProcessError:
        pass


def _threads_left(wait_s=0.2):
    """How many threads besides this one still run in the kernel (waiting up to ``wait_s`` for
    ones that are on their way out). Counted from /proc, so threads started from C count too."""
    import time

    end = time.monotonic() + wait_s
    while True:
        try:
            extra = len(os.listdir("/proc/self/task")) - 1
        except OSError:
            import threading

            extra = threading.active_count() - 1
        if extra <= 0 or time.monotonic() >= end:
            return max(extra, 0)
        time.sleep(0.01)


def _serve_session(rfd, wfd, jailed):
    kernel = _Session()
    _send(wfd, {"ready": True, "pid": os.getpid()})
    while True:
        req = _recv(rfd)
        if req is None:
            return 0
        nonce = req.pop("nonce", None)
        op = req.get("op")
        if op == "exec":
            reply = kernel.execute(req)
            if os.getpid() != _OWNER[0]:
                os._exit(0)  # a fork of user code unwound to here
            if jailed:
                _kill_others()
            if reply.get("flag"):
                reply["threads_left"] = _threads_left()
        else:
            reply = {"error": ("ProtocolError", f"unknown op {op!r}", "")}
        reply["nonce"] = nonce
        _send(wfd, reply)


# ---------------------------------------------------------------------------------------------
# serve mode: runner (fork server)


def _decode_fields(data):
    fields, i = [], 0
    while i < len(data):
        colon = data.index(b":", i)
        size = int(data[i:colon])
        fields.append(data[colon + 1:colon + 1 + size].decode("utf-8", "replace"))
        i = colon + 1 + size
    return fields


def _reap_jail(keep):
    """As pid 1 of a jail whose candidates share its pid namespace: kill every process but this
    driver and ``keep`` (the template), reap, repeat until none is left."""
    import signal
    import time

    spare = {"1", str(keep)}
    for _ in range(400):
        others = [int(n) for n in os.listdir("/proc") if n.isdigit() and n not in spare]
        if not others:
            return
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        time.sleep(0.005)


def _reap_group(pid):
    import signal

    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _wipe(paths):
    import shutil
    import stat

    def fix_and_retry(func, path, _exc):
        try:
            os.chmod(os.path.dirname(path), stat.S_IRWXU)
            os.chmod(path, stat.S_IRWXU)
            func(path)
        except OSError:
            pass

    for top in paths:
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, onerror=fix_and_retry)
                else:
                    os.unlink(entry.path)
            except OSError:
                pass


def _finish_child():
    """What interpreter shutdown would do: join threads, run atexit, flush."""
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException:
            pass
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


# ---------------------------------------------------------------------------------------------
# serve mode: runner. A template process that never reads a request forks every candidate; in
# the bubblewrap jail each candidate gets namespaces of its own (mount, IPC, pid) and a fresh
# /tmp and /dev/shm, all discarded with it.

_CLONE_NEWNS = 0x00020000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWPID = 0x20000000
_CLONE_PARENT = 0x00008000
_CLONE_VM, _CLONE_FILES = 0x00000100, 0x00000400
_SIGCHLD = 17
_EAGAIN, _EINVAL = 11, 22
_TEMPLATE = []  # a pidfd of the runner's template (in the driver)
_OWN_PID_NS = []  # in a template in the runner's own pid namespace: a descriptor of it
_HOLDER = None  # what isolated candidates' holders need (``_prepare_holders``, in the driver)
_HOLDER_STACK = 1 << 16
# the clone system call's number where its first argument is the flags and, with every other
# argument 0, it returns twice like fork (elsewhere the template uses a middle process)
_CLONE_NUMBER = {"x86_64": 56, "aarch64": 220}
_CLONE_USABLE = [True] if os.uname().machine in _CLONE_NUMBER else []
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x2, 0x4, 0x8
_MS_REC, _MS_PRIVATE = 0x4000, 1 << 18
_CAP_SYS_ADMIN = 21
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS, _PR_GET_NO_NEW_PRIVS = 38, 39
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAPABILITY_VERSION_3 = 0x20080522
_CAP_FIELDS = ("CapInh", "CapPrm", "CapEff", "CapAmb")
# fds a candidate is handed, in this order (the template passes them on, then closes its own)
_GIVEN = ("job_r", "rep_w", "res_w", "out_w", "in_fd", "st_w")
_LIBC = []
_CLONE_CALL = []  # what ``_clone`` calls, looked up once
_CAP_STRUCTS = []


def _libc():
    if not _LIBC:
        import ctypes

        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def _status_masks(fields):
    """Hex fields of this process's /proc status (capability sets, signal masks), by name."""
    masks = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            name, _, value = line.partition(":")
            if name in fields:
                masks[name] = int(value.strip(), 16)
    return masks


def _has_admin():
    try:
        return bool(_status_masks(_CAP_FIELDS).get("CapEff", 0) >> _CAP_SYS_ADMIN & 1)
    except (OSError, ValueError):
        return False


def _cap_structs():
    """capset's header and data types (made once; a template makes them before it forks, so
    no candidate builds ctypes classes)."""
    if not _CAP_STRUCTS:
        import ctypes

        class Header(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        class Data(ctypes.Structure):
            _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                        ("inheritable", ctypes.c_uint32)]

        _CAP_STRUCTS.extend((Header, Data * 2))
    return _CAP_STRUCTS


def _drop_caps():
    """Give up every capability for good (ambient, effective, permitted, inheritable) and set
    no_new_privs, so no later exec can regain one. Fails closed: exits when any set is left."""
    import ctypes

    header, data = _cap_structs()
    libc = _libc()
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    libc.capset(ctypes.byref(header(_CAPABILITY_VERSION_3, 0)), data())
    # checked with capget (reading /proc/self/status costs a candidate ~0.3 ms): the kernel
    # keeps the ambient set within permitted and inheritable, so with both empty it is empty
    now = data()
    left = (libc.capget(ctypes.byref(header(_CAPABILITY_VERSION_3, 0)), now) != 0
            or any(half.effective or half.permitted or half.inheritable for half in now)
            or libc.prctl(_PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1)
    if left:
        sys.stderr.write("weft sandbox driver: could not drop capabilities\n")
        os._exit(71)


def _mount(source, target, fstype, flags, data):
    import ctypes

    if _libc().mount(source, target, fstype, flags, data) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {target!r}: {os.strerror(errno)}")


def _fresh_mounts(mounts):
    """In a new mount namespace (and, in it, the candidate's pid namespace): private
    propagation, a fresh size- and inode-limited tmpfs on /tmp and on /dev/shm, a /proc of the
    candidate's own pid namespace (where the kernel allows it), the work dir entered anew; then
    every capability dropped."""
    disk_b, disk_files, shm_b, shm_files = mounts
    _mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None)
    flags = _MS_NOSUID | _MS_NODEV
    _mount(b"weft-tmp", b"/tmp", b"tmpfs", flags,
           b"size=%d,nr_inodes=%d,mode=0700" % (disk_b, disk_files))
    _mount(b"weft-shm", b"/dev/shm", b"tmpfs", flags,
           b"size=%d,nr_inodes=%d,mode=0700" % (shm_b, shm_files))
    try:
        _mount(b"proc", b"/proc", b"proc", flags | _MS_NOEXEC, None)
    except OSError:
        pass  # the jail's /proc stays: it shows the outer processes, all non-dumpable
    os.chdir("/tmp")
    _drop_caps()


def _fork():
    """``os.fork`` for the driver's own processes, retried for a moment on EAGAIN: the process
    limit counts every process of the jail's user (in the plain-subprocess fallback, every
    sandbox of that user on the host), so a burst elsewhere can make one fork fail briefly."""
    import time

    for attempt in range(10):
        try:
            return os.fork()
        except BlockingIOError:
            if attempt == 9:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def _template(ctl, isolated, mounts):
    """The process every candidate is forked from. It is forked from the driver before the
    driver reads any request, and it reads none itself: it gets only trusted preloads and, per
    candidate, a set of descriptors. So no candidate inherits a byte of an earlier candidate's
    program, stdin, output or results (the driver that handled them is never forked again)."""
    import socket

    # the interpreter builds its AST types at the first compile() (about 1 ms): here, once,
    # instead of in every candidate that compiles its program
    compile("pass", "<template>", "exec")
    # the atexit module, which every candidate's end uses (``_finish_child``): made in each
    # candidate, it cost about 70 copied pages of the template's memory
    import atexit  # noqa: F401
    if isolated:  # what every candidate's set-up calls, loaded here once instead of per fork
        libc = _libc()
        for name in ("mount", "prctl", "capset", "capget"):  # ctypes looks a function up and
            getattr(libc, name)  # builds its caller at the first use: ~50 us each in a fork
        _cap_structs()
        if _HOLDER is not None:
            _OWN_PID_NS.append(os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC))
    while True:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(ctl, 4096, len(_GIVEN))
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)
        if msg[:1] == b"P" and len(fds) == 1:
            source = os.pread(fds[0], os.fstat(fds[0]).st_size, 0)
            os.close(fds[0])
            reply = _preload(msg[1:].decode("utf-8"), source.decode("utf-8"))
            _check_holders()
            error = reply.get("error")
            ctl.send(("E" + error[0] + "\0" + error[1]).encode("utf-8", "replace")[:4000]
                     if error else b"ok")
        elif msg[:1] == b"F" and len(fds) == len(_GIVEN):
            started = _fork_candidate(ctl, fds, isolated, mounts)
            for fd in fds:
                os.close(fd)
            ctl.send(b"%d %d" % started if started else b"E")
        else:
            for fd in fds:
                os.close(fd)
            ctl.send(b"E")


def _fork_candidate(ctl, fds, isolated, mounts):
    """Start a candidate as the driver's child (the driver is the jail's pid 1, or a subreaper
    in the fallback), which waits for it. In the jail (``isolated``) the candidate gets mount,
    IPC and pid namespaces of its own. Where the runner could make a pid namespace of its own
    (``_runner_pid_namespace``), a holder is the candidate's init and the program is cloned
    straight into its namespace (``_fork_isolated``). Elsewhere a Python init starts first and
    forks the program: cloned with ``CLONE_PARENT`` (and the namespaces) where the kernel and
    the machine allow it, else through a short-lived middle process that unshares the
    namespaces, forks the init and exits at once, so the init is re-parented to the driver.
    Returns ``(program or init pid, holder pid or 0)``, or None when the candidate could not be
    started (the runner is then replaced)."""
    global _HOLDER
    if isolated and _HOLDER is not None:
        started = _fork_isolated(ctl, fds, mounts)
        if started != "refused":
            return started
        _HOLDER = None  # (say, a preload started a thread): Python inits from now on
    if _CLONE_USABLE:
        flags = _CLONE_PARENT | (_CLONE_NEWNS | _CLONE_NEWIPC | _CLONE_NEWPID if isolated else 0)
        pid = _clone(flags)
        if pid == 0:
            try:
                ctl.close()
                for fd in _OWN_PID_NS:
                    os.close(fd)
            finally:
                _candidate_init(dict(zip(_GIVEN, fds)), isolated, mounts)  # never returns
        if pid > 0:
            return (_driver_pid(pid) if _OWN_PID_NS else pid), 0
        if pid == -_EAGAIN or _OWN_PID_NS:  # the process limit, for a moment (or, in the
            return None  # runner's own namespace, no middle process: its orphans go astray)
        _CLONE_USABLE.clear()  # refused here (a seccomp filter, an old kernel): use the middle
    r, w = os.pipe()
    middle = _fork()
    if middle == 0:
        status = 72
        try:
            os.close(r)
            ctl.close()
            if isolated and _libc().unshare(_CLONE_NEWNS | _CLONE_NEWIPC | _CLONE_NEWPID):
                os._exit(72)
            pid = _fork()
            if pid == 0:
                os.close(w)
                _candidate_init(dict(zip(_GIVEN, fds)), isolated, mounts)  # never returns
            _write_all(w, b"%d" % pid)
            status = 0
        finally:
            os._exit(status)
    os.close(w)
    data = _read_all(r)
    os.close(r)
    os.waitpid(middle, 0)
    return (int(data), 0) if data.isdigit() else None


def _fork_isolated(ctl, fds, mounts):
    """Start an isolated candidate with no Python process but its program. The template
    unshares a pid namespace for its next children, clones a *holder* into it (pid 1: it
    shares the template's memory and descriptor table and sleeps in ``pause()`` with every
    signal blocked, so it costs no page-table copy and runs no code), clones the program into
    it (pid 2) with mount and IPC namespaces of its own, and points its children back at its
    own pid namespace. Both are the driver's children: the driver waits for the program and
    then kills the holder, and the kernel ends every process the candidate left as the
    namespace's init goes. The holder is non-dumpable (it shares the template's memory, which
    is), so a program without capabilities can neither ptrace it nor open its ``/proc`` files;
    from inside its namespace no signal reaches it (the kernel drops an init's default-action
    signals sent from there, and it blocks every other). Returns ``(program, holder)``, None
    when it could not be started (the kernel refused a step, or the process limit was hit
    for a moment), or "refused" when no holder can be made here."""
    import ctypes
    import signal

    libc = _libc()
    if libc.unshare(_CLONE_NEWPID) != 0:
        return "refused"
    holder = pid = 0
    try:
        holder = _start_holder(ctypes, signal, libc)
        if holder > 0:
            pid = _clone(_CLONE_PARENT | _CLONE_NEWNS | _CLONE_NEWIPC)
            if pid == 0:
                try:
                    ctl.close()
                    os.close(_OWN_PID_NS[0])
                finally:
                    _isolated_program(dict(zip(_GIVEN, fds)), mounts)  # never returns
        # the next fork must not land in this namespace: a template that cannot return its
        # children to its own pid namespace stops (the runner is then replaced)
        if libc.setns(_OWN_PID_NS[0], _CLONE_NEWPID) != 0:
            raise OSError(ctypes.get_errno(), "setns back to the runner's pid namespace")
        if holder > 0 and pid > 0:
            return _driver_pid(pid), _driver_pid(holder)
    except BaseException:
        for started in (pid, holder):  # the holder holds this template's descriptors
            if started > 0:
                os.kill(started, signal.SIGKILL)
        os._exit(74)
    if holder > 0:
        os.kill(holder, signal.SIGKILL)  # its namespace's program never started
    return None if holder > 0 or holder == -_EAGAIN else "refused"


def _driver_pid(pid):
    """The pid the driver knows the template's child ``pid`` by: the template lives in a pid
    namespace of its own (see ``_runner_pid_namespace``), the driver in the jail's, whose
    numbers the jail's ``/proc`` gives (a pidfd's fdinfo)."""
    fd = os.pidfd_open(pid)
    try:
        info = os.open(b"/proc/self/fdinfo/%d" % fd, os.O_RDONLY)
        try:
            text = os.read(info, 1024)  # (about 100 bytes: pos, flags, mnt_id, ino, Pid, NSpid)
        finally:
            os.close(info)
    finally:
        os.close(fd)
    at = text.find(b"\nPid:")
    if at < 0:
        raise OSError("no Pid line in a pidfd's fdinfo")
    return int(text[at + 5:text.index(b"\n", at + 5)])


def _start_holder(ctypes, signal, libc):
    """``clone(CLONE_VM | CLONE_FILES | CLONE_PARENT)`` onto glibc's ``pause``, on a stack of
    its own in the template's memory, with every signal blocked (the holder inherits the
    mask; the template's is restored at once). ``pause`` is a bare system call in a
    single-threaded process (the template is one): it touches no thread state the template
    owns. Returns the holder's pid or minus errno (EAGAIN is retried for a moment, as in
    ``_fork``)."""
    if not _HOLDER["single"]():
        return -_EINVAL
    full, old = _HOLDER["masks"]  # (libc's own calls: ``signal``'s wrap every signal in enums)
    block, setmask = int(signal.SIG_BLOCK), int(signal.SIG_SETMASK)
    for attempt in range(10):
        if libc.pthread_sigmask(block, full, old) != 0:
            return -_EINVAL
        try:
            holder = libc.clone(_HOLDER["pause"], _HOLDER["top"],
                                _CLONE_VM | _CLONE_FILES | _CLONE_PARENT | _SIGCHLD, None)
            errno = ctypes.get_errno()
        finally:
            libc.pthread_sigmask(setmask, old, None)
        if holder > 0 or errno != _EAGAIN or attempt == 9:
            return holder if holder > 0 else -errno
        import time

        time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def _runner_pid_namespace():
    """Before the template is forked: make the pid namespace it will live in, owned by the
    jail's innermost user namespace. bubblewrap's own pid namespace belongs to an outer one
    (``--disable-userns`` nests a user namespace), where the template's CAP_SYS_ADMIN does not
    count, so ``setns`` back into it is refused; into this one it is allowed, and that is how
    the template points its children back at its own namespace after each candidate. The
    namespace's init is a forked process of the driver's that closes every descriptor and
    sleeps with every signal blocked until the jail ends. Leaves ``_HOLDER`` None (candidates
    then start with a Python init of their own) where any of it is refused."""
    global _HOLDER
    import signal

    _prepare_holders()
    if _HOLDER is None or _libc().unshare(_CLONE_NEWPID) != 0:
        _HOLDER = None
        return
    if _fork() == 0:
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
            os.closerange(0, os.sysconf("SC_OPEN_MAX"))
            while True:
                signal.pause()
        finally:
            os._exit(0)


def _check_holders():
    """Give up holders (Python inits from then on) when this process handles a signal a holder
    could not block: glibc keeps its two internal signals (32 and 33, which it handles only
    once threads or cancellation were used) out of any mask, and a holder running a handler
    would run it on the template's memory. Read once before the template is forked and after
    each preload."""
    global _HOLDER
    if _HOLDER is None:
        return
    try:
        caught = _status_masks(("SigCgt",)).get("SigCgt", -1)
    except (OSError, ValueError):
        caught = -1
    if caught < 0 or caught >> 31 & 0b11:
        _HOLDER = None


def _prepare_holders():
    """What ``_fork_isolated`` needs, made once before the template is forked: glibc's
    ``clone`` and ``pause``, the holders' stack (holders only ever sit in ``pause``, so they
    can share it) and a check that the caller is single-threaded. The template adds its own
    pid namespace (``_OWN_PID_NS``)."""
    global _HOLDER
    import ctypes

    libc = _libc()
    try:
        clone, pause = libc.clone, libc.pause
    except AttributeError:
        return
    try:
        flag = ctypes.c_bool.in_dll(libc, "__libc_single_threaded")

        def single():
            return flag.value
    except ValueError:  # glibc before 2.32 keeps the flag per thread; count the threads

        def single():
            return len(os.listdir("/proc/self/task")) == 1
    clone.restype = ctypes.c_int
    clone.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)
    stack = ctypes.create_string_buffer(_HOLDER_STACK)
    top = (ctypes.addressof(stack) + _HOLDER_STACK - 64) & ~15
    masks = (ctypes.create_string_buffer(128), ctypes.create_string_buffer(128))  # sigset_t
    if libc.sigfillset(masks[0]) != 0:
        return
    _HOLDER = {"stack": stack, "top": top, "pause": ctypes.cast(pause, ctypes.c_void_p),
               "single": single, "masks": masks}
    _check_holders()


def _isolated_program(fds, mounts):
    """The program process of an isolated candidate (pid 2 of its pid namespace, in mount
    and IPC namespaces of its own): its fresh mounts, its capabilities dropped, then
    ``_program``."""
    status = 73
    try:
        os.close(fds.pop("st_w"))  # its wait status reaches the driver directly
        # a session of its own: ``kill(0, ...)`` (its parent, the driver, is pid 0 to it) and
        # ``killpg(getpgrp(), ...)`` then reach only the candidate's own processes
        os.setsid()
        _fresh_mounts(mounts)
        try:  # the first to go when short
            fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
            try:
                os.write(fd, b"1000")
            finally:
                os.close(fd)
        except OSError:
            pass
        _program(fds)  # never returns
    finally:
        os._exit(status)


def _clone(flags):
    """``fork()`` with extra clone flags, for a single-threaded caller (the template): the raw
    ``clone`` system call wrapped in the interpreter's own fork hooks, as ``os.fork`` wraps
    ``fork``. The child's exit is signalled with SIGCHLD (to the caller's parent under
    CLONE_PARENT), so it is waited for like any forked child. Returns 0 in the child, the
    child's pid in the caller, or minus errno when the kernel refused (EAGAIN is retried for a
    moment, as in ``_fork``)."""
    if not _CLONE_CALL:  # made once (a template clones per candidate)
        import ctypes

        api = ctypes.pythonapi
        _CLONE_CALL.extend((api.PyOS_BeforeFork, api.PyOS_AfterFork_Child,
                            api.PyOS_AfterFork_Parent, _libc().syscall,
                            ctypes.c_long(_CLONE_NUMBER[os.uname().machine]), ctypes.c_ulong,
                            ctypes.get_errno))
    before, child, parent, syscall, number, c_ulong, get_errno = _CLONE_CALL
    for attempt in range(10):
        before()
        pid = syscall(number, c_ulong(flags | _SIGCHLD), None, None, None, None)
        if pid == 0:
            child()
            return 0
        errno = get_errno()
        parent()
        if pid > 0:
            return pid
        if errno != 11 or attempt == 9:  # EAGAIN: the process limit, for a moment
            return -errno
        import time

        time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def _candidate_init(fds, isolated, mounts):
    """A candidate's Python init, where it has no holder (``_fork_candidate``): in the jail,
    pid 1 of the candidate's own pid namespace (when it exits the kernel kills everything the
    candidate left), holding its own mounts and IPC namespace. It forks the program, reaps
    whatever is re-parented to it, and writes the program's wait status to the driver on a
    pipe the program does not hold."""
    status = 73
    try:
        if isolated:
            os.setsid()  # (see ``_isolated_program``)
            _fresh_mounts(mounts)
        else:
            os.setpgid(0, 0)
        try:
            with open("/proc/self/oom_score_adj", "w") as fh:  # the first to go when short
                fh.write("1000")
        except OSError:
            pass
        pid = _fork()
        if pid == 0:
            os.close(fds.pop("st_w"))
            _program(fds)  # never returns
        for name in ("job_r", "rep_w", "res_w", "out_w", "in_fd"):
            os.close(fds[name])
        waited = None
        while waited is None:
            try:
                done, code = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            if done == pid:
                waited = code
        if waited is not None:
            _write_all(fds["st_w"], b"%d" % waited)
        status = 0
    finally:
        os._exit(status)


def _program(fds):
    """The candidate's program process: waits for its job (code and limits) on a pipe; its
    stdin arrives in a memfd it already holds."""
    import _signal

    status = 70
    try:
        for fd in fds.values():
            os.set_inheritable(fd, False)
        data = _read_all(fds["job_r"])
        os.close(fds["job_r"])
        if not data:  # the runner is shutting down
            os._exit(0)
        import marshal

        job = marshal.loads(data)
        relay = job.get("relay")
        if relay is None:
            os.close(fds["res_w"])
            os.close(fds["out_w"])
        in_fd = fds["in_fd"]
        if not job["stdin"]:
            os.close(in_fd)
            in_fd = os.open("/dev/null", os.O_RDONLY)
        os.dup2(in_fd, 0)
        os.close(in_fd)
        # (``_signal``'s own functions: ``signal.signal`` wraps each call in enum look-ups)
        for signum in (_signal.SIGALRM, _signal.SIGXCPU, _signal.SIGTERM, _signal.SIGCHLD):
            _signal.signal(signum, _signal.SIG_DFL)
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)
        _set_limits(job["limits"])
        if relay is not None:
            _relay_child(relay, fds["rep_w"], fds["res_w"], fds["out_w"])  # never returns
        status = _run_program(job["code"], "main.py", fds["rep_w"])
        _finish_child()
    finally:
        os._exit(status)


def _ctl_recv(ctl, size):
    """The template's answer on ``ctl``, or b"" once the template is gone (an isolated
    candidate's holder shares the template's descriptors, its end of ``ctl`` included, so
    the socket alone would not say so until the holder is killed)."""
    import select

    while True:
        ready = select.select([ctl, *_TEMPLATE], [], [])[0]
        if ctl in ready:
            return ctl.recv(size)
        if ready:
            return b""


def _prefork(ctl):
    """Have the template fork the next candidate before its request is read (its pipes are
    made here and handed over; the driver keeps the other ends)."""
    import socket

    job_r, job_w = os.pipe()
    rep_r, rep_w = os.pipe()
    res_r, res_w = os.pipe()  # a relay's results and output (unused by a plain program)
    out_r, out_w = os.pipe()
    st_r, st_w = os.pipe()
    in_fd = os.memfd_create("stdin", 0)
    given = (job_r, rep_w, res_w, out_w, in_fd, st_w)
    try:
        socket.send_fds(ctl, [b"F"], list(given))
        answer = _ctl_recv(ctl, 64)
    except OSError:
        answer = b""
    for fd in (job_r, rep_w, res_w, out_w, st_w):
        os.close(fd)
    pids = answer.split(b" ")
    if len(pids) != 2 or not all(pid.isdigit() for pid in pids):
        sys.stderr.write("weft sandbox driver: the runner's template is gone\n")
        os._exit(75)  # the host sees the runner die and starts a new one
    return {"pid": int(pids[0]), "holder": int(pids[1]), "job_w": job_w, "rep_r": rep_r, "in_fd": in_fd,
            "res_r": res_r, "out_r": out_r, "st_r": st_r}


def _relay_child(relay, rep_w, res_w, out_w):
    """The forked child of a relay request: the preloaded relay module's child part (fds 0, 1
    and 2 replaced, every other fd but the results pipe closed, the candidate's code run and
    its function called on each call; it ends the process)."""
    os.close(rep_w)
    module = sys.modules.get(relay["module"])
    if module is None:  # the host sends relay requests only to runners it preloaded
        os._exit(70)
    calls = relay["calls"]
    if type(calls) is not list:  # (the driver could not decode them: neither can this)
        import json

        calls = json.loads(calls)
    _cap_recursion()
    module.__weft_child(relay["source"], relay["target"], calls, relay["digest_above"],
                        relay["digest_count"], res_w, out_w)
    os._exit(70)


def _gather(relay, zygote, pidfd, timeout_s):
    """Drain a relay child's results (at most ``results_cap`` bytes, else ``overflow``) and
    output (the first ``keep`` bytes kept, all counted) until it exits or ``timeout_s`` ends.
    Returns (timed_out, state)."""
    import select
    import time

    state = {"results": bytearray(), "out": bytearray(), "out_total": 0, "overflow": False}
    fds = {zygote["res_r"], zygote["out_r"]}
    for fd in fds:
        os.set_blocking(fd, False)
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return True, state
        ready = select.select([pidfd, *fds], [], [], left)[0]
        for fd in ready:
            if fd != pidfd:
                _pump(fd, zygote, relay, state, fds)
        if pidfd in ready:
            return False, state


def _pump(fd, zygote, relay, state, fds):
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            fds.discard(fd)
            return
        if fd == zygote["res_r"]:
            if len(state["results"]) + len(data) > relay["results_cap"]:
                state["overflow"] = True
            else:
                state["results"].extend(data)
        else:
            state["out_total"] += len(data)
            keep = relay["keep"]
            if len(state["out"]) < keep:
                state["out"].extend(data[:keep - len(state["out"])])


def _print_relay(relay, state, status, nonce):
    """The payload line of a relay request, on this driver's stdout (what the host reads as
    the run's output): the same line a relay program's parent prints."""
    import json

    parsed = []
    for line in bytes(state["results"]).split(b"\n"):
        if not line:
            continue
        try:
            parsed.append(json.loads(line))
        except (ValueError, RecursionError, MemoryError):
            parsed.append(["invalid", "an unreadable result"])
    payload = {"results": parsed, "overflow": state["overflow"], "status": status,
               "sealed": True, "output": state["out"].decode("utf-8", "replace"),
               "output_bytes": state["out_total"]}
    try:
        text = json.dumps(payload)
    except (ValueError, RecursionError):
        text = json.dumps(dict(payload, results=[], overflow=True))
    nonce = "".join(c for c in str(nonce or "")[:256] if c in "0123456789abcdef")
    _write_all(1, ("\n" + relay["prefix"] + nonce + "__" + text + "\n").encode("ascii"))


def _drop(zygote):
    """End a pre-forked candidate that got no job."""
    for fd in (zygote["job_w"], zygote["rep_r"], zygote["in_fd"], zygote["res_r"],
               zygote["out_r"], zygote["st_r"]):
        os.close(fd)
    try:
        os.waitpid(zygote["pid"], 0)
    except ChildProcessError:
        pass
    _end_holder(zygote)


def _end_holder(zygote):
    """Kill an isolated candidate's holder (its pid namespace's init: the kernel then kills
    every process left in the namespace) and reap it. Called after the program was reaped:
    the holder's exit waits until no other process of its namespace is left, zombies
    included."""
    import signal

    holder = zygote["holder"]
    if holder:
        os.kill(holder, signal.SIGKILL)  # an unreaped child of this driver: never a reused pid
        os.waitpid(holder, 0)


def _child_relay(relay):
    """What a relay's child needs of its request, its calls decoded here (the driver decodes
    JSON at no cost to the candidates; a candidate that decodes it writes the decoder's pages,
    each a copy of the template's). Calls that are not a JSON list are passed on as they
    came, and the child fails on them."""
    import json

    child = {key: relay.get(key) for key in ("module", "source", "target", "calls",
                                              "digest_above", "digest_count")}
    try:
        decoded = json.loads(child["calls"]) if isinstance(child["calls"], str) else None
    except (ValueError, RecursionError):
        decoded = None
    if type(decoded) is list:
        child["calls"] = decoded
    return child


def _spawn(req, zygote, mode, keep):
    """Run one request in the pre-forked candidate ``zygote`` and clean up after it. ``mode``:
    ``isolated`` (the candidate has its own namespaces: its init's end ends it all), ``jailed``
    (a shared pid namespace: every process but this driver and ``keep`` is killed, the work
    dirs wiped) or ``plain`` (the fallback: the candidate's process group is killed)."""
    import marshal
    import select
    import signal

    timeout_s = float(req["timeout_s"])
    cpu_s = int(req["cpu_s"])
    stdin = req.get("stdin")
    relay = req.get("relay")
    pid, rep_r = zygote["pid"], zygote["rep_r"]
    if stdin is not None and relay is None:  # a relay's stdin is its nonce: it stays here
        view, at = memoryview(stdin.encode("latin-1")), 0
        while at < len(view):
            at += os.pwrite(zygote["in_fd"], view[at:], at)
    os.close(zygote["in_fd"])
    job = marshal.dumps({"code": req["code"], "limits": req["limits"],
                         "relay": None if relay is None else _child_relay(relay),
                         "stdin": stdin is not None and relay is None})
    del req
    try:
        _write_all(zygote["job_w"], job)
    except OSError:
        pass  # the candidate died before reading its job: reported from its status below
    del job
    os.close(zygote["job_w"])
    pidfd = os.pidfd_open(pid)
    try:
        if relay is None:
            timed_out = not select.select([pidfd], [], [], timeout_s)[0]
        else:
            timed_out, gathered = _gather(relay, zygote, pidfd, timeout_s)
    finally:
        os.close(pidfd)
    if timed_out:
        try:  # a holder's end ends the program and whatever it started
            os.kill(zygote["holder"] or pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, init_status, usage = os.wait4(pid, 0)
    _end_holder(zygote)
    if mode == "jailed":
        _reap_jail(keep)
    elif mode == "plain":
        _reap_group(pid)
    for fd in (rep_r, zygote["st_r"]):
        os.set_blocking(fd, False)
    chunks = []
    try:
        while data := os.read(rep_r, 1 << 16):
            chunks.append(data)
    except BlockingIOError:
        pass
    os.close(rep_r)
    try:
        told = os.read(zygote["st_r"], 64)
    except BlockingIOError:
        told = b""
    os.close(zygote["st_r"])
    status = int(told) if told.isdigit() else init_status
    error = None
    try:
        fields = _decode_fields(b"".join(chunks))
        if len(fields) >= 4 and fields[0] == "error":
            error = fields[1:4]
    except (ValueError, IndexError):
        pass
    code = os.waitstatus_to_exitcode(status)
    used = usage.ru_utime + usage.ru_stime
    if mode != "isolated":
        _wipe([os.getcwd()] + (["/dev/shm"] if mode == "jailed" else []))
    if relay is not None:
        if not timed_out:  # every process of the run is gone: read the pipes to their end
            for fd in (zygote["res_r"], zygote["out_r"]):
                _pump(fd, zygote, relay, gathered, set())
            _print_relay(relay, gathered, code, stdin)
        os.close(zygote["res_r"])
        os.close(zygote["out_r"])
        # Like a relay program's parent, which ends normally whatever its child did: the
        # child's own status is in the payload.
        return {"exit_code": 0, "error": None, "timed_out": timed_out, "cpu_exceeded": False,
                "cpu_used": used}
    os.close(zygote["res_r"])
    os.close(zygote["out_r"])
    return {"exit_code": code, "error": error, "timed_out": timed_out,
            "cpu_exceeded": (not timed_out) and code < 0 and used >= cpu_s - 0.05,
            "cpu_used": used}


def _preload(name, source):
    """Execute trusted module source from the host in the template (which no request has
    touched), registered in ``sys.modules`` under its name, so that every program forked
    later has it loaded."""
    if not (isinstance(name, str) and name.isidentifier() and isinstance(source, str)):
        return {"error": ["ProtocolError", "preload takes a module name and its source", ""]}
    module = type(sys)(name)
    try:
        exec(compile(source, name, "exec"), module.__dict__)  # noqa: S102 - the host's own code
    except BaseException as exc:
        return {"error": [type(exc).__name__, str(exc)[:_MAX_VALUE], ""]}
    sys.modules[name] = module
    return {"preloaded": name}


def _ask_preload(ctl, req):
    """Forward a preload request to the template; the reply the host gets."""
    name, source = req.get("name"), req.get("code")
    if not (isinstance(name, str) and name.isidentifier() and isinstance(source, str)):
        return {"error": ["ProtocolError", "preload takes a module name and its source", ""]}
    import socket

    fd = os.memfd_create("preload", 0)
    try:
        _write_all(fd, source.encode("utf-8", "surrogatepass"))
        socket.send_fds(ctl, [b"P" + name.encode("utf-8")], [fd])
        answer = _ctl_recv(ctl, 4096)
    except OSError:
        answer = b""
    finally:
        os.close(fd)
    if answer == b"ok":
        return {"preloaded": name}
    if not answer:
        sys.stderr.write("weft sandbox driver: the runner's template is gone\n")
        os._exit(75)
    name, _, value = answer[1:].decode("utf-8", "replace").partition("\0")
    return {"error": [name, value, ""]}


def _serve_runner(rfd, wfd, jailed, mounts):
    # imported once here, before the template is forked, so no candidate pays for them
    import json  # noqa: F401
    import select  # noqa: F401
    import shutil  # noqa: F401
    import signal
    import socket
    import stat  # noqa: F401
    import time  # noqa: F401

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    isolated = jailed and mounts is not None and _has_admin()
    if not jailed:  # orphaned candidates come back to this driver, which reaps them
        _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    ctl, ctl_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    if isolated and _CLONE_USABLE:
        _runner_pid_namespace()
    template = _fork()
    if template == 0:
        try:
            for fd in (rfd, wfd):
                os.close(fd)
            ctl.close()
            _template(ctl_child, isolated, mounts)
        finally:
            os._exit(0)
    ctl_child.close()
    _TEMPLATE.append(os.pidfd_open(template))
    if _has_admin():
        _drop_caps()  # only the template (and each candidate's set-up) needs them
    mode = "isolated" if isolated else "jailed" if jailed else "plain"
    _send(wfd, {"ready": True, "pid": os.getpid(), "isolated": isolated})
    zygote = None
    while True:
        if zygote is None:
            zygote = _prefork(ctl)
        req = _recv(rfd)
        if req is None:
            _drop(zygote)
            return 0
        nonce = req.pop("nonce", None)
        op = req.get("op")
        if op == "spawn":
            reply = _spawn(req, zygote, mode, template)
            zygote = None
        elif op == "preload":
            _drop(zygote)  # forked before the module existed: the next one is forked after
            zygote = None
            reply = _ask_preload(ctl, req)
        else:
            reply = {"error": ["ProtocolError", f"unknown op {op!r}", ""]}
        del req
        reply["nonce"] = nonce
        _send(wfd, reply)


def _serve(request_fd, reply_fd, spec, jailed, role, mounts=""):
    rfd = _move_high(request_fd)
    wfd = _move_high(reply_fd)
    _seal_process()
    _set_limits(spec)
    _OWNER.append(os.getpid())
    if role == "runner":
        sizes = tuple(int(x) for x in mounts.split(",")) if mounts else None
        return _serve_runner(rfd, wfd, jailed == "1", sizes)
    return _serve_session(rfd, wfd, jailed == "1")


def _main(argv):
    mode = argv[1]
    if mode == "once":
        _once(int(argv[2]), int(argv[3]), argv[4])
    elif mode == "serve":
        raise SystemExit(_serve(int(argv[2]), int(argv[3]), *argv[4:8]))
    else:
        sys.stderr.write(f"weft sandbox driver: unknown mode {mode!r}\n")
        raise SystemExit(2)


if __name__ == "__main__":
    _main(sys.argv)
