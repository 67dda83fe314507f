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
