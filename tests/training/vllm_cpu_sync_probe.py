"""Run in a subprocess by test_rollouts_cpu.py: what TRL's colocate weight sync meets on vLLM's
CPU build, with vLLM's own layers and loader (no engine: one process, a gloo group of one).

TRL 1.16's colocate sync (``VLLMGeneration.sync_weights``) calls
``model_runner.model.load_weights([(name, tensor)])`` on the engine's model after every
optimiser step. This script builds the attention projections of a Llama layer the way vLLM does
(``QKVParallelLinear`` + ``RowParallelLinear``, names mapped by ``LlamaModel.hf_to_vllm_mapper``
so that ``q_proj``/``k_proj``/``v_proj`` load into ``qkv_proj`` shards), loads weights once (as
the engine does at start), runs ``process_weights_after_loading`` (what vLLM's model loader
does next), then loads again (what the sync does). Prints one JSON line.
"""

from __future__ import annotations

import json
import socket
import sys

import torch


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> int:
    import vllm
    from vllm import _custom_ops as ops
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed.parallel_state import (
        init_distributed_environment,
        initialize_model_parallel,
    )
    from vllm.model_executor.layers.linear import QKVParallelLinear, RowParallelLinear
    from vllm.model_executor.models.llama import LlamaModel
    from vllm.model_executor.models.utils import AutoWeightsLoader
    from vllm.platforms import current_platform

    hidden, heads, kv_heads, head_dim = 32, 4, 2, 8
    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
        initialize_model_parallel(1, 1)
        attn = torch.nn.Module()
        attn.qkv_proj = QKVParallelLinear(hidden, head_dim, heads, kv_heads, bias=False,
                                          params_dtype=torch.float32)
        attn.o_proj = RowParallelLinear(heads * head_dim, hidden, bias=False,
                                        params_dtype=torch.float32)
        model = torch.nn.Module()
        model.self_attn = attn

        def checkpoint(seed: int) -> list[tuple[str, torch.Tensor]]:
            gen = torch.Generator().manual_seed(seed)
            shapes = {"q_proj": (heads * head_dim, hidden), "k_proj": (kv_heads * head_dim, hidden),
                      "v_proj": (kv_heads * head_dim, hidden), "o_proj": (hidden, heads * head_dim)}
            return [(f"self_attn.{n}.weight", torch.randn(s, generator=gen))
                    for n, s in shapes.items()]

        def load(weights) -> str | None:
            try:
                AutoWeightsLoader(model).load_weights(weights, mapper=LlamaModel.hf_to_vllm_mapper)
            except Exception as exc:  # noqa: BLE001 - the error is the finding
                return f"{type(exc).__name__}: {exc}"
            return None

        first = load(checkpoint(0))
        q_loaded = torch.equal(attn.qkv_proj.weight[: heads * head_dim], checkpoint(0)[0][1])
        before = {"has_weight_loader": hasattr(attn.qkv_proj.weight, "weight_loader"),
                  "shape": list(attn.qkv_proj.weight.shape)}
        for layer in (attn.qkv_proj, attn.o_proj):
            layer.quant_method.process_weights_after_loading(layer)
        after = {"has_weight_loader": hasattr(attn.qkv_proj.weight, "weight_loader"),
                 "shape": list(attn.qkv_proj.weight.shape)}
        second = load(checkpoint(1))
    print(json.dumps({"vllm": vllm.__version__, "cpu": current_platform.is_cpu(),
                      "onednn": bool(ops._supports_onednn), "first_load_error": first,
                      "first_load_q_equal": q_loaded, "before": before, "after": after,
                      "sync_error": second}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
