"""Materialize the MOSAIC assets with a temp warehouse: synthesis against a scripted fake endpoint
and the real sandbox, the real TIR files, SFT rows, step instances, and every asset check."""

import json
import re

import dagster as dg
import pytest

from assets import ingest, mosaic
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.sandbox_resource import SandboxResource
from warehouse import Warehouse

ALL = [*ingest.SOURCE_ASSETS, ingest.problems, ingest.check_problems_answers_and_ids,
       *mosaic.MOSAIC_ASSETS, *mosaic.MOSAIC_CHECKS]


def _resources(base_url: str, model: str) -> dict:
    return {"llm": LLMResource(base_url=base_url, model=model, max_concurrency=4, timeout_s=60),
            "warehouse": WarehouseResource(), "grader": GraderResource(processes=1),
            "sandbox": SandboxResource(backend="local", timeout_s=5.0, warm_sessions=2)}


def _materialize(resources, selection, partition=None, config=None, raise_on_error=True):
    run_config = {"ops": {name: {"config": cfg} for name, cfg in (config or {}).items()}}
    return dg.materialize(ALL, selection=selection, partition_key=partition, resources=resources,
                          run_config=run_config, instance=dg.DagsterInstance.ephemeral(),
                          raise_on_error=raise_on_error)


def _checks(result) -> dict[str, bool]:
    return {e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data.passed
            for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}


def _metadata(result, asset: str) -> dict:
    event = next(e for e in result.get_asset_materialization_events()
                 if e.asset_key.to_user_string() == asset)
    return event.materialization.metadata


def _scripted(gold: dict[str, str]):
    """Manager: Intermediate then Final. Actor/baseline: one code step, then the answer (wrong for
    every second problem)."""

    def answer_for(text: str) -> str:
        for i, (problem, answer) in enumerate(sorted(gold.items())):
            if problem in text:
                return answer if i % 2 == 0 else answer + "1"
        raise AssertionError("problem not in prompt")

    def responder(body, index):
        messages = body["messages"]
        system, last = messages[0]["content"], messages[-1]["content"]
        if "navigation card" in system:
            step = int(re.search(r"This is step (\d+)", last).group(1))
            return json.dumps({"verdict": "on_track", "reason": "", "guide": "compute the total",
                               "mode": "Progress", "stage": "Final" if step >= 2 else "Intermediate"})
        text = json.dumps(messages)
        final = "final step" in last or ("one step per reply" in system and len(messages) >= 4)
        if final:
            return f"<think>\nthe output gives it\n</think>\n<answer>\n\\boxed{{{answer_for(text)}}}\n</answer>"
        return "<think>\nadd up\n</think>\n<code>\ntotal = 2 + 3\nprint(total)\n</code>"

    return responder


def test_mosaic_chain_materializes_with_checks(weft_home, shared_data):
    from pipelines.llm.testing import FakeLLMServer

    with FakeLLMServer(models=("scripted",)) as server:
        res = _resources(server.base_url, "scripted")
        cfg = {"gsm8k_train_problems": {"limit": 6}}
        assert _materialize(res, ["gsm8k_train_problems", "problems"], config=cfg).success
        wh = Warehouse()
        problems = wh.sql("SELECT problem, answer FROM problems WHERE split = 'train'").to_pylist()
        assert len(problems) == 6
        server.responder = _scripted({p["problem"].strip(): p["answer"] for p in problems})

        synth = {"limit": 4, "max_steps": 4, "rho": 1.0, "seed": 3, "concurrency": 2}
        result = _materialize(res, ["mosaic_trajectories"], partition="gsm8k",
                              config={"mosaic_trajectories": synth})
        assert result.success and _checks(result) == {"check_mosaic_trajectories_valid": True}
        rows = wh.read("mosaic_trajectories", partition="gsm8k/rho=1").to_pylist()
        assert len(rows) == 4 and all(r["status"] == "complete" and r["valid"] for r in rows)
        order = sorted(p["problem"].strip() for p in problems)  # the responder's right/wrong rule
        expected_correct = {r["trajectory_id"]: order.index(r["problem"].strip()) % 2 == 0 for r in rows}
        assert {r["trajectory_id"]: r["correct"] for r in rows} == expected_correct
        accuracy = sum(expected_correct.values()) / 4
        assert all(r["perturbed_steps"] == r["code_steps"] >= 1 for r in rows)  # rho = 1
        meta = _metadata(result, "mosaic_trajectories")
        assert meta["accuracy"].value == pytest.approx(accuracy) and meta["perturbation_rate"].value == 1.0
        assert "mosaic_vs_baseline" not in meta

        result = _materialize(res, ["mosaic_baseline_trajectories"], partition="gsm8k",
                              config={"mosaic_baseline_trajectories": synth})
        assert result.success and _checks(result) == {"check_mosaic_baseline_trajectories_valid": True}
        base = wh.read("mosaic_baseline_trajectories", partition="gsm8k").to_pylist()
        assert len(base) == 4 and all(r["perturbed_steps"] == 0 and r["num_turns"] == 2 for r in base)
        table = _metadata(result, "mosaic_baseline_trajectories")["mosaic_vs_baseline"].value
        assert f"| accuracy | {accuracy:.4f} | {accuracy:.4f} |" in table
        assert "perturbation_rate | 1.0000 | 0.0000" in table
        summary = wh.sql("SELECT method, accuracy, perturbation_rate, recovery_rate, failed_max_steps, "
                         "avg_turns, avg_turns_complete, early_answers, rho "
                         "FROM mosaic_summary ORDER BY method").to_pylist()
        assert [s["method"] for s in summary] == ["baseline", "mosaic"]
        assert [s["rho"] for s in summary] == [0.0, 1.0] and summary[1]["early_answers"] == 0
        assert summary[1]["avg_turns_complete"] == pytest.approx(sum(r["num_turns"] for r in rows) / 4)
        assert summary[0]["recovery_rate"] is None and summary[1]["recovery_rate"] == pytest.approx(accuracy)
        calls = wh.sql("SELECT count(*) AS n FROM llm_calls").to_pylist()[0]["n"]
        assert calls >= 4 * 2 + 4 * 2  # manager + actor per MOSAIC step, two baseline turns

        # re-materializing replaces the partition (cached responses, same rows)
        before = server.chat_count
        assert _materialize(res, ["mosaic_trajectories"], partition="gsm8k",
                            config={"mosaic_trajectories": synth}).success
        assert server.chat_count == before
        assert wh.sql("SELECT count(*) AS n FROM mosaic_trajectories").to_pylist()[0]["n"] == 4

        expert = {"real_limit": 3}
        result = _materialize(res, ["tir_trajectories", "tir_sft_dataset", "step_instances"],
                              config={"tir_trajectories": {"limit": 40}, "tir_sft_dataset": expert,
                                      "step_instances": expert})
        assert result.success
        assert _checks(result) == {"check_tir_trajectories_valid": True,
                                   "check_tir_sft_dataset_well_formed": True,
                                   "check_step_instances_reference_rewards": True}
        # 2 correct MOSAIC trajectories (every step a target, generation-mutated ones included:
        # the paper's default) + 3 + 3 real
        mosaic_rows = [r for r in rows if r["correct"]]
        mutated = sum(1 for r in mosaic_rows for s in json.loads(r["steps_json"])
                      if (s["perturbation"] or {}).get("mode") == "generation")
        assert mutated > 0
        real = wh.sql("SELECT trajectory_id, num_steps, source FROM tir_trajectories").to_pylist()
        chosen = [t for src in ("mathcoder", "tora")
                  for t in sorted((r for r in real if r["source"] == src), key=lambda r: r["trajectory_id"])[:3]]
        expected = sum(r["num_turns"] for r in mosaic_rows) + sum(t["num_steps"] for t in chosen)
        sft = wh.read("tir_sft_dataset").to_pylist()
        counts = {r: sum(1 for x in sft if x["rendering"] == r) for r in ("state_preserved", "state_discarded")}
        assert counts == {"state_preserved": expected, "state_discarded": expected}
        assert _metadata(result, "tir_sft_dataset")["masked_mutated_steps"].value == 0
        instances = wh.read("step_instances").to_pylist()
        assert len(instances) == expected
        assert {r["origin"] for r in instances} == {"mosaic", "real"}
        assert sum(r["is_last_step"] for r in instances) == len(mosaic_rows) + 6


def test_rho_runs_live_side_by_side_and_feed_sft_and_step_instances_separately(weft_home, shared_data):
    """The paper's setup (DeepTool §3.1): ρ = 0.1 trajectories for SFT, ρ = 0.2 for RL."""
    from pipelines.llm.testing import FakeLLMServer

    with FakeLLMServer(models=("scripted",)) as server:
        res = _resources(server.base_url, "scripted")
        cfg = {"gsm8k_train_problems": {"limit": 4}}
        assert _materialize(res, ["gsm8k_train_problems", "problems"], config=cfg).success
        wh = Warehouse()
        problems = wh.sql("SELECT problem, answer FROM problems WHERE split = 'train'").to_pylist()
        server.responder = _scripted({p["problem"].strip(): p["answer"] for p in problems})
        runs = {}
        for rho in (0.1, 0.2):
            synth = {"limit": 4, "max_steps": 3, "rho": rho, "seed": 1, "concurrency": 2}
            result = _materialize(res, ["mosaic_trajectories"], partition="gsm8k",
                                  config={"mosaic_trajectories": synth})
            assert result.success
            runs[rho] = result.run_id

    rows = wh.read("mosaic_trajectories").to_pylist()
    assert sorted(wh.partitions("mosaic_trajectories")) == ["gsm8k/rho=0.1", "gsm8k/rho=0.2"]
    assert len(rows) == 8
    correct = {rho: {r["trajectory_id"] for r in rows if r["run_id"] == run and r["correct"]}
               for rho, run in runs.items()}
    assert len(correct[0.1]) == len(correct[0.2]) == 2 and not correct[0.1] & correct[0.2]
    assert {r["rho"] for r in rows if r["run_id"] == runs[0.2]} == {0.2}

    config = {"tir_sft_dataset": {"include_real": False, "mosaic_rho": 0.1},
              "step_instances": {"include_real": False, "mosaic_rho": 0.2}}
    assert _materialize(res, ["tir_sft_dataset", "step_instances"], config=config).success
    assert {r["trajectory_id"] for r in wh.read("tir_sft_dataset").to_pylist()} == correct[0.1]
    assert {r["trajectory_id"] for r in wh.read("step_instances").to_pylist()} == correct[0.2]

    config = {"step_instances": {"include_real": False, "mosaic_run_ids": [runs[0.1]]}}
    assert _materialize(res, ["step_instances"], config=config).success
    assert {r["trajectory_id"] for r in wh.read("step_instances").to_pylist()} == correct[0.1]
    config = {"step_instances": {"include_real": False, "mosaic_rho": 0.3}}
    result = _materialize(res, ["step_instances"], config=config, raise_on_error=False)
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "mosaic_rho=0.3" in str(failure.event_specific_data.error)


def test_synthesis_without_problems_fails_with_what_to_do(weft_home):
    res = _resources("http://127.0.0.1:9/v1", "none")
    result = _materialize(res, ["mosaic_trajectories"], partition="math", raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "materialize" in str(failure.event_specific_data.error) and "math" in str(failure.event_specific_data.error)


def test_expert_assets_without_data_fail_clearly(weft_home):
    res = _resources("http://127.0.0.1:9/v1", "none")
    result = _materialize(res, ["step_instances"], raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "no expert trajectories" in str(failure.event_specific_data.error)


class RecordingLLM(LLMResource):
    """The ``llm`` resource, keeping every client it builds so a test can read its settings."""

    def client_for(self, base_url, model, api_key=None, **settings):
        client = super().client_for(base_url, model, api_key, **settings)
        BUILT.append(client)
        return client


BUILT: list = []


def test_manager_and_actor_clients_carry_the_resource_settings(weft_home, shared_data):
    """The actor on its own endpoint gets the same reliability settings as the manager, and
    both agents' calls are recorded under the run."""
    from pipelines.llm.testing import FakeLLMServer

    BUILT.clear()
    with FakeLLMServer(models=("scripted",)) as server, \
            FakeLLMServer(models=("actor",)) as actor_server:
        res = _resources(server.base_url, "scripted")
        assert _materialize(res, ["gsm8k_train_problems", "problems"],
                            config={"gsm8k_train_problems": {"limit": 2}}).success
        problems = Warehouse().sql("SELECT problem, answer FROM problems").to_pylist()
        gold = {p["problem"].strip(): p["answer"] for p in problems}
        server.responder = actor_server.responder = _scripted(gold)
        res["llm"] = RecordingLLM(base_url=server.base_url, model="scripted", max_retries=2,
                                  connect_retry_window_s=7.0, max_response_bytes=12345,
                                  batch_timeout_s=99.0, progress_every_s=3.0, max_concurrency=3)
        synth = {"limit": 2, "max_steps": 3, "rho": 0.0, "concurrency": 2,
                 "actor_base_url": actor_server.base_url, "actor_model": "actor"}
        result = _materialize(res, ["mosaic_trajectories"], partition="gsm8k",
                              config={"mosaic_trajectories": synth})
        actor_requests = actor_server.chat_count
    assert result.success
    manager, actor = BUILT
    assert (manager.base_url, actor.base_url) == (server.base_url, actor_server.base_url)
    assert actor.model == "actor"
    for client in (manager, actor):
        assert (client.max_retries, client.connect_retry_window_s, client.max_response_bytes,
                client.batch_timeout_s, client.log_every_s, client.max_concurrency) == (
            2, 7.0, 12345, 99.0, 3.0, 3)
        assert client.progress is not None and client.timeout_s is None
    calls = Warehouse().read("llm_calls").to_pylist()
    mine = [c for c in calls if c["run_id"] == result.run_id]
    assert actor_requests > 0
    assert sum(c["base_url"] == actor_server.base_url for c in mine) == actor_requests


def test_the_agents_sample_as_configured(weft_home, shared_data):
    """The manager and the actor decode with their nested ``manager`` / ``actor`` settings
    (defaults: greedy manager with 640 tokens, actor at 0.7 with 384), both with the run's
    seed; an agent asked for several replies per step is refused before any call."""
    from pipelines.llm.testing import FakeLLMServer

    with FakeLLMServer(models=("scripted",)) as server:
        res = _resources(server.base_url, "scripted")
        assert _materialize(res, ["gsm8k_train_problems", "problems"],
                            config={"gsm8k_train_problems": {"limit": 2}}).success
        problems = Warehouse().sql("SELECT problem, answer FROM problems").to_pylist()
        server.responder = _scripted({p["problem"].strip(): p["answer"] for p in problems})

        def sent(synth):
            server.requests.clear()
            assert _materialize(res, ["mosaic_trajectories"], partition="gsm8k",
                                config={"mosaic_trajectories": synth}).success
            by_role = {}
            for body in server.requests:
                role = "manager" if "navigation card" in body["messages"][0]["content"] else "actor"
                by_role.setdefault(role, set()).add(
                    (body.get("temperature"), body.get("top_p", 1.0), body.get("max_tokens"),
                     body.get("seed"), bool(body.get("stop"))))
            return by_role

        base = {"limit": 2, "max_steps": 3, "rho": 0.0, "concurrency": 2, "seed": 4}
        assert sent(base) == {"manager": {(0.0, 1.0, 640, 4, False)},
                              "actor": {(0.7, 1.0, 384, 4, True)}}
        tuned = dict(base, manager={"max_tokens": 300}, actor={"temperature": 0.3, "top_p": 0.9})
        assert sent(tuned) == {"manager": {(0.0, 1.0, 300, 4, False)},
                               "actor": {(0.3, 0.9, 384, 4, True)}}
        server.requests.clear()
        result = _materialize(res, ["mosaic_trajectories"], partition="gsm8k",
                              config={"mosaic_trajectories": dict(base, actor={"k": 2})},
                              raise_on_error=False)
        assert not result.success and not server.requests
        failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
        assert "actor.k" in str(failure.event_specific_data.error)
