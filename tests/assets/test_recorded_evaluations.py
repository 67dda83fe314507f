"""Every stored evaluation goes through one recorded path (``eval.recorded.evaluate_recorded``).

``eval_samples``, ``tandem_eval``, the DUET sweep and the Engagement paper's Table 5 job are run
against a fake endpoint whose first generation request hangs, under an ``llm`` resource with a
1.5 s whole-batch watchdog: each evaluation fails, and each must still write one `runs` row of
the same shape (asset ``eval_samples``, partition ``<benchmark>@<label>``, status ``failed``,
the ``BatchTimeout`` reason), one `llm_calls` record per generation it asked for (answered or
cancelled), and no samples. A caller that bypassed the path (its own
client, its own writes) would miss the watchdog, the calls or the row's shape.

Checkpoints (DUET, Table 5) are served the way ``eval.models.ModelSpec.serve`` reuses a server
already serving the model on the default port: the port is pointed at the fake server.
"""

from __future__ import annotations

from types import SimpleNamespace

import dagster as dg
import pytest

from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.training import TrainerLauncher
from pipelines.llm.testing import FakeLLMServer
from pipelines.settings import weft_home
from training.callbacks import metrics_row
from training.config import load_config
from warehouse import Lineage, Warehouse

PROBLEMS = [
    {"problem_id": f"gsm8k-{i}", "source": "gsm8k", "split": "test", "answer": str(i),
     "problem": f"What is {i} plus 0?", "solution": "", "answer_type": "number", "meta": "{}",
     "dataset_version": "t"} for i in range(4)
]
RUN_COLUMNS = {"status", "error", "started_at", "finished_at", "rows_written", "config_json",
               "git_sha", "run_id", "asset", "partition", "config_hash", "created_at"}


def _llm(server: FakeLLMServer) -> LLMResource:
    return LLMResource(base_url=server.base_url, model=server.models[0], max_retries=0,
                       batch_timeout_s=1.5, max_concurrency=4)


def _resources(server: FakeLLMServer, **extra) -> dict:
    from assets.sandbox_resource import SandboxResource

    return {"llm": _llm(server), "warehouse": WarehouseResource(),
            "grader": GraderResource(processes=1), "sandbox": SandboxResource(), **extra}


def _failed_evaluation(result, server: FakeLLMServer, partition: str) -> dict:
    """The run's single `runs` row for ``eval_samples`` ``partition``, after checking its calls
    and that it wrote no samples."""
    assert not result.success
    wh = Warehouse()
    runs = [r for r in wh.read("runs").to_pylist()
            if r["run_id"] == result.run_id and r["asset"] == "eval_samples"]
    assert len(runs) == 1, runs
    (row,) = runs
    assert row["partition"] == partition  # the evaluation's partition, Dagster's spelling
    assert row["status"] == "failed" and row["error"].startswith("BatchTimeout")
    calls = [c for c in wh.read("llm_calls").to_pylist() if c["run_id"] == result.run_id]
    assert len(calls) == len(PROBLEMS)  # one generation per problem (k = 1, one budget)
    assert {c["partition"] for c in calls} == {partition}
    # stored in the run's own folders, next to earlier runs' records
    assert f"eval_samples/{partition}/{result.run_id}" in wh.partitions("runs")
    assert f"eval_samples/{partition}/{result.run_id}" in wh.partitions("llm_calls")
    assert any(c["status"] != "ok" for c in calls)  # the hung request, cancelled
    assert not [s for s in wh.read("eval_samples").to_pylist() if s["run_id"] == result.run_id]
    return row


@pytest.fixture
def hanging_server(weft_home):
    with FakeLLMServer(models=("fake-model",)) as server:
        server.plan.append("hang")
        Warehouse().write("problems", PROBLEMS, lineage=Lineage(partition="gsm8k"))
        yield server


@pytest.fixture
def default_port_is(monkeypatch):
    """Point the local-serving default port at a server, so ModelSpec.serve reuses it."""
    import pipelines.serving

    def point(server: FakeLLMServer) -> None:
        monkeypatch.setattr(pipelines.serving, "DEFAULT_PORT", server.port)

    return point


def _eval_samples(server) -> dict:
    from assets import evaluation
    from eval.models import ModelSpec, register_model

    register_model(ModelSpec(model_id="fake-model", kind="endpoint", base_url=server.base_url,
                             served_model="fake-model"))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("models", ["fake-model"])
    result = dg.materialize(
        [evaluation.eval_samples], instance=instance, resources=_resources(server),
        partition_key=dg.MultiPartitionKey({"benchmark": "gsm8k", "model": "fake-model"}),
        run_config={"ops": {"eval_samples": {"config": {
            "limit": 4, "sampling": {"k": 1, "max_tokens": 16}}}}},
        raise_on_error=False)
    return _failed_evaluation(result, server, "gsm8k|fake-model")


def _tandem_eval(server) -> dict:
    from assets.tandem import tandem_eval
    from eval.models import ModelSpec, register_model

    server.models = ("senior", "junior")
    for name in server.models:
        register_model(ModelSpec(model_id=name, kind="endpoint", base_url=server.base_url,
                                 served_model=name))
    result = dg.materialize(
        [tandem_eval], resources=_resources(server), raise_on_error=False,
        run_config={"ops": {"tandem_eval": {"config": {
            "model": "senior", "junior": "junior", "limit": 4,
            "sampling": {"k": 1, "temperature": 0.0, "max_tokens": 16}}}}})
    return _failed_evaluation(result, server, "gsm8k|senior")  # the first run: senior solo


class ServedTrainer(TrainerLauncher):
    """Resolves each arm like the real script, writes one made-up train_metrics row and reports
    a checkpoint that the fake server then serves."""

    def launch(self, context, kind, recipe, overrides, extras=None):
        config = load_config(recipe, overrides, expect_kind=kind)
        ck = config.checkpoint_id
        Warehouse().write("train_metrics", [metrics_row(
            {"loss": 0.0}, checkpoint_id=ck, kind="grpo", step=1, epoch=None, step_seconds=1.0,
            steps=1)], lineage=Lineage(run_id=context.run_id), partition=ck)
        folder = weft_home() / "checkpoints" / ck
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text("{}")  # enough to name a model folder
        SERVER.models = (*SERVER.models, ck)
        LAUNCHED.append(ck)
        meta = {"checkpoint_id": dg.MetadataValue.text(ck),
                "checkpoint_path": dg.MetadataValue.path(str(folder))}
        return SimpleNamespace(get_materialize_result=lambda: dg.MaterializeResult(metadata=meta))


SERVER: FakeLLMServer
LAUNCHED: list[str] = []


def _duet_sweep(server) -> dict:
    from assets.duet import duet_sweep

    result = dg.materialize(
        [duet_sweep], resources=_resources(server, trainer=ServedTrainer()), raise_on_error=False,
        run_config={"ops": {"duet_sweep": {"config": {
            "budgets": [1.0], "full_rollouts": 2, "slots": 4, "max_steps": 1,
            "dataset_limit": 8, "eval_limit": 4, "eval_sampling": {"max_tokens": 16}}}}})
    row = _failed_evaluation(result, server, f"gsm8k|{LAUNCHED[0]}")  # the first arm's
    sweep = [r for r in Warehouse().read("runs").to_pylist() if r["asset"] == "duet_sweep"]
    assert [r["status"] for r in sweep] == ["failed"]  # the sweep records its own failure
    return row


def _ep_budget_table(server) -> dict:
    from assets.ep_training import ep_budget_table

    result = dg.materialize(
        [ep_budget_table], resources=_resources(server, trainer=ServedTrainer()),
        raise_on_error=False,
        run_config={"ops": {"ep_budget_table": {"config": {
            "max_steps": 1, "dataset_limit": 8, "rlvr_cap_factors": [1.0], "heldout_n": 4,
            "budgets": [16], "sampling": {"temperature": 0.0}, "evaluate_base": False}}}})
    return _failed_evaluation(result, server, f"ep_heldout|{LAUNCHED[0]}")  # the EP arm's


@pytest.mark.parametrize("caller", [_eval_samples, _tandem_eval, _duet_sweep, _ep_budget_table],
                         ids=["eval_samples", "tandem_eval", "duet_sweep", "ep_budget_table"])
def test_every_evaluation_records_its_calls_and_a_failed_run_of_one_shape(
        caller, hanging_server, default_port_is):
    global SERVER
    SERVER = hanging_server
    LAUNCHED.clear()
    default_port_is(hanging_server)
    row = caller(hanging_server)
    assert set(row) == RUN_COLUMNS
    assert row["rows_written"] == 0 and row["finished_at"] >= row["started_at"]
