import dagster as dg
import pytest


def test_definitions_load_with_assets_checks_jobs_and_schedule():
    from assets.definitions import defs

    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    for name in ("problems", "eval_samples", "eval_scores", "gsm8k_problems", "reasoning_gym_problems"):
        assert name in keys
    assert defs.resolve_job_def("eval_job").name == "eval_job"
    schedule = defs.resolve_schedule_def("nightly_eval")
    assert schedule.cron_schedule == "0 2 * * *"
    check_keys = {k.name for k in defs.resolve_asset_graph().asset_check_keys}
    assert {"check_problems_answers_and_ids", "check_eval_samples_all_graded",
            "check_eval_scores_within_unit_interval"} <= check_keys


def test_nightly_schedule_yields_one_run_per_configured_benchmark(monkeypatch):
    from assets.definitions import defs
    from assets.schedules import nightly_eval

    monkeypatch.setenv("WEFT_NIGHTLY_BENCHMARKS", "gsm8k, math500,gpqa_diamond")
    import datetime as dt

    ctx = dg.build_schedule_context(scheduled_execution_time=dt.datetime(2026, 11, 22, 2, 0),
                                    repository_def=defs.get_repository_def())
    requests = list(nightly_eval.evaluate_tick(ctx).run_requests)
    assert [r.partition_key for r in requests] == ["gsm8k", "math500", "gpqa_diamond"]
    assert len({r.run_key for r in requests}) == 3 and all("2026-11-22" in r.run_key for r in requests)


def test_nightly_schedule_rejects_unknown_benchmarks(monkeypatch):
    from assets.schedules import nightly_benchmarks

    monkeypatch.setenv("WEFT_NIGHTLY_BENCHMARKS", "gsm8k,nope")
    with pytest.raises(ValueError, match="nope"):
        nightly_benchmarks()


def test_cluster_env_reads_endpoint_from_env_vars():
    from assets.definitions import resources_for

    res = resources_for("cluster")
    assert isinstance(res["llm"].base_url, (str, dg.EnvVar))
    with pytest.raises(ValueError, match="WEFT_ENV"):
        resources_for("staging")
