"""bench/gpu_smoke.py on this CPU machine: the clear refusal, the random-init model copy and
the per-engine figures (the GPU run itself is `make gpu-check`)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_smoke.py"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_smoke", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_exits_with_a_clear_message_without_cuda():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--grpo-steps", "1"], check=False,
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "needs a CUDA GPU and none is visible" in proc.stderr
    assert "make gpu-check" in proc.stderr
    assert proc.stdout == ""  # no JSON line: nothing was measured


def test_grpo_figures_skip_the_warm_up_step():
    rows = [  # step 1 is the warm-up (engine start, first weight sync)
        {"step": 1, "seconds_per_step": 50.0, "generation_s": 45.0, "tokens_generated": 900},
        {"step": 2, "seconds_per_step": 4.0, "generation_s": 1.0, "tokens_generated": 1000},
        {"step": 3, "seconds_per_step": 6.0, "generation_s": 3.0, "tokens_generated": 3000},
    ]
    figures = _module().grpo_figures(rows)
    # by hand: mean step 5 s, mean generation 2 s, mean tokens 2000 -> 1000 tokens/s, share 0.4
    assert figures == {"seconds_per_step": 5.0, "generation_s_per_step": 2.0,
                       "generation_share": 0.4, "tokens_per_step": 2000.0,
                       "generation_tokens_per_s": 1000.0, "steps_measured": 2}
    one = _module().grpo_figures(rows[:1])
    assert one["steps_measured"] == 1 and one["generation_tokens_per_s"] == 20.0


def test_random_init_copy_keeps_architecture_and_tokenizer(tmp_path):
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM, LlamaConfig

    source = tmp_path / "source"
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(source)
    (source / "tokenizer.json").write_text(json.dumps({"marker": 1}))
    (source / "chat_template.jinja").write_text("{{ messages }}")
    torch.manual_seed(1)
    copy = _module().random_init_copy(source, tmp_path / "copy")
    assert (copy / "tokenizer.json").read_text() == json.dumps({"marker": 1})
    assert (copy / "chat_template.jinja").is_file()
    original = AutoModelForCausalLM.from_pretrained(source)
    fresh = AutoModelForCausalLM.from_pretrained(copy)
    assert fresh.config.to_diff_dict() | {"_name_or_path": ""} == \
        original.config.to_diff_dict() | {"_name_or_path": ""}
    a, b = original.state_dict(), fresh.state_dict()
    assert a.keys() == b.keys() and all(a[k].shape == b[k].shape for k in a)
    assert not torch.equal(a["model.layers.0.mlp.up_proj.weight"],
                           b["model.layers.0.mlp.up_proj.weight"])  # new weights
