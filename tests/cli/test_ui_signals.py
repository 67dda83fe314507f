"""`make ui` started in the background (SIGINT ignored, as a shell starts a background job)
stops on SIGTERM, with the processes it started."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2):
            return True
    except OSError:
        return False


def test_a_background_ui_stops_on_sigterm(weft_home):
    port = _free_port()
    # SIGINT ignored before `weft ui` runs, as a shell does for a background job
    code = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
            f"sys.argv = ['weft', 'ui', '--port', '{port}']; "
            "runpy.run_module('cli.instance', run_name='__main__')")
    ui = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not _answers(port):
            assert ui.poll() is None, "the UI exited before serving"
            assert time.monotonic() < deadline, "the UI did not come up in 180 s"
            time.sleep(1)
        ui.send_signal(signal.SIGTERM)
        ui.wait(timeout=60)  # ignored SIGINT made it ignore SIGTERM: this timed out
        deadline = time.monotonic() + 30
        while _answers(port):
            assert time.monotonic() < deadline, "the webserver outlived the UI process"
            time.sleep(0.5)
    finally:
        if ui.poll() is None:
            os.killpg(ui.pid, signal.SIGKILL)
            ui.wait()
