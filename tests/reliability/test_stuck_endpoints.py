"""A stuck request must not stall a run for long, nor silently.

Request deadlines come from the LLM resource (scaled to max_tokens by default), a whole-batch
watchdog stops a batch that outlives its deadline, and progress (done/total, failures,
tokens/s, ETA) is reported at least every ``log_every_s`` even while nothing finishes.
"""

from __future__ import annotations

import asyncio
import time

import dagster as dg
import pytest

from assets.resources import LLMResource
from pipelines.llm import BatchTimeout, LLMClient, map_ordered, run
from pipelines.llm.testing import FakeLLMServer
from warehouse import Warehouse


def test_default_request_timeout_scales_with_max_tokens():
    llm = LLMResource(base_url="http://127.0.0.1:9/v1", model="m")
    # literal transcription of the documented rule with no prompt: 60 s + max_tokens / (4 tokens/s)
    assert llm.request_timeout_s(512) == pytest.approx(60 + 512 / 4)
    assert llm.request_timeout_s(8192) == pytest.approx(60 + 8192 / 4)
    assert LLMResource(base_url="http://x/v1", model="m", timeout_s=7).request_timeout_s(8192) == 7
    settings = llm.client_settings(64, requests=10, max_concurrency=4)
    # 3 waves of 4, each allowed the full schedule of one request (5 attempts + 4 backoffs
    # of at most 30 s), plus 60 s of slack
    assert settings["batch_timeout_s"] == pytest.approx(3 * (5 * (60 + 64 / 4) + 4 * 30) + 60)
    assert LLMResource(base_url="http://x/v1", model="m", batch_timeout_s=60).client_settings(
        64, requests=10)["batch_timeout_s"] == 60


def test_heartbeat_reports_while_nothing_finishes():
    lines: list[str] = []

    async def stuck(i: int) -> dict:
        await asyncio.sleep(1.6 if i == 0 else 0)
        return {"completion_tokens": 10, "gen_error": None}

    started = time.monotonic()
    run(map_ordered(stuck, range(3), workers=3, log_every_s=0.3, log=lines.append, desc="stall"))
    assert time.monotonic() - started < 5
    during_stall = [ln for ln in lines if ln.startswith("stall: 2/3 done")]
    assert len(during_stall) >= 3  # ~1.5 s stalled at 2/3 with a 0.3 s interval
    assert all("tokens/s" in ln and "eta" in ln and "failed" in ln for ln in lines)
    assert lines[-1].startswith("stall: 3/3 done (100%), 0 failed")


def test_progress_counts_failed_rows_and_tokens():
    lines: list[str] = []

    async def fn(i: int) -> dict:
        return {"completion_tokens": 5, "gen_error": "boom" if i % 2 else None}

    run(map_ordered(fn, range(4), workers=2, log=lines.append, desc="rows"))
    assert lines[-1].startswith("rows: 4/4 done (100%), 2 failed")


def test_watchdog_stops_a_batch_with_a_hung_request():
    with FakeLLMServer() as server:
        server.plan.extend(["ok", "hang"])
        client = LLMClient(server.base_url, "fake-model", use_cache=False, max_concurrency=1,
                           timeout_s=600, batch_timeout_s=1.5)

        async def ask(i: int):
            return await client.chat([{"role": "user", "content": f"q{i}"}])

        started = time.monotonic()
        with pytest.raises(BatchTimeout, match="1.5s deadline with 2 of 3 items unfinished"):
            run(client.map(ask, range(3)))
        assert time.monotonic() - started < 10  # not the 600 s request deadline
        records = client.drain_records()
        # the finished call is recorded; the hung one and the one queued behind it were
        # cancelled by the watchdog and are recorded as such
        assert sorted(r["status"] for r in records) == ["error", "error", "ok"]
        assert [r["error"] for r in records if r["status"] == "error"] == ["cancelled"] * 2


def test_eval_request_timeout_comes_from_the_resource(eval_env):
    """A reply that takes 40 s must fail after the resource's 1 s deadline, not wait (the
    asset used to hard-code 900 s), and progress lines must reach the Dagster run log."""
    eval_env.server.plan.extend(["sleep:40"])
    instance = dg.DagsterInstance.ephemeral()
    started = time.monotonic()
    result = eval_env.evaluate(llm={"timeout_s": 1.0, "max_retries": 0, "progress_every_s": 0.5},
                               selection=("eval_samples",), instance=instance, k=1,
                               temperature=0.0, limit=3)
    elapsed = time.monotonic() - started
    assert result.success
    assert elapsed < 30
    samples = Warehouse().read("eval_samples").to_pylist()
    timed_out = [s for s in samples if s["gen_error"]]
    assert len(timed_out) == 1 and "timeout after 1s" in timed_out[0]["gen_error"]
    logs = [e.user_message for e in instance.all_logs(result.run_id)]
    progress = [m for m in logs if "done (" in m and "tokens/s" in m and "eta" in m]
    assert progress and any(m.startswith("generate gsm8k") and "3/3 done" in m for m in progress)
    assert any("request timeout 1s" in m for m in logs)
