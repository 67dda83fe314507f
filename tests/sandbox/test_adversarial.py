"""Hostile programs against the real bubblewrap jail, in all three execution paths: a cold
stateless run, a warm runner (fork server) and a session cell. Each case must end with the
right flag within its limit plus a margin, leave the host alone, and the next execution on the
same sandbox/runner/session must work.

The second part attacks the sandbox itself, since rewards are computed by running
model-written code: the memory of the warm worker and of a program's parent, the host kernel's
memory through millions of files, a session's reply channel, threads that outlive a timed-out
cell, and runaway recursion."""

import os
import signal
import socket
import subprocess
import sys
import uuid

import pytest

from pipelines.sandbox import Limits

MODES = ("run", "runner", "session")
BASE = Limits(timeout_s=10, cpu_s=10, memory_mb=512, processes=64)
# Slack for a loaded 2-core machine on top of a limit (the sandbox itself adds ~1 s of grace).
SLACK_S = 6.0


@pytest.fixture(scope="module")
def runner(jail):
    worker = jail.runner(BASE)
    yield worker
    worker.close()


def execute(mode, jail, runner, code, limits=BASE):
    """Run ``code`` in ``mode``; check the next execution in the same place works."""
    if mode == "run":
        result = jail.run(code, limits=limits)
        after = jail.run("print('next')", limits=BASE)
    elif mode == "runner":
        result = runner.run(code, limits=limits)
        after = runner.run("print('next')")
    else:
        with jail.session(BASE) as session:
            result = session.execute(code, limits=limits)
            after = session.execute("print('next')")
    assert after.ok and after.stdout == "next\n", after
    return result


def _host_processes_with(token: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if token.encode() in handle.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("mode", MODES)
def test_infinite_loop_hits_the_wall_clock_limit(mode, jail, runner):
    limits = BASE.with_(timeout_s=1, cpu_s=60)
    result = execute(mode, jail, runner, "import time\nwhile True:\n    time.sleep(0.01)", limits)
    assert result.timed_out and result.limit_exceeded == "wall_time"
    assert result.error.name == "TimeoutError"
    assert result.duration_s < 1 + SLACK_S


@pytest.mark.parametrize("mode", MODES)
def test_cpu_heavy_loop_hits_the_cpu_limit(mode, jail, runner):
    limits = BASE.with_(timeout_s=60, cpu_s=1)
    result = execute(mode, jail, runner, "while True:\n    pass", limits)
    assert result.timed_out and result.limit_exceeded == "cpu_time", result
    assert result.duration_s < 60  # ended by the CPU limit, not the wall clock


@pytest.mark.parametrize("mode", MODES)
def test_allocating_4gb_is_a_memory_error(mode, jail, runner):
    result = execute(mode, jail, runner, "block = bytearray(4 * 1024 ** 3)\nprint('got it')")
    assert result.memory_exceeded and result.limit_exceeded == "memory"
    assert result.error.name == "MemoryError" and "got it" not in result.stdout


@pytest.mark.parametrize("mode", MODES)
def test_fork_bomb_is_stopped_by_the_process_limit(mode, jail, runner):
    result = execute(mode, jail, runner, "import os\nwhile True:\n    os.fork()")
    assert result.limit_exceeded == "processes", result
    assert result.error.name == "BlockingIOError"
    assert result.duration_s < BASE.timeout_s + SLACK_S


@pytest.mark.parametrize("mode", MODES)
def test_fork_bomb_that_ignores_errors_ends_at_the_wall_clock(mode, jail, runner):
    code = ("import os\nwhile True:\n    try:\n        os.fork()\n"
            "    except OSError:\n        pass")
    result = execute(mode, jail, runner, code, BASE.with_(timeout_s=2))
    assert result.timed_out and result.limit_exceeded == "wall_time"
    assert result.duration_s < 2 + SLACK_S


@pytest.mark.parametrize("mode", MODES)
def test_child_that_tries_to_outlive_the_run_is_gone(mode, jail, runner):
    token = f"weft-outlive-{uuid.uuid4().hex}"
    code = ("import subprocess, sys\n"
            "subprocess.Popen([sys.executable, '-c', 'import os, time; os.setsid(); "
            f"time.sleep(60)', '{token}'], start_new_session=True)\n"
            "print('spawned')")
    result = execute(mode, jail, runner, code)
    assert result.ok and result.stdout == "spawned\n"
    assert _host_processes_with(token) == []


@pytest.mark.parametrize("mode", MODES)
def test_100mb_of_stdout_is_truncated(mode, jail, runner):
    code = "import sys\nline = 'x' * (1 << 20)\nfor _ in range(100):\n    sys.stdout.write(line)"
    result = execute(mode, jail, runner, code)
    assert result.output_truncated and result.limit_exceeded == "output"
    assert len(result.stdout) == BASE.max_output_bytes
    assert result.duration_s < BASE.timeout_s + SLACK_S
    assert "output truncated" in result.observation()


@pytest.mark.parametrize("mode", MODES)
def test_writing_a_1gb_file_hits_the_file_size_limit(mode, jail, runner):
    code = ("with open('big.bin', 'wb') as handle:\n"
            "    for _ in range(1024):\n        handle.write(b'\\0' * (1 << 20))")
    result = execute(mode, jail, runner, code)
    assert result.limit_exceeded == "file_size"
    assert "File too large" in result.error.value


@pytest.mark.parametrize("mode", MODES)
def test_many_files_fill_only_the_jail_disk(mode, jail, runner):
    code = ("for i in range(100):\n    with open(f'f{i}.bin', 'wb') as handle:\n"
            "        handle.write(b'\\0' * (16 << 20))")
    result = execute(mode, jail, runner, code)
    assert result.limit_exceeded == "disk" and "No space left" in result.error.value


@pytest.mark.parametrize("mode", MODES)
def test_writing_outside_the_work_dir_fails(mode, jail, runner):
    name = f"weft-escape-{uuid.uuid4().hex}"
    code = ("import os\nfailures = []\n"
            f"for path in ['/etc/{name}', '/usr/{name}', '/{name}', '../{name}', '/root/{name}']:\n"
            "    try:\n        open(path, 'w').write('x')\n"
            "        failures.append('WROTE ' + path)\n"
            "    except OSError as exc:\n        failures.append(type(exc).__name__)\n"
            "print(failures)")
    result = execute(mode, jail, runner, code)
    assert "WROTE" not in result.stdout and result.stdout.count("Error") == 5, result.stdout
    assert not any(os.path.exists(p) for p in (f"/etc/{name}", f"/usr/{name}", f"/{name}"))


@pytest.mark.parametrize("mode", MODES)
def test_reading_root_shadow_and_host_environment_fails(mode, jail, runner, monkeypatch):
    secret = f"weft-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("WEFT_PLANTED_SECRET", secret)
    code = ("import os\nseen = []\n"
            "for path in ['/root', '/etc/shadow']:\n"
            "    try:\n        seen.append(str(os.listdir(path) if path == '/root' "
            "else open(path).read()))\n"
            "    except OSError as exc:\n        seen.append(type(exc).__name__)\n"
            "print(seen)\nprint(dict(os.environ))\n"
            "for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
            "    try:\n        print(open(f'/proc/{pid}/environ', 'rb').read())\n"
            "    except OSError:\n        pass")
    result = execute(mode, jail, runner, code)
    assert result.ok, result
    assert "['FileNotFoundError', 'FileNotFoundError']" in result.stdout
    assert secret not in result.stdout and "WEFT_PLANTED_SECRET" not in result.stdout


@pytest.mark.parametrize("mode", MODES)
def test_connecting_to_a_host_loopback_server_fails(mode, jail, runner):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.3)
        port = server.getsockname()[1]
        code = ("import socket\ns = socket.create_connection(('127.0.0.1', "
                f"{port}), timeout=3)\nprint('connected')")
        result = execute(mode, jail, runner, code)
        assert "connected" not in result.stdout
        assert result.error.name in ("ConnectionRefusedError", "OSError", "TimeoutError")
        with pytest.raises(socket.timeout):
            server.accept()


@pytest.mark.parametrize("mode", MODES)
def test_killing_the_parent_or_host_processes_fails(mode, jail, runner):
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # (a warm runner's candidate has no parent in its pid namespace: getppid() is 0, and
        # kill(0) would mean its own process group; that case is in test_runner_forks)
        code = ("import os, signal\nfor pid in (os.getppid() or 1, 1, " f"{victim.pid}" "):\n"
                "    try:\n        os.kill(pid, signal.SIGKILL)\n"
                "    except OSError as exc:\n        print(type(exc).__name__)\n"
                "print('still here')")
        result = execute(mode, jail, runner, code)
        assert result.stdout.endswith("still here\n"), result
        assert victim.poll() is None  # the host process survived
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()


@pytest.mark.parametrize("mode", MODES)
def test_deep_python_recursion_is_a_recursion_error(mode, jail, runner):
    code = "import sys\nsys.setrecursionlimit(100000)\ndef f(n):\n    return f(n + 1) + 1\nf(0)"
    result = execute(mode, jail, runner, code)
    assert result.error.name in ("RecursionError", "MemoryError"), result
    assert "outer frames omitted" in result.error.traceback


@pytest.mark.parametrize("mode", MODES)
def test_deep_c_recursion_crash_is_reported(mode, jail, runner):
    code = ("import sys\nsys.setrecursionlimit(10 ** 7)\nnested = []\n"
            "for _ in range(10 ** 6):\n    nested = [nested]\nprint(len(repr(nested)))")
    result = execute(mode, jail, runner, code)
    assert not result.ok
    if mode == "session":
        assert result.restarted and result.error.name == "KernelDied"
    else:
        assert result.exit_code == -signal.SIGSEGV and result.error.name == "ProcessKilled"


@pytest.mark.parametrize("mode", MODES)
def test_closing_stdout_does_not_hang_or_break_the_next_run(mode, jail, runner):
    code = "import os, sys\nprint('before', flush=True)\nsys.stdout.close()\nos.close(1)"
    result = execute(mode, jail, runner, code)
    assert result.stdout == "before\n" and not result.timed_out


@pytest.mark.parametrize("mode", MODES)
def test_binary_garbage_on_stdout_is_decoded_with_replacements(mode, jail, runner):
    code = "import sys\nsys.stdout.buffer.write(bytes(range(256)) + b'\\xff\\xfe end')"
    result = execute(mode, jail, runner, code)
    assert result.ok and result.stdout.endswith("\ufffd\ufffd end")
    assert "\ufffd" in result.observation()


# ---------------------------------------------------------------------------------------------
# code that attacks the sandbox itself (its worker, its reply channel, the host kernel)

# Every way in from one process to another that the kernel guards with a ptrace access check:
# /proc/<pid>/{mem,maps,environ,fd} and process_vm_readv (EPERM when refused, EFAULT when the
# check passed and only the address 0 was bad). Prints what it reached, one "pid/what" each.
_REACH_PROBE = r"""
import ctypes, os
class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
libc = ctypes.CDLL(None, use_errno=True)
me = os.getpid()
pids = {int(p) for p in os.listdir("/proc") if p.isdigit()} | {os.getppid()}
reached = []
for pid in sorted(pids - {0, me}):
    for what, mode in (("mem", "rb"), ("mem", "r+b"), ("maps", "rb"), ("environ", "rb")):
        try:
            with open(f"/proc/{pid}/{what}", mode, buffering=0):
                reached.append(f"{pid}/{what}/{mode}")
        except OSError:
            pass
    try:
        os.listdir(f"/proc/{pid}/fd")
        reached.append(f"{pid}/fd")
    except OSError:
        pass
    buf = ctypes.create_string_buffer(1)
    local, remote = _IoVec(ctypes.addressof(buf), 1), _IoVec(0, 1)
    if libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) == -1:
        if ctypes.get_errno() != 1:  # not EPERM: the access check let it through
            reached.append(f"{pid}/process_vm_readv")
    else:
        reached.append(f"{pid}/process_vm_readv")
print("REACHED", sorted(reached))
"""


@pytest.mark.parametrize("mode", MODES)
def test_program_cannot_reach_the_memory_of_its_parent_or_the_worker(mode, jail, runner):
    # The program itself, and a child it starts (whose parent is the program, or in a session
    # the kernel), try to reach every other process of the jail.
    code = (f"PROBE = {_REACH_PROBE!r}\nexec(PROBE)\nimport subprocess, sys\n"
            "subprocess.run([sys.executable, '-c', PROBE], check=True)")
    result = execute(mode, jail, runner, code)
    assert result.ok, result
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("REACHED")]
    assert lines == ["REACHED []", "REACHED []"], result.stdout


# Overwrite every copy of the bytes b"main.py" in the parent's writable memory (the name the
# warm worker gives each program: sys.argv[0] and traceback file names).
_REWRITE_PARENT = r"""
import os, re
ppid = os.getppid()
hits = 0
try:
    maps = open(f"/proc/{ppid}/maps").read().splitlines()
    mem = open(f"/proc/{ppid}/mem", "r+b", buffering=0)
    for line in maps:
        span, perms = line.split()[:2]
        if not perms.startswith("rw"):
            continue
        lo, hi = (int(x, 16) for x in span.split("-"))
        try:
            mem.seek(lo)
            data = mem.read(hi - lo)
        except OSError:
            continue
        for found in re.finditer(rb"main\.py", data):
            mem.seek(lo + found.start())
            mem.write(b"HACKED!")
            hits += 1
    print("rewrote", hits)
except OSError as exc:
    print("refused", type(exc).__name__)
"""


def test_pooled_program_cannot_rewrite_the_worker_for_later_programs(jail):
    with jail.runner(BASE) as worker:
        attack = worker.run(_REWRITE_PARENT)
        assert attack.stdout.startswith("refused"), attack
        for _ in range(3):  # every later program on this worker sees the pristine worker
            later = worker.run("import sys\nprint(sys.argv)\nraise ValueError('x')")
            assert later.stdout == "['main.py']\n", later
            assert 'File "main.py", line 3' in later.error.traceback
        assert worker.restarts == 0


@pytest.mark.parametrize("mode", MODES)
def test_millions_of_empty_files_stop_at_the_file_count_limit(mode, jail):
    # Each file, directory or link costs host kernel memory no other limit counts; the jail's
    # work dir holds at most disk_files of them (the tmpfs root is one).
    limits = BASE.with_(disk_files=500)
    code = ("import os\nmade = 0\ntry:\n    os.mkdir('d')\n    made += 1\n"
            "    for i in range(5000):\n        open(f'd/{i}', 'w').close()\n        made += 1\n"
            "except OSError as exc:\n    print('stopped', made, exc.errno)\n"
            "    raise\nprint('made', made)")
    if mode == "run":
        result = jail.run(code, limits=limits)
        after = jail.run("import os; print(len(os.listdir('.')))", limits=limits)
    elif mode == "runner":
        with jail.runner(limits) as worker:
            result = worker.run(code)
            after = worker.run("import os; print(len(os.listdir('.')))")
    else:
        with jail.session(limits) as session:
            result = session.execute(code)
            after = session.execute("import os, shutil; shutil.rmtree('d'); "
                                    "print(len(os.listdir('.')))")
    assert result.stdout == "stopped 499 28\n", result  # ENOSPC after 499 of the 500 inodes
    assert result.limit_exceeded == "disk" and "No space left" in result.error.value
    assert after.ok and after.stdout == "0\n", after


def test_shm_file_count_is_bounded_too(jail):
    code = ("import os\nmade = 0\ntry:\n    for i in range(5000):\n"
            "        open(f'/dev/shm/{i}', 'w').close()\n        made += 1\n"
            "except OSError as exc:\n    print('stopped', made, exc.errno)")
    result = jail.run(code)
    assert result.stdout.startswith("stopped ") and result.stdout.endswith(" 28\n"), result
    assert int(result.stdout.split()[1]) < 5000


def _reply_fds_garbage(payload: str) -> str:
    """A cell that writes ``payload`` (a bytes expression) into every fd it can, 3..255."""
    return ("import os\n"
            f"payload = {payload}\n"
            "for fd in range(3, 256):\n"
            "    try:\n        os.write(fd, payload)\n    except OSError:\n        pass\n"
            "print('wrote')")


def _forged(reply: str) -> str:
    return f"(lambda b: b'%010d' % len(b) + b)(__import__('json').dumps({reply}).encode())"


def _assert_not_shifted(session):
    """The cells after an attack answer for themselves: each result is its own cell's value
    or a reported failure (the kernel replaced), and at most the first one fails."""
    results = [session.execute(f"{n} * 1000") for n in range(1, 5)]
    for n, result in enumerate(results, start=1):
        if result.error is None:
            assert result.value == str(n * 1000), results
        else:
            assert n == 1 and result.error.name == "KernelDied" and result.restarted, results
    assert all(r.ok for r in results[1:]), results


def test_garbage_in_the_reply_channel_fails_the_cell_without_raising(jail):
    with jail.session(BASE) as session:
        session.execute("x = 1")
        result = session.execute(_reply_fds_garbage("b'not a length header at all'"))
        assert result.error.name == "KernelDied" and result.restarted and not result.ok, result
        _assert_not_shifted(session)
        huge = session.execute(_reply_fds_garbage("b'9999999999'"))  # an absurd frame length
        assert huge.error.name == "KernelDied" and huge.restarted, huge
        assert huge.duration_s < BASE.timeout_s  # refused at once, not waited for
        _assert_not_shifted(session)


def test_a_forged_reply_without_the_nonce_does_not_shift_later_cells(jail):
    with jail.session(BASE) as session:
        forged = session.execute(_reply_fds_garbage(_forged(
            "{'error': None, 'value': \"'FORGED'\", 'flag': None}")))
        assert forged.value != "'FORGED'" and forged.error.name == "KernelDied", forged
        _assert_not_shifted(session)


def test_a_forged_reply_with_the_nonce_dug_out_of_memory_does_not_shift_later_cells(jail):
    # The cell shares the kernel's process, so it can find the current request's nonce on the
    # stack and forge its own cell's reply; the genuine reply then arrives unasked for.
    code = ("import sys\nframe = sys._getframe().f_back\n"
            "while frame is not None and 'nonce' not in frame.f_locals:\n"
            "    frame = frame.f_back\nnonce = frame.f_locals['nonce'] if frame else None\n"
            + _reply_fds_garbage(
                _forged("{'error': None, 'value': \"'FORGED'\", 'flag': None, 'nonce': nonce}")))
    with jail.session(BASE) as session:
        for _ in range(3):
            session.execute(code)  # its own result may be the forgery; never the next ones'
            _assert_not_shifted(session)


def _frame(body: bytes) -> bytearray:
    return bytearray(b"%010d" % len(body) + body)


@pytest.mark.parametrize(("raw", "expected"), [
    (_frame(b'{"value": "1", "nonce": "n1"}'), ({"value": "1", "nonce": "n1"}, "ok")),
    (_frame(b'{"value": "1", "nonce": "n0"}'), (None, "garbled")),  # another request's reply
    (_frame(b'{"value": "1"}'), (None, "garbled")),  # no nonce at all
    (_frame(b'{"value": "1", "nonce": "n1"}') + b"0", (None, "garbled")),  # bytes after it
    (_frame(b'{"value": "1", "nonce": "n1"}') * 2, (None, "garbled")),  # two replies at once
    (_frame(b'["a list", "n1"]'), (None, "garbled")),
    (_frame(b"\xff\xfe not json"), (None, "garbled")),
    (bytearray(b"not digits and more"), (None, "garbled")),
    (bytearray(b"9999999999"), (None, "garbled")),  # longer than any real reply
    (bytearray(b"-000000001{}"), (None, "garbled")),
    (bytearray(b"00000000"), None),  # header incomplete: wait for more
    (_frame(b'{"nonce": "n1"}')[:-1], None),  # body incomplete: wait for more
])
def test_reply_framing_accepts_only_one_whole_frame_for_this_request(raw, expected):
    from pipelines.sandbox.local import _take_frame

    assert _take_frame(bytearray(raw), "n1") == expected


def test_threads_of_a_timed_out_cell_do_not_keep_burning_cpu(jail):
    spin = ("import threading, time\ndef spin():\n    while True:\n        pass\n"
            "threading.Thread(target=spin, daemon=True).start()\ntime.sleep(60)")
    # the CPU this process uses while the next cell only sleeps for a second
    idle = "import time\nt = time.process_time()\ntime.sleep(1)\nprint(time.process_time() - t)"
    with jail.session(BASE) as session:
        result = session.execute(spin, limits=BASE.with_(timeout_s=1))
        assert result.timed_out and result.limit_exceeded == "wall_time"
        assert result.restarted  # the state is gone with the threads
        burnt = session.execute(idle)
        assert burnt.ok and float(burnt.stdout) < 0.1, burnt


def test_timed_out_cell_without_leftover_threads_keeps_its_state(jail):
    with jail.session(BASE) as session:
        session.execute("kept = 41")
        result = session.execute("import time\ntime.sleep(60)", limits=BASE.with_(timeout_s=1))
        assert result.timed_out and not result.restarted
        assert session.execute("kept + 1").value == "42"


_RUNAWAY = "import sys\nsys.setrecursionlimit(10 ** 8)\ndef f(n):\n    return f(n + 1) + 1\nf(0)"


@pytest.mark.parametrize("mode", MODES)
def test_runaway_recursion_is_its_own_kind_not_a_timeout(mode, jail, runner):
    limits = BASE.with_(timeout_s=20, cpu_s=20, memory_mb=1024)
    if mode == "runner":
        with jail.runner(limits) as worker:
            result = worker.run(_RUNAWAY)
    else:
        result = execute(mode, jail, runner, _RUNAWAY, limits)
    assert not result.timed_out and result.limit_exceeded == "recursion", result
    assert result.error.name in ("RecursionError", "SystemError")


def test_runaway_recursion_past_the_cap_ending_in_system_error_is_recursion(jail):
    # Restores the interpreter's own setrecursionlimit, so the frames fill the address space
    # and CPython 3.11 ends with "SystemError: error return without exception set".
    code = ("import sys\nreal = sys.setrecursionlimit.__closure__[0].cell_contents\n"
            "real(10 ** 8)\ndef f(n):\n    return f(n + 1) + 1\nf(0)")
    result = jail.run(code, limits=BASE.with_(timeout_s=30, cpu_s=30, memory_mb=256))
    assert not result.timed_out and result.limit_exceeded == "recursion", result
    assert result.error.name in ("SystemError", "RecursionError")
