"""A cache that fails never fails a call: on a full disk ("database or disk is full") or an
unreadable cache file the client warns once and answers without caching. The endpoint is the
in-process fake server; the failing write is simulated at the cache (sqlite3's own error), and
also met for real on a full 4 MB tmpfs where one can be mounted."""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import subprocess

import pytest

from pipelines.llm import LLMClient, run
from pipelines.llm.cache import ResponseCache
from pipelines.llm.testing import FakeLLMServer


def _ask(i: int) -> list[dict]:
    return [{"role": "user", "content": f"What is {i} + {i}?"}]


def _client(server: FakeLLMServer, path) -> LLMClient:
    return LLMClient(server.base_url, "fake-model", cache_path=path)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "LLM cache" in r.getMessage()]


def test_a_cache_write_that_fails_warns_once_and_calls_go_on(tmp_path, monkeypatch, caplog):
    def full(self, *args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(ResponseCache, "put", full)
    with FakeLLMServer() as server, caplog.at_level(logging.WARNING, logger="pipelines.llm"):
        client = _client(server, tmp_path / "c.sqlite")
        results = [run(client.chat(_ask(i)))[0] for i in range(3)]
        again = run(client.chat(_ask(0)))[0]  # not cached: asked again
        assert server.chat_count == 4
    assert [r.error for r in results] == [None] * 3
    assert not again.cached and again.error is None
    (warning,) = _warnings(caplog)
    assert "database or disk is full" in warning and "without caching" in warning
    assert len(client.drain_records()) == 4


def test_a_cache_that_cannot_be_read_is_a_miss(tmp_path, monkeypatch, caplog):
    def broken(self, key):
        raise sqlite3.DatabaseError("file is not a database")

    monkeypatch.setattr(ResponseCache, "get", broken)
    with FakeLLMServer() as server, caplog.at_level(logging.WARNING, logger="pipelines.llm"):
        client = _client(server, tmp_path / "c.sqlite")
        assert [run(client.chat(_ask(1)))[0].error for _ in range(2)] == [None, None]
        assert server.chat_count == 2
    (warning,) = _warnings(caplog)
    assert "file is not a database" in warning


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
                          check=False, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False, capture_output=True)


def test_a_real_full_disk_under_the_cache(small_disk, caplog):
    path = small_disk / "llm_cache.sqlite"
    with FakeLLMServer() as server, caplog.at_level(logging.WARNING, logger="pipelines.llm"):
        client = _client(server, path)
        assert run(client.chat(_ask(0)))[0].error is None  # cached while there is room
        fd = os.open(small_disk / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            for size in (1 << 20, 4096, 1):
                try:
                    while True:
                        os.write(fd, b"\0" * size)
                except OSError as err:
                    assert err.errno == errno.ENOSPC
        finally:
            os.close(fd)
        # long prompts: each entry needs new pages of the database
        big = [[{"role": "user", "content": f"{i} " + "x" * 20_000}] for i in range(5)]
        results = [run(client.chat(messages))[0] for messages in big]
        assert [r.error for r in results] == [None] * 5
        assert run(client.chat(_ask(0)))[0].cached  # reading still works
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "full" in warnings[0]
