"""A finished checkpoint is a model folder the local vLLM server serves under its checkpoint id."""

import json
import urllib.request

import pytest

from training.config import load_config
from training.sft import run_sft


def test_model_label_is_the_checkpoint_id(tmp_path):
    from assets.resources import LLMResource

    folder = tmp_path / "models" / "sxs_sft.cpu-0123abcd"
    assert LLMResource(local_model_path=str(folder)).model_label() == "sxs_sft.cpu-0123abcd"


@pytest.mark.slow
def test_checkpoint_is_served_by_the_local_model_server(weft_home, embedded_model_dir):
    from pipelines.serving import LocalModelServer, free_port

    config = load_config("sxs_sft.cpu", {
        "model_name_or_path": str(embedded_model_dir), "max_steps": 1,
        "per_device_train_batch_size": 2, "max_length": 96, "dataset": "builtin:arith_sft",
        "dataset_limit": 4, "save_strategy": "no"})
    result = run_sft(config)
    server = LocalModelServer(model_path=result.path, port=free_port(), max_model_len=1024)
    assert server.served_name == result.checkpoint_id
    server.start()
    try:
        body = json.dumps({"model": result.checkpoint_id, "max_tokens": 8, "temperature": 0,
                           "messages": [{"role": "user", "content": "What is 2 plus 3?"}]})
        request = urllib.request.Request(f"{server.base_url}/chat/completions", data=body.encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            reply = json.loads(response.read())
        assert reply["model"] == result.checkpoint_id
        assert reply["choices"][0]["message"]["content"].strip()
    finally:
        server.stop()
