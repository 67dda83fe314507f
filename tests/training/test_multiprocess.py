"""Two processes (torchrun, gloo on CPU): the same script trains with data parallelism, rank 0
alone writes the warehouse rows, and token counts cover both processes."""

import json
import subprocess
import sys

import pytest

from pipelines.settings import PROJECT_ROOT
from warehouse import Warehouse


@pytest.mark.slow
def test_grpo_under_two_processes(weft_home, embedded_model_dir):
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
               "-m", "training.grpo", "--recipe", "rlvr_grpo.cpu",
               f"model_name_or_path={embedded_model_dir}", "max_steps=2", "num_generations=2",
               "per_device_train_batch_size=2", "max_completion_length=8", 'save_strategy="no"',
               "dataset_limit=8", "checkpoint_id=two-procs"]
    done = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=900,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = Warehouse().read("train_metrics", partition="two-procs").to_pylist()
    assert [r["step"] for r in rows] == [1, 2]  # written once, by rank 0
    for row in rows:  # TRL's mean length is over the completions of both processes (4)
        mean_length = json.loads(row["logs_json"])["completions/mean_length"]
        assert row["tokens_generated"] == round(4 * mean_length)
    (ck,) = Warehouse().read("checkpoints", partition="two-procs").to_pylist()
    assert ck["status"] == "complete" and (weft_home / "models" / "two-procs").is_dir()
