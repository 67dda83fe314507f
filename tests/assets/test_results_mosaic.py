"""The DeepTool / MOSAIC result assets (assets/results/mosaic_results.py): both assets run for real
against the fake LLM server and the real sandbox (the recovery experiment with a recording
trainer and scripted tool-mode samples: training and serving real checkpoints is the job's, not
a unit test's). The claims' rules on hand-made rows are tested in tests/eval/test_mosaic_claims.py."""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import numpy as np
import pytest

import assets.results.mosaic_results as rm
from assets import ingest
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.results.experiments import claim_job
from assets.sandbox_resource import SandboxResource
from assets.training import TrainerLauncher
from training.config import load_config
from warehouse import Warehouse


def _samples(spec):
    """spec: {problem: [(cells, tool_errors, correct), ...]} -> injected tool-mode rows (the
    failure each sample met: one kind per problem)."""
    return [{"problem_id": p, "sample_index": i, "cells": c, "tool_errors": e, "correct": ok,
             "injected_failure": "timeout" if c else None}
            for p, items in spec.items() for i, (c, e, ok) in enumerate(items)]


# ---- both assets, really run against the fake server and the real sandbox ---------------------


def _scripted(gold: dict[str, str]):
    """Manager: Progress, Final from step 2. Actor and baseline: one code step, then the
    answer, right on every second problem (in sorted order)."""

    order = sorted(gold)

    def answer_for(text: str) -> str:
        for i, problem in enumerate(order):
            if problem in text:
                return gold[problem] if i % 2 == 0 else gold[problem] + "1"
        raise AssertionError("problem not in prompt")

    def responder(body, index):
        messages = body["messages"]
        system, last = messages[0]["content"], messages[-1]["content"]
        if "navigation card" in system:
            step = int(re.search(r"This is step (\d+)", last).group(1))
            return json.dumps({"verdict": "on_track", "reason": "", "guide": "compute it",
                               "mode": "Progress",
                               "stage": "Final" if step >= 2 else "Intermediate"})
        if "final step" in last or ("one step per reply" in system and len(messages) >= 4):
            return ("<think>\nthe printed value answers it\n</think>\n<answer>\n\\boxed{"
                    + answer_for(json.dumps(messages)) + "}\n</answer>")
        return "<think>\nlet Python add\n</think>\n<code>\nx = 2 + 3\nprint(x)\n</code>"

    return responder


def _resources(server, trainer=None):
    return {"llm": LLMResource(base_url=server.base_url, model="scripted", max_concurrency=4,
                               timeout_s=60),
            "warehouse": WarehouseResource(), "grader": GraderResource(processes=1),
            "sandbox": SandboxResource(backend="local", timeout_s=5.0, warm_sessions=2),
            "trainer": trainer or TrainerLauncher()}


def _ingest(server, limit=6):
    assert dg.materialize([*ingest.SOURCE_ASSETS, ingest.problems],
                          selection=["gsm8k_train_problems", "problems"],
                          resources=_resources(server),
                          run_config={"ops": {"gsm8k_train_problems": {"config": {"limit": limit}}}},
                          instance=dg.DagsterInstance.ephemeral()).success
    problems = Warehouse().sql("SELECT problem, answer FROM problems WHERE split = 'train'")
    server.responder = _scripted({p["problem"].strip(): p["answer"]
                                  for p in problems.to_pylist()})


def test_synthesis_claim_job_runs_both_arms_and_judges_each_source(weft_home, shared_data):
    from pipelines.llm.testing import FakeLLMServer

    with FakeLLMServer(models=("scripted",)) as server:
        _ingest(server)
        defs = dg.Definitions(assets=[rm.mosaic_synthesis_claim],
                              jobs=[claim_job(rm.SYNTHESIS)], resources=_resources(server))
        tiny = {"limit": 4, "max_steps": 4, "concurrency": 2, "n_boot": 500}
        result = defs.resolve_job_def("mosaic_synthesis_claim_job").execute_in_process(
            run_config={"scale": "cpu", "ops": {"mosaic_synthesis_claim": {"config": tiny}}},
            instance=dg.DagsterInstance.ephemeral())
    assert result.success
    wh = Warehouse()
    mosaic_rows = wh.read("mosaic_trajectories",
                          partition="gsm8k/rho=0.1|mosaic_synthesis_claim").to_pylist()
    base_rows = wh.read("mosaic_baseline_trajectories",
                        partition="gsm8k|mosaic_synthesis_claim").to_pylist()
    assert len(mosaic_rows) == len(base_rows) == 4
    assert not wh.read("mosaic_trajectories", partition="gsm8k/rho=0.1").num_rows  # kept apart
    claims = wh.sql("SELECT * FROM claims ORDER BY metric").to_pylist()
    assert [c["metric"] for c in claims] == ["synthetic trajectory accuracy",
                                             "turns per trajectory"]
    assert {c["experiment"] for c in claims} == {"mosaic_synthesis_claim"}
    assert {c["section"] for c in claims} == {"Table 2 (gsm8k)"}
    assert all(c["scale"] == "cpu" and c["n"] == 4 for c in claims)
    by_pid = {r["problem_id"]: r for r in base_rows}
    assert set(by_pid) == {r["problem_id"] for r in mosaic_rows}  # the same problems
    acc, turns = claims
    # the responder answers the same problems right in both arms: no accuracy difference
    expected = np.mean([float(bool(r["correct"])) - float(bool(by_pid[r["problem_id"]]["correct"]))
                        for r in mosaic_rows])
    assert acc["diff"] == pytest.approx(expected) == 0.0
    expected_turns = np.mean([r["num_turns"] - by_pid[r["problem_id"]]["num_turns"]
                              for r in mosaic_rows])
    assert turns["diff"] == pytest.approx(expected_turns)
    assert json.loads(acc["config_json"])["sources"] == ["gsm8k"]


def test_synthesis_claim_refuses_an_unknown_source(weft_home):
    result = dg.materialize(
        [rm.mosaic_synthesis_claim], resources={
            "llm": LLMResource(), "warehouse": WarehouseResource(),
            "grader": GraderResource(processes=1), "sandbox": SandboxResource(backend="local")},
        run_config={"ops": {"mosaic_synthesis_claim": {"config": {"sources": ["gsm8k", "aime"]}}}},
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert not result.success
    assert "sources must be a non-empty list of MOSAIC sources" in str(
        result.failure_data_for_node("mosaic_synthesis_claim").error)


class RecordingTrainer(TrainerLauncher):
    """Resolves each SFT arm's recipe like the script would, records it and its data, and
    reports a checkpoint named after the arm's data file (nothing is trained)."""

    def launch(self, context, kind, recipe, overrides, extras=None):
        config = load_config(recipe, overrides, expect_kind=kind)
        path = config.dataset.removeprefix("jsonl:")
        rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]
        ck = "ck-" + path.rsplit("/", 1)[-1].split("-", 1)[0]
        LAUNCHED.append(SimpleNamespace(kind=kind, config=config, rows=rows, ck=ck,
                                        overrides=list(overrides)))
        meta = {"checkpoint_id": dg.MetadataValue.text(ck),
                "checkpoint_path": dg.MetadataValue.path(f"/models/{ck}")}
        return SimpleNamespace(get_materialize_result=lambda: dg.MaterializeResult(metadata=meta))


LAUNCHED: list = []
# injected tool-mode samples per arm: (cells, tool_errors, correct) per problem, two each
SCRIPTED = {"ck-rho1": {"q0": [(2, 1, True), (2, 1, True)], "q1": [(2, 1, True), (3, 2, False)],
                        "q2": [(0, 0, True), (0, 0, True)], "q3": [(1, 1, False), (2, 1, True)]},
            "ck-rho0": {"q0": [(1, 1, False), (2, 1, True)], "q1": [(1, 1, False), (1, 1, False)],
                        "q2": [(1, 1, False), (0, 0, True)], "q3": [(2, 2, False), (1, 1, False)]}}


def scripted_evaluation(context, config, ck, path, wh, llm, grader, sandbox):
    EVALUATED.append((ck, path, config.sampling.k, config.max_turns))
    return _samples(SCRIPTED[ck])


EVALUATED: list = []


def test_recovery_claim_trains_both_arms_alike_on_the_same_problems(weft_home, shared_data,
                                                                   monkeypatch):
    from pipelines.llm.testing import FakeLLMServer

    LAUNCHED.clear()
    EVALUATED.clear()
    monkeypatch.setattr(rm, "_evaluate", scripted_evaluation)
    with FakeLLMServer(models=("scripted",)) as server:
        _ingest(server)
        defs = dg.Definitions(assets=[rm.mosaic_recovery_claim], jobs=[claim_job(rm.RECOVERY)],
                              resources=_resources(server, RecordingTrainer()))
        # ρ = 1: every code step of the treatment's data is perturbed, so it surely differs
        cfg = {"source": "gsm8k", "limit": 4, "synthesis_max_steps": 4, "rho": 1.0,
               "concurrency": 2, "train_steps": 3, "n_boot": 500, "synthesis_agents": "llm",
               "only_correct": False, "benchmark": "gsm8k", "eval_limit": 4}
        result = defs.resolve_job_def("mosaic_recovery_claim_job").execute_in_process(
            run_config={"scale": "cpu", "ops": {"mosaic_recovery_claim": {"config": cfg}}},
            instance=dg.DagsterInstance.ephemeral())
    assert result.success
    wh = Warehouse()
    treat = wh.read("mosaic_trajectories",
                    partition="gsm8k/rho=1|mosaic_recovery_claim").to_pylist()
    ref = wh.read("mosaic_trajectories", partition="gsm8k/rho=0|mosaic_recovery_claim").to_pylist()
    assert len(treat) == len(ref) == 4
    assert all(r["perturbed_steps"] >= 1 for r in treat if r["code_steps"])
    assert all(r["perturbed_steps"] == 0 for r in ref)
    assert not wh.read("mosaic_trajectories", partition="gsm8k/rho=1").num_rows  # kept apart
    # two SFT arms, alike but for their data, on the same problems
    treat_arm, ref_arm = LAUNCHED
    assert (treat_arm.kind, ref_arm.kind) == ("sft", "sft")
    assert (treat_arm.ck, ref_arm.ck) == ("ck-rho1", "ck-rho0")
    for field in ("model_name_or_path", "max_steps", "seed", "learning_rate",
                  "per_device_train_batch_size"):
        assert getattr(treat_arm.config, field) == getattr(ref_arm.config, field), field
    assert treat_arm.config.max_steps == 3 and treat_arm.config.dataset_limit is None
    assert treat_arm.rows != ref_arm.rows
    treat_text = json.dumps(treat_arm.rows)
    assert "<interpreter>" in treat_text

    def problems_of(rows):
        return {m["content"] for r in rows for m in r["prompt"] if m["role"] == "user"}

    # every shared problem's first prompt is the same in both arms
    firsts = {json.dumps(r["prompt"]) for r in ref_arm.rows if len(r["prompt"]) <= 2}
    assert firsts == {json.dumps(r["prompt"]) for r in treat_arm.rows if len(r["prompt"]) <= 2}
    assert problems_of(treat_arm.rows) and len(firsts) == 4
    assert [e[0] for e in EVALUATED] == ["ck-rho1", "ck-rho0"]
    (claim,) = wh.sql("SELECT * FROM claims").to_pylist()
    # by hand from SCRIPTED, per problem over its 2 samples: rho=1 q0 1, q1 1/2, q2 0 (no
    # cell), q3 1/2 -> 1/2; rho=0 q0 1/2, q1 0, q2 0, q3 0 -> 1/8
    assert claim["n"] == 4
    assert claim["treatment_value"] == pytest.approx(1 / 2)
    assert claim["reference_value"] == pytest.approx(1 / 8)
    assert claim["diff"] == pytest.approx(1 / 2 - 1 / 8)
    assert claim["experiment"] == "mosaic_recovery_claim" and claim["treatment"] == "SFT rho=1"
    meta = result.asset_materializations_for_node("mosaic_recovery_claim")[0].metadata
    pairing = meta["pairing"].value
    assert pairing["met_the_same_error_in_both"] == 6
    assert (pairing["wrote_no_cell_treatment"], pairing["wrote_no_cell_reference"]) == (2, 1)
    assert pairing["shared_training_problems"] == 4
    assert pairing["injected_steps_in_treatment"] >= 1


def test_recovery_claim_at_cpu_scale_trains_on_builtin_arithmetic(weft_home, monkeypatch):
    """The cpu scale synthesizes built-in arithmetic with the scripted agents (no LLM call, no
    ingested source), keeps only correct trajectories, and the arms' data differ only where
    the treatment's synthesis injected a failure, which a correction then follows."""
    from pipelines.llm.testing import FakeLLMServer

    LAUNCHED.clear()
    EVALUATED.clear()

    def evaluation(context, config, ck, *args):
        return scripted_evaluation(context, config, {"ck-rho0.5": "ck-rho1"}.get(ck, ck), *args)

    monkeypatch.setattr(rm, "_evaluate", evaluation)

    def no_endpoint(self):  # with base_url unset this would start a local vLLM server
        raise AssertionError("the scripted synthesis asked for an LLM endpoint")

    monkeypatch.setattr(LLMResource, "endpoint", no_endpoint)
    with FakeLLMServer(models=("scripted",)) as server:
        defs = dg.Definitions(assets=[rm.mosaic_recovery_claim], jobs=[claim_job(rm.RECOVERY)],
                              resources=_resources(server, RecordingTrainer()))
        cfg = {"limit": 12, "eval_limit": 4, "rho": 0.5, "concurrency": 2, "train_steps": 3,
               "n_boot": 500}
        result = defs.resolve_job_def("mosaic_recovery_claim_job").execute_in_process(
            run_config={"scale": "cpu", "ops": {"mosaic_recovery_claim": {"config": cfg}}},
            instance=dg.DagsterInstance.ephemeral())
        assert not server.requests  # no LLM call
    assert result.success
    wh = Warehouse()
    treat = wh.read("mosaic_trajectories",
                    partition="arith/rho=0.5|mosaic_recovery_claim").to_pylist()
    ref = wh.read("mosaic_trajectories", partition="arith/rho=0|mosaic_recovery_claim").to_pylist()
    assert {r["manager_model"] for r in treat + ref} == {"scripted-reference-walker"}
    assert len(ref) == 12 and all(r["correct"] for r in ref)  # every reference checks out
    assert sum(r["perturbed_steps"] for r in ref) == 0
    perturbed = {r["problem"] for r in treat if r["perturbed_steps"]}
    assert perturbed
    treat_arm, ref_arm = LAUNCHED
    assert treat_arm.config.max_steps == 3
    # the arms differ only on the problems the treatment's synthesis perturbed
    def by_problem(rows):
        out = {}
        for row in rows:
            out.setdefault(row["prompt"][1]["content"], []).append(json.dumps(row))
        return out

    t_rows, r_rows = by_problem(treat_arm.rows), by_problem(ref_arm.rows)
    assert set(r_rows) == {r["problem"] for r in ref}
    for problem, rows in r_rows.items():
        assert (t_rows.get(problem) == rows) == (problem not in perturbed), problem
    corrected = [p for p in perturbed if p in t_rows
                 and "The last cell failed" in "".join(t_rows[p])]
    assert corrected  # an injected failure followed by the correction
    assert "Traceback" not in json.dumps(ref_arm.rows)
    assert [e[0] for e in EVALUATED] == ["ck-rho1", "ck-rho0"]  # (rho0.5 read as rho1)


def test_builtin_arithmetic_holds_its_evaluation_problems_out_of_training():
    train, held = rm.arith_problems(20, 8, seed=3)
    assert (len(train), len(held)) == (20, 8)
    assert not {p.problem for p in train} & {h["problem"] for h in held}
    assert {p.source for p in train} == {h["source"] for h in held} == {"arith"}
    again, _ = rm.arith_problems(20, 8, seed=3)
    assert [p.problem for p in again] == [p.problem for p in train]  # one draw per seed
    other, _ = rm.arith_problems(20, 8, seed=4)
    assert [p.problem for p in other] != [p.problem for p in train]
    config = rm.RecoveryClaimConfig(source=rm.ARITH, benchmark=rm.ARITH, limit=20,
                                    eval_limit=8, seed=3)
    bench, problems = rm._heldout(config, wh=None)
    assert problems == held and bench.grader == "math"
    mode = rm._eval_config(config).mode
    assert mode.name == "tool" and mode.inject_first_cell is True


def test_recovery_claim_config_checks_fail_before_anything_runs(weft_home):
    result = dg.materialize(
        [rm.mosaic_recovery_claim], resources={
            "llm": LLMResource(), "warehouse": WarehouseResource(),
            "grader": GraderResource(processes=1), "sandbox": SandboxResource(backend="local"),
            "trainer": RecordingTrainer()},
        run_config={"ops": {"mosaic_recovery_claim": {"config": {"rho": 0.0}}}},
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert not result.success
    failure = result.failure_data_for_node("mosaic_recovery_claim")
    assert "rho must be in (0, 1]" in str(failure.error)
