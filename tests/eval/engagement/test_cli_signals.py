"""Stopping ``python -m eval.engagement llm`` (eval/engagement/__main__.py) with a real signal
stops the model server it started.

The command runs in a subprocess with the real ``pipelines.serving.LocalModelServer`` start /
stop code, whose child is a stand-in instead of vLLM (vLLM takes minutes to start on CPU): one
that never becomes ready (the signal arrives during start-up) or one that serves the model list
with the fake server of ``pipelines.llm.testing`` and answers chats after 60 s (the signal
arrives during the run). ``ps`` must then list no process of the stand-in's session.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines import serving

REPO = Path(__file__).resolve().parents[3]

STANDIN = r"""
import sys, time
port, name, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
if mode == "serve":
    from pipelines.llm.testing import FakeLLMServer
    fake = FakeLLMServer(models=(name,), latency_s=60.0)
    fake._port = port
    fake.start()
time.sleep(600)
"""

COMMAND = r"""
import sys
from pathlib import Path
from pipelines import serving

model, port, mode, standin = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]


class StandIn(serving.LocalModelServer):
    def command(self):
        return [sys.executable, "-c", standin, str(self.port), str(self.served_name), mode]


serving.LocalModelServer = lambda: StandIn(model_path=model, served_name="standin", port=port,
                                           startup_timeout_s=300)
from eval.engagement.__main__ import main

sys.exit(main(["llm", "--env", "assistant", "--setting", "single", "--seeds", "1",
               "--episodes", "1", "--main-tokens", "4"]))
"""


def _session_processes(sid: int) -> list[str]:
    """``ps`` rows (pid, session, state, command) of every process in session ``sid``."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,sid=,stat=,args="], capture_output=True,
                         text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) >= 3 and (int(parts[0]) == sid or int(parts[1]) == sid):
            rows.append(line.strip())
    return rows


def _wait(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


@pytest.mark.parametrize("mode", ["starting", "serve"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_server_the_command_started(weft_home, tmp_path, mode, sig):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    port = serving.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEFT_LLM_")}
    proc = subprocess.Popen([sys.executable, "-c", COMMAND, str(model), str(port), mode, STANDIN],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    state = weft_home / "run" / f"server-{port}.json"
    server_pid = None
    try:
        server_pid = _wait(lambda: state.exists() and json.loads(state.read_text())["pid"], 120,
                           "the command to spawn its server")
        assert _session_processes(server_pid), "the stand-in server should be running"
        if mode == "serve":  # ready: the run is under way, its first chat waits 60 s
            base = f"http://127.0.0.1:{port}/v1"
            _wait(lambda: serving.served_models(base) == ["standin"], 120, "the server")
            time.sleep(1.0)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err
        assert "interrupted" in err
        assert _session_processes(server_pid) == []
        assert not state.exists()  # the server's record went with it
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if server_pid is not None and _session_processes(server_pid):
            os.killpg(server_pid, signal.SIGKILL)  # only the stand-in this test started
