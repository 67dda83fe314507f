"""Refused connections during a server restart are retried over a window;
a run that still fails leaves its `llm_calls` and a failed `runs` row; the Dagster instance
weft configures has run monitoring on."""

from __future__ import annotations

import threading
import time

import dagster as dg
import pytest
import yaml

from pipelines.llm import EndpointUnreachable, LLMClient, run
from pipelines.llm.testing import FakeLLMServer
from warehouse import Warehouse

USER = [{"role": "user", "content": "hello"}]


def test_a_restarting_server_is_waited_for():
    with FakeLLMServer() as server:
        client = LLMClient(server.base_url, "fake-model", use_cache=False,
                           connect_retry_window_s=20)
        assert run(client.chat(USER))[0].error is None  # the endpoint has been seen up
        restart = server.refuse_for(2.0)
        assert not server.is_listening()
        started = time.monotonic()
        result = run(client.chat([{"role": "user", "content": "after restart"}]))[0]
        waited = time.monotonic() - started
        restart.join()
        assert result.error is None and result.text.endswith("after restart")
        assert 1.5 <= waited < 15
        record = client.drain_records()[-1]
        assert record["status"] == "ok"


def test_refusals_past_the_window_raise_with_the_url():
    with FakeLLMServer() as server:
        client = LLMClient(server.base_url, "fake-model", use_cache=False,
                           connect_retry_window_s=1.0)
        run(client.chat(USER))
        server.refuse_for(60.0)
        started = time.monotonic()
        with pytest.raises(EndpointUnreachable, match="127.0.0.1") as info:
            run(client.chat([{"role": "user", "content": "x"}]))
        assert 0.9 <= time.monotonic() - started < 10
        assert "down for" in str(info.value)


def test_an_endpoint_never_seen_up_still_fails_fast():
    with FakeLLMServer() as server:
        url = server.base_url
    client = LLMClient(url, "fake-model", use_cache=False, connect_retry_window_s=30)
    started = time.monotonic()
    with pytest.raises(EndpointUnreachable):
        run(client.chat(USER))
    assert time.monotonic() - started < 5


def test_a_server_that_died_is_revived_at_once_and_the_call_answered():
    """The client asks its ``revive`` hook at the first refused probe of an outage; a hook that
    starts the server again gets the request retried at once, not after the window."""
    with FakeLLMServer() as server:
        revived = []

        def revive() -> bool:
            revived.append(time.monotonic())
            server.start()  # the same port again
            return True

        client = LLMClient(server.base_url, "fake-model", use_cache=False,
                           connect_retry_window_s=60, revive=revive)
        assert run(client.chat(USER))[0].error is None
        server.stop()
        started = time.monotonic()
        result = run(client.chat([{"role": "user", "content": "after revive"}]))[0]
        assert result.error is None and result.text.endswith("after revive")
        assert len(revived) == 1 and time.monotonic() - started < 10  # not the 60 s window
        # a second outage asks the hook again
        server.stop()
        assert run(client.chat([{"role": "user", "content": "again"}]))[0].error is None
        assert len(revived) == 2


def test_a_hook_that_cannot_revive_leaves_the_window_as_it_was():
    with FakeLLMServer() as server:
        asked = []
        client = LLMClient(server.base_url, "fake-model", use_cache=False,
                           connect_retry_window_s=1.0, revive=lambda: asked.append(1) or False)
        run(client.chat(USER))
        server.refuse_for(60.0)
        started = time.monotonic()
        with pytest.raises(EndpointUnreachable, match="down for"):
            run(client.chat([{"role": "user", "content": "x"}]))
        assert 0.9 <= time.monotonic() - started < 10 and asked == [1]


def test_a_failed_run_records_its_calls_and_a_failed_runs_row(eval_env):
    server = eval_env.server
    server.plan.extend(["ok", "ok", "ok"] + ["hang"] * 20)

    def kill_after_three() -> None:
        while server.chat_count < 5:
            time.sleep(0.02)
        server.stop()  # gone for good: hung requests are dropped, new ones refused

    threading.Thread(target=kill_after_three, daemon=True).start()
    result = eval_env.evaluate(llm={"connect_retry_window_s": 1.0, "max_concurrency": 4},
                               selection=("eval_samples",), max_concurrency=4)
    assert not result.success
    wh = Warehouse()
    assert wh.read("eval_samples").num_rows == 0
    calls = wh.read("llm_calls").to_pylist()
    ok = [c for c in calls if c["status"] == "ok"]
    assert len(ok) == 3  # the three answered calls are on record
    assert all(c["asset"] == "eval_samples" and c["run_id"] == result.run_id for c in calls)
    runs = [r for r in wh.read("runs").to_pylist() if r["asset"] == "eval_samples"]
    assert len(runs) == 1 and runs[0]["status"] == "failed" and runs[0]["run_id"] == result.run_id
    assert "EndpointUnreachable" in runs[0]["error"] and "127.0.0.1" in runs[0]["error"]


def test_dagster_home_has_run_monitoring(tmp_path, monkeypatch):
    from cli.demo import ensure_dagster_home

    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")  # an older home
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    ensure_dagster_home()
    settings = yaml.safe_load((home / "dagster.yaml").read_text())
    assert settings["telemetry"] == {"enabled": False}
    with dg.DagsterInstance.from_config(str(home)) as instance:  # validated by dagster itself
        assert instance.run_monitoring_enabled
        assert instance.run_monitoring_max_runtime_seconds == 6 * 3600
        assert instance.run_monitoring_start_timeout_seconds == 180
    # a user's own monitoring settings are kept
    (home / "dagster.yaml").write_text("run_monitoring:\n  enabled: false\n")
    ensure_dagster_home()
    assert yaml.safe_load((home / "dagster.yaml").read_text())["run_monitoring"] == {
        "enabled": False}


def test_an_eval_run_survives_a_server_restart(eval_env):
    server = eval_env.server

    def restart_after_four() -> None:
        while server.chat_count < 4:
            time.sleep(0.01)
        server.refuse_for(2.0).join()

    restarter = threading.Thread(target=restart_after_four, daemon=True)
    restarter.start()
    started = time.monotonic()
    result = eval_env.evaluate(llm={"connect_retry_window_s": 20.0, "max_retries": 0},
                               selection=("eval_samples",), max_concurrency=2)
    restarter.join(timeout=10)
    assert result.success
    samples = Warehouse().read("eval_samples").to_pylist()
    assert len(samples) == 12 and all(s["gen_error"] is None for s in samples)
    assert all(s["correct"] for s in samples)
    assert time.monotonic() - started >= 2.0  # it did wait for the restart
