"""Hostile programs against the real bubblewrap jail, in all three execution paths: a cold
stateless run, a warm runner (fork server) and a session cell. Each case must end with the
right flag within its limit plus a margin, leave the host alone, and the next execution on the
same sandbox/runner/session must work."""

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
        code = ("import os, signal\nfor pid in (os.getppid(), 1, " f"{victim.pid}" "):\n"
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
