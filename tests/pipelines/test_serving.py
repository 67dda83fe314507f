"""The real local vLLM server: answers through the LLM client, is reused, stops only its own."""

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pipelines.llm.testing import StandInServer
from pipelines.serving import (
    BIND_ENV,
    SERVER_MARKER,
    LocalModelServer,
    ServerStartError,
    choose_cpu_bind,
    cpu_busy_fractions,
    cpu_server_dtype,
    format_cpu_list,
    free_port,
    parse_cpu_list,
    running_cpu_binds,
    served_models,
    stop_recorded,
)


def test_missing_model_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a model folder"):
        LocalModelServer(model_path=tmp_path)


def test_stop_recorded_without_a_record_does_nothing(weft_home):
    assert stop_recorded(port=1) is False


def test_float32_on_cpus_without_bfloat16_arithmetic(embedded_model_dir, monkeypatch):
    avx2 = {"fpu", "sse2", "avx", "avx2", "fma"}
    assert cpu_server_dtype(avx2, cpu_build=True) == "float32"
    assert cpu_server_dtype(avx2 | {"avx512f", "avx512_bf16"}, cpu_build=True) is None
    assert cpu_server_dtype(avx2 | {"amx_bf16"}, cpu_build=True) is None
    assert cpu_server_dtype(avx2, cpu_build=False) is None  # a GPU build keeps the model's
    monkeypatch.setattr("pipelines.serving.cpu_server_dtype", lambda: "float32")
    cmd = LocalModelServer(model_path=embedded_model_dir).command()
    assert cmd[cmd.index("--dtype") + 1] == "float32"
    # a dtype in the server's own arguments wins, and appears once
    for extra in (("--dtype", "bfloat16"), ("--dtype=bfloat16",)):
        cmd = LocalModelServer(model_path=embedded_model_dir, extra_args=extra).command()
        assert [a for a in cmd if a.startswith("--dtype")] == [extra[0]]
        assert "float32" not in cmd


def test_cpu_lists_parse_and_format_round_trip():
    assert parse_cpu_list("0-3,6") == [0, 1, 2, 3, 6]
    assert parse_cpu_list("4-5|0-1") == [0, 1, 4, 5]  # one list per rank, merged
    assert format_cpu_list([5, 0, 1, 2]) == "0-2,5"
    assert format_cpu_list([3]) == "3"
    for spec in ("0-2,5", "1,3,5-7"):
        assert format_cpu_list(parse_cpu_list(spec)) == spec
    with pytest.raises(ValueError, match="bad CPU list 'a-b'"):
        parse_cpu_list("a-b")


def test_cpu_bind_takes_small_hosts_whole_and_splits_cores_otherwise():
    two, eight = [0, 1], list(range(8))
    # alone on a small host: every allowed core (auto would leave one of two idle) ...
    assert choose_cpu_bind(two, []) == "0-1"
    assert choose_cpu_bind([0, 2, 3], []) == "0,2-3"
    # ... on a larger one, vLLM's NUMA-aware default
    assert choose_cpu_bind(eight, []) == "auto"
    # vLLM's auto pins every core but the last: the second server gets the core it leaves
    assert choose_cpu_bind(two, [None]) == "1"
    assert choose_cpu_bind(two, ["auto"]) == "1"
    assert choose_cpu_bind(eight, ["0-3"]) == "4-7"
    assert choose_cpu_bind(eight, ["0-3", "4-5"]) == "6-7"
    assert choose_cpu_bind(eight, ["nobind"]) == "0-7"


def test_cpu_bind_on_a_busy_host_pins_one_core_never_nobind():
    two, four = [0, 1], [0, 1, 2, 3]
    # every core pinned by another server: one core, the highest when all are pinned alike ...
    assert choose_cpu_bind(two, ["0-1"]) == "1"
    assert choose_cpu_bind(two, ["garbage"]) == "1"  # unknown pinning counts as every core
    assert choose_cpu_bind([0], [None]) == "0"
    assert choose_cpu_bind([0], ["nobind", "0"]) == "0"
    # ... the one the fewest servers pin: auto pins 0, "1" pins 1, "0-1" both -> 0 twice, 1 twice
    assert choose_cpu_bind(two, [None, "1"]) == "1"
    assert choose_cpu_bind(two, [None, "1", "0"]) == "1"  # 0 pinned twice, 1 once
    assert choose_cpu_bind(four, ["0-3", "3", "1-2"]) == "0"
    # ... then the least busy, by the sampled busy fractions (a core not sampled counts idle)
    assert choose_cpu_bind(two, ["0-1"], {0: 0.2, 1: 0.9}) == "0"
    assert choose_cpu_bind(four, ["0-3"], {0: 0.5, 1: 0.5, 2: 0.1, 3: 0.5}) == "2"
    assert choose_cpu_bind(four, ["0-3"], {0: 0.5, 1: 0.5, 2: 0.5}) == "3"
    assert choose_cpu_bind(four, ["0-3", "3"], {3: 0.0, 0: 0.9, 1: 0.9, 2: 0.9}) == "2"
    # whatever runs, a host with a core to pin never gets nobind
    for running in (["0-1"], ["0-1", "0-1", "0-1"], [None, None], ["auto", "0", "1"], ["x"]):
        for busy in (None, {0: 1.0, 1: 1.0}, {0: 0.0}):
            assert choose_cpu_bind(two, running, busy) in ("0", "1")
    with pytest.raises(ValueError, match="no CPU core allowed"):
        choose_cpu_bind([], ["0-1"])


def test_cpu_busy_fractions_see_a_spinning_core():
    # a child spinning on one pinned core keeps that core busy whatever else runs
    core = max(os.sched_getaffinity(0))
    spin = subprocess.Popen([sys.executable, "-c",
                             f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True: pass"])
    try:
        time.sleep(0.3)
        busy = cpu_busy_fractions(0.5)
    finally:
        spin.kill()
        spin.wait()
    assert set(busy) >= set(os.sched_getaffinity(0))
    assert all(0.0 <= f <= 1.0 for f in busy.values())
    assert busy[core] > 0.9


def test_running_binds_are_read_from_proc_and_forked_workers_count_once():
    before = running_cpu_binds()
    # a stand-in process with the server's command-line marker, which forks a child that
    # keeps the same command line, as vLLM's forked workers do
    script = "import os, time\nif os.fork() == 0:\n    time.sleep(60)\nelse:\n    time.sleep(60)\n"
    proc = subprocess.Popen([sys.executable, "-c", script, SERVER_MARKER],
                            env={**os.environ, BIND_ENV: "7"}, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            after = running_cpu_binds()
            if len(after) > len(before):
                break
            time.sleep(0.1)
        time.sleep(0.5)  # let the child appear too
        after = running_cpu_binds()
        assert sorted(map(str, after)) == sorted(map(str, before + ["7"]))
        assert running_cpu_binds(exclude_pid=proc.pid).count("7") == before.count("7") + 1  # the child
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


@pytest.mark.server
def test_real_server_chat_json_and_reuse(local_server, embedded_model_dir, weft_home):
    from pipelines.llm import LLMClient, SamplingParams

    assert local_server.served_name in served_models(local_server.base_url)
    # the real server process is found in /proc with the CPU bind it was started with
    assert local_server.cpu_bind and local_server.cpu_bind in running_cpu_binds()

    async def talk():
        client = LLMClient(local_server.base_url, local_server.served_name, cache_path=weft_home / "c.sqlite")
        try:
            out = await client.chat([{"role": "user", "content": "What is 2 + 3?"}],
                                    SamplingParams(max_tokens=24, seed=1))
            schema = {"type": "object", "properties": {"covered": {"type": "integer", "minimum": 0, "maximum": 3}},
                      "required": ["covered"]}
            js = await client.chat_json([{"role": "user", "content": "How many of 3 items are covered? JSON."}],
                                        schema, SamplingParams(max_tokens=32))
            return out, js, client.drain_records()
        finally:
            await client.aclose()

    out, js, records = asyncio.run(talk())
    assert out[0].error is None and out[0].text and out[0].completion_tokens > 0
    # guided decoding on the server keeps even a 135M model inside the schema
    assert js.error is None and isinstance(js.value["covered"], int) and 0 <= js.value["covered"] <= 3
    assert len(records) == 2 and all(r["status"] == "ok" for r in records)

    # a second server object on the same port reuses the running one and never stops it
    again = LocalModelServer(model_path=embedded_model_dir, served_name=local_server.served_name,
                             port=local_server.port).start()
    assert again.owned is False
    again.stop()
    assert local_server.is_ready()

    other = LocalModelServer(model_path=embedded_model_dir, served_name="some-other-model",
                             port=local_server.port)
    with pytest.raises(ServerStartError, match="already serves"):
        other.start()


@pytest.mark.slow
@pytest.mark.server
def test_a_second_cpu_server_gets_its_own_cores(embedded_model_dir, local_server):
    """A second server started beside a running one must come up and answer.

    Left on vLLM's default, both pin their compute threads to the same core (on 2 cores the
    second server's start-up once hung past the 420 s timeout on a busy machine;
    bench/serving_bind.py measures the throughput lost).
    """
    from pipelines.llm import LLMClient, SamplingParams

    servers = [LocalModelServer(model_path=embedded_model_dir, served_name="second",
                                port=free_port(), startup_timeout_s=300)]
    try:
        started = time.monotonic()
        for server in servers:
            server.start()
        elapsed = time.monotonic() - started
        binds = [local_server.cpu_bind] + [s.cpu_bind for s in servers]
        assert binds[1] != binds[0] and binds[1] != "auto", binds

        async def ask(server):
            client = LLMClient(server.base_url, server.served_name, use_cache=False)
            try:
                return await client.chat([{"role": "user", "content": "Say hi."}],
                                         SamplingParams(max_tokens=8, seed=0))
            finally:
                await client.aclose()

        with ThreadPoolExecutor(2) as pool:
            outs = list(pool.map(lambda s: asyncio.run(ask(s)), [local_server, *servers]))
        assert all(o[0].error is None and o[0].completion_tokens > 0 for o in outs)
        print(f"second server ready in {elapsed:.0f}s with binds {binds}")
    finally:
        for server in servers:
            server.stop()


def _model_folder(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    return tmp_path


def test_revive_restarts_only_a_server_it_started_that_has_exited(tmp_path, weft_home):
    server = StandInServer(model_path=_model_folder(tmp_path), served_name="stand-in",
                           port=free_port(), max_restarts=1, startup_timeout_s=60)
    server.start()
    try:
        assert server.is_ready() and not server.revive()  # running: nothing to do
        server.process.kill()
        server.process.wait()
        assert not server.is_ready()
        assert server.revive() and server.is_ready() and server.restarts == 1
        server.process.kill()
        server.process.wait()
        assert not server.revive() and not server.is_ready()  # max_restarts reached
    finally:
        server.stop()
    other = StandInServer(model_path=tmp_path, served_name="stand-in", port=free_port())
    assert not other.revive()  # never started by this object


def _ignored_signals(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^SigIgn:\s*([0-9a-f]+)$", status, re.MULTILINE).group(1), 16)


class InterruptedStart(StandInServer):
    """A Ctrl-C (or a SIGTERM Dagster turns into one) arrives while the server comes up."""

    def is_ready(self) -> bool:
        if self.process is not None:  # spawned: now waiting for it
            # once the child runs with SIGTERM at its default (a process that ran a Dagster
            # job in the background hands it down ignored, until the start shim resets it)
            for _ in range(100):
                if not _ignored_signals(self.process.pid) & (1 << (signal.SIGTERM - 1)):
                    break
                time.sleep(0.05)
            raise KeyboardInterrupt
        return False


def test_a_start_interrupted_while_waiting_stops_the_server_it_spawned(tmp_path, weft_home):
    from pipelines.serving import _state_path

    server = InterruptedStart(model_path=_model_folder(tmp_path), served_name="stand-in",
                              port=free_port(), startup_timeout_s=60)
    with pytest.raises(KeyboardInterrupt):
        server.start()
    assert server.process is not None and server.process.poll() is not None  # not orphaned
    assert not server.owned and not _state_path(server.port).exists()


def test_a_server_started_where_sigterm_is_ignored_still_stops_on_sigterm(tmp_path, weft_home):
    """A background process that ran a Dagster job ignores SIGTERM (Dagster gives SIGTERM
    SIGINT's handler, ignored under nohup); the server it starts must not inherit that."""
    before = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        assert _ignored_signals(os.getpid()) & (1 << (signal.SIGTERM - 1))  # the setup holds
        server = StandInServer(model_path=_model_folder(tmp_path), served_name="stand-in",
                               port=free_port(), startup_timeout_s=60)
        server.start()
    finally:
        signal.signal(signal.SIGTERM, before)
    try:
        assert server.is_ready()
        ignored = _ignored_signals(server.process.pid)
        assert not ignored & (1 << (signal.SIGTERM - 1))
        assert not ignored & (1 << (signal.SIGINT - 1))
        os.killpg(server.process.pid, signal.SIGTERM)
        assert server.process.wait(timeout=30) == -signal.SIGTERM  # SIGTERM itself ended it
    finally:
        server.stop()


def test_an_llm_resource_client_revives_the_local_server_it_started(tmp_path, weft_home,
                                                                    monkeypatch):
    from assets import resources
    from pipelines.llm import run

    folder = _model_folder(tmp_path)
    monkeypatch.setattr(resources, "LocalModelServer",
                        lambda model_path=None, port=0: StandInServer(
                            model_path=folder, served_name="stand-in", port=free_port(),
                            startup_timeout_s=60))
    llm = resources.LLMResource(connect_retry_window_s=60)
    client = llm.client(max_tokens=8, use_cache=False)
    user = [{"role": "user", "content": "first"}]
    try:
        assert run(client.chat(user))[0].error is None
        llm._server.process.kill()
        llm._server.process.wait()
        started = time.monotonic()
        result = run(client.chat([{"role": "user", "content": "after the crash"}]))[0]
        assert result.error is None and result.text.endswith("after the crash")
        assert llm._server.restarts == 1 and time.monotonic() - started < 30
    finally:
        llm._server.stop()


def test_an_evaluation_reuses_a_server_weft_started_for_its_folder_on_any_port(tmp_path, weft_home,
                                                                               monkeypatch):
    import json

    from eval.models import ModelSpec
    from pipelines import serving
    from pipelines.serving import _state_path, recorded_server

    # a server the evaluation started itself would be a stand-in too, and show as a 2nd record
    monkeypatch.setattr(serving, "LocalModelServer", StandInServer)

    (tmp_path / "ck-1").mkdir()
    (tmp_path / "other" / "ck-1").mkdir(parents=True)
    folder = _model_folder(tmp_path / "ck-1")
    server = StandInServer(model_path=folder, served_name="ck-1", port=free_port(),
                           startup_timeout_s=60).start()
    try:
        spec = ModelSpec(model_id="ck-1", kind="local", path=str(folder), served_model="ck-1")
        with spec.serve() as (base_url, served, _):
            assert (base_url, served) == (server.base_url, "ck-1")
            assert list((weft_home / "run").glob("server-*.json")) == [_state_path(server.port)]
        assert server.is_ready()  # the block did not stop a server it did not start
        # the same name from another folder, or this folder under another name, is not it
        other = _model_folder(tmp_path / "other" / "ck-1")
        assert recorded_server(other, "ck-1") is None
        assert recorded_server(folder, "ck-2") is None
        # a record that names the folder and a live process but a port that lists other models
        lie = _state_path(server.port + 1 if server.port < 65535 else 1024)
        lie.write_text(json.dumps({"pid": os.getpid(), "model_path": str(folder),
                                   "served_name": "ck-3", "base_url": server.base_url}))
        assert recorded_server(folder, "ck-3") is None
        lie.unlink()
    finally:
        server.stop()
    assert recorded_server(folder, "ck-1") is None  # stopped: its record went with it
    # a record left by a process that is gone (killed before it could remove it)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _state_path(server.port).write_text(json.dumps({
        "pid": dead.pid, "model_path": str(folder), "served_name": "ck-1",
        "base_url": server.base_url}))
    assert recorded_server(folder, "ck-1") is None


@pytest.mark.server
def test_an_evaluation_finds_the_real_server_that_serves_its_model(local_server,
                                                                    embedded_model_dir,
                                                                    monkeypatch):
    """The session's vLLM server runs on a free port, not the default one: the spec of the
    model it serves finds it through its record instead of starting a second server."""
    from eval.models import ModelSpec

    monkeypatch.setenv("WEFT_HOME", str(local_server.weft_home))
    spec = ModelSpec(model_id=local_server.served_name, kind="local",
                     path=str(embedded_model_dir), served_model=local_server.served_name)
    with spec.serve() as (base_url, served, _):
        assert base_url == local_server.base_url and served == local_server.served_name
    assert local_server.is_ready()
