"""Model servers as Slurm jobs (``pipelines.slurm.serve``): the batch script offline, then the
life cycle on the test cluster (conftest.py) with a stand-in server (submit, wait for the
address and the health endpoint, reuse a kept job, cancel; a job that exits early, a server
that never answers, a job that never leaves the queue) and, slow, the embedded model served by
real ``vllm serve`` in a job and one evaluation partition run against it."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from pipelines.serving import ServerStartError, serve_mode
from pipelines.settings import PROJECT_ROOT
from pipelines.slurm.jobs import SlurmCommands
from pipelines.slurm.script import Raw, SlurmSettings
from pipelines.slurm.serve import (
    ServeLaunch,
    ServerJobError,
    SlurmModelServer,
    answers,
    read_address,
    record_path,
    serve_script,
    server_from_env,
    settings_from_env,
    stop_kept,
)

HERE = Path(__file__).resolve().parent
SHARED = {"python": "/shared/weft/.venv/bin/python", "workdir": "/shared/weft",
          "weft_home": "/shared/weft/.weft"}

# One checkpoint on one GPU node, written out by hand: what `serve_script` must produce.
ONE_GPU_SCRIPT = r"""#!/bin/bash
# weft model server job (vLLM): /shared/weft/.weft/checkpoints/sft-1 served as sft-1
#SBATCH --job-name=weft-serve
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --partition=gpu
#SBATCH --account=proj
#SBATCH --time=04:00:00
#SBATCH --mem=64G
#SBATCH --gpus-per-node=1
#SBATCH --cpus-per-task=8
#SBATCH --exclusive
#SBATCH --output=/shared/weft/.weft/serve/sft-1/1/slurm-%j.log
set -eo pipefail
cd /shared/weft
export WEFT_HOME=/shared/weft/.weft
export PYTHONUNBUFFERED=1
export WEFT_PYTHON=/shared/weft/.venv/bin/python
export HF_HUB_OFFLINE=1
export WEFT_SERVE_ADDRESS_FILE=/shared/weft/.weft/serve/sft-1/1/address.json
export WEFT_SERVE_LAUNCH_ID=weft-launch-5f1c0e2a9b7d4c3e
unset WEFT_SERVE_HOST  # a setup line may set it: the host name weft dials
# setup
module load cuda/12.4
weft_free_port() {  # the first port from $1 up that nothing on this node answers on
    local port=$1
    while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
    echo "$port"
}
export WEFT_SERVE_HOST="${WEFT_SERVE_HOST:-$(hostname)}"
export WEFT_SERVE_PORT="$(weft_free_port $((20000 + SLURM_JOB_ID % 20000)))"
set +e
/shared/weft/.venv/bin/python -m vllm.entrypoints.openai.api_server \
    --model /shared/weft/.weft/checkpoints/sft-1 \
    --served-model-name sft-1 "$WEFT_SERVE_LAUNCH_ID" --host 0.0.0.0 --port "$WEFT_SERVE_PORT" \
    --max-model-len 4096 --gpu-memory-utilization 0.85 &
weft_server=$!
printf '{"job_id": "%s", "host": "%s", "port": %s}\n' "$SLURM_JOB_ID" "$WEFT_SERVE_HOST" "$WEFT_SERVE_PORT" > "$WEFT_SERVE_ADDRESS_FILE.tmp"
mv -f "$WEFT_SERVE_ADDRESS_FILE.tmp" "$WEFT_SERVE_ADDRESS_FILE"
echo "weft: job $SLURM_JOB_ID starts its server at http://$WEFT_SERVE_HOST:$WEFT_SERVE_PORT/v1"
wait "$weft_server"
exit $?
"""


def test_serve_script_for_one_checkpoint_on_one_gpu_node():
    settings = SlurmSettings(**SHARED, partition="gpu", account="proj", time_limit="04:00:00",
                             gpus_per_node=1, cpus_per_task=8, mem="64G",
                             sbatch_args=("--exclusive",), setup=("module load cuda/12.4",),
                             env={"HF_HUB_OFFLINE": "1"})
    launch = ServeLaunch("/shared/weft/.weft/checkpoints/sft-1", "sft-1",
                         "/shared/weft/.weft/serve/sft-1/1",
                         extra_args=("--gpu-memory-utilization", "0.85"),
                         launch_id="weft-launch-5f1c0e2a9b7d4c3e")
    assert serve_script(settings, launch) == ONE_GPU_SCRIPT


def test_serve_script_with_a_container_tensor_parallel_and_a_fixed_port():
    settings = SlurmSettings(**SHARED, gpus_per_node=4, nodes=3, signal_before_s=120,
                             job_name="my-serve", container_image="nvcr.io#nvidia/vllm:25.01",
                             container_mounts=("/shared:/shared",))
    text = serve_script(settings, ServeLaunch("/m/ck", "ck", "/shared/weft/.weft/serve/ck/2",
                                              port=8123))
    lines = text.splitlines()
    # one node whatever the training layout says, no USR1 signal, the chosen job name
    assert "#SBATCH --nodes=1" in lines and "#SBATCH --job-name=my-serve" in lines
    assert not any("--signal" in line for line in lines)
    assert 'export WEFT_SERVE_PORT="8123"' in lines
    server = text[text.index("set +e\n") + 7:text.index(" &\n")].replace(" \\\n    ", " ")
    assert server == ("srun --export=ALL --nodes=1 --ntasks=1 --gpus-per-node=4 "
                      "'--container-image=nvcr.io#nvidia/vllm:25.01' "  # '#' is quoted
                      "--container-workdir=/shared/weft --container-mounts=/shared:/shared "
                      "/shared/weft/.venv/bin/python -m vllm.entrypoints.openai.api_server "
                      "--model /m/ck --served-model-name ck "
                      "--host 0.0.0.0 --port \"$WEFT_SERVE_PORT\" --max-model-len 4096 "
                      "--tensor-parallel-size 4")


@pytest.mark.parametrize("change, message", [
    ({"folder": "relative/1"}, "absolute path"),
    ({"port": 70000}, "TCP port"),
    ({"served_name": ""}, "served model name"),
    ({"extra_args": ("--x\nrm -rf /",)}, "line breaks"),
])
def test_bad_server_launches_are_refused(change, message):
    fields = {"model_path": "/m", "served_name": "m", "folder": "/w/serve/m/1", **change}
    with pytest.raises(ValueError, match=message):
        ServeLaunch(**fields)


def test_server_settings_come_from_the_trainers_variables(monkeypatch, weft_home):
    for name, value in {"PARTITION": "gpu", "TIME_LIMIT": "02:00:00", "GPUS_PER_NODE": "8",
                        "SERVE_GPUS": "2", "CONTAINER_IMAGE": "img", "SETUP": "module load x",
                        "SBATCH_ARGS": "--exclusive --qos=low", "PYTHON": "/s/py",
                        "SERVE_ARGS": "--dtype bfloat16", "SERVE_KEEP": "1",
                        "SERVE_STARTUP_TIMEOUT_S": "30"}.items():
        monkeypatch.setenv(f"WEFT_SLURM_{name}", value)
    settings = settings_from_env()
    assert (settings.partition, settings.time_limit, settings.gpus_per_node,
            settings.container_image, settings.setup, settings.sbatch_args, settings.python,
            settings.weft_home, settings.workdir) == (
        "gpu", "02:00:00", 2, "img", ("module load x",), ("--exclusive", "--qos=low"), "/s/py",
        str(weft_home), str(PROJECT_ROOT))
    model = weft_home / "ck"
    model.mkdir()
    (model / "config.json").write_text("{}")
    server = server_from_env(model)
    assert (server.served_name, server.extra_args, server.keep, server.startup_timeout_s) == (
        "ck", ("--dtype", "bfloat16"), True, 30.0)
    monkeypatch.setenv("WEFT_SLURM_SERVE_GPUS", "two")
    with pytest.raises(ValueError, match="WEFT_SLURM_SERVE_GPUS must be a whole number"):
        settings_from_env()


def test_serve_mode_is_local_unless_set(monkeypatch):
    monkeypatch.delenv("WEFT_SERVE_MODE", raising=False)
    assert serve_mode() == "local"
    monkeypatch.setenv("WEFT_SERVE_MODE", "Slurm")
    assert serve_mode() == "slurm"
    monkeypatch.setenv("WEFT_SERVE_MODE", "k8s")
    with pytest.raises(ValueError, match="WEFT_SERVE_MODE must be one of local, slurm"):
        serve_mode()


def test_the_launch_id_is_exported_and_served_as_a_second_name():
    launch = ServeLaunch("/m/ck", "ck", "/w/serve/ck/1", launch_id="weft-launch-0123abcd")
    text = serve_script(SlurmSettings(**SHARED), launch)
    assert "export WEFT_SERVE_LAUNCH_ID=weft-launch-0123abcd" in text.splitlines()
    assert '--served-model-name ck "$WEFT_SERVE_LAUNCH_ID"' in text.replace(" \\\n    ", " ")
    with pytest.raises(ValueError, match="launch id"):
        ServeLaunch("/m/ck", "ck", "/w/serve/ck/1", launch_id="x; rm -rf /")


def test_a_server_is_the_launchs_only_when_it_lists_the_launch_id():
    port = _free_port()
    impostor = subprocess.Popen([sys.executable, str(HERE / "stub_server.py"), "--port",
                                 str(port), "--served-model-name", "ck", "weft-launch-aaaa"],
                                stdout=subprocess.PIPE, text=True)
    try:
        assert "listening" in impostor.stdout.readline()  # printed just before it binds
        url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 60
        while not answers(url, "ck") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert answers(url, "ck") and answers(url, "ck", launch_id="weft-launch-aaaa")
        assert not answers(url, "ck", launch_id="weft-launch-bbbb")
        assert not answers(url, "other", launch_id="weft-launch-aaaa")
    finally:
        impostor.kill()
        impostor.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_address_left_by_another_job_is_not_taken(tmp_path):
    path = tmp_path / "address.json"
    path.write_text(json.dumps({"job_id": "41", "host": "node7", "port": 20041}))
    assert read_address(path, "41") == "http://node7:20041/v1"
    assert read_address(path, "42") is None
    path.write_text('{"job_id": "42", "ho')  # half written
    assert read_address(path, "42") is None


# ---- on the test cluster --------------------------------------------------------------------

def _settings(weft_home, **changes) -> SlurmSettings:
    return SlurmSettings(python=sys.executable, workdir=str(PROJECT_ROOT),
                         weft_home=str(weft_home), **changes)


def _stub(*extra: str, name: str = "stub-model", port: str = '"$WEFT_SERVE_PORT"',
          launch_id: str = '"$WEFT_SERVE_LAUNCH_ID"') -> tuple[str, ...]:
    return (sys.executable, str(HERE / "stub_server.py"), "--port", Raw(port),
            "--served-model-name", name, *((Raw(launch_id),) if launch_id else ()), *extra)


def _server(weft_home, command, *, name: str = "stub-model", **changes) -> SlurmModelServer:
    fields = {"queue_timeout_s": 60.0, "startup_timeout_s": 60.0, "poll_interval_s": 0.5,
              **changes}
    return SlurmModelServer(settings=_settings(weft_home), model_path=str(weft_home / "model"),
                            served_name=name, command=command, **fields)


def _gone_from_queue(job_id: str, within_s: float = 90.0) -> bool:  # slurmd is slow under load
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                             text=True, check=False).stdout.strip()
        if not out:
            return True
        time.sleep(0.5)
    return False


def _models(base_url: str) -> list[str]:
    import urllib.request

    with urllib.request.urlopen(f"{base_url}/models", timeout=5) as resp:
        return [m["id"] for m in json.loads(resp.read())["data"]]


@pytest.mark.slurm
@pytest.mark.xdist_group("slurm_cluster")
def test_a_server_job_serves_until_stopped_then_is_cancelled(slurm_cluster, weft_home):
    server = _server(weft_home, _stub("--delay", "2"))
    started = time.monotonic()
    server.start()
    print(f"stand-in server job answering after {time.monotonic() - started:.1f} s")
    job_id = server.job_id
    address = json.loads((server.log_path.parent / "address.json").read_text())
    assert address["job_id"] == job_id
    first = 20000 + int(job_id) % 20000
    assert first <= address["port"] < first + 100
    assert server.base_url == f"http://{socket.gethostname()}:{address['port']}/v1"
    assert _models(server.base_url) == ["stub-model", server.launch_id]
    assert server.launch_id.startswith("weft-launch-")
    assert subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                          text=True, check=True).stdout.strip() == "RUNNING"
    server.stop()
    assert _gone_from_queue(job_id), f"job {job_id} still in squeue after stop"
    assert SlurmCommands().state(job_id).state == "CANCELLED"


@pytest.mark.slurm
@pytest.mark.xdist_group("slurm_cluster")
def test_a_kept_job_is_reused_by_the_next_run_and_stopped_by_hand(slurm_cluster, weft_home):
    first = _server(weft_home, _stub(), keep=True)
    with first:
        pass  # kept: leaving the block does not cancel it
    assert json.loads(record_path("stub-model").read_text())["job_id"] == first.job_id
    second = _server(weft_home, _stub())
    with second:
        assert (second.job_id, second.base_url, second.owned) == (first.job_id, first.base_url,
                                                                  False)
    assert SlurmCommands().state(first.job_id).state == "RUNNING"  # the reuser did not cancel
    assert stop_kept("stub-model") == first.job_id
    assert _gone_from_queue(first.job_id) and not record_path("stub-model").exists()


@pytest.mark.slurm
@pytest.mark.xdist_group("slurm_cluster")
def test_a_job_that_exits_before_serving_is_an_error_with_its_log(slurm_cluster, weft_home):
    dies = (sys.executable, "-c", "import sys; print('stand-in fails: marker-51c2'); sys.exit(3)")
    server = _server(weft_home, dies)
    with pytest.raises(ServerJobError) as err:
        server.start()
    text = str(err.value)
    assert f"Slurm job {server.job_id}: FAILED" in text and "exit code 3:0" in text
    assert str(server.log_path) in text and "marker-51c2" in text
    assert isinstance(err.value, ServerStartError)


@pytest.mark.slurm
@pytest.mark.xdist_group("slurm_cluster")
def test_a_server_that_never_answers_times_out_and_is_cancelled(slurm_cluster, weft_home):
    # A served name of its own: twice, in a full run, a server answering as "stub-model" was
    # found on this job's port (not this job's stub, which had not started); weft's check of
    # the served name must reject such a server, and a name no other test serves makes that
    # the test's condition.
    name = "stub-never-answers"
    server = _server(weft_home, _stub("--delay", "300", name=name), name=name,
                     startup_timeout_s=3.0)
    with pytest.raises(ServerJobError, match=r"ran for 3 s .*without its server at http://"
                                             r".* to answer GET /health"):
        server.start()
    assert _gone_from_queue(server.job_id)


@pytest.mark.slurm
@pytest.mark.xdist_group("slurm_cluster")
def test_another_server_on_the_jobs_port_is_never_taken_for_the_jobs(slurm_cluster, weft_home):
    # Another server answers as this very model on the port the job is given (it took the
    # port first). The job's own stand-in starts late and cannot bind it, so the job fails:
    # weft must say so, not hand out the other server's address as this job's.
    name, port = "stub-same-name", _free_port()
    other = subprocess.Popen(_stub(name=name, port=str(port), launch_id=""),
                             stdout=subprocess.PIPE, text=True)
    try:
        assert "listening" in other.stdout.readline()
        server = _server(weft_home, _stub("--delay", "3", name=name), name=name, port=port)
        with pytest.raises(ServerJobError, match="ended before its server answered") as err:
            server.start()
        assert "Address already in use" in str(err.value)  # the job's stand-in, in its log
        assert server.base_url.endswith(f":{port}/v1")  # it did find the other one there
    finally:
        other.kill()
        other.wait()


@pytest.mark.slurm
@pytest.mark.xdist_group("slurm_cluster")
def test_a_job_that_stays_queued_times_out_naming_the_queue(slurm_cluster, weft_home):
    server = _server(weft_home, _stub(), queue_timeout_s=2.0)
    server.settings = _settings(weft_home, sbatch_args=("--begin=now+1hour",))
    with pytest.raises(ServerJobError, match=r"waited 2 s for Slurm job \d+: PENDING.*to start "
                                             r"running"):
        server.start()
    assert _gone_from_queue(server.job_id)


@pytest.mark.slow  # real vLLM start in a job: 35+ s on an idle 2-core machine, minutes if loaded
@pytest.mark.slurm
@pytest.mark.xdist_group("slurm_cluster")
def test_an_evaluation_partition_runs_against_vllm_served_by_a_slurm_job(
        slurm_cluster, weft_home, shared_data, embedded_model_dir, monkeypatch):
    from assets import evaluation, ingest
    from assets.resources import GraderResource, LLMResource, WarehouseResource
    from assets.sandbox_resource import SandboxResource
    from eval.models import ModelSpec, register_model
    from pipelines.serving import BIND_ENV, choose_cpu_bind, cpu_server_dtype, running_cpu_binds
    from tests.assets.eval_config import eval_samples_config
    from warehouse import Warehouse

    monkeypatch.setenv("WEFT_SERVE_MODE", "slurm")
    monkeypatch.setenv("WEFT_SLURM_SERVE_ARGS", "--enforce-eager --disable-log-stats"
                       + (f" --dtype {cpu_server_dtype()}" if cpu_server_dtype() else ""))
    monkeypatch.setenv("WEFT_SLURM_SERVE_STARTUP_TIMEOUT_S", "600")
    monkeypatch.setenv("WEFT_SLURM_TIME_LIMIT", "00:20:00")
    for name, value in {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",  # sbatch exports
                        "TOKENIZERS_PARALLELISM": "false",
                        BIND_ENV: choose_cpu_bind(sorted(os.sched_getaffinity(0)),
                                                  running_cpu_binds())}.items():
        monkeypatch.setenv(name, value)
    assets = [*ingest.SOURCE_ASSETS, ingest.problems, evaluation.eval_samples,
              evaluation.eval_scores]
    resources = {"llm": LLMResource(max_concurrency=2, timeout_s=240),
                 "warehouse": WarehouseResource(), "grader": GraderResource(processes=1),
                 "sandbox": SandboxResource()}
    assert dg.materialize(assets, selection=["gsm8k_problems", "problems"], resources=resources,
                          run_config={"ops": {"gsm8k_problems": {"config": {"limit": 3}}}},
                          instance=dg.DagsterInstance.ephemeral()).success
    register_model(ModelSpec(model_id="slurm-embedded", kind="local",
                             path=str(embedded_model_dir), served_model="slurm-embedded"))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("models", ["slurm-embedded"])
    started = time.monotonic()
    result = dg.materialize(
        assets, selection=["eval_samples", "eval_scores"], resources=resources,
        partition_key=dg.MultiPartitionKey({"benchmark": "gsm8k", "model": "slurm-embedded"}),
        run_config={"ops": {"eval_samples": {"config": eval_samples_config(
            limit=2, k=1, temperature=0.0, max_tokens=48, seed=0)}}},
        instance=instance, raise_on_error=False)
    print(f"evaluation through a Slurm vLLM job: {time.monotonic() - started:.1f} s")
    failure = result.failure_data_for_node("eval_samples")
    assert result.success, failure and failure.error
    samples = Warehouse().sql("SELECT * FROM eval_samples").to_pylist()
    assert len(samples) == 2
    assert all(s["output"] and s["completion_tokens"] > 0 and s["gen_error"] is None
               for s in samples)
    (folder,) = (weft_home / "serve" / "slurm-embedded").iterdir()
    address = json.loads((folder / "address.json").read_text())
    log = next(folder.glob("slurm-*.log")).read_text()
    assert f"starts its server at http://{address['host']}:{address['port']}/v1" in log
    assert _gone_from_queue(address["job_id"])  # cancelled when the evaluation ended
    assert SlurmCommands().state(address["job_id"]).state == "CANCELLED"
