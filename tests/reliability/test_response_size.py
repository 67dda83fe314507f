"""The bytes read per response are capped, and an over-size reply is an
error of its row. Memory is measured with tracemalloc in this process while the fake server
runs in a child process, so only the client's allocations count."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tracemalloc

import pytest

from pipelines.llm import LLMClient, run
from pipelines.llm.endpoint import ResponseTooLarge, _CappedStream
from pipelines.llm.testing import FakeLLMServer

MB = 1024 * 1024
SERVER_SCRIPT = """
import sys
from pipelines.llm.testing import FakeLLMServer
server = FakeLLMServer()
server.plan.extend(sys.argv[1:])
server.start()
print(server.port, flush=True)
sys.stdin.read()  # serve until the parent closes our stdin
server.stop()
"""


@pytest.fixture
def huge_server():
    """A fake server in a child process whose first ten replies carry 10 MB of content."""
    proc = subprocess.Popen([sys.executable, "-c", SERVER_SCRIPT, *["huge:10000000"] * 10],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def _ten_huge_replies(base_url: str, **kwargs) -> tuple[list, int]:
    client = LLMClient(base_url, "fake-model", use_cache=False, max_concurrency=10, **kwargs)

    async def ask(i: int):
        return (await client.chat([{"role": "user", "content": f"q{i}"}]))[0]

    tracemalloc.start()
    try:
        results = run(client.map(ask, range(10)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return results, peak, client.drain_records()


def test_oversize_replies_are_row_errors_and_memory_stays_bounded(huge_server):
    results, peak, records = _ten_huge_replies(huge_server, max_response_bytes=1 * MB)
    assert all(r.error is not None and "1048576-byte cap" in r.error for r in results)
    assert all(r["status"] == "error" and r["attempts"] == 1 for r in records)  # not retried
    assert peak < 20 * MB  # ten 10 MB replies, none read


def test_replies_under_the_cap_are_read(huge_server):
    results, _, _ = _ten_huge_replies(huge_server, max_response_bytes=32 * MB)
    assert all(r.error is None and len(r.text) == 10_000_000 for r in results)


def test_capped_stream_stops_a_body_without_content_length():
    chunk = b"x" * 65536
    consumed = []

    class Chunks:
        async def __aiter__(self):
            for _ in range(100):  # 6.5 MB if read to the end
                consumed.append(len(chunk))
                yield chunk

        async def aclose(self):
            return None

    async def read_all() -> int:
        total = 0
        async for part in _CappedStream(Chunks(), 1 * MB):
            total += len(part)
        return total

    with pytest.raises(ResponseTooLarge, match="1048576-byte cap"):
        asyncio.run(read_all())
    assert sum(consumed) <= 1 * MB + len(chunk)


def test_an_oversize_reply_in_process_server():
    with FakeLLMServer() as server:
        server.plan.append("huge:3000000")
        client = LLMClient(server.base_url, "fake-model", use_cache=False,
                           max_response_bytes=1 * MB)
        result = run(client.chat([{"role": "user", "content": "q"}]))[0]
        assert result.error is not None and "cap" in result.error
        assert server.chat_count == 1
        assert run(client.chat([{"role": "user", "content": "q"}]))[0].error is None
    with pytest.raises(ValueError, match="max_response_bytes"):
        LLMClient("http://127.0.0.1:9/v1", "m", use_cache=False, max_response_bytes=0)
