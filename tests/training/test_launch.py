"""Launch commands and the Kubernetes pod spec (built offline; no cluster needed)."""


import pytest
import yaml

from training import launch as L


def test_script_command_single_and_multi_process():
    assert L.script_command("sft", "sxs_sft.cpu", ["max_steps=2"], python="py") == [
        "py", "-m", "training.sft", "--recipe", "sxs_sft.cpu", "max_steps=2"]
    multi = L.script_command("grpo", "sxs_grpo", {"max_steps": 5}, processes=4, python="py")
    assert multi[:7] == ["py", "-m", "accelerate.commands.launch", "--multi_gpu",
                         "--num_processes", "4", "-m"]
    assert multi[7:] == ["training.grpo", "--recipe", "sxs_grpo", "max_steps=5"]
    for bad, message in [(("dpo", "r"), "kind"), (("sft", ""), "recipe")]:
        with pytest.raises(ValueError, match=message):
            L.script_command(*bad)
    with pytest.raises(ValueError, match="processes"):
        L.script_command("sft", "r", processes=0)
    with pytest.raises(ValueError, match="key=value"):
        L.override_args(["nokey"])


@pytest.mark.parametrize("value", ["text", "true", "1e-5", "null", "a: b", "", 3, 2.5, True, None,
                                   [1, 2], {"name": "outcome", "weight": 0.5}, "two\nlines"])
def test_override_formatting_round_trips(value):
    key, _, raw = L.format_override("k", value).partition("=")
    assert key == "k" and yaml.safe_load(raw) == value if raw else value == ""


def test_accelerate_launch_module_exists():
    import importlib.util

    assert importlib.util.find_spec("accelerate.commands.launch") is not None


def test_pod_spec_for_gpus_and_volume():
    settings = L.PodSettings(image="registry/weft:1", gpus=4, weft_home_claim="weft-pvc",
                             service_account="trainer", image_pull_secrets=("regcred",),
                             node_selector={"gpu": "h100"}, env={"HF_HOME": "/weft/hf"})
    command = L.pod_command("grpo", "sxs_grpo", ["max_steps=10"], settings)
    assert "--num_processes" in command and command[command.index("--num_processes") + 1] == "4"
    spec = L.pod_spec(settings, command)
    (container,) = spec["containers"]
    assert container["image"] == "registry/weft:1" and container["command"] == command
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "4"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["WEFT_HOME"] == "/weft" and env["HF_HOME"] == "/weft/hf"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"dshm": "/dev/shm", "weft-home": "/weft"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["weft-home"]["persistentVolumeClaim"]["claimName"] == "weft-pvc"
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    assert spec["restartPolicy"] == "Never" and spec["serviceAccountName"] == "trainer"
    assert spec["imagePullSecrets"] == [{"name": "regcred"}] and spec["nodeSelector"] == {"gpu": "h100"}
    assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"


def test_pod_spec_cpu_only_and_errors():
    settings = L.PodSettings(image="img", gpus=0)
    spec = L.pod_spec(settings, L.pod_command("sft", "sxs_sft.cpu", [], settings))
    (container,) = spec["containers"]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert "tolerations" not in spec and container["command"][1:3] == ["-m", "training.sft"]
    with pytest.raises(ValueError, match="image"):
        L.PodSettings(image="")
    with pytest.raises(ValueError, match="gpus"):
        L.PodSettings(image="x", gpus=-1)


# --- multi-GPU configs and the vLLM rollout server ------------------------------------------


def _accelerate_args(command):
    """Parse a generated command with accelerate's own `accelerate launch` parser."""
    from accelerate.commands.launch import launch_command_parser

    assert command[1:3] == ["-m", "accelerate.commands.launch"]
    return launch_command_parser().parse_args(command[3:])


@pytest.mark.parametrize("name, distributed, extra", [
    ("ddp", "MULTI_GPU", {}),
    ("fsdp", "FSDP", {"fsdp_version": 2, "fsdp_state_dict_type": "FULL_STATE_DICT"}),
    ("zero2", "DEEPSPEED", {"zero_stage": 2}),
    ("zero3", "DEEPSPEED", {"zero_stage": 3, "zero3_init_flag": True,
                            "zero3_save_16bit_model": True}),
])
def test_accelerate_configs_load_with_accelerates_loader(name, distributed, extra):
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(L.accelerate_config_path(name))
    assert config.distributed_type.value == distributed and not config.use_cpu
    section = config.fsdp_config if distributed == "FSDP" else config.deepspeed_config
    assert {k: section.get(k) for k in extra} == extra


def test_every_shipped_config_is_selectable():
    shipped = sorted(p.stem for p in L.ACCELERATE_DIR.glob("*.yaml"))
    assert shipped == sorted(L.ACCELERATE_CONFIGS)
    assert L.accelerate_config_path("zero3", relative=True) == "training/accelerate/zero3.yaml"
    assert L.accelerate_config_path("/x/my.yaml") == "/x/my.yaml"
    with pytest.raises(ValueError, match="accelerate_config must be one of"):
        L.accelerate_config_path("zero4")


def test_command_with_accelerate_config_parses_with_accelerate():
    command = L.script_command("grpo", "rlvr_grpo", ["max_steps=3"], processes=4,
                               accelerate_config="fsdp", python="py")
    args = _accelerate_args(command)
    assert args.config_file == str(L.ACCELERATE_DIR / "fsdp.yaml")
    assert args.num_processes == 4 and args.module
    assert args.training_script == "training.grpo"
    assert args.training_script_args == ["--recipe", "rlvr_grpo", "max_steps=3"]


def test_vllm_gpus_keep_gpus_for_the_server_process():
    command = L.script_command("grpo", "rlvr_grpo", [], processes=3, vllm_gpus=2,
                               accelerate_config="zero2", python="py")
    args = _accelerate_args(command)
    assert args.num_processes == 3
    tail = args.training_script_args
    assert tail[2:] == ["use_vllm=true", "vllm_mode=server", "vllm_server_gpus=[3, 4]"]
    assert yaml.safe_load(tail[-1].partition("=")[2]) == [3, 4]
    with pytest.raises(ValueError, match="only applies to GRPO"):
        L.script_command("sft", "sxs_sft", [], vllm_gpus=1)


def test_server_overrides_pass_the_config_on_a_cuda_machine(monkeypatch):
    """The overrides a server launch adds are accepted by weft's config where CUDA and a
    TRL-supported vLLM are present (both stubbed: this machine has neither)."""
    import training.config_base as C
    import training.rollouts as R
    from training.config import load_config

    monkeypatch.setattr(C, "_cuda_available", lambda: True)
    monkeypatch.setattr(R, "vllm_version", lambda: "0.31.0")
    command = L.script_command("grpo", "rlvr_grpo.cpu", ["use_cpu=false"], processes=1,
                               vllm_gpus=1, python="py")
    config = load_config("rlvr_grpo.cpu", command[command.index("--recipe") + 2:])
    assert config.use_vllm and config.vllm_mode == "server" and config.vllm_server_gpus == [1]


def test_pod_with_vllm_server_process():
    settings = L.PodSettings(image="img", gpus=4, vllm_gpus=1, accelerate_config="zero3",
                             weft_home_claim="pvc")
    command = L.pod_command("grpo", "rlvr_grpo", ["max_steps=2"], settings)
    args = _accelerate_args(command)
    assert args.config_file == "training/accelerate/zero3.yaml" and args.num_processes == 3
    assert args.training_script_args[-1] == "vllm_server_gpus=[3]"
    spec = L.pod_spec(settings, command)
    assert "initContainers" not in spec  # the script starts the server on GPU 3 itself
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"


def test_pod_with_vllm_sidecar_container():
    settings = L.PodSettings(image="img", gpus=3, vllm_gpus=1, vllm_server="container",
                             vllm_image="vllm-img", vllm_port=8123, weft_home_claim="pvc")
    command = L.pod_command("grpo", "rlvr_grpo",
                            ["model_name_or_path=/weft/models/sft-1"], settings)
    args = _accelerate_args(command)
    assert args.num_processes == 2 and args.multi_gpu
    assert args.training_script_args[-3:] == [
        "use_vllm=true", "vllm_mode=server", "vllm_server_base_url=http://127.0.0.1:8123"]
    spec = L.pod_spec(settings, command)
    (train,) = spec["containers"]
    (server,) = spec["initContainers"]
    assert train["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert server["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert server["restartPolicy"] == "Always" and server["image"] == "vllm-img"
    assert server["startupProbe"]["httpGet"] == {"path": "/health", "port": 8123}
    serve = server["command"]
    assert serve[:5] == ["python", "-m", "vllm.entrypoints.cli.main", "serve",
                         "/weft/models/sft-1"]
    assert serve[serve.index("--port") + 1] == "8123"
    assert serve[serve.index("--weight-transfer-config") + 1] == '{"backend": "nccl"}'
    assert {"name": "VLLM_SERVER_DEV_MODE", "value": "1"} in server["env"]
    mounts = {m["name"] for m in server["volumeMounts"]}
    assert mounts == {"dshm", "weft-home"}  # NCCL's shared memory and the model's volume
    with pytest.raises(ValueError, match="model the training run starts from"):
        L.pod_spec(settings, L.pod_command("grpo", "rlvr_grpo", [], settings))


@pytest.mark.parametrize("kwargs, message", [
    ({"gpus": 2, "vllm_gpus": 2}, "leaves no GPU for training"),
    ({"gpus": 2, "vllm_gpus": -1}, "vllm_gpus must be >= 0"),
    ({"vllm_server": "pod"}, "vllm_server must be one of"),
    ({"accelerate_config": "zero9"}, "accelerate_config must be one of"),
])
def test_pod_settings_refuse_bad_gpu_splits(kwargs, message):
    with pytest.raises(ValueError, match=message):
        L.PodSettings(image="img", **kwargs)


def test_trainer_launcher_passes_gpu_settings():
    from assets.training import TrainerLauncher

    local = TrainerLauncher(processes=2, accelerate_config="ddp", vllm_gpus=1, python="py")
    args = _accelerate_args(local.command("grpo", "rlvr_grpo", ["max_steps=1"]))
    assert args.config_file.endswith("training/accelerate/ddp.yaml") and args.num_processes == 2
    assert args.training_script_args[-1] == "vllm_server_gpus=[2]"
    pod = TrainerLauncher(mode="k8s", image="img", gpus=8, vllm_gpus=2, vllm_server="container",
                          accelerate_config="fsdp")
    settings = pod.pod_settings()
    assert (settings.training_gpus, settings.sidecar, settings.accelerate_config) == (6, True,
                                                                                      "fsdp")
    assert _accelerate_args(pod.command("grpo", "r", [])).num_processes == 6
