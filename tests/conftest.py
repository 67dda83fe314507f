"""Shared fixtures: a temp WEFT_HOME per test, the converted embedded model, and ONE real local
vLLM server per test session (started on first use, stopped at the end)."""

import os
import socket
from pathlib import Path

import pytest

# Captured before any test changes WEFT_HOME: the converted model lives in the real home.
_PROJECT_HOME = Path(os.environ.get("WEFT_HOME") or Path.cwd() / ".weft").resolve()


def pytest_collection_modifyitems(config, items):
    """A test that uses the session's real model server is a ``server`` test, whether or not it
    says so: ``-m "not server"`` then deselects every test that would start or reuse it.

    With pytest-xdist (``make test`` runs two workers, ``--dist loadgroup``) every test is put
    in a group: the tests of the session server in one, so one worker starts it and the other
    never does, and every other test in its file's group, so module fixtures are made once."""
    for item in items:
        uses_server = "local_server" in getattr(item, "fixturenames", ())
        if uses_server and not item.get_closest_marker("server"):
            item.add_marker(pytest.mark.server)
        if not item.get_closest_marker("xdist_group"):
            group = "local_server" if uses_server else item.nodeid.split("::", 1)[0]
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(autouse=True)
def _no_leaked_dagster_home():
    """``cli.instance.ensure_dagster_home`` (run by the demo, ``weft`` and some tests) sets
    ``DAGSTER_HOME`` process-wide; restore it after every test so a later test never opens the
    instance of a temp directory that is gone."""
    before = os.environ.get("DAGSTER_HOME")
    yield
    if before is None:
        os.environ.pop("DAGSTER_HOME", None)
    else:
        os.environ["DAGSTER_HOME"] = before


@pytest.fixture
def weft_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "weft_home"
    home.mkdir()
    monkeypatch.setenv("WEFT_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def shared_data() -> Path:
    from pipelines.settings import data_dir

    found = data_dir()
    if found is None:
        pytest.skip("no local data directory (set WEFT_DATA_DIR to a copy of shared/data)")
    return found


@pytest.fixture(scope="session")
def embedded_model_dir() -> Path:
    """The converted embedded model (made once by `make setup`, or here if missing)."""
    from pipelines.models import EMBEDDED_NAME, convert

    return convert(_PROJECT_HOME / "models" / EMBEDDED_NAME)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def local_server(embedded_model_dir, tmp_path_factory):
    """The real vLLM OpenAI-compatible server over the embedded model, one per session."""
    from pipelines.models import EMBEDDED_SERVED_NAME
    from pipelines.serving import LocalModelServer

    old = os.environ.get("WEFT_HOME")
    os.environ["WEFT_HOME"] = str(tmp_path_factory.mktemp("server_home"))
    try:
        server = LocalModelServer(model_path=embedded_model_dir, served_name=EMBEDDED_SERVED_NAME,
                                  port=_free_port())
        server.start()
        server.weft_home = Path(os.environ["WEFT_HOME"])  # where its record lies
    finally:
        if old is None:
            os.environ.pop("WEFT_HOME", None)
        else:
            os.environ["WEFT_HOME"] = old
    yield server
    server.stop()


@pytest.fixture(scope="session")
def load_model_pair():
    """A callable giving (tokenizer, senior, junior) from one model folder: the junior is a
    seeded perturbation of the senior (N(0, scale^2) added to every weight), so the two differ
    but share a tokenizer, as tandem rollouts and legibility metrics need."""

    def load(model_dir, seed: int, scale: float = 0.02):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_dir)
        senior = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        junior = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in junior.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * scale)
        return tok, senior, junior

    return load
