"""The real local vLLM server: answers through the LLM client, is reused, stops only its own."""

import asyncio

import pytest

from pipelines.serving import LocalModelServer, ServerStartError, served_models, stop_recorded


def test_missing_model_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a model folder"):
        LocalModelServer(model_path=tmp_path)


def test_stop_recorded_without_a_record_does_nothing(weft_home):
    assert stop_recorded(port=1) is False


@pytest.mark.server
def test_real_server_chat_json_and_reuse(local_server, embedded_model_dir, weft_home):
    from pipelines.llm import LLMClient, SamplingParams

    assert local_server.served_name in served_models(local_server.base_url)

    async def talk():
        client = LLMClient(local_server.base_url, local_server.served_name, cache_path=weft_home / "c.sqlite")
        try:
            out = await client.chat([{"role": "user", "content": "What is 2 + 3?"}],
                                    SamplingParams(max_tokens=24, seed=1))
            schema = {"type": "object", "properties": {"covered": {"type": "integer", "minimum": 0, "maximum": 3}},
                      "required": ["covered"]}
            js = await client.chat_json([{"role": "user", "content": "How many of 3 items are covered? JSON."}],
                                        schema, SamplingParams(max_tokens=32))
            return out, js, client.drain_records()
        finally:
            await client.aclose()

    out, js, records = asyncio.run(talk())
    assert out[0].error is None and out[0].text and out[0].completion_tokens > 0
    # guided decoding on the server keeps even a 135M model inside the schema
    assert js.error is None and isinstance(js.value["covered"], int) and 0 <= js.value["covered"] <= 3
    assert len(records) == 2 and all(r["status"] == "ok" for r in records)

    # a second server object on the same port reuses the running one and never stops it
    again = LocalModelServer(model_path=embedded_model_dir, served_name=local_server.served_name,
                             port=local_server.port).start()
    assert again.owned is False
    again.stop()
    assert local_server.is_ready()

    other = LocalModelServer(model_path=embedded_model_dir, served_name="some-other-model",
                             port=local_server.port)
    with pytest.raises(ServerStartError, match="already serves"):
        other.start()
