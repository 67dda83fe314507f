"""pipelines.progress: weft loggers on stderr, gather with progress lines, blocking-phase heartbeat."""

import asyncio
import logging
import time

import pytest

from pipelines.progress import WEFT_LOGGERS, gather_with_progress, heartbeat, log_to_stderr


@pytest.fixture
def restore_loggers():
    saved = {n: (logging.getLogger(n).level, list(logging.getLogger(n).handlers),
                 logging.getLogger(n).propagate) for n in WEFT_LOGGERS}
    yield
    for name, (level, handlers, propagate) in saved.items():
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.handlers[:] = handlers
        logger.propagate = propagate


def test_log_to_stderr_prints_weft_info_lines_once(restore_loggers, capfd):
    log_to_stderr()
    log_to_stderr("info")  # idempotent: still one handler per logger
    logging.getLogger("eval.runner").info("grading 3 samples")
    logging.getLogger("thirdparty").info("not ours")
    err = capfd.readouterr().err
    assert err.count("grading 3 samples") == 1 and "INFO eval.runner: grading 3 samples" in err
    assert "not ours" not in err
    with pytest.raises(ValueError, match="unknown log level 'loud'"):
        log_to_stderr("loud")


def test_gather_with_progress_keeps_order_and_counts_failures():
    lines = []

    async def item(i):
        await asyncio.sleep(0.01 * (5 - i))  # finish in reverse order
        return {"i": i, "completion_tokens": 10, "error": "boom" if i == 2 else None}

    results = asyncio.run(gather_with_progress([item(i) for i in range(5)], desc="align",
                                               log=lines.append))
    assert [r["i"] for r in results] == [0, 1, 2, 3, 4]
    assert lines[-1].startswith("align: 5/5 done (100%), 1 failed")
    assert "tokens/s" in lines[-1] and "eta 0s" in lines[-1]
    assert asyncio.run(gather_with_progress([], desc="none", log=lines.append)) == []


def test_gather_with_progress_raises_the_first_error():
    async def bad():
        raise KeyError("missing")

    async def slow():
        await asyncio.sleep(5)

    with pytest.raises(KeyError, match="missing"):
        asyncio.run(gather_with_progress([slow(), bad()], desc="x", log=lambda _: None))


def test_heartbeat_speaks_while_a_blocking_call_runs():
    lines = []
    with heartbeat("grading 9 samples", lines.append, every_s=0.05) as info:
        time.sleep(0.5)  # blocks this thread, as a process-pool grade_many call does
    assert lines[0] == "grading 9 samples: started"
    assert any("still running" in line for line in lines[1:-1])
    assert lines[-1].startswith("grading 9 samples: done in") and info["elapsed_s"] > 0
    failed = []
    with pytest.raises(RuntimeError), heartbeat("x", failed.append, every_s=10):
        raise RuntimeError("stop")
    assert failed[-1].startswith("x: failed after")
