"""One writer per evaluation partition, and scores only from their own run's samples.

Two runs of one ``eval_samples`` partition at once used to interleave: run A (limit 20)
recorded ``eval_scores`` computed from run B's samples. Now the evaluation holds the
partition's lock (``warehouse.locks``) while it writes, a second run is refused at once with a
failed `runs` row naming the holder, a crashed holder leaves no stale lock, and ``eval_scores``
of a run that evaluated the partition scores that run's samples or fails.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import dagster as dg
import pytest

from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.sandbox_resource import SandboxResource
from pipelines.llm.testing import FakeLLMServer
from warehouse import Lineage, Warehouse
from warehouse.locks import PartitionBusy, lock_path, partition_lock

PROBLEMS = [
    {"problem_id": f"gsm8k-{i}", "source": "gsm8k", "split": "test", "answer": str(i),
     "problem": f"What is {i} plus 0?", "solution": "", "answer_type": "number", "meta": "{}",
     "dataset_version": "t"} for i in range(6)
]
PARTITION = "gsm8k|fake-model"
KEY = dg.MultiPartitionKey({"benchmark": "gsm8k", "model": "fake-model"})


def _boxed(body: dict, index: int) -> str:
    return "\\boxed{" + body["messages"][-1]["content"].split("What is ")[1].split(" ")[0] + "}"


@pytest.fixture
def endpoint(weft_home):
    from eval.models import ModelSpec, register_model

    with FakeLLMServer(models=("fake-model",), responder=_boxed) as server:
        Warehouse().write("problems", PROBLEMS, lineage=Lineage(partition="gsm8k"))
        register_model(ModelSpec(model_id="fake-model", kind="endpoint",
                                 base_url=server.base_url, served_model="fake-model"))
        yield server


def _evaluate(server, instance=None, selection=("eval_samples", "eval_scores"), limit=4):
    from assets import evaluation

    instance = instance or dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("models", ["fake-model"])
    assets = [evaluation.eval_samples, evaluation.eval_scores]
    return dg.materialize(
        assets, selection=list(selection), instance=instance, partition_key=KEY,
        resources={"llm": LLMResource(base_url=server.base_url, model="fake-model"),
                   "warehouse": WarehouseResource(), "grader": GraderResource(processes=1),
                   "sandbox": SandboxResource()},
        run_config={"ops": {"eval_samples": {"config": {
            "limit": limit, "sampling": {"max_tokens": 16}}}}} if "eval_samples" in selection
        else None,
        raise_on_error=False)


def test_a_second_run_of_a_partition_is_refused_while_the_first_writes(endpoint):
    with partition_lock("eval_samples", PARTITION, "run-A"):
        refused = _evaluate(endpoint)
    assert not refused.success
    message = refused.get_step_failure_events()[0].event_specific_data.error.message
    assert "being written by another run (run run-A, pid" in message
    assert endpoint.chat_count == 0  # refused before any request
    runs = Warehouse().sql("SELECT status, error FROM runs WHERE run_id = $r AND asset = "
                           "'eval_samples'", {"r": refused.run_id}).to_pylist()
    assert [r["status"] for r in runs] == ["failed"] and "run-A" in runs[0]["error"]
    done = _evaluate(endpoint)  # the lock is free again
    assert done.success


def test_a_killed_holder_leaves_no_stale_lock(weft_home):
    code = ("import time; from warehouse.locks import partition_lock\n"
            f"with partition_lock('eval_samples', {PARTITION!r}, 'run-K'):\n"
            "    print('held', flush=True); time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(PartitionBusy, match="run run-K"), \
                partition_lock("eval_samples", PARTITION, "run-B"):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    assert lock_path("eval_samples", PARTITION).exists()  # the file stays; the lock does not
    deadline = time.monotonic() + 5
    while True:
        try:
            with partition_lock("eval_samples", PARTITION, "run-B"):
                break
        except PartitionBusy:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_scores_come_from_their_own_run_or_the_run_fails(endpoint):
    from assets.evaluation import scored_samples

    done = _evaluate(endpoint, limit=4)
    assert done.success
    wh = Warehouse()
    (n,) = {r["n_problems"] for r in wh.read("eval_scores", partition=PARTITION).to_pylist()}
    assert n == 4
    # another run replaces the partition's samples after this run evaluated it
    other = [dict(r, run_id="run-B") for r in
             wh.read("eval_samples", partition=PARTITION).to_pylist()[:2]]
    wh.write("eval_samples", other, lineage=Lineage(run_id="run-B", asset="eval_samples",
                                                    partition=PARTITION))
    with pytest.raises(dg.Failure, match=r"replaced by run\(s\) \['run-B'\]"):
        scored_samples(wh, PARTITION, done.run_id)
    rows, writer = scored_samples(wh, PARTITION, "a-run-that-only-scores")
    assert writer == "run-B" and len(rows) == len(other)


def test_a_failed_scoring_writes_a_failed_runs_row(endpoint):
    instance = dg.DagsterInstance.ephemeral()
    failed = _evaluate(endpoint, instance=instance, selection=("eval_scores",))
    assert not failed.success  # nothing to score yet
    runs = Warehouse().sql("SELECT asset, partition, status, error FROM runs WHERE run_id = $r",
                           {"r": failed.run_id}).to_pylist()
    assert [(r["asset"], r["partition"], r["status"]) for r in runs] == [
        ("eval_scores", PARTITION, "failed")]
    assert "materialize eval_samples first" in runs[0]["error"]
