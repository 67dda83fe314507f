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


def test_report_inside_a_heartbeat_gives_how_far_and_an_eta():
    import time

    from pipelines.progress import heartbeat, progress_line, report

    assert report("nothing to tell", done=1, total=2) is False  # outside: a no-op
    lines: list[str] = []
    with heartbeat("claim x", lines.append, every_s=0.05):
        assert report("training seed 0", done=1, total=4) is True
        time.sleep(0.3)
        with heartbeat("inner", lines.append, every_s=10.0):
            assert report(done=3, total=3)  # the innermost heartbeat gets it
        report(done=2)
        time.sleep(0.3)
    beats = [ln for ln in lines if ln.startswith("claim x: training seed 0")]
    assert any("1/4 (25%)" in ln and "ETA" in ln for ln in beats), lines
    assert any("2/4 (50%)" in ln for ln in beats), lines  # `doing` kept, `done` updated
    assert lines[-1].startswith("claim x: done in")
    # the ETA is the pace so far: 30 s for 1 of 4 leaves 90 s
    assert progress_line("d", {"doing": "x", "done": 1, "total": 4}, 30.0) == (
        "d: x, 1/4 (25%), 30s elapsed, ETA 90s")
    assert progress_line("d", {}, 12.0) == "d: still running, 12s elapsed"


def test_a_patrol_claim_reports_its_training_seeds(monkeypatch):
    from eval.engagement import claims as C
    from pipelines import progress

    seen: list[tuple] = []
    real = progress.report

    def spy(doing=None, done=None, total=None):
        seen.append((doing, done, total))
        return real(doing, done, total)

    monkeypatch.setattr(C, "report", spy)
    monkeypatch.setattr(C.P, "policies", lambda cfg, episodes: {"ep": 1, "patchpro": 0})
    monkeypatch.setattr(C.P, "evaluate", lambda cfg, policy, episodes: type(
        "R", (), {"returns": [float(policy + cfg.seed % 3), float(policy)]})())
    C.patrol_claims("state2", training_seeds=3, n_boot=50)
    assert [(d, t) for _, d, t in seen] == [(0, 3), (1, 3), (2, 3)]
    assert all("Table 2 state2: training seed" in doing for doing, _, _ in seen)
