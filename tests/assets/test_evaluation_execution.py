"""How evaluation runs execute: ``eval_job`` (and any run of light steps only) runs every step in
the run's own process, a run with another step keeps one process per step, scores are computed
once per evaluation, and one grading pool serves every step of a run.

Runs are created and executed through ``cli.launcher.Launcher`` (what ``weft job`` runs) on a
persistent test instance, against a fake OpenAI-compatible server whose answers are right
exactly for the problems with an even gold answer."""

from __future__ import annotations

import os
from types import SimpleNamespace

import dagster as dg
import pytest

from assets import evaluation, schedules
from assets.execution import IN_PROCESS, AutoExecutor, light_step, weft_executor
from assets.resources import GraderResource
from cli.launcher import Launcher
from pipelines.llm.testing import FakeLLMServer
from warehouse import Warehouse

LOCATION = "tests.assets.eval_location"
KEY = dg.MultiPartitionKey({"benchmark": "gsm8k", "model": "scripted"})


@pytest.fixture
def instance(tmp_path, weft_home):
    overrides = {"run_coordinator": {"module": "dagster._core.run_coordinator",
                                     "class": "DefaultRunCoordinator"},
                 "telemetry": {"enabled": False}}
    home = tmp_path / "dagster"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home), overrides=overrides) as inst:
        yield inst


def _step_pids(instance, run_id: str) -> dict[str, set[int]]:
    """{step key: pids its step events came from}."""
    out: dict[str, set[int]] = {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is not None and event.step_key and event.is_step_event:
            out.setdefault(event.step_key, set()).add(event.pid)
    return out


def _answer(golds: dict[str, str]):
    def responder(body, index):
        prompt = body["messages"][-1]["content"]
        gold = next(a for q, a in golds.items() if q in prompt)
        said = gold if int(gold) % 2 == 0 else str(int(gold) + 1)
        return f"Adding up the numbers.\nThe final answer is \\boxed{{{said}}}."
    return responder


def test_eval_job_runs_its_steps_in_process_and_scores_once(instance, shared_data, monkeypatch):
    import eval.runner
    from eval.models import ModelSpec, register_model

    calls: list[str] = []
    real_score = eval.runner.score

    def counting_score(rows, **kwargs):
        calls.append(kwargs.get("benchmark", ""))
        return real_score(rows, **kwargs)

    monkeypatch.setattr(eval.runner, "score", counting_score)
    monkeypatch.setattr(evaluation, "score", counting_score)
    order: list[str] = []
    real_warm = GraderResource.warm

    def recording_warm(self):
        order.append("grading pool started")
        real_warm(self)

    monkeypatch.setattr(GraderResource, "warm", recording_warm)
    with FakeLLMServer(models=("scripted",)) as server:
        monkeypatch.setenv("EVAL_LOCATION_BASE_URL", server.base_url)
        with Launcher(instance, LOCATION) as launcher:
            ingest = launcher.launch(selection="gsm8k_problems,problems", run_config={
                "ops": {"gsm8k_problems": {"config": {"limit": 4}}}})
            assert ingest.status == dg.DagsterRunStatus.SUCCESS
            golds = {p["problem"]: p["answer"]
                     for p in Warehouse().read("problems", partition="gsm8k").to_pylist()}
            answer = _answer(golds)

            def responder(body, index):
                order.append("answer")
                return answer(body, index)

            server.responder = responder
            register_model(ModelSpec(model_id="scripted", kind="endpoint",
                                     base_url=server.base_url, served_model="scripted"))
            instance.add_dynamic_partitions("models", ["scripted"])
            run = launcher.launch("eval_job", partition=KEY, run_config={
                "ops": {"eval_samples": {"config": {"limit": 4, "sampling": {"max_tokens": 32}}}}})
        assert run.status == dg.DagsterRunStatus.SUCCESS
        assert server.chat_count == 4

    # ingestion (steps without the light tag) kept a process per step ...
    ingest_pids = _step_pids(instance, ingest.run_id)
    assert set(ingest_pids) == {"gsm8k_problems", "problems"}
    assert all(os.getpid() not in pids for pids in ingest_pids.values())
    # ... the evaluation ran generation, scoring and every check here, in the run's process
    eval_pids = _step_pids(instance, run.run_id)
    assert set(eval_pids) == {"eval_samples", "eval_scores",
                              "eval_samples_check_eval_samples_all_graded",
                              "eval_samples_check_eval_samples_runs_agree",
                              "eval_scores_check_eval_scores_within_unit_interval"}
    assert set().union(*eval_pids.values()) == {os.getpid()}
    # scored once: by eval_scores, not also inside eval_samples' evaluation
    assert calls == ["gsm8k"]
    # the grading workers started before the first answer was asked for (they warm up meanwhile)
    assert order[0] == "grading pool started" and order.count("grading pool started") == 1

    samples = Warehouse().read("eval_samples", partition=str(KEY)).to_pylist()
    expected = {p: int(g) % 2 == 0 for p, g in golds.items()}
    assert len(samples) == 4
    assert [s["correct"] for s in samples] == [
        next(v for q, v in expected.items() if q in s["prompt"]) for s in samples]
    scores = {(s["metric"], s["k"]): s
              for s in Warehouse().read("eval_scores", partition=str(KEY)).to_pylist()}
    right = sum(expected.values()) / 4
    assert set(scores) == {("avg@k", 1), ("pass@k", 1)}
    for row in scores.values():
        assert row["value"] == pytest.approx(right)
        assert row["ci_low"] <= row["value"] <= row["ci_high"]
        assert row["n_problems"] == 4 and row["failed"] == 0


def test_warming_the_grader_starts_its_workers_without_waiting():
    grader = GraderResource(processes=2)
    try:
        grader.warm()
        with grader.pool() as pool:
            assert len(pool.worker_pids()) == 2
            assert [r.correct for r in pool.grade_many([("\\boxed{4}", "4")])] == [True]
    finally:
        grader.close()


def test_one_grading_pool_serves_every_step_of_a_run_and_stops_with_it():
    seen: list[tuple[int, tuple[int, ...]]] = []

    @dg.asset
    def first(grader: GraderResource) -> None:
        with grader.pool() as pool:
            assert [r.correct for r in pool.grade_many([("\\boxed{4}", "4")], kind="math")] == [True]
            seen.append((id(pool), tuple(pool.worker_pids())))

    @dg.asset(deps=[first])
    def second(grader: GraderResource) -> None:
        with grader.pool() as pool:
            assert [r.correct for r in pool.grade_many([("\\boxed{5}", "4")], kind="math")] == [False]
            seen.append((id(pool), tuple(pool.worker_pids())))

    assert dg.materialize([first, second], resources={"grader": GraderResource(processes=1)}).success
    (pool_a, pids_a), (pool_b, pids_b) = seen
    assert pool_a == pool_b and pids_a == pids_b and len(pids_a) == 1
    # the run's end stopped the worker
    with pytest.raises(ProcessLookupError):
        os.kill(pids_a[0], 0)


def test_executor_choice_follows_the_light_tag():
    light = SimpleNamespace(tags=dict(IN_PROCESS, other="x"))
    heavy = SimpleNamespace(tags={"other": "x"})
    chooser = AutoExecutor(in_process=None, multiprocess=None)  # type: ignore[arg-type]
    assert chooser.chooses_in_process([light, light])
    assert not chooser.chooses_in_process([light, heavy])
    assert not chooser.chooses_in_process([])
    assert not light_step(None)
    # the evaluation steps carry the tag; the eval job runs in process whatever they carry
    for spec in (evaluation.eval_samples, evaluation.eval_scores):
        assert light_step(spec.op.tags)
    for check in (evaluation.check_eval_samples_all_graded,
                  evaluation.check_eval_samples_runs_agree,
                  evaluation.check_eval_scores_within_unit_interval):
        assert light_step(check.op.tags)
    # eval_job has no executor of its own: the code location's executor runs it (in process,
    # as every step above is light), so run config may pin a mode as for any other job
    assert schedules.eval_job.executor_def is None
    from assets.definitions import defs

    assert defs.executor is weft_executor


@pytest.mark.parametrize("job", ["eval_job", "ingest_job"])
def test_the_demos_run_config_is_valid_for_the_jobs_it_launches(job):
    """The demo pins every stage in process through the executor's config; each job the demo
    launches must accept that config (a job with an executor of its own rejected it)."""
    from assets.definitions import defs
    from cli.demo import demo_run_config

    job_def = defs.resolve_job_def(job)
    execution = dg.validate_run_config(job_def, demo_run_config())["execution"]
    assert list(execution) == ["weft"] and list(execution["weft"]) == ["in_process"]
    with pytest.raises(dg.DagsterInvalidConfigError, match="in_process_x"):
        dg.validate_run_config(job_def, {"execution": {"config": {"in_process_x": {}}}})
