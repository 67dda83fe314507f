"""traces → sxs_alignments → sxs_sft_dataset, with a scripted judge and with the real server."""

import json

import dagster as dg
import pytest

from assets import sxs
from assets.resources import LLMResource, WarehouseResource
from warehouse import Warehouse

ASSETS = [sxs.traces, sxs.sxs_alignments, sxs.sxs_sft_dataset,
          sxs.check_sxs_alignments_consistent, sxs.check_sxs_sft_dataset_round_trip]


def _run(base_url, model, limit, tokenizer, traces_limit=3):
    resources = {"llm": LLMResource(base_url=base_url, model=model), "warehouse": WarehouseResource()}
    config = {"ops": {"traces": {"config": {"limit": traces_limit}},
                      "sxs_alignments": {"config": {"limit": limit, "max_concurrency": 4}},
                      "sxs_sft_dataset": {"config": {"tokenizer_path": str(tokenizer)}}}}
    return dg.materialize(ASSETS, resources=resources, run_config=config,
                          instance=dg.DagsterInstance.ephemeral())


def _checks(result):
    return {e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data.passed
            for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}


def test_scripted_judge_builds_both_variants_and_round_trips(weft_home, shared_data, embedded_model_dir):
    from pipelines.llm.testing import FakeLLMServer

    def responder(body, index):
        # covers one answer block per prefix that mentions "=": a real, varying level sequence
        prefix = body["messages"][-1]["content"]
        return json.dumps({"covered": 1 if "=" in prefix else 0})

    with FakeLLMServer(models=("judge",), responder=responder) as server:
        result = _run(server.base_url, "judge", limit=5, tokenizer=embedded_model_dir)
    assert result.success
    assert _checks(result) == {"check_sxs_alignments_consistent": True, "check_sxs_sft_dataset_round_trip": True}
    wh = Warehouse()
    assert wh.sql("SELECT count(*) AS n FROM traces").to_pylist()[0]["n"] == 9  # 3 per source
    alignments = wh.read("sxs_alignments").to_pylist()
    assert len(alignments) == 5
    for row in alignments:
        assert row["repaired"][-1] == row["k_a"]  # terminal safeguard
        assert all(b >= a for a, b in zip(row["repaired"], row["repaired"][1:]))
        assert row["calls_made"] + row["calls_saved"] + row["calls_prefiltered"] == row["k_r"] - 1
    data = wh.sql("SELECT variant, count(*) AS n FROM sxs_sft_dataset GROUP BY 1 ORDER BY 1").to_pylist()
    assert data == [{"variant": "standard", "n": 5}, {"variant": "sxs", "n": 5}]
    standard = wh.sql("SELECT completion FROM sxs_sft_dataset WHERE variant = 'standard'").to_pylist()
    for row in standard:  # the baseline is plain reason-then-answer
        text = json.loads(row["completion"])[-1]["content"]
        assert text.startswith("<think>") and text.count("<speak>") == 1 and text.endswith("</speak>")
    mat = next(e for e in result.all_events if e.event_type_value == "ASSET_MATERIALIZATION"
               and e.asset_key.path == ["sxs_sft_dataset"])
    meta = mat.event_specific_data.materialization.metadata
    assert "latency" in meta and meta["samples"].value == 5


def test_training_reads_the_sxs_dataset(weft_home, shared_data, embedded_model_dir):
    from pipelines.llm.testing import FakeLLMServer
    from training.data import load_rows, sft_examples

    with FakeLLMServer(models=("judge",), responder=lambda b, i: '{"covered": 0}') as server:
        assert _run(server.base_url, "judge", limit=2, tokenizer=embedded_model_dir).success
    rows = load_rows("warehouse:sxs_sft_dataset?variant=sxs")
    examples = sft_examples(rows)
    assert len(examples) == 2 and examples[0]["completion"][-1]["content"].startswith("<think>")


def _short_trace_records(shared_data, tmp_path, n=2, min_blocks=4):
    """A data folder whose OpenMathReasoning file holds the ``n`` shortest real records with at
    least ``min_blocks`` reasoning blocks: the real judge gets a few short prompts (3-4 per
    trace) instead of dozens of long ones, and still has prefixes to judge."""
    from pipelines.ingest import TRACE_SOURCES
    from pipelines.ingest.traces import adapt_openmathreasoning
    from pipelines.sxs_align import segment

    rel = TRACE_SOURCES["openmathreasoning"].local_path
    lines = (shared_data / rel).read_text().splitlines()

    def blocks(line):
        return len(segment(adapt_openmathreasoning(json.loads(line)).reasoning))

    chosen = sorted((line for line in lines if blocks(line) >= min_blocks), key=len)[:n]
    target = tmp_path / "data" / rel
    target.parent.mkdir(parents=True)
    target.write_text("\n".join(chosen) + "\n")
    return tmp_path / "data", [blocks(line) for line in chosen]


@pytest.mark.server
def test_real_server_as_judge_keeps_the_pipeline_correct(weft_home, shared_data, local_server,
                                                         embedded_model_dir, tmp_path, monkeypatch):
    data, k_r = _short_trace_records(shared_data, tmp_path)
    monkeypatch.setenv("WEFT_DATA_DIR", str(data))
    resources = {"llm": LLMResource(base_url=local_server.base_url, model=local_server.served_name),
                 "warehouse": WarehouseResource()}
    config = {"ops": {"traces": {"config": {"sources": ["openmathreasoning"]}},
                      "sxs_alignments": {"config": {"max_concurrency": 4}},
                      "sxs_sft_dataset": {"config": {"tokenizer_path": str(embedded_model_dir)}}}}
    result = dg.materialize(ASSETS, resources=resources, run_config=config,
                            instance=dg.DagsterInstance.ephemeral())
    assert result.success
    assert _checks(result) == {"check_sxs_alignments_consistent": True,
                               "check_sxs_sft_dataset_round_trip": True}
    wh = Warehouse()
    rows = wh.read("sxs_alignments").to_pylist()
    assert sorted(r["k_r"] for r in rows) == sorted(k_r)
    for row in rows:  # the real judge's levels went through repair and the terminal safeguard
        assert row["repaired"][-1] == row["k_a"]
        assert all(b >= a for a, b in zip(row["repaired"], row["repaired"][1:]))
        assert row["calls_made"] + row["calls_saved"] + row["calls_prefiltered"] == row["k_r"] - 1
    assert sum(r["calls_made"] for r in rows) > 0
    calls = wh.sql("SELECT status, count(*) AS n FROM llm_calls WHERE tag = 'sxs/judge' "
                   "GROUP BY 1").to_pylist()
    by_status = {c["status"]: c["n"] for c in calls}
    assert by_status.get("ok", 0) > 0  # the real model answered inside the schema
    assert sum(by_status.values()) >= sum(r["calls_made"] for r in rows)
    data = wh.sql("SELECT variant, count(*) AS n FROM sxs_sft_dataset GROUP BY 1 ORDER BY 1")
    assert data.to_pylist() == [{"variant": "standard", "n": 2}, {"variant": "sxs", "n": 2}]


class RecordingLLM(LLMResource):
    """The ``llm`` resource, keeping every client it builds so a test can read its settings."""

    def client_for(self, base_url, model, api_key=None, **settings):
        client = super().client_for(base_url, model, api_key, **settings)
        BUILT.append(client)
        return client


BUILT: list = []


def test_the_judge_client_carries_the_resource_settings(weft_home, shared_data, embedded_model_dir):
    from pipelines.llm.testing import FakeLLMServer

    BUILT.clear()
    # "covered" ends each alignment at its first step (with 0 the judge is asked about every
    # prefix: over a thousand requests), and the settings are what this test is about
    with FakeLLMServer(models=("judge",), responder=lambda b, i: '{"covered": 1}') as server:
        llm = RecordingLLM(base_url=server.base_url, model="judge", max_retries=2,
                           connect_retry_window_s=7.0, max_response_bytes=12345,
                           batch_timeout_s=99.0, progress_every_s=3.0)
        config = {"ops": {"traces": {"config": {"limit": 1}},
                          "sxs_alignments": {"config": {"limit": 2, "max_concurrency": 3}}}}
        result = dg.materialize(ASSETS[:2], resources={"llm": llm, "warehouse": WarehouseResource()},
                                run_config=config, instance=dg.DagsterInstance.ephemeral())
    assert result.success
    (client,) = BUILT
    assert (client.max_retries, client.connect_retry_window_s, client.max_response_bytes,
            client.batch_timeout_s, client.log_every_s, client.max_concurrency) == (
        2, 7.0, 12345, 99.0, 3.0, 3)
    assert client.progress is not None  # progress lines reach the run log
    assert client.timeout_s is None  # each request's deadline scales with its own prompt


def test_a_failing_judge_still_records_its_calls_and_a_failed_run(weft_home, shared_data):
    """The judge answers two requests, then one hangs; the resource's 10 s watchdog stops the
    batch. The calls made so far and a failed `runs` row are written, and no alignments."""
    from pipelines.llm.testing import FakeLLMServer

    with FakeLLMServer(models=("judge",), responder=lambda b, i: '{"covered": 0}') as server:
        server.plan.extend(['text:{"covered": 0}', 'text:{"covered": 0}', "hang"])
        llm = LLMResource(base_url=server.base_url, model="judge", max_retries=0,
                          batch_timeout_s=10.0)
        config = {"ops": {"traces": {"config": {"limit": 1}},
                          "sxs_alignments": {"config": {"limit": 3, "max_concurrency": 4}}}}
        result = dg.materialize(ASSETS[:2], resources={"llm": llm, "warehouse": WarehouseResource()},
                                run_config=config, instance=dg.DagsterInstance.ephemeral(),
                                raise_on_error=False)
        sent = server.chat_count
    assert not result.success
    wh = Warehouse()
    runs = [r for r in wh.read("runs").to_pylist() if r["asset"] == "sxs_alignments"]
    assert len(runs) == 1 and runs[0]["run_id"] == result.run_id
    assert runs[0]["status"] == "failed" and runs[0]["error"].startswith("BatchTimeout")
    calls = wh.read("llm_calls").to_pylist()
    # every request the server received has a record (queued calls cancelled before they
    # were sent have one too); the two answered ones are ok, the hung one is not
    assert sent >= 3 and len(calls) >= sent
    assert 2 <= sum(c["status"] == "ok" for c in calls) <= sent - 1
    assert {(c["asset"], c["run_id"]) for c in calls} == {("sxs_alignments", result.run_id)}
    assert {c["tag"] for c in calls} == {"sxs/judge"}
    assert not wh.partitions("sxs_alignments")


def test_evidence_judge_needs_no_llm_and_long_traces_can_be_left_out(weft_home, shared_data,
                                                                     embedded_model_dir):
    from transformers import AutoTokenizer

    from pipelines.sxs_align import segment
    from pipelines.sxs_judge import evidence

    resources = {"llm": LLMResource(base_url="http://127.0.0.1:9/v1", model="nobody"),
                 "warehouse": WarehouseResource()}  # never called: a call would fail

    def run(max_tokens):
        config = {"ops": {"traces": {"config": {"sources": ["openmathreasoning"], "limit": 6}},
                          "sxs_alignments": {"config": {"judge": "evidence"}},
                          "sxs_sft_dataset": {"config": {
                              "tokenizer_path": str(embedded_model_dir),
                              "max_example_tokens": max_tokens}}}}
        return dg.materialize(ASSETS, resources=resources, run_config=config,
                              instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)

    assert run(None).success
    wh = Warehouse()
    aligned = wh.read("sxs_alignments").to_pylist()
    assert len(aligned) == 6 and {r["judge_model"] for r in aligned} == {"evidence"}
    assert sum(r["calls_made"] for r in aligned) == sum(r["k_r"] - 1 for r in aligned)
    traces = {t["trace_id"]: t for t in wh.read("traces").to_pylist()}
    for row in aligned:  # each level: leading answer blocks whose numbers are already written
        t = traces[row["trace_id"]]
        reasoning, answer = segment(t["reasoning"]), segment(t["response"])
        have, expected = set(evidence(t["problem"])), []
        for block in reasoning[:-1]:
            have |= evidence(block)
            covered = 0
            while covered < len(answer) and evidence(answer[covered]) <= have:
                covered += 1
            expected.append(max([covered, *expected]))
        assert row["repaired"] == [*expected, len(answer)]
    tokenizer = AutoTokenizer.from_pretrained(str(embedded_model_dir))
    sizes: dict[str, int] = {}
    for row in wh.read("sxs_sft_dataset").to_pylist():
        texts = [m["content"] for m in json.loads(row["prompt"]) + json.loads(row["completion"])]
        n = sum(len(tokenizer.encode(t, add_special_tokens=False)) for t in texts)
        sizes[row["trace_id"]] = max(n, sizes.get(row["trace_id"], 0))
    cut = sorted(sizes.values())[2]  # keeps the three shortest traces
    result = run(cut)
    assert result.success
    kept = {r["trace_id"] for r in wh.read("sxs_sft_dataset").to_pylist()}
    assert kept == {t for t, n in sizes.items() if n <= cut} and len(kept) == 3
    meta = result.asset_materializations_for_node("sxs_sft_dataset")[0].metadata
    assert meta["left_out_too_long"].value == 3
