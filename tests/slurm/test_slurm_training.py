"""Training through Slurm on the test cluster (conftest.py): the generated two-node script's
``srun accelerate launch`` line joining both nodes with gloo on CPU, and (slow) a real
``sft_checkpoint`` materialized by ``TrainerLauncher(mode="slurm")``."""

import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from assets.resources import WarehouseResource
from assets.slurm_pipes import PipesSlurmClient
from assets.training import TrainerLauncher, sft_checkpoint
from pipelines.settings import PROJECT_ROOT
from pipelines.slurm.script import SlurmSettings, TrainingLaunch, batch_script
from warehouse import Warehouse

pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm_cluster")]
HERE = Path(__file__).resolve().parent


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_node_job_runs_srun_accelerate_launch_with_gloo(slurm_cluster, weft_home):
    """The multi-node launch exactly as generated: srun starts one task per node, each runs
    ``accelerate launch --num_machines 2 --machine_rank $SLURM_PROCID ... --rdzv_backend c10d``,
    and both processes join one gloo group (``PartialState(cpu=True)``, as a CPU training run's
    ``use_cpu`` asks)."""
    settings = SlurmSettings(
        python=sys.executable, workdir=str(PROJECT_ROOT), weft_home=str(weft_home), nodes=2,
        main_process_port=_free_port(), job_name="weft-test-ddp",
        env={"PYTHONPATH": str(HERE), "OMP_NUM_THREADS": "1"})
    launch = TrainingLaunch(module="ddp_probe", args=(), one_node=(sys.executable, "-m", "x"))
    client = PipesSlurmClient(poll_interval_s=0.5, report_grace_s=10)

    @dg.asset(name="probe")
    def probe(context: dg.AssetExecutionContext):
        return client.run(context=context,
                          script=lambda env: batch_script(settings, launch, env)
                          ).get_materialize_result()

    result = dg.materialize([probe], instance=dg.DagsterInstance.ephemeral(),
                            raise_on_error=False)
    failure = result.failure_data_for_node("probe")
    assert result.success, failure and failure.user_failure_data
    (mat,) = result.asset_materializations_for_node("probe")
    assert mat.metadata["world_size"].value == 2
    assert mat.metadata["rank_sum"].value == 3.0  # (0 + 1) + (1 + 1): both ranks took part
    assert mat.metadata["distributed_type"].value == "DistributedType.MULTI_CPU"
    assert sorted(mat.metadata["nodes"].value) == sorted(slurm_cluster.nodes)  # one per node
    script = next((weft_home / "pipes" / result.run_id / "probe").glob("*/job.sh")).read_text()
    assert "--machine_rank \"$SLURM_PROCID\"" in script and "--num_machines 2" in script


@pytest.mark.slow  # about 20 s on 2 cores: real training (model loading, two SFT steps) in a job
def test_sft_checkpoint_through_slurm(slurm_cluster, weft_home, embedded_model_dir):
    overrides = [f"model_name_or_path={embedded_model_dir}", "max_steps=2",
                 "per_device_train_batch_size=2", "max_length=96", "dataset=builtin:arith_sft",
                 "dataset_limit=8", 'save_strategy="no"']
    trainer = TrainerLauncher(mode="slurm", time_limit="00:20:00", poll_interval_s=1,
                              report_grace_s=30)
    instance = dg.DagsterInstance.ephemeral()
    started = time.monotonic()
    result = dg.materialize(
        [sft_checkpoint], instance=instance, raise_on_error=False,
        resources={"trainer": trainer, "warehouse": WarehouseResource()},
        run_config={"ops": {"sft_checkpoint": {"config": {"recipe": "sxs_sft.cpu",
                                                          "overrides": overrides}}}})
    failure = result.failure_data_for_node("sft_checkpoint")
    assert result.success, failure and failure.user_failure_data
    (mat,) = result.asset_materializations_for_node("sft_checkpoint")
    job_id = mat.metadata["slurm_job_id"].value
    assert mat.metadata["launcher"].value == "slurm" and mat.metadata["global_step"].value == 2
    path = Path(mat.metadata["checkpoint_path"].value)
    assert path.is_relative_to(weft_home) and (path / "model.safetensors").is_file()
    assert Path(mat.metadata["slurm_log"].value).is_file()
    assert mat.metadata["registered_model"].value == mat.metadata["checkpoint_id"].value
    rows = Warehouse().sql("SELECT kind, step, run_id, asset FROM train_metrics ORDER BY step"
                           ).to_pylist()
    assert [(r["kind"], r["step"]) for r in rows] == [("sft", 1), ("sft", 2)]
    assert {r["run_id"] for r in rows} == {result.run_id}
    assert {r["asset"] for r in rows} == {"sft_checkpoint"}
    messages = [e.message for e in instance.all_logs(result.run_id)]
    assert any(f"Slurm job {job_id}: RUNNING" in m for m in messages)
    print(f"sft_checkpoint through Slurm: {time.monotonic() - started:.1f} s")
