"""Unusable replies are never replayed from the cache as successes.

Empty or null content is a failed request (retried, not cached); structured output still
invalid after the repair round has its cache entries flagged failed, so a re-run asks the
server again and recovers once the server behaves.
"""

from __future__ import annotations

import json
import sqlite3

from pipelines.llm import LLMClient, SamplingParams, run
from pipelines.llm.cache import ResponseCache, cache_key
from pipelines.llm.testing import FakeLLMServer

USER = [{"role": "user", "content": "What is 2 + 2?"}]
SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}


def _client(server: FakeLLMServer, path, **kwargs) -> LLMClient:
    client = LLMClient(server.base_url, "fake-model", cache_path=path, **kwargs)

    async def no_sleep(delay: float) -> None:
        return None

    client._sleep = no_sleep
    return client


def test_empty_and_null_replies_are_retried(tmp_path):
    with FakeLLMServer() as server:
        client = _client(server, tmp_path / "c.sqlite")
        server.plan.extend(["text:", "null"])
        result = run(client.chat(USER))[0]
        assert result.error is None and result.text.endswith("What is 2 + 2?")
        assert server.chat_count == 3
        assert client.drain_records()[0]["attempts"] == 3


def test_a_flaky_run_recovers_on_the_next_run(tmp_path):
    path = tmp_path / "c.sqlite"
    with FakeLLMServer() as server:
        flaky = _client(server, path, max_retries=0)
        server.plan.extend(["text:", "null"])
        first = run(flaky.chat(USER))[0]
        second = run(flaky.chat(USER, sample_index=1))[0]
        assert first.error is not None and "empty reply" in first.error
        assert second.error is not None and "empty reply" in second.error
        run(flaky.aclose())
        # the next run (a fresh client on the same cache file) asks again and gets answers
        rerun = _client(server, path, max_retries=0)
        again = [run(rerun.chat(USER))[0], run(rerun.chat(USER, sample_index=1))[0]]
        assert [r.error for r in again] == [None, None]
        assert not any(r.cached for r in again)
        assert server.chat_count == 4
        # and from now on they are cache hits
        assert run(rerun.chat(USER))[0].cached


def test_an_empty_reply_stored_by_an_older_version_is_a_miss(tmp_path):
    path = tmp_path / "c.sqlite"
    params = SamplingParams()
    with FakeLLMServer() as server:
        key = cache_key("fake-model", USER, temperature=params.temperature, top_p=params.top_p,
                        max_tokens=params.max_tokens, stop=params.stop, seed=params.seed, n=1,
                        endpoint=server.base_url)
        ResponseCache(path).put(key, "fake-model", {
            "choices": [{"text": "", "finish_reason": "stop", "reasoning": None}],
            "prompt_tokens": 3, "completion_tokens": 0, "latency_s": 0.1, "n": 1})
        client = _client(server, path)
        result = run(client.chat(USER))[0]
        assert result.cache_key == key  # the stored entry was looked up, and was a miss
        assert result.error is None and result.text and not result.cached
        assert server.chat_count == 1


def test_invalid_json_is_not_replayed_and_a_rerun_recovers(tmp_path):
    path = tmp_path / "c.sqlite"
    with FakeLLMServer() as server:
        client = _client(server, path, json_mode="prompt")
        server.plan.extend(['text:{"answer": "four"}', "text:no json at all"])
        bad = run(client.chat_json(USER, SCHEMA))
        assert bad.value is None and bad.error is not None and server.chat_count == 2
        run(client.aclose())
        rerun = _client(server, path, json_mode="prompt")
        server.plan.append('text:{"answer": 4}')
        good = run(rerun.chat_json(USER, SCHEMA))
        assert good.error is None and good.value == {"answer": 4}
        assert server.chat_count == 3  # asked again instead of replaying the invalid reply
        assert run(rerun.chat_json(USER, SCHEMA)).value == {"answer": 4}
        assert server.chat_count == 3  # the valid reply is a cache hit


def test_cache_failure_flag(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    cache.put("k", "m", {"v": 1})
    cache.put("k", "m", {"v": 2})
    assert cache.get("k") == {"v": 1}  # the first success wins
    assert cache.mark_failed("k", "invalid JSON") and cache.failure("k") == "invalid JSON"
    assert cache.get("k") is None and "k" not in cache
    cache.put("k", "m", {"v": 3})  # a later success replaces the failed entry
    assert cache.get("k") == {"v": 3} and cache.failure("k") is None
    cache.put("f", "m", {"v": 0}, failed="empty reply")
    assert cache.get("f") is None and cache.failure("f") == "empty reply"
    assert not cache.mark_failed("absent", "x")


def test_a_cache_file_from_before_the_flag_is_upgraded(tmp_path):
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE responses (key TEXT PRIMARY KEY, model TEXT NOT NULL, "
                 "payload TEXT NOT NULL, created_at TEXT NOT NULL)")
    conn.execute("INSERT INTO responses VALUES ('k', 'm', ?, 'then')", (json.dumps({"v": 1}),))
    conn.commit()
    conn.close()
    cache = ResponseCache(path)
    assert cache.get("k") == {"v": 1}
    assert cache.mark_failed("k", "bad") and cache.get("k") is None


def _payload(choices: list[dict], completion_tokens: int) -> dict:
    return {"choices": choices, "prompt_tokens": 3, "completion_tokens": completion_tokens}


def test_empty_choices_table():
    from pipelines.llm.types import empty_choices

    text = {"text": "4", "finish_reason": "stop", "reasoning": None}
    blank = {"text": "", "finish_reason": "stop", "reasoning": None}
    null = {"text": "", "finish_reason": "stop", "reasoning": None, "null_content": True}
    thought = {"text": "", "finish_reason": "length", "reasoning": "let me think",
               "null_content": True}
    assert empty_choices(_payload([text], 1)) == []
    assert empty_choices(_payload([blank], 0)) == [0]  # the server produced nothing
    assert empty_choices(_payload([blank], 1)) == []  # the model answered with nothing
    assert empty_choices(_payload([null], 5)) == [0]  # no message content at all
    assert empty_choices(_payload([thought], 64)) == []  # cut off while reasoning
    assert empty_choices(_payload([text, blank, null], 0)) == [1, 2]
