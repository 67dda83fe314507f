"""Tests for pipelines.llm (the client and its helpers cache, structured, batch, endpoint).

Every client test talks HTTP to a real in-process fake server (pipelines.llm.testing.FakeLLMServer
on 127.0.0.1) that counts requests and misbehaves on demand; the cache is a real SQLite file in a
temp folder; the concurrency test uses real processes. Backoff sleeps are recorded instead of
slept so retry tests stay fast and can assert the schedule. The last test (marker `server`)
runs the same calls against the real local vLLM server from tests/conftest.py.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import multiprocessing
import os
import random
import socket
import sqlite3
from pathlib import Path

import pytest

from pipelines.llm import (
    ChatResult,
    Endpoint,
    EndpointUnreachable,
    JsonResult,
    LLMClient,
    SamplingParams,
    backoff_delay,
    map_ordered,
    redact_url,
    run,
)
from pipelines.llm.cache import ResponseCache, cache_key
from pipelines.llm.structured import check_schema, extract_json, schema_errors
from pipelines.llm.testing import FakeLLMServer

USER = [{"role": "user", "content": "What is 2 + 2?"}]
SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "integer", "minimum": 0, "maximum": 100},
        "steps": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["answer"],
}
RECORD_COLUMNS = {
    "call_id",
    "tag",
    "base_url",
    "model",
    "prompt_tokens",
    "completion_tokens",
    "latency_s",
    "cached",
    "attempts",
    "status",
    "error",
    "finish_reason",
    "cache_key",
    "created_at",
}


@pytest.fixture()
def fake():
    with FakeLLMServer() as server:
        yield server


@pytest.fixture()
def cache_path(tmp_path: Path) -> Path:
    return tmp_path / "llm_cache.sqlite"


def make_client(
    fake: FakeLLMServer, cache_path: Path | None, **kwargs
) -> tuple[LLMClient, list[float]]:
    """A client against the fake server whose backoff sleeps are recorded, not slept."""
    kwargs.setdefault("use_cache", cache_path is not None)
    client = LLMClient(fake.base_url, "fake-model", cache_path=cache_path, **kwargs)
    sleeps: list[float] = []

    async def fake_sleep(delay: float) -> None:
        sleeps.append(delay)
        await asyncio.sleep(0)

    client._sleep = fake_sleep
    return client, sleeps


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


# ---------------------------------------------------------------- cache


def test_cache_hit_makes_no_request(fake, cache_path):
    client, _ = make_client(fake, cache_path)
    first = run(client.chat(USER, tag="t"))
    second = run(client.chat(USER, tag="t"))
    assert fake.chat_count == 1
    assert [r.text for r in second] == [r.text for r in first]
    assert first[0].cached is False and second[0].cached is True
    assert second[0].latency_s == first[0].latency_s  # replay reports the original latency
    records = client.drain_records()
    assert [r["cached"] for r in records] == [False, True]
    assert records[1]["attempts"] == 0


def test_the_sdk_is_imported_by_the_first_request_not_by_the_definitions(fake, cache_path):
    """Importing the pipeline's definitions, and replaying answers from the cache, never loads
    the openai SDK (about a quarter of the definitions' import time); a request sent does."""
    import subprocess
    import sys

    run(make_client(fake, cache_path)[0].chat(USER, tag="t"))  # the answer, in the cache
    script = ("import asyncio, sys\n"
              "import assets.definitions\n"
              "from pipelines.llm import LLMClient\n"
              "print('definitions', 'openai' in sys.modules)\n"
              f"client = LLMClient({fake.base_url!r}, 'fake-model', "
              f"cache_path={str(cache_path)!r})\n"
              f"cached = asyncio.run(client.chat({USER!r}, tag='t'))[0].cached\n"
              "print('replayed', cached, 'openai' in sys.modules)\n"
              "asyncio.run(client.chat([{'role': 'user', 'content': 'new'}], tag='t'))\n"
              "print('sent', 'openai' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[3], timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-3:] == ["definitions False", "replayed True False",
                                             "sent True"]


def test_cache_persists_across_client_instances(fake, cache_path):
    client, _ = make_client(fake, cache_path)
    texts = [run(client.chat([{"role": "user", "content": f"q{i}"}]))[0].text for i in range(5)]
    client.cache.close()
    fresh, _ = make_client(fake, cache_path)
    replay = [run(fresh.chat([{"role": "user", "content": f"q{i}"}]))[0] for i in range(5)]
    assert fake.chat_count == 5
    assert [r.text for r in replay] == texts
    assert all(r.cached for r in replay)


def test_cache_disabled_always_requests(fake):
    client, _ = make_client(fake, None)
    run(client.chat(USER))
    run(client.chat(USER))
    assert client.cache is None
    assert fake.chat_count == 2


def test_default_cache_path_is_under_weft_home(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("WEFT_HOME", str(tmp_path / "home"))
    client = LLMClient(fake.base_url, "fake-model")
    run(client.chat(USER))
    assert client.cache is not None
    assert client.cache.path == (tmp_path / "home" / "cache" / "llm_cache.sqlite").resolve()
    assert len(client.cache) == 1


def test_cache_is_wal_and_holds_nothing_after_errors(fake, cache_path):
    client, _ = make_client(fake, cache_path, max_retries=0)
    fake.plan.append("500")
    assert run(client.chat(USER))[0].error is not None
    assert len(client.cache) == 0
    run(client.chat(USER))
    assert len(client.cache) == 1
    with sqlite3.connect(cache_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_cache_key_covers_every_input():
    base = {"temperature": 0.0, "top_p": 1.0, "max_tokens": 64, "stop": None, "seed": None, "n": 1,
            "endpoint": "http://a:8000/v1"}
    key = cache_key("m", USER, **base)
    assert key == cache_key(
        "m", [{"content": "What is 2 + 2?", "role": "user"}], **base
    )  # dict order
    assert key == cache_key("m", USER, **{**base, "temperature": 0})  # 0 == 0.0
    variants = [
        cache_key("other-model", USER, **base),
        cache_key("m", [{"role": "user", "content": "What is 2 + 3?"}], **base),
        cache_key("m", USER, **{**base, "temperature": 0.7}),
        cache_key("m", USER, **{**base, "top_p": 0.9}),
        cache_key("m", USER, **{**base, "max_tokens": 65}),
        cache_key("m", USER, **{**base, "stop": ["\n"]}),
        cache_key("m", USER, **{**base, "seed": 1}),
        cache_key("m", USER, **{**base, "n": 2}),
        cache_key("m", USER, **base, response_format={"type": "json_object"}),
        cache_key("m", USER, **base, extra_body={"top_k": 5}),
        cache_key("m", USER, **base, sample_index=1),
        cache_key("m", USER, **{**base, "endpoint": "http://b:8000/v1"}),
        cache_key("m", USER, **base, model_root="/models/checkpoint-2"),
    ]
    assert len({key, *variants}) == len(variants) + 1
    # a trailing slash or credentials in the URL do not name another model
    assert key == cache_key("m", USER, **{**base, "endpoint": "http://u:pw@a:8000/v1/"})
    with pytest.raises(ValueError, match="base URL"):
        cache_key("m", USER, **{**base, "endpoint": ""})


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.1.1", "localhost", "[::1]", "LOCALHOST"])
def test_cache_key_of_a_loopback_server_with_a_root_ignores_its_port(host):
    base = {"temperature": 0.0, "top_p": 1.0, "max_tokens": 64, "stop": None, "seed": None, "n": 1}
    root = {"model_root": "/models/m"}
    key = cache_key("m", USER, endpoint=f"http://{host}:8000/v1", **base, **root)
    assert key == cache_key("m", USER, endpoint=f"http://{host}:51889/v1/", **base, **root)
    # the root, the path and the served name still count; without a root the port does
    assert key != cache_key("m", USER, endpoint=f"http://{host}:8000/v1", **base,
                            model_root="/models/other")
    assert key != cache_key("m", USER, endpoint=f"http://{host}:8000/v2", **base, **root)
    assert key != cache_key("other", USER, endpoint=f"http://{host}:8000/v1", **base, **root)
    assert cache_key("m", USER, endpoint=f"http://{host}:8000/v1", **base) != cache_key(
        "m", USER, endpoint=f"http://{host}:8001/v1", **base)


def test_cache_key_of_a_remote_server_keeps_its_port():
    base = {"temperature": 0.0, "top_p": 1.0, "max_tokens": 64, "stop": None, "seed": None, "n": 1,
            "model_root": "/models/m"}
    for a, b in (("http://10.0.0.5:8000/v1", "http://10.0.0.5:8001/v1"),
                 ("http://gpu-1:8000/v1", "http://gpu-2:8000/v1"),
                 ("http://128.0.0.1:8000/v1", "http://127.0.0.1:8000/v1")):
        assert cache_key("m", USER, endpoint=a, **base) != cache_key("m", USER, endpoint=b, **base)


def test_cache_key_rejects_unserializable_messages():
    with pytest.raises(ValueError, match="JSON-serializable"):
        cache_key(
            "m",
            [{"role": "user", "content": object()}],
            temperature=0,
            top_p=1,
            max_tokens=1,
            stop=None,
            seed=None,
            n=1,
            endpoint="http://a:8000/v1",
        )


def _child_writer(base_url: str, cache_path: str, start: int, count: int) -> None:
    client = LLMClient(base_url, "fake-model", cache_path=cache_path, max_concurrency=4)

    async def go():
        await client.map(
            lambda i: client.chat([{"role": "user", "content": f"p{i}"}]),
            range(start, start + count),
        )

    run(go())
    os._exit(0)


def test_two_processes_write_the_cache_concurrently(fake, cache_path):
    ctx = multiprocessing.get_context("fork")
    # overlapping ranges: both processes write p20..p39
    procs = [
        ctx.Process(target=_child_writer, args=(fake.base_url, str(cache_path), s, 40))
        for s in (0, 20)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0
    cache = ResponseCache(cache_path)
    assert cache.integrity_ok()
    assert len(cache) == 60
    sent = fake.chat_count
    client, _ = make_client(fake, cache_path)
    replay = run(
        client.map(lambda i: client.chat([{"role": "user", "content": f"p{i}"}]), range(60))
    )
    assert fake.chat_count == sent  # every answer replayed, none requested again
    assert all(group[0].cached and f"p{i}" in group[0].text for i, group in enumerate(replay))


def _child_crasher(base_url: str, cache_path: str) -> None:
    client = LLMClient(base_url, "fake-model", cache_path=cache_path)
    for i in range(3):
        run(client.chat([{"role": "user", "content": f"c{i}"}]))
    os._exit(1)  # die without closing anything


def test_completed_responses_survive_a_crash(fake, cache_path):
    proc = multiprocessing.get_context("fork").Process(
        target=_child_crasher, args=(fake.base_url, str(cache_path))
    )
    proc.start()
    proc.join(timeout=60)
    assert proc.exitcode == 1
    client, _ = make_client(fake, cache_path)
    results = [run(client.chat([{"role": "user", "content": f"c{i}"}]))[0] for i in range(3)]
    assert all(r.cached for r in results)
    assert fake.chat_count == 3


# ---------------------------------------------------------------- retries and errors


def test_retry_on_500_with_growing_backoff(fake, cache_path):
    client, sleeps = make_client(fake, cache_path, backoff_base_s=1.0, backoff_max_s=60.0)
    fake.plan.extend(["500", "503", "502"])
    result = run(client.chat(USER))[0]
    assert result.error is None and result.text.startswith("echo")
    assert fake.chat_count == 4
    assert len(sleeps) == 3
    for retry, delay in enumerate(sleeps):  # equal jitter: within [ceiling/2, ceiling]
        assert 2**retry / 2 <= delay <= 2**retry
    assert client.drain_records()[-1]["attempts"] == 4


def test_retry_on_429_honours_retry_after(fake, cache_path):
    client, sleeps = make_client(fake, cache_path, backoff_base_s=0.01)
    fake.plan.append("429:7")
    assert run(client.chat(USER))[0].error is None
    assert fake.chat_count == 2
    assert sleeps[0] >= 7


def test_retry_on_timeout(fake, cache_path):
    client, sleeps = make_client(fake, cache_path, timeout_s=0.5)
    fake.plan.append("sleep:3")
    result = run(client.chat(USER))[0]
    assert result.error is None
    assert fake.chat_count == 2 and len(sleeps) == 1
    # one GET /models for the model's identity (cache key), then the timeout triggered one
    # reachability probe, which passed
    assert fake.models_count == 2


def test_default_timeout_has_a_prompt_length_term():
    from pipelines.llm import default_timeout_s
    from pipelines.llm.types import prompt_chars

    # literal transcription: 60 s + chars / (3 chars/token) / (25 tokens/s) + n * max_tokens / 4
    assert default_timeout_s(512) == pytest.approx(60 + 512 / 4)
    assert default_timeout_s(32, prompt_chars=12_000) == pytest.approx(60 + 160 + 8)
    assert default_timeout_s(100, n=4, prompt_chars=300) == pytest.approx(60 + 4 + 100)
    messages = [{"role": "system", "content": "abc"},
                {"role": "user", "content": [{"type": "text", "text": "hello"},
                                             {"type": "image_url", "image_url": {"url": "x"}}]},
                {"role": "assistant", "content": None}]
    assert prompt_chars(messages) == 8
    with pytest.raises(ValueError, match="prompt_chars must be an int >= 0"):
        default_timeout_s(32, prompt_chars=-1)


def test_without_a_fixed_timeout_each_request_gets_its_own_deadline(fake, cache_path, monkeypatch):
    from pipelines.llm import types

    # shrink the rule's constants so the deadlines are fractions of a second: 0.3 s plus
    # 1 s per 100 prompt characters (max_tokens costs ~nothing)
    monkeypatch.setattr(types, "TIMEOUT_BASE_S", 0.3)
    monkeypatch.setattr(types, "PROMPT_CHARS_PER_TOKEN", 1.0)
    monkeypatch.setattr(types, "MIN_PREFILL_TOKENS_PER_S", 100.0)
    monkeypatch.setattr(types, "MIN_TOKENS_PER_S", 1e9)
    client, _ = make_client(fake, cache_path, timeout_s=None, max_retries=0)
    short = [{"role": "user", "content": "hi"}]
    long = [{"role": "user", "content": "x" * 300}]  # 0.3 + 3 s
    params = SamplingParams(max_tokens=8)
    assert client.request_timeout_s(short, params) == pytest.approx(0.3 + 0.02)
    assert client.request_timeout_s(long, params) == pytest.approx(0.3 + 3.0)
    fake.plan.extend(["sleep:1.5", "sleep:1.5"])
    slow_short = run(client.chat(short, params))[0]
    assert slow_short.error is not None and "timeout after 0.32s" in slow_short.error
    assert run(client.chat(long, params))[0].error is None  # the long prompt may take longer
    fixed, _ = make_client(fake, None, timeout_s=0.3, max_retries=0)
    assert fixed.request_timeout_s(long, params) == 0.3
    fake.plan.append("sleep:1.5")
    assert "timeout after 0.3s" in run(fixed.chat(long, params))[0].error


def test_retry_on_dropped_connection(fake, cache_path):
    client, sleeps = make_client(fake, cache_path)
    fake.plan.append("drop")
    assert run(client.chat(USER))[0].error is None
    assert fake.chat_count == 2 and len(sleeps) == 1


def test_no_retry_on_400(fake, cache_path):
    client, sleeps = make_client(fake, cache_path)
    fake.plan.append("400")
    results = run(client.chat(USER, SamplingParams(n=2)))
    assert fake.chat_count == 1 and sleeps == []
    assert len(results) == 2 and all("HTTP 400" in r.error for r in results)
    record = client.drain_records()[0]
    assert record["status"] == "error" and record["attempts"] == 1 and "HTTP 400" in record["error"]
    run(client.chat(USER))  # the failure was not cached: the next call asks again
    assert fake.chat_count == 2


def test_exhausted_retries_return_an_error_result(fake, cache_path):
    client, sleeps = make_client(fake, cache_path, max_retries=2)
    fake.plan.extend(["500"] * 5)
    result = run(client.chat(USER))[0]
    assert isinstance(result, ChatResult)
    assert result.text == "" and "HTTP 500" in result.error and "3 attempts" in result.error
    assert fake.chat_count == 3 and len(sleeps) == 2


def test_non_json_body_is_an_error_result(fake, cache_path):
    client, _ = make_client(fake, cache_path)
    fake.plan.append("garbage")
    result = run(client.chat(USER))[0]
    assert result.error is not None and "bad response" in result.error
    assert fake.chat_count == 1


def test_unreachable_endpoint_fails_fast_with_the_url(cache_path):
    url = closed_port_url()
    client = LLMClient(url, "fake-model", cache_path=cache_path)
    sleeps: list[float] = []

    async def fake_sleep(delay: float) -> None:
        sleeps.append(delay)

    client._sleep = fake_sleep
    with pytest.raises(EndpointUnreachable) as info:
        run(client.chat(USER))
    assert url in str(info.value) and "WEFT_LLM_BASE_URL" in str(info.value)
    assert sleeps == []  # no backoff rounds before giving up
    record = client.drain_records()[0]
    assert record["status"] == "error" and record["attempts"] == 1


def test_unreachable_endpoint_stops_a_batch(cache_path):
    client = LLMClient(closed_port_url(), "fake-model", cache_path=cache_path)
    with pytest.raises(EndpointUnreachable):
        run(client.map(lambda i: client.chat([{"role": "user", "content": str(i)}]), range(50)))


def test_check_reachable(fake, cache_path):
    client, _ = make_client(fake, cache_path)
    client.check_reachable()
    assert client.ping() == ["fake-model"]
    with pytest.raises(EndpointUnreachable, match="127.0.0.1"):
        LLMClient(closed_port_url(), "m", use_cache=False).check_reachable()
    fake.models_status = 404
    with pytest.raises(EndpointUnreachable, match="/v1"):
        client.check_reachable()


def test_check_reachable_warns_about_an_unserved_model(fake, caplog):
    client = LLMClient(fake.base_url, "not-served", use_cache=False)
    with caplog.at_level(logging.WARNING, logger="pipelines.llm"):
        client.check_reachable()
    assert "not-served" in caplog.text


# ---------------------------------------------------------------- accounting


def test_records_have_the_columns_and_never_the_api_key(fake, cache_path):
    secret = "sk-test-very-secret-123"
    client, _ = make_client(fake, cache_path, api_key=secret, max_retries=0)
    run(client.chat(USER, tag="eval/gsm8k"))
    run(client.chat(USER, tag="eval/gsm8k"))
    fake.plan.append("400")
    run(client.chat([{"role": "user", "content": "other"}], tag="eval/gsm8k"))
    assert fake.headers[0]["authorization"] == f"Bearer {secret}"  # the key was sent...
    records = client.drain_records()
    assert len(records) == 3 and client.drain_records() == []
    for record in records:
        assert set(record) == RECORD_COLUMNS
        assert secret not in repr(record)  # ...and never recorded
        assert record["tag"] == "eval/gsm8k" and record["model"] == "fake-model"
        assert record["created_at"].tzinfo is not None
    assert [r["status"] for r in records] == ["ok", "ok", "error"]
    assert records[0]["prompt_tokens"] > 0 and records[0]["completion_tokens"] > 0
    assert records[0]["cache_key"] == records[1]["cache_key"]
    assert secret not in repr(client)


def test_redact_url():
    assert (
        redact_url("https://user:pw@api.example.com:8443/v1") == "https://api.example.com:8443/v1"
    )
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"


# ---------------------------------------------------------------- sampling


def test_n_choices_are_returned_and_replayed(fake, cache_path):
    client, _ = make_client(fake, cache_path)
    params = SamplingParams(temperature=1.0, n=4)
    first = run(client.chat(USER, params))
    again = run(client.chat(USER, params))
    assert len(first) == 4 and len({r.text for r in first}) == 4
    assert [r.text for r in again] == [r.text for r in first] and fake.chat_count == 1
    assert sum(r.completion_tokens for r in first) == client.drain_records()[0]["completion_tokens"]


def test_k_unseeded_samples_are_k_cache_entries(fake, cache_path):
    client, _ = make_client(fake, cache_path)
    params = SamplingParams(temperature=0.8)
    first = run(client.samples(USER, params, 5, per_request=True))
    assert len({r.text for r in first}) == 5 and fake.chat_count == 5
    again = run(client.samples(USER, params, 5, per_request=True))
    assert [r.text for r in again] == [r.text for r in first] and fake.chat_count == 5
    assert len(client.cache) == 5


def test_k_seeded_samples_use_distinct_seeds(fake, cache_path):
    client, _ = make_client(fake, cache_path)
    run(client.samples(USER, SamplingParams(temperature=0.8, seed=100), 3, per_request=True))
    assert sorted(body["seed"] for body in fake.requests) == [100, 101, 102]
    run(client.samples(USER, SamplingParams(temperature=0.8, seed=100), 3))  # one request, n=3
    assert fake.requests[-1]["n"] == 3 and fake.chat_count == 4


def test_request_carries_the_sampling_params(fake, cache_path):
    client, _ = make_client(
        fake, cache_path, extra_body={"chat_template_kwargs": {"enable_thinking": False}}
    )
    run(
        client.chat(
            USER, SamplingParams(temperature=0.3, top_p=0.9, max_tokens=77, seed=5, stop=("###",))
        )
    )
    body = fake.requests[0]
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"], body["stop"]) == (
        0.3,
        0.9,
        77,
        5,
        ["###"],
    )
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert "response_format" not in body


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"n": 0}, "n must"),
        ({"seed": 1.5}, "seed"),
        ({"stop": ("",)}, "stop"),
    ],
)
def test_bad_sampling_params_are_rejected(kwargs, word):
    with pytest.raises(ValueError, match=word):
        SamplingParams(**kwargs)


def test_stop_given_as_a_string_or_list_becomes_a_tuple():
    assert SamplingParams(stop="\n").stop == ("\n",)
    assert SamplingParams(stop=["a", "b"]).stop == ("a", "b")


@pytest.mark.parametrize("messages", [[], "hello", [{"content": "no role"}], [{"role": "user"}]])
def test_bad_messages_are_rejected(fake, messages):
    client = LLMClient(fake.base_url, "fake-model", use_cache=False)
    with pytest.raises(ValueError, match="messages"):
        run(client.chat(messages))
    assert fake.chat_count == 0


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"base_url": "localhost:8000"}, "base_url"),
        ({"model": ""}, "model"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"json_mode": "xml"}, "json_mode"),
        ({"max_retries": -1}, "max_retries"),
    ],
)
def test_bad_client_config_is_rejected(kwargs, word):
    args = {"base_url": "http://127.0.0.1:8000/v1", "model": "m", **kwargs}
    with pytest.raises(ValueError, match=word):
        LLMClient(args.pop("base_url"), args.pop("model"), use_cache=False, **args)


def test_from_env(monkeypatch):
    for name in ("WEFT_LLM_BASE_URL", "WEFT_LLM_MODEL", "WEFT_LLM_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="WEFT_LLM_MODEL"):
        LLMClient.from_env(use_cache=False)
    monkeypatch.setenv("WEFT_LLM_MODEL", "qwen")
    client = LLMClient.from_env(use_cache=False)
    assert (client.base_url, client.model, client._api_key) == (
        "http://127.0.0.1:8000/v1",
        "qwen",
        "EMPTY",
    )
    monkeypatch.setenv("WEFT_LLM_BASE_URL", "http://10.0.0.1:9000/v1/")
    monkeypatch.setenv("OPENAI_API_KEY", "from-openai")
    assert LLMClient.from_env(use_cache=False)._api_key == "from-openai"
    monkeypatch.setenv("WEFT_LLM_API_KEY", "from-weft")
    client = LLMClient.from_env(use_cache=False, max_concurrency=3)
    assert (client.base_url, client._api_key, client.max_concurrency) == (
        "http://10.0.0.1:9000/v1",
        "from-weft",
        3,
    )


def test_endpoint_reads_the_key_from_the_named_variable(monkeypatch):
    monkeypatch.setenv("MY_KEY", "abc")
    endpoint = Endpoint("http://127.0.0.1:1/v1", "m", api_key_env="MY_KEY")
    assert "abc" not in repr(endpoint)
    assert LLMClient.from_endpoint(endpoint, use_cache=False)._api_key == "abc"
    monkeypatch.delenv("MY_KEY")
    assert endpoint.api_key() == "EMPTY"


def test_backoff_delay_is_capped_and_jittered():
    rng = random.Random(0)
    delays = [backoff_delay(r, 0.5, 4.0, rng) for r in range(8)]
    assert all(0.25 <= d <= 4.0 for d in delays)
    assert max(delays[4:]) <= 4.0 and min(delays[4:]) >= 2.0  # capped at 4 s, jitter keeps >= half
    assert len({round(d, 6) for d in delays[4:]}) > 1  # jittered, not identical


# ---------------------------------------------------------------- cancellation


def test_cancellation_releases_the_slot_and_writes_no_cache_entry(fake, cache_path):
    client, _ = make_client(fake, cache_path, max_concurrency=1)
    fake.plan.append("sleep:30")
    slow = [{"role": "user", "content": "slow"}]

    async def scenario() -> list[ChatResult]:
        task = asyncio.create_task(client.chat(slow))
        while fake.chat_count == 0:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # with the only slot leaked this would hang; the guard turns a hang into a failure
        return await asyncio.wait_for(client.chat(USER), timeout=20)

    result = run(scenario())[0]
    assert result.error is None
    slow_key = cache_key(
        "fake-model", slow, temperature=0.0, top_p=1.0, max_tokens=512, stop=None, seed=None, n=1,
        endpoint=fake.base_url,
    )
    assert client._identity_known and client.model_root is None  # the key the client used
    assert slow_key not in client.cache and len(client.cache) == 1
    records = client.drain_records()
    assert records[0]["error"] == "cancelled" and records[0]["status"] == "error"


def test_cancelled_chat_json_tasks_free_their_slots(fake, cache_path):
    client, _ = make_client(fake, cache_path, max_concurrency=2)
    fake.plan.extend(["sleep:30", "sleep:30"])

    async def scenario() -> JsonResult:
        tasks = [
            asyncio.create_task(client.chat_json([{"role": "user", "content": f"s{i}"}], SCHEMA))
            for i in range(2)
        ]
        while fake.chat_count < 2:
            await asyncio.sleep(0.01)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        fake.plan.append('text:{"answer": 4}')
        return await asyncio.wait_for(client.chat_json(USER, SCHEMA), timeout=20)

    result = run(scenario())
    assert result.value == {"answer": 4}
    assert len(client.cache) == 1


# ---------------------------------------------------------------- structured output


def test_chat_json_sends_the_schema_and_parses(fake, cache_path):
    client, _ = make_client(fake, cache_path)
    fake.plan.append('text:{"answer": 4, "steps": ["2+2=4"]}')
    result = run(client.chat_json(USER, SCHEMA, tag="sxs"))
    assert result == JsonResult(
        {"answer": 4, "steps": ["2+2=4"]}, ['{"answer": 4, "steps": ["2+2=4"]}'], 1, None
    )
    fmt = fake.requests[0]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"] == SCHEMA
    assert fmt["json_schema"]["strict"] is True
    assert fake.requests[0]["messages"] == USER  # schema mode leaves the prompt alone


def test_chat_json_repairs_once(fake, cache_path):
    client, _ = make_client(fake, cache_path)
    fake.plan.extend(["text:The answer is four.", 'text:```json\n{"answer": 4}\n```'])
    result = run(client.chat_json(USER, SCHEMA))
    assert result.value == {"answer": 4} and result.attempts == 2 and result.error is None
    assert result.raw == ["The answer is four.", '```json\n{"answer": 4}\n```']
    repair = fake.requests[1]["messages"]
    assert repair[:-2] == USER
    assert repair[-2] == {"role": "assistant", "content": "The answer is four."}
    assert repair[-1]["role"] == "user" and "not valid JSON" in repair[-1]["content"]
    # both turns were cached: a re-run replays the same outcome with no request
    again = run(client.chat_json(USER, SCHEMA))
    assert again.value == {"answer": 4} and again.attempts == 2 and fake.chat_count == 2


def test_chat_json_gives_up_without_raising(fake, cache_path):
    client, _ = make_client(fake, cache_path)
    fake.plan.extend(['text:{"answer": "four"}', 'text:{"answer": 400}'])
    result = run(client.chat_json(USER, SCHEMA))
    assert result.value is None and result.attempts == 2
    assert "maximum" in result.error and len(result.raw) == 2
    assert "expected integer" in fake.requests[1]["messages"][-1]["content"]


def test_chat_json_uses_the_caller_validator(fake, cache_path):
    client, _ = make_client(fake, cache_path)
    fake.plan.extend(['text:{"answer": 5}', 'text:{"answer": 4}'])

    def must_be_four(value):
        if value["answer"] != 4:
            raise ValueError("2 + 2 is not 5")
        return value["answer"]

    result = run(client.chat_json(USER, SCHEMA, validate=must_be_four))
    assert result.value == 4 and result.attempts == 2
    assert "2 + 2 is not 5" in fake.requests[1]["messages"][-1]["content"]


def test_chat_json_survives_a_crashing_validator(fake, cache_path):
    client, _ = make_client(fake, cache_path)
    fake.plan.extend(['text:{"answer": 1}', 'text:{"answer": 2}'])
    result = run(client.chat_json(USER, SCHEMA, validate=lambda v: v["missing"]))
    assert result.value is None and "KeyError" in result.error


@pytest.mark.parametrize("mode, expected", [("object", {"type": "json_object"}), ("prompt", None)])
def test_chat_json_fallback_modes_put_the_schema_in_the_prompt(fake, cache_path, mode, expected):
    client, _ = make_client(fake, cache_path, json_mode=mode)
    fake.plan.append('text:{"answer": 4}')
    assert run(client.chat_json(USER, SCHEMA)).value == {"answer": 4}
    body = fake.requests[0]
    assert body.get("response_format") == expected
    assert (
        '"answer"' in body["messages"][-1]["content"]
        and USER[0]["content"] in body["messages"][-1]["content"]
    )
    assert USER[0]["content"] == "What is 2 + 2?"  # the caller's messages were not mutated


def test_chat_json_request_failure_is_reported(fake, cache_path):
    client, _ = make_client(fake, cache_path)
    fake.plan.append("400")
    result = run(client.chat_json(USER, SCHEMA))
    assert result.value is None and result.attempts == 1 and result.raw == []
    assert "HTTP 400" in result.error and "json_mode" in result.error


def test_chat_json_rejects_bad_arguments(fake, cache_path):
    client, _ = make_client(fake, cache_path)
    with pytest.raises(ValueError, match="anyOf"):
        run(client.chat_json(USER, {"anyOf": [{"type": "string"}]}))
    with pytest.raises(ValueError, match="n=1"):
        run(client.chat_json(USER, SCHEMA, SamplingParams(n=2)))
    assert fake.chat_count == 0


@pytest.mark.parametrize(
    "text, kind, expected",
    [
        ('{"a": 1}', "object", {"a": 1}),
        ('  ```json\n{"a": [1, 2]}\n```  ', "object", {"a": [1, 2]}),
        ('Here you go:\n{"a": "x}y"} hope it helps {"b": 2}', "object", {"a": "x}y"}),
        ('<think>maybe {"a": 0}</think>\n{"a": 1}', "object", {"a": 1}),
        ('reasoning without an opening tag {"a": 0}</think>{"a": 2}', "object", {"a": 2}),
        ("Sure: [1, 2, 3]", "array", [1, 2, 3]),
        ('x {"a": 1}', "any", {"a": 1}),
        ('{bad} then {"ok": true}', "object", {"ok": True}),
    ],
)
def test_extract_json_finds_the_value(text, kind, expected):
    assert extract_json(text, kind) == expected


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "empty"),
        ("no json here", "found no JSON object"),
        ('{"a": 1', "found no JSON object"),
        ("[1, 2]", "found no JSON object"),
        ("<think>still thinking {", "think"),
    ],
)
def test_extract_json_explains_failure(text, reason):
    with pytest.raises(ValueError, match=reason):
        extract_json(text)


@pytest.mark.parametrize(
    "value, fragment",
    [
        ({"answer": 4}, None),
        ({"answer": 4.0}, None),  # an integral float is an integer in JSON Schema
        ({"answer": True}, "expected integer"),  # a bool is not
        ({}, "missing required key 'answer'"),
        ({"answer": 101}, "above the maximum"),
        ({"answer": -1}, "below the minimum"),
        ({"answer": 1, "steps": ["a", 2]}, "$.steps[1]: expected string"),
        ([1], "expected object"),
    ],
)
def test_schema_errors(value, fragment):
    errors = schema_errors(value, SCHEMA)
    if fragment is None:
        assert errors == []
    else:
        assert any(fragment in e for e in errors), errors


def test_schema_errors_enum_lengths_and_additional_properties():
    schema = {
        "type": "object",
        "properties": {"kind": {"enum": ["a", "b"]}, "name": {"type": "string", "minLength": 2}},
        "additionalProperties": False,
    }
    assert schema_errors({"kind": "a", "name": "ok"}, schema) == []
    errors = schema_errors({"kind": "c", "name": "x", "extra": 1}, schema)
    assert len(errors) == 3
    assert schema_errors({"n": None}, {"properties": {"n": {"type": ["integer", "null"]}}}) == []


@pytest.mark.parametrize(
    "schema, word",
    [
        ({"type": "object", "pattern": "x"}, "pattern"),
        ({"type": "strnig"}, "type"),
        ({"properties": {"a": {"$ref": "#"}}}, "properties.a"),
        ({"required": "a"}, "required"),
        ({"enum": []}, "enum"),
    ],
)
def test_check_schema_rejects_what_it_cannot_enforce(schema, word):
    with pytest.raises(ValueError, match=word):
        check_schema(schema)


@pytest.mark.parametrize("schema", ["not a dict", {"properties": ["a"]}])
def test_check_schema_rejects_wrong_types(schema):
    with pytest.raises(TypeError, match="must be a dict"):
        check_schema(schema)


# ---------------------------------------------------------------- batches


def test_map_preserves_order_and_logs_progress(fake, cache_path, caplog):
    client, _ = make_client(fake, cache_path, max_concurrency=4)
    fake.plan.extend(["400"] * 3)

    async def ask(i: int) -> ChatResult:
        return (await client.chat([{"role": "user", "content": f"item {i}"}], tag="batch"))[0]

    with caplog.at_level(logging.INFO, logger="pipelines.llm"):
        results = run(client.map(ask, range(40), desc="gsm8k"))
    ok = [(i, r) for i, r in enumerate(results) if r.error is None]
    assert len(ok) == 37 and all(r.text.endswith(f"item {i}") for i, r in ok)  # input order kept
    assert "gsm8k: 40/40 done (100%)" in caplog.text and "3 failed" in caplog.text
    assert fake.chat_count == 40


def test_map_raises_or_collects_exceptions():
    async def fn(i: int) -> int:
        if i == 3:
            raise KeyError("boom")
        await asyncio.sleep(0)
        return i * 2

    with pytest.raises(KeyError):
        run(map_ordered(fn, range(10), workers=3))
    results = run(map_ordered(fn, range(10), workers=3, return_exceptions=True))
    assert results[:3] == [0, 2, 4] and isinstance(results[3], KeyError) and results[9] == 18


def test_run_works_inside_a_running_loop(fake, cache_path):
    client, _ = make_client(fake, cache_path)

    async def outer() -> str:
        return run(client.chat(USER))[0].text  # e.g. a notebook cell with a live loop

    assert asyncio.run(outer()).startswith("echo")


def test_cache_file_rows_are_json(fake, cache_path):
    client, _ = make_client(fake, cache_path)
    run(client.chat(USER, SamplingParams(n=2, temperature=1.0)))
    with sqlite3.connect(cache_path) as conn:
        (payload,) = conn.execute("SELECT payload FROM responses").fetchone()
    stored = json.loads(payload)
    assert len(stored["choices"]) == 2 and stored["prompt_tokens"] > 0


def test_one_client_across_many_event_loops_is_clean(fake, cache_path, capfd, caplog):
    client, _ = make_client(fake, cache_path, use_cache=False)
    for i in range(2):
        assert run(client.chat([{"role": "user", "content": f"r{i}"}]))[0].error is None
        assert client._state is None  # run() closed the loop-bound HTTP client on its own loop
        gc.collect()

    async def direct(i: int) -> str:
        result = (await client.chat([{"role": "user", "content": f"d{i}"}]))[0].text
        gc.collect()  # a client left from the previous loop is collected while this one runs
        return result

    for i in range(2):
        assert asyncio.run(direct(i)).endswith(f"d{i}")
    gc.collect()
    noise = capfd.readouterr().err + caplog.text
    assert "Event loop is closed" not in noise and "never retrieved" not in noise


# ---------------------------------------------------------------- the real thing: a local vLLM fake


@pytest.mark.server
def test_real_vllm_server(local_server, tmp_path):
    client = LLMClient(
        local_server.base_url, local_server.served_name, cache_path=tmp_path / "c.sqlite"
    )
    client.check_reachable()
    question = [{"role": "user", "content": "What is 2 + 2? Answer briefly."}]
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 100}},
        "required": ["answer"],
        "additionalProperties": False,
    }

    async def scenario() -> dict:
        out: dict = {}
        out["greedy"] = (await client.chat(question, SamplingParams(max_tokens=24)))[0]
        out["n3"] = await client.chat(question, SamplingParams(max_tokens=24, temperature=1.0, n=3))
        seeded = SamplingParams(max_tokens=24, temperature=1.0, seed=7)
        out["seeded"] = [
            (await client.chat(question, seeded, sample_index=i))[0].text for i in (1, 2)
        ]
        out["too_long"] = (await client.chat(question, SamplingParams(max_tokens=10**6)))[0]
        out["json"] = await client.chat_json(
            question + [{"role": "user", "content": "Reply as JSON with the key answer."}],
            schema,
            SamplingParams(max_tokens=48),
        )
        slow = asyncio.create_task(
            client.chat(
                [{"role": "user", "content": "Tell a long story."}], SamplingParams(max_tokens=2000)
            )
        )
        await asyncio.sleep(0.3)
        slow.cancel()
        await asyncio.gather(slow, return_exceptions=True)
        out["replay"] = (await client.chat(question, SamplingParams(max_tokens=24)))[0]
        return out

    out = run(scenario())
    assert (
        out["greedy"].error is None and out["greedy"].text and out["greedy"].completion_tokens > 0
    )
    assert len(out["n3"]) == 3 and all(r.error is None for r in out["n3"])
    assert out["seeded"][0] == out["seeded"][1]  # vLLM honours per-request seeds
    assert "HTTP 400" in out["too_long"].error  # a bad request is reported once, not retried
    assert out["json"].error is None and isinstance(
        out["json"].value["answer"], int
    )  # guided decoding
    assert out["replay"].cached and out["replay"].text == out["greedy"].text
    records = client.drain_records()
    assert any(r["error"] == "cancelled" for r in records)
    assert [r["attempts"] for r in records if r["error"] and "HTTP 400" in r["error"]] == [1]


def test_a_timed_out_request_is_retried_with_twice_the_deadline(fake, cache_path, monkeypatch):
    """A server slowed by other load: the first attempt misses its deadline while the server
    still generates; the retry gets twice the time instead of the deadline it just missed."""
    from pipelines.llm import types

    monkeypatch.setattr(types, "TIMEOUT_BASE_S", 0.3)
    monkeypatch.setattr(types, "MIN_TOKENS_PER_S", 1e9)
    client, _ = make_client(fake, cache_path, timeout_s=None, max_retries=2)
    short = [{"role": "user", "content": "hi"}]
    params = SamplingParams(max_tokens=8)
    deadline = client.request_timeout_s(short, params)
    fake.plan.extend(["sleep:0.5", "sleep:0.5", "sleep:0.5"])  # each attempt takes 0.5 s
    result = run(client.chat(short, params))[0]
    assert result.error is None  # 0.3 s missed it, 0.6 s was enough
    (record,) = [r for r in client.drain_records() if r["status"] == "ok"]
    assert record["attempts"] == 2 and deadline < 0.5 < 2 * deadline
    # a fixed timeout stays what the user set
    fixed, _ = make_client(fake, None, timeout_s=0.3, max_retries=1)
    fake.plan.extend(["sleep:0.5", "sleep:0.5"])
    assert "timeout after 0.3s" in run(fixed.chat(short, params))[0].error


def test_the_deadline_follows_the_slowest_recent_pace(fake, cache_path):
    from pipelines.llm.client import RATE_SAFETY, RATE_WINDOW
    from pipelines.llm.types import TIMEOUT_BASE_S, default_timeout_s, prompt_chars

    client, _ = make_client(fake, cache_path, timeout_s=None)
    msgs = [{"role": "user", "content": "hi"}]
    params = SamplingParams(max_tokens=512)
    base = default_timeout_s(512, 1, prompt_chars(msgs))
    assert client.observed_rate() is None and client.request_timeout_s(msgs, params) == base
    client._observe(8, 10.0)  # too short to time the pace
    assert client.observed_rate() is None
    client._observe(100, 50.0)  # 2 tokens/s: a server crawling under load
    assert client.observed_rate() == 2.0
    assert client.request_timeout_s(msgs, params) == pytest.approx(
        TIMEOUT_BASE_S + RATE_SAFETY * 512 / 2.0)
    for _ in range(RATE_WINDOW):  # the slow one leaves the window
        client._observe(200, 1.0)
    assert client.observed_rate() == 200.0
    assert client.request_timeout_s(msgs, params) == base  # never below the default
