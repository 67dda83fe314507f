"""A benchmark added to the benchmarks file reaches a running UI: `weft` reloads the UI's code
location when the file changed after the location loaded, or says what to do by hand."""

import json
import os
import time
from types import SimpleNamespace

from cli.instance import UI_STATE, ensure_dagster_home, reload_ui_for_benchmarks


class FakeClient:
    calls: list = []

    def __init__(self, host, port_number):
        self.where = (host, port_number)

    def reload_repository_location(self, name):
        FakeClient.calls.append((self.where, name))
        return SimpleNamespace(status=SimpleNamespace(name="SUCCESS"), message=None)


class BrokenClient(FakeClient):
    def reload_repository_location(self, name):
        raise ConnectionError("connection refused")


def _ui(loaded_at, pid=None):
    state = ensure_dagster_home() / UI_STATE
    state.write_text(json.dumps({"host": "127.0.0.1", "port": 3111, "pid": pid or os.getpid(),
                                 "loaded_at": loaded_at}))
    return state


def test_a_changed_benchmarks_file_reloads_the_running_ui(weft_home, capsys):
    FakeClient.calls = []
    assert reload_ui_for_benchmarks(FakeClient) is None  # no UI, nothing to do
    state = _ui(time.time() - 60)
    assert reload_ui_for_benchmarks(FakeClient) is None  # no benchmarks file
    (weft_home / "benchmarks.yaml").write_text("benchmarks: []\n")
    line = reload_ui_for_benchmarks(FakeClient)
    assert FakeClient.calls == [(("127.0.0.1", 3111), "assets.definitions")]
    assert "reloaded the UI's code location 'assets.definitions'" in line
    assert "reloaded" in capsys.readouterr().err
    # recorded: the same file does not reload again
    assert json.loads(state.read_text())["loaded_at"] >= os.path.getmtime(
        weft_home / "benchmarks.yaml")
    assert reload_ui_for_benchmarks(FakeClient) is None and len(FakeClient.calls) == 1


def test_a_failed_reload_says_what_to_do_by_hand(weft_home):
    (weft_home / "benchmarks.yaml").write_text("benchmarks: []\n")
    state = _ui(0.0)
    line = reload_ui_for_benchmarks(BrokenClient)
    assert "connection refused" in line and "press Reload" in line and "make ui" in line
    assert json.loads(state.read_text())["loaded_at"] == 0.0  # unchanged
