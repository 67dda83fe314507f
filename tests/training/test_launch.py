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
