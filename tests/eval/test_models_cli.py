"""`python -m eval.models add|remove|list`: up-front validation, the reachability probe, removal,
and one-line errors instead of tracebacks (real warehouse; real HTTP servers)."""

import socket

import pytest

from eval.models import ModelSpec, list_models, main, register_model, unreachable_advice


def _ids():
    return [spec.model_id for spec in list_models()]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out, out.err


@pytest.mark.parametrize("argv, message", [
    (["--id", "m", "--base-url", "not-a-url", "--served-model", "x"], "is not an http(s) URL"),
    (["--id", "m", "--base-url", "ftp://host/v1", "--served-model", "x"], "is not an http(s) URL"),
    (["--id", "m", "--base-url", "http://host:port/v1", "--served-model", "x"], "bad port"),
    (["--id", "m", "--base-url", "http://h:8000/v1"], "needs --base-url URL and --served-model"),
    (["--id", "m"], "needs --base-url URL and --served-model"),
    (["--id", "m", "--path", "/x", "--base-url", "http://h/v1"], "either --path"),
    (["--id", "org/model", "--base-url", "http://h:8000/v1", "--served-model", "x"],
     "e.g. --id org--model"),
    (["--id", "m", "--path", "/no/such/folder"], "does not exist"),
])
def test_add_rejects_mistakes_with_one_line(weft_home, capsys, argv, message):
    code, _, err = _run(capsys, "add", *argv)
    assert code == 2 and message in err and err.startswith("error: ")
    assert "m" not in _ids() and "org--model" not in _ids()  # nothing registered


def test_add_checks_that_a_folder_holds_a_model(weft_home, tmp_path, capsys):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    assert "no config.json" in _run(capsys, "add", "--id", "c", "--path", str(folder))[2]
    (folder / "config.json").write_text("{}")
    assert "no weights" in _run(capsys, "add", "--id", "c", "--path", str(folder))[2]
    (tmp_path / "file").write_text("x")
    assert "is a file" in _run(capsys, "add", "--id", "c", "--path", str(tmp_path / "file"))[2]
    (folder / "model.safetensors").write_bytes(b"\0")
    code, out, _ = _run(capsys, "add", "--id", "c", "--path", str(folder))
    assert code == 0 and "registered c (local)" in out and "c" in _ids()


def test_check_probes_the_endpoint(weft_home, capsys):
    from pipelines.llm.testing import FakeLLMServer

    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    code, _, err = _run(capsys, "add", "--id", "d", "--base-url", dead, "--served-model", "x",
                        "--check")
    assert code == 2 and "did not answer GET /models" in err and "d" not in _ids()
    # without --check the URL form is enough (the endpoint may be started later)
    assert _run(capsys, "add", "--id", "d", "--base-url", dead, "--served-model", "x")[0] == 0
    with FakeLLMServer(models=("served-a",)) as server:
        code, _, err = _run(capsys, "add", "--id", "e", "--base-url", server.base_url,
                            "--served-model", "other", "--check")
        assert code == 2 and "serves ['served-a'], not 'other'" in err
        code, out, _ = _run(capsys, "add", "--id", "e", "--base-url", server.base_url,
                            "--served-model", "served-a", "--check")
        assert code == 0 and "answers and serves ['served-a']" in out and "e" in _ids()


@pytest.mark.server
def test_check_against_the_real_local_server(weft_home, capsys, local_server):
    url, served = local_server.base_url, local_server.served_name
    code, _, err = _run(capsys, "add", "--id", "r", "--base-url", url, "--served-model", "nope",
                        "--check")
    assert code == 2 and "not 'nope'" in err and served in err
    code, _, _ = _run(capsys, "add", "--id", "r", "--base-url", url, "--served-model", served,
                        "--check")
    assert code == 0 and "r" in _ids()


def test_remove(weft_home, capsys):
    register_model(ModelSpec(model_id="gone", kind="endpoint", base_url="http://h:1/v1",
                             served_model="g"))
    assert "gone" in _ids()
    code, out, _ = _run(capsys, "remove", "gone")
    assert code == 0 and "removed gone" in out and "gone" not in _ids()
    code, _, err = _run(capsys, "remove", "gone")
    assert code == 2 and "model 'gone' is not registered" in err
    embedded = list_models()[0].model_id
    code, _, err = _run(capsys, "remove", embedded)
    assert code == 2 and "always registered" in err and embedded in _ids()


def test_unreachable_advice_names_the_registry_entry():
    spec = ModelSpec(model_id="gpu-a", kind="endpoint", base_url="http://gpu:8000/v1",
                     served_model="qwen")
    text = unreachable_advice(spec, "ConnectionRefusedError")
    assert "'gpu-a' is registered as the endpoint http://gpu:8000/v1" in text
    assert "--id gpu-a --base-url URL --served-model qwen --check" in text
    assert "python -m eval.models remove gpu-a" in text


def _checkpoint(weft_home, ck: str) -> "object":
    """A weft checkpoint in the warehouse: a model folder (config.json, weights, the training
    marker) and its `checkpoints` row."""
    import json

    from warehouse import Lineage, Warehouse

    folder = weft_home / "models" / ck
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"0")
    (folder / "weft-checkpoint.json").write_text(json.dumps({"checkpoint_id": ck}))
    Warehouse().write("checkpoints", [{
        "checkpoint_id": ck, "kind": "grpo", "status": "complete", "path": str(folder),
        "recipe": "demo_grpo", "parent_checkpoint": "demo_sft-1", "config_json": "{}",
        "dataset_fingerprints": json.dumps({"train": {"spec": "builtin:arith1", "rows": 96}})}],
        lineage=Lineage(run_id="train-run", asset="grpo_checkpoint", partition=ck))
    return folder


def _lineage(model_id: str) -> dict:
    from warehouse import Warehouse

    (row,) = Warehouse().sql("SELECT * FROM model_lineage WHERE model_id = $m",
                             {"m": model_id}).to_pylist()
    return row


def test_a_checkpoint_registers_by_its_id_and_keeps_its_lineage(weft_home, capsys):
    _checkpoint(weft_home, "demo_grpo-abc")
    code, out, _ = _run(capsys, "add", "--checkpoint", "demo_grpo-abc")
    assert code == 0 and "registered demo_grpo-abc (local)" in out
    row = _lineage("demo_grpo-abc")
    assert (row["checkpoint_id"], row["recipe"], row["dataset"], row["parent_checkpoint"],
            row["training_run_id"]) == ("demo_grpo-abc", "demo_grpo", "builtin:arith1",
                                        "demo_sft-1", "train-run")
    code, _, err = _run(capsys, "add", "--checkpoint", "nope")
    assert code == 2 and "not a weft checkpoint in the warehouse (known: demo_grpo-abc)" in err


def test_a_checkpoint_folder_given_by_path_keeps_its_lineage(weft_home, capsys):
    folder = _checkpoint(weft_home, "demo_grpo-def")
    code, _, _ = _run(capsys, "add", "--id", "mine", "--path", str(folder))
    assert code == 0
    assert _lineage("mine")["recipe"] == "demo_grpo"


def test_a_wrong_folder_named_like_a_checkpoint_says_where_it_is(weft_home, capsys):
    folder = _checkpoint(weft_home, "demo_grpo-ghi")
    code, _, err = _run(capsys, "add", "--id", "x", "--path",
                        str(weft_home / "checkpoints" / "demo_grpo-ghi"))
    assert code == 2
    assert f"whose folder is {folder}" in err and "--checkpoint demo_grpo-ghi" in err
