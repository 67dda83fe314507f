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


def test_nightly_schedule_evaluates_new_models_and_baselines(monkeypatch, weft_home, tmp_path):
    import datetime as dt

    from assets.definitions import defs
    from assets.schedules import nightly_eval
    from eval.models import ModelSpec, register_model
    from warehouse import Warehouse

    monkeypatch.setenv("WEFT_EVAL_SUITE", "gsm8k, math500")
    wh = Warehouse()
    register_model(ModelSpec(model_id="remote-a", kind="endpoint", base_url="http://x/v1", served_model="a"))
    register_model(ModelSpec(model_id="remote-b", kind="endpoint", base_url="http://x/v1", served_model="b"))
    # remote-b is already evaluated on gsm8k: only math500 is new for it
    wh.write("eval_samples", [{"model": "remote-b", "benchmark": "gsm8k", "problem_id": "p",
                               "sample_index": 0, "correct": True}], partition="gsm8k@remote-b")
    with dg.instance_for_test() as instance:
        ctx = dg.build_schedule_context(instance=instance, repository_def=defs.get_repository_def(),
                                        scheduled_execution_time=dt.datetime(2026, 11, 22, 2, 0))
        requests = list(nightly_eval.evaluate_tick(ctx).run_requests)
        partitions = set(instance.get_dynamic_partitions("models"))
    pairs = sorted((r.partition_key.keys_by_dimension["benchmark"], r.partition_key.keys_by_dimension["model"])
                   for r in requests)
    # the embedded model is a baseline: evaluated every night
    assert pairs == sorted([("gsm8k", "remote-a"), ("math500", "remote-a"), ("math500", "remote-b"),
                            ("gsm8k", "smollm2-135m-instruct"), ("math500", "smollm2-135m-instruct")])
    assert all(r.run_key.startswith("2026-11-22/") for r in requests)
    assert partitions == {"remote-a", "remote-b", "smollm2-135m-instruct"}


def test_models_sensor_evaluates_every_registered_model_without_scores(monkeypatch, weft_home):
    """One rule: a registered model without samples on a suite benchmark is evaluated there,
    whether its partition is new (ckpt-1) or was added by hand (the embedded model); one with
    samples is not; only missing partitions are added."""
    from assets.definitions import defs
    from assets.partition_defs import table_partition
    from assets.schedules import models_sensor
    from eval.models import ModelSpec, register_model
    from warehouse import Warehouse

    monkeypatch.setenv("WEFT_EVAL_SUITE", "gsm8k")
    register_model(ModelSpec(model_id="ckpt-1", kind="endpoint", base_url="http://x/v1", served_model="c"))
    register_model(ModelSpec(model_id="ckpt-2", kind="endpoint", base_url="http://y/v1", served_model="d"))
    Warehouse().write("eval_samples", [{"benchmark": "gsm8k", "model": "ckpt-2",
                                        "problem_id": "p1", "sample_idx": 0}],
                      partition=table_partition("gsm8k", "ckpt-2"))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("models", ["smollm2-135m-instruct", "ckpt-2"])
        ctx = dg.build_sensor_context(instance=instance, repository_def=defs.get_repository_def())
        result = models_sensor(ctx)
    assert sorted(r.partition_key.keys_by_dimension["model"] for r in result.run_requests) == [
        "ckpt-1", "smollm2-135m-instruct"]
    assert {r.partition_key.keys_by_dimension["benchmark"] for r in result.run_requests} == {"gsm8k"}
    assert result.dynamic_partitions_requests[0].partition_keys == ["ckpt-1"]


def test_eval_suite_rejects_unknown_benchmarks(monkeypatch):
    from assets.partition_defs import eval_suite

    monkeypatch.setenv("WEFT_EVAL_SUITE", "gsm8k,nope")
    with pytest.raises(ValueError, match="nope"):
        eval_suite()


def test_cluster_env_reads_endpoint_from_env_vars():
    from assets.definitions import resources_for

    res = resources_for("cluster")
    assert isinstance(res["llm"].base_url, (str, dg.EnvVar))
    with pytest.raises(ValueError, match="WEFT_ENV"):
        resources_for("staging")


def test_cluster_env_with_slurm_serving_needs_no_endpoint(monkeypatch):
    """WEFT_ENV=cluster with WEFT_SERVE_MODE=slurm and no WEFT_LLM_BASE_URL: the `llm`
    resource serves the model itself (as a Slurm job), instead of requiring an endpoint."""
    from assets.definitions import resources_for

    monkeypatch.delenv("WEFT_LLM_BASE_URL", raising=False)
    monkeypatch.setenv("WEFT_SERVE_MODE", "slurm")
    assert resources_for("cluster")["llm"].base_url == ""
    monkeypatch.setenv("WEFT_LLM_BASE_URL", "http://gpu-node:8000/v1")
    assert isinstance(resources_for("cluster")["llm"].base_url, (str, dg.EnvVar))
    assert resources_for("cluster")["llm"].base_url != ""
    monkeypatch.setenv("WEFT_SERVE_MODE", "kubernetes")
    monkeypatch.delenv("WEFT_LLM_BASE_URL")
    with pytest.raises(ValueError, match="WEFT_SERVE_MODE must be one of local, slurm"):
        resources_for("cluster")
