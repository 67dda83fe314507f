"""The response cache replays an answer only to the model that gave it.

Two real in-process fake servers (``pipelines.llm.testing.FakeLLMServer``) answer differently
under the same served model name; the cache is a real SQLite file shared by their clients.
"""

from __future__ import annotations

from pathlib import Path

from pipelines.llm import LLMClient, run
from pipelines.llm.testing import FakeLLMServer

USER = [{"role": "user", "content": "How many legs does a spider have?"}]


def _answering(text: str):
    return lambda body, index: text


def test_same_served_name_at_another_endpoint_is_not_replayed(tmp_path: Path):
    path = tmp_path / "cache.sqlite"
    with FakeLLMServer(responder=_answering("eight")) as first, \
            FakeLLMServer(responder=_answering("six")) as second:
        a = LLMClient(first.base_url, "fake-model", cache_path=path)
        b = LLMClient(second.base_url, "fake-model", cache_path=path)
        assert run(a.chat(USER))[0].text == "eight"
        answer = run(b.chat(USER))[0]
        assert answer.text == "six" and not answer.cached
        assert second.chat_count == 1
        # each endpoint still replays its own answer
        assert run(a.chat(USER))[0].text == "eight" and first.chat_count == 1
        assert run(b.chat(USER))[0].cached and second.chat_count == 1


def test_the_same_weights_on_a_local_server_at_another_port_are_replayed(tmp_path: Path):
    # a local server comes up on whatever port is free: a re-run whose server got another port
    # replays what the same weights answered; other weights on this machine still do not share
    path = tmp_path / "cache.sqlite"
    with FakeLLMServer(responder=_answering("eight"), model_root="/models/m") as first, \
            FakeLLMServer(responder=_answering("six"), model_root="/models/m") as second, \
            FakeLLMServer(responder=_answering("ten"), model_root="/models/other") as third:
        assert first.base_url != second.base_url and "127.0.0.1" in first.base_url
        assert run(LLMClient(first.base_url, "fake-model", cache_path=path).chat(USER))[0].text \
            == "eight"
        again = run(LLMClient(second.base_url, "fake-model", cache_path=path).chat(USER))[0]
        assert (again.text, again.cached, second.chat_count) == ("eight", True, 0)
        other = run(LLMClient(third.base_url, "fake-model", cache_path=path).chat(USER))[0]
        assert (other.text, other.cached, third.chat_count) == ("ten", False, 1)


def test_a_model_redeployed_under_the_same_name_and_url_is_not_replayed(tmp_path: Path):
    path = tmp_path / "cache.sqlite"
    with FakeLLMServer(responder=_answering("eight"), model_root="/ckpt/step-100") as server:
        old = LLMClient(server.base_url, "fake-model", cache_path=path)
        assert run(old.chat(USER))[0].text == "eight"
        # the same URL and served name now serve other weights
        server.model_root, server.responder = "/ckpt/step-200", _answering("six")
        new = LLMClient(server.base_url, "fake-model", cache_path=path)
        answer = run(new.chat(USER))[0]
        assert (answer.text, answer.cached, server.chat_count) == ("six", False, 2)
        assert new.model_root == "/ckpt/step-200"
        # the same weights again replay their own answer without a request
        again = run(LLMClient(server.base_url, "fake-model", cache_path=path).chat(USER))[0]
        assert (again.text, again.cached, server.chat_count) == ("six", True, 2)


def test_a_server_without_a_model_list_still_gets_cache_hits(tmp_path: Path):
    # hosted APIs may refuse GET /models: the root is unknown, the endpoint and name still key
    with FakeLLMServer(models_status=404) as server:
        client = LLMClient(server.base_url, "fake-model", cache_path=tmp_path / "c.sqlite")
        first, second = run(client.chat(USER))[0], run(client.chat(USER))[0]
        assert not first.cached and second.cached and second.text == first.text
        assert server.chat_count == 1 and client.model_root is None


def test_the_identity_is_read_once_per_client(tmp_path: Path):
    with FakeLLMServer(model_root="/ckpt/a") as server:
        client = LLMClient(server.base_url, "fake-model", cache_path=tmp_path / "c.sqlite")
        for i in range(3):
            run(client.chat([{"role": "user", "content": f"q{i}"}]))
        assert server.models_count == 1 and server.chat_count == 3


def test_without_the_cache_no_identity_lookup_is_made(tmp_path: Path):
    with FakeLLMServer() as server:
        client = LLMClient(server.base_url, "fake-model", use_cache=False)
        run(client.chat(USER))
        run(client.chat(USER))
        assert server.models_count == 0 and server.chat_count == 2
