"""The Slurm job script and the Slurm command parsers, offline (no cluster): sbatch flags,
the one-node and multi-node launches (with a vLLM node), what the launched processes really
receive (the script run against stub ``srun``/``scontrol``), bad settings, and the trainer
resource's slurm mode and environment wiring."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from assets.training import TrainerLauncher, sft_checkpoint, trainer_for
from pipelines.models import embedded_model_dir
from pipelines.slurm.jobs import (
    JobState,
    normalize_state,
    parse_job_id,
    parse_scontrol,
    state_from_sacct,
    state_from_scontrol,
    state_from_squeue,
)
from pipelines.slurm.script import (
    SlurmSettings,
    TrainingLaunch,
    batch_script,
    time_limit_seconds,
)
from training.config_recipes import read_recipe

SHARED = {"python": "/shared/weft/.venv/bin/python", "workdir": "/shared/weft",
          "weft_home": "/shared/weft/.weft"}
GRPO_ARGS = ("--recipe", "rlvr_grpo", "model_name_or_path=/shared/ck/sft-1",
             "rewards=[outcome, {name: length_penalty, weight: 0.5}]")


def _grpo_launch(**kw) -> TrainingLaunch:
    return TrainingLaunch(module="training.grpo", args=GRPO_ARGS,
                          one_node=(SHARED["python"], "-m", "training.grpo", *GRPO_ARGS),
                          **kw)


@pytest.mark.parametrize(("text", "seconds"), [
    ("30", 1800), ("0:05", 5), ("1:30", 90), ("04:00:00", 14400), ("1-12", 129600),
    ("2-00:30", 174600), ("1-01:02:03", 90123), ("UNLIMITED", None), ("infinite", None),
])
def test_time_limit_seconds_reads_every_slurm_form(text, seconds):
    assert time_limit_seconds(text) == seconds


@pytest.mark.parametrize("text", ["soon", "1h", "1:2:3:4", "-5", "1-", ""])
def test_time_limit_seconds_refuses_other_text(text):
    with pytest.raises(ValueError, match="time_limit must be a Slurm time"):
        time_limit_seconds(text)


@pytest.mark.parametrize(("change", "message"), [
    ({"python": "python3"}, "python must be an absolute path"),
    ({"weft_home": ""}, "weft_home must be an absolute path"),
    ({"nodes": 0}, "nodes must be >= 1"),
    ({"time_limit": "tomorrow"}, "time_limit must be a Slurm time"),
    ({"mem": "lots"}, "mem must be an sbatch --mem value"),
    ({"sbatch_args": ("exclusive",)}, "each sbatch_args item is one sbatch flag"),
    ({"setup": ("module load a\nmodule load b",)}, "must not contain line breaks"),
    ({"vllm_nodes": 1}, "vllm_nodes=1 needs nodes >= 2"),
    ({"vllm_nodes": 1, "nodes": 2}, "needs gpus_per_node >= 1"),
    ({"vllm_nodes": 2, "nodes": 3, "gpus_per_node": 8}, "vllm_nodes must be 0 or 1"),
    ({"container_mounts": ("/a:/a",)}, "container_mounts needs container_image"),
    ({"env": {"BAD-NAME": "x"}}, "shell identifiers"),
    ({"main_process_port": 0}, "main_process_port must be a TCP port"),
])
def test_bad_settings_say_what_to_change(change, message):
    with pytest.raises(ValueError, match=message):
        SlurmSettings(**{**SHARED, **change})


def test_one_node_script_runs_todays_command_with_the_sbatch_flags():
    settings = SlurmSettings(**SHARED, partition="gpu", account="proj", qos="high",
                             time_limit="04:00:00", gpus_per_node=1, cpus_per_task=16,
                             mem="120G", constraint="h100", sbatch_args=("--exclusive",),
                             setup=("module load cuda/12.4",), env={"HF_HUB_OFFLINE": "1"})
    launch = TrainingLaunch(module="training.sft", args=("--recipe", "sxs_sft"),
                            one_node=(SHARED["python"], "-m", "training.sft", "--recipe",
                                      "sxs_sft"))
    script = batch_script(settings, launch, env={"DAGSTER_PIPES_CONTEXT": "eJy=="})
    directives = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert directives == [
        "#SBATCH --job-name=weft-train", "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1",
        "#SBATCH --partition=gpu", "#SBATCH --account=proj", "#SBATCH --qos=high",
        "#SBATCH --time=04:00:00", "#SBATCH --mem=120G", "#SBATCH --constraint=h100",
        "#SBATCH --gpus-per-node=1", "#SBATCH --cpus-per-task=16",
        "#SBATCH --signal=B:USR1@300", "#SBATCH --exclusive"]
    body = script.splitlines()
    assert body.index("module load cuda/12.4") < body.index("set +e")  # setup may fail the job
    for line in ("cd /shared/weft", "export WEFT_HOME=/shared/weft/.weft",
                 "export HF_HUB_OFFLINE=1", "export DAGSTER_PIPES_CONTEXT=eJy==",
                 "/shared/weft/.venv/bin/python -m training.sft --recipe sxs_sft &",
                 "trap weft_on_usr1 USR1"):
        assert line in body, line
    assert "srun" not in script  # one node: the batch step runs the command itself
    _syntax_ok(script)


def test_one_node_in_a_pyxis_container_runs_under_srun():
    settings = SlurmSettings(**SHARED, container_image="nvcr.io#nvidia/pytorch:25.01-py3",
                             container_mounts=("/shared:/shared",))
    script = _joined(batch_script(settings, _grpo_launch()))
    assert ("srun --export=ALL --nodes=1 --ntasks=1 "
            "'--container-image=nvcr.io#nvidia/pytorch:25.01-py3' "
            "--container-workdir=/shared/weft --container-mounts=/shared:/shared "
            "/shared/weft/.venv/bin/python -m training.grpo --recipe rlvr_grpo") in script


def _joined(script: str) -> str:
    """The script with its continuation lines joined."""
    return script.replace(" \\\n    ", " ")


def test_two_node_grpo_serves_vllm_on_the_last_node():
    settings = SlurmSettings(**SHARED, nodes=2, gpus_per_node=8, vllm_nodes=1)
    script = batch_script(settings, _grpo_launch(processes_per_node=8, vllm_model="/shared/ck/sft-1"))
    assert "#SBATCH --nodes=2" in script
    assert 'export WEFT_VLLM_HOST="${weft_hosts[1]}"' in script
    assert "/shared/weft/.venv/bin/trl vllm-serve --model /shared/ck/sft-1" in script
    assert "--tensor-parallel-size 8" in script
    assert '"vllm_server_base_url=http://${WEFT_VLLM_HOST}:8000"' in script
    assert 'kill "$weft_vllm_pid"' in script
    assert "--num_machines" not in script  # one training node: the one-node command
    _syntax_ok(script)


def test_a_vllm_node_needs_the_model_to_serve():
    settings = SlurmSettings(**SHARED, nodes=2, gpus_per_node=8, vllm_nodes=1)
    with pytest.raises(ValueError, match="model_name_or_path"):
        batch_script(settings, _grpo_launch())


def _syntax_ok(script: str) -> None:
    done = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True,
                          check=False)
    assert done.returncode == 0, done.stderr


def _stub(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_what_each_node_receives_from_the_multi_node_script(tmp_path):
    """The generated script run by bash against stubs: ``scontrol`` names three hosts, ``srun``
    runs each task with its ``SLURM_PROCID`` (and records its flags), the interpreter and
    ``trl`` record their arguments. Quoting, expansion and the host split are checked on what
    the processes really get."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "calls.jsonl"
    recorder = (f"#!{sys.executable}\nimport json, os, sys\n"
                f"with open({str(record)!r}, 'a') as f:\n"
                "    f.write(json.dumps({'argv': sys.argv, 'rank': os.environ.get("
                "'SLURM_PROCID'), 'srun': os.environ.get('STUB_SRUN_FLAGS')}) + '\\n')\n")
    python, trl = tmp_path / "venv" / "python", tmp_path / "venv" / "trl"
    python.parent.mkdir()
    _stub(python, recorder)
    _stub(trl, recorder)
    _stub(bin_dir / "scontrol", "#!/bin/bash\nprintf 'n1\\nn2\\nn3\\n'\n")
    _stub(bin_dir / "srun", """#!/bin/bash
flags=(); ntasks=1
while [[ "$1" == --* ]]; do flags+=("$1"); [[ "$1" == --ntasks=* ]] && ntasks=${1#--ntasks=}; shift; done
export STUB_SRUN_FLAGS="${flags[*]}"
for ((i = 0; i < ntasks; i++)); do SLURM_PROCID=$i "$@"; done
""")
    settings = SlurmSettings(python=str(python), workdir=str(tmp_path), weft_home=str(tmp_path),
                             nodes=3, gpus_per_node=4, cpus_per_task=8, vllm_nodes=1,
                             main_process_port=29555)
    script = batch_script(settings, TrainingLaunch(
        module="training.grpo", args=GRPO_ARGS, one_node=(str(python),), processes_per_node=4,
        accelerate_config="training/accelerate/zero2.yaml", vllm_model="/shared/ck/sft-1"))
    job = tmp_path / "job.sh"
    job.write_text(script)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "n[1-3]"}
    done = subprocess.run(["bash", str(job)], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    server = next(c for c in calls if c["argv"][0] == str(trl))
    assert server["argv"][1:] == ["vllm-serve", "--model", "/shared/ck/sft-1", "--host", "0.0.0.0",
                                  "--port", "8000", "--tensor-parallel-size", "4"]
    assert "--nodelist=n3" in server["srun"] and "--gpus-per-node=4" in server["srun"]
    trainers = sorted((c for c in calls if c["argv"][0] == str(python)), key=lambda c: c["rank"])
    assert [c["rank"] for c in trainers] == ["0", "1"]
    for rank, call in enumerate(trainers):
        assert "--nodelist=n1,n2" in call["srun"] and "--cpus-per-task=8" in call["srun"]
        argv = call["argv"][1:]
        assert argv[:4] == ["-m", "accelerate.commands.launch", "--config_file",
                            "training/accelerate/zero2.yaml"]
        flags = dict(zip(argv[4:20:2], argv[5:20:2], strict=True))
        assert flags == {"--num_machines": "2", "--num_processes": "8",
                         "--machine_rank": str(rank), "--main_process_ip": "n1",
                         "--main_process_port": "29555", "--rdzv_backend": "c10d",
                         "--rdzv_conf": f"is_host={int(rank == 0)}", "-m": "training.grpo"}
        assert argv[20:] == [*GRPO_ARGS, "use_vllm=true", "vllm_mode=server",
                             "vllm_server_base_url=http://n3:8000"]


@pytest.mark.parametrize(("line", "expected"), [
    (("JobId=7 JobName=weft-train UserId=root(0) JobState=TIMEOUT Reason=TimeLimit "
      "Dependency=(null) ExitCode=0:15 NodeList=gpu[01-02] TRES=cpu=2,mem=4G,node=2 "
      "Command=/x/job.sh"), JobState("7", "TIMEOUT", "TimeLimit", "0:15", "gpu[01-02]",
                                   "scontrol")),
    ("JobId=8 JobState=PENDING Reason=Resources ExitCode=0:0 NodeList=(null)",
     JobState("8", "PENDING", "Resources", "0:0", "(null)", "scontrol")),
])
def test_scontrol_lines_become_states(line, expected):
    assert state_from_scontrol(expected.job_id, line) == expected
    assert parse_scontrol(line)["JobState"] == expected.state


def test_sacct_squeue_and_sbatch_outputs_parse():
    assert normalize_state("CANCELLED by 0") == "CANCELLED"
    assert normalize_state("COMPLETED+") == "COMPLETED"
    rows = "12|PREEMPTED|0:0|n1\n12|CANCELLED by 1000|0:15|n1,n2\n"
    assert state_from_sacct("12", rows) == JobState("12", "CANCELLED", "", "0:15", "n1,n2",
                                                    "sacct")
    assert state_from_sacct("13", rows) is None
    assert state_from_squeue("5", "5|PENDING|Priority|\n") == JobState(
        "5", "PENDING", "Priority", "", "", "squeue")
    assert parse_job_id("1234\n") == "1234" and parse_job_id("99;cluster-a") == "99"
    described = JobState("3", "OUT_OF_MEMORY", "", "0:125").describe()
    assert "exit code 0:125" in described and "raise mem" in described
    assert JobState("3", "RUNNING").finished is False
    assert JobState("3", "TIMEOUT").finished and not JobState("3", "TIMEOUT").succeeded


def test_the_trainer_builds_slurm_scripts_from_recipes(weft_home):
    one = TrainerLauncher(mode="slurm", python="/shared/weft/.venv/bin/python",
                          workdir="/shared/weft", gpus_per_node=4, accelerate_config="ddp")
    script = one.batch_script("sft", "sxs_sft", ["max_steps=5"])
    assert ("/shared/weft/.venv/bin/python -m accelerate.commands.launch \\\n"
            "    --config_file training/accelerate/ddp.yaml --num_processes 4 -m training.sft "
            "--recipe sxs_sft \\\n    max_steps=5 &") in script
    assert f"export WEFT_HOME={weft_home}" in script
    assert one.command("sft", "sxs_sft", ["max_steps=5"])[-3:] == ["--recipe", "sxs_sft",
                                                                   "max_steps=5"]
    # a one-node GRPO job keeps GPUs for the server the training script starts
    kept = TrainerLauncher(mode="slurm", gpus_per_node=4, vllm_gpus=1)
    assert "vllm_server_gpus=[3]" in kept.batch_script("grpo", "rlvr_grpo", [])
    two = TrainerLauncher(mode="slurm", nodes=2, gpus_per_node=8, vllm_nodes=1)
    script = _joined(two.batch_script("grpo", "rlvr_grpo", []))
    # the recipe's model is served: `embedded`, the converted model's folder under WEFT_HOME
    assert read_recipe("rlvr_grpo").values["model_name_or_path"] == "embedded"
    assert f"vllm-serve --model {embedded_model_dir()} " in script
    assert "#SBATCH --nodes=2" in script
    with pytest.raises(ValueError, match="vllm_nodes only applies to GRPO"):
        two.batch_script("sft", "sxs_sft", [])
    with pytest.raises(ValueError, match="set vllm_nodes=1"):
        TrainerLauncher(mode="slurm", nodes=2, gpus_per_node=8, vllm_gpus=1).batch_script(
            "grpo", "rlvr_grpo", [])


def test_bad_slurm_settings_fail_the_asset_before_anything_is_submitted(weft_home):
    trainer = TrainerLauncher(mode="slurm", time_limit="until done")
    result = dg.materialize(
        [sft_checkpoint], resources={"trainer": trainer, "warehouse": _warehouse()},
        run_config={"ops": {"sft_checkpoint": {"config": {"recipe": "sxs_sft.cpu"}}}},
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    failure = result.failure_data_for_node("sft_checkpoint")
    assert "bad Slurm settings of the trainer resource: time_limit must be a Slurm time" in \
        failure.user_failure_data.description
    assert not (weft_home / "pipes").exists()


def _warehouse():
    from assets.resources import WarehouseResource

    return WarehouseResource()


def test_cluster_env_picks_slurm_and_reads_weft_slurm_variables(monkeypatch):
    monkeypatch.setenv("WEFT_TRAINER_MODE", "slurm")
    for name, value in {"PARTITION": "gpu", "ACCOUNT": "proj", "TIME_LIMIT": "12:00:00",
                        "NODES": "4", "GPUS_PER_NODE": "8", "VLLM_NODES": "1",
                        "PYTHON": "/shared/weft/.venv/bin/python",
                        "SBATCH_ARGS": "--exclusive --gres=gpu:h100:8",
                        "SETUP": "module load cuda/12.4; source /shared/env.sh",
                        "CONTAINER_IMAGE": "nvcr.io#nvidia/pytorch:25.01-py3",
                        "CONTAINER_MOUNTS": "/shared:/shared,/scratch:/scratch"}.items():
        monkeypatch.setenv(f"WEFT_SLURM_{name}", value)
    trainer = trainer_for("cluster")
    assert (trainer.mode, trainer.partition, trainer.account, trainer.time_limit) == (
        "slurm", "gpu", "proj", "12:00:00")
    assert (trainer.nodes, trainer.gpus_per_node, trainer.vllm_nodes) == (4, 8, 1)
    assert trainer.sbatch_args == ["--exclusive", "--gres=gpu:h100:8"]
    assert trainer.setup == ["module load cuda/12.4; source /shared/env.sh"]
    assert trainer.container_mounts == ["/shared:/shared", "/scratch:/scratch"]
    monkeypatch.setenv("WEFT_SLURM_NODES", "four")
    with pytest.raises(ValueError, match="WEFT_SLURM_NODES must be a whole number"):
        trainer_for("cluster")
    monkeypatch.setenv("WEFT_TRAINER_MODE", "ray")
    with pytest.raises(ValueError, match="WEFT_TRAINER_MODE must be 'k8s' or 'slurm'"):
        trainer_for("cluster")


def test_a_gpu_recipe_is_checked_on_a_cpu_host_without_its_device():
    """The Dagster host of a Slurm (or k8s) launch has no GPU: it checks a bf16 recipe's other
    settings and leaves the device to the worker; run here, the same recipe is refused."""
    import dagster as dg
    import pytest

    from assets.training import check_recipe, host_check_overrides
    from training.config_base import _cuda_available

    if _cuda_available():
        pytest.skip("this host has a CUDA GPU: bf16 is valid here")
    with pytest.raises(dg.Failure, match="bf16 training needs a CUDA GPU"):
        check_recipe("sft", "sxs_sft", host_check_overrides("subprocess", []))
    config = check_recipe("sft", "sxs_sft", host_check_overrides("slurm", ["max_steps=2"]))
    assert config.max_steps == 2
    assert host_check_overrides("k8s", ["model_name_or_path=/pod/m", "seed=1"]) == [
        "seed=1", "bf16=false"]
    with pytest.raises(dg.Failure, match="bad training recipe"):
        check_recipe("sft", "sxs_sft", host_check_overrides("slurm", ["max_stepz=2"]))


def test_the_batch_shell_forwards_the_time_limit_warning_to_the_training_step(tmp_path):
    """The one-node script run by bash (as a batch step runs it): USR1 sent to the batch
    shell, as Slurm's --signal=B:USR1 does, reaches the training process, which a stand-in
    here answers by writing a file and exiting 0; the job exits with its status."""
    import signal
    import subprocess
    import sys
    import time

    got = tmp_path / "got_usr1"
    ready = tmp_path / "ready"
    stand_in = ("import signal, sys, time, pathlib\n"
                f"def on(*a):\n    pathlib.Path({str(got)!r}).write_text('saved')\n"
                "    sys.exit(0)\n"
                "signal.signal(signal.SIGUSR1, on)\n"
                f"pathlib.Path({str(ready)!r}).write_text('up')\n"
                "time.sleep(60)\nsys.exit(5)\n")
    settings = SlurmSettings(python=sys.executable, workdir=str(tmp_path),
                             weft_home=str(tmp_path / "home"))
    script = batch_script(settings, TrainingLaunch(
        module="training.sft", args=("--recipe", "x"), one_node=(sys.executable, "-c", stand_in)))
    assert "weft_train_pid=$!" in script.splitlines()
    path = tmp_path / "job.sh"
    path.write_text(script)
    job = subprocess.Popen(["bash", str(path)], cwd=tmp_path, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    job.send_signal(signal.SIGUSR1)
    out, _ = job.communicate(timeout=60)
    assert got.read_text() == "saved", out
    assert job.returncode == 0, out
    assert "asking the training step to save a checkpoint" in out
