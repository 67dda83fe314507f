"""Sensor- and schedule-triggered evaluations evaluate a bounded slice by default
(WEFT_NIGHTLY_LIMIT, default 20 problems per benchmark), never whole benchmarks by surprise."""

import contextvars
import datetime as dt

import dagster as dg
import pytest

from assets.schedules import DEFAULT_NIGHTLY_LIMIT, models_sensor, nightly_eval, nightly_limit


@pytest.mark.parametrize("raw, expected", [
    (None, DEFAULT_NIGHTLY_LIMIT), ("", DEFAULT_NIGHTLY_LIMIT), (" 5 ", 5), ("all", None),
    ("ALL", None), ("0", None),
])
def test_nightly_limit_values(monkeypatch, raw, expected):
    if raw is None:
        monkeypatch.delenv("WEFT_NIGHTLY_LIMIT", raising=False)
    else:
        monkeypatch.setenv("WEFT_NIGHTLY_LIMIT", raw)
    assert nightly_limit() == expected


@pytest.mark.parametrize("raw", ["-3", "ten", "2.5"])
def test_bad_nightly_limit_says_what_to_set(monkeypatch, raw):
    monkeypatch.setenv("WEFT_NIGHTLY_LIMIT", raw)
    with pytest.raises(ValueError, match="positive number of problems per benchmark.*'all'"):
        nightly_limit()


def _limits(requests):
    return {r.run_config["ops"]["eval_samples"]["config"]["limit"] for r in requests}


def test_sensor_and_schedule_request_the_default_slice(weft_home, monkeypatch):
    from eval.models import ModelSpec, register_model

    monkeypatch.delenv("WEFT_NIGHTLY_LIMIT", raising=False)
    monkeypatch.delenv("WEFT_EVAL_SUITE", raising=False)
    register_model(ModelSpec(model_id="ckpt-9", kind="endpoint", base_url="http://h:1/v1",
                             served_model="c"))
    home = weft_home / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")

    def evaluate() -> None:
        with dg.instance_for_test(temp_dir=str(home)) as instance:
            result = models_sensor(dg.build_sensor_context(instance=instance))
            assert len(result.run_requests) == 4  # (embedded, ckpt-9) x (gsm8k, math500)
            assert _limits(result.run_requests) == {DEFAULT_NIGHTLY_LIMIT}
            monkeypatch.setenv("WEFT_NIGHTLY_LIMIT", "all")
            context = dg.build_schedule_context(instance=instance,
                                                scheduled_execution_time=dt.datetime(2026, 11, 23))
            assert _limits(nightly_eval(context)) == {None}
    # in a copy of the context: Dagster's sensor evaluation leaves its defs-state context
    # variable set, which breaks later tests' Definitions loading in this process
    contextvars.copy_context().run(evaluate)
