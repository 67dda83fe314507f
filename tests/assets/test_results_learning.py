"""The demo's learning check as a result asset (``learning_claim``): the base model, the SFT
checkpoint and the trained checkpoint are evaluated through the one recorded path, on held-out
one-digit problems that no checkpoint of the lineage trained on, and the claims rows point at
the run that wrote those samples.

The checkpoints are served the way ``eval.models.ModelSpec.serve`` reuses a server already on
the default port (pointed at a fake endpoint that answers by model: the base model always
wrong, the SFT checkpoint right on its first sample only, the trained checkpoint always right).
"""

from __future__ import annotations

import json
import re

import dagster as dg
import pytest

from assets.resources import GraderResource, LLMResource, WarehouseResource
from pipelines.llm.testing import FakeLLMServer
from pipelines.models import EMBEDDED_SERVED_NAME, embedded_model_dir
from warehouse import Lineage, Warehouse

SFT, GRPO = "demo_sft-aaaa1111", "demo_grpo-bbbb2222"
WORDS = {"plus": lambda a, b: a + b, "minus": lambda a, b: a - b, "times": lambda a, b: a * b}


def answer(body: dict, index: int) -> str:
    """Right for the trained model, right on the first sample for the SFT one, else wrong."""
    m = re.search(r"What is (\d) (plus|minus|times) (\d)\?", body["messages"][-1]["content"])
    value = WORDS[m[2]](int(m[1]), int(m[3]))
    # the sample index reaches the endpoint as the per-sample seed (sampling seed 0 + index)
    right = body["model"] == GRPO or (body["model"] == SFT and body.get("seed", 0) % 2 == 0)
    return f"The answer is \\boxed{{{value if right else value + 100}}}."


def _checkpoint(wh: Warehouse, folder, ck: str, parent: str, base: str, config: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text("{}")
    wh.write("checkpoints", [{
        "checkpoint_id": ck, "kind": "grpo" if parent else "sft", "status": "complete",
        "path": str(folder), "base_model": base, "recipe": ck.split("-")[0],
        "parent_checkpoint": parent, "config_json": json.dumps(config)}],
        lineage=Lineage(partition=ck))


def _report(instance: dg.DagsterInstance, asset: str, ck: str, folder) -> None:
    instance.report_runless_asset_event(dg.AssetMaterialization(asset, metadata={
        "checkpoint_id": dg.MetadataValue.text(ck),
        "checkpoint_path": dg.MetadataValue.path(str(folder))}))


@pytest.fixture
def lineage_of_two(weft_home, monkeypatch):
    """An SFT and a GRPO checkpoint in `checkpoints` (the GRPO one trained from the SFT one)
    and their materializations; the default serving port points at the fake endpoint."""
    import pipelines.serving

    wh = Warehouse()
    embedded_model_dir().mkdir(parents=True)  # named a model folder; the fake endpoint serves it
    (embedded_model_dir() / "config.json").write_text("{}")
    sft_dir, grpo_dir = weft_home / "models" / SFT, weft_home / "models" / GRPO
    _checkpoint(wh, sft_dir, SFT, "", str(embedded_model_dir()),
                {"dataset": "builtin:arith_sft", "dataset_limit": 64, "seed": 0})
    _checkpoint(wh, grpo_dir, GRPO, SFT, str(sft_dir),
                {"dataset": "builtin:arith1?seed=2", "dataset_limit": 96, "seed": 0})
    instance = dg.DagsterInstance.ephemeral()
    _report(instance, "sft_checkpoint", SFT, sft_dir)
    _report(instance, "grpo_checkpoint", GRPO, grpo_dir)
    with FakeLLMServer(models=(EMBEDDED_SERVED_NAME, SFT, GRPO), responder=answer) as server:
        monkeypatch.setattr(pipelines.serving, "DEFAULT_PORT", server.port)
        yield instance, server


def _materialize(instance, server, **config):
    from assets.results.learning_results import learning_claim

    resources = {"warehouse": WarehouseResource(), "grader": GraderResource(processes=1),
                 "llm": LLMResource(base_url=server.base_url, model=EMBEDDED_SERVED_NAME,
                                    max_concurrency=4)}
    return dg.materialize([learning_claim], instance=instance, resources=resources,
                          raise_on_error=False,
                          run_config={"ops": {"learning_claim": {"config": config}}})


def test_learning_claim_evaluates_every_model_through_the_recorded_path(lineage_of_two):
    from training.data import load_dataset

    instance, server = lineage_of_two
    result = _materialize(instance, server, heldout_n=20, sampling={"k": 2}, n_boot=500)
    assert result.success
    wh = Warehouse()
    samples = wh.sql("SELECT model, problem_id, correct, run_id, benchmark, prompt FROM "
                     "eval_samples").to_pylist()
    by_model = {m: [s for s in samples if s["model"] == m] for m in (EMBEDDED_SERVED_NAME, SFT, GRPO)}
    assert {m: len(v) for m, v in by_model.items()} == {EMBEDDED_SERVED_NAME: 40, SFT: 40, GRPO: 40}
    assert {s["benchmark"] for s in samples} == {"arith1_heldout"}
    assert {s["run_id"] for s in samples} == {result.run_id}
    # held out: no problem either checkpoint trained on (read independently of the asset)
    trained = {r["problem"] for r in load_dataset("builtin:arith1?seed=2", limit=96, seed=0).rows}
    asked = {re.search(r"What is .*\?", s["prompt"])[0] for s in samples}
    assert len(asked) == 20 and not asked & trained
    assert sum(s["correct"] for s in by_model[GRPO]) == 40
    assert sum(s["correct"] for s in by_model[EMBEDDED_SERVED_NAME]) == 0
    assert sum(s["correct"] for s in by_model[SFT]) == 20
    # every claims row points at this run, which wrote a `runs` row for itself and one per
    # evaluation
    claims = wh.sql("SELECT * FROM claims WHERE experiment = 'learning_claim' "
                    "ORDER BY reference").to_pylist()
    assert [(c["reference"], c["treatment"]) for c in claims] == [("base", "sft+grpo"),
                                                                   ("sft", "sft+grpo")]
    assert {c["run_id"] for c in claims} == {result.run_id}
    runs = {(r["asset"], r["partition"]): r["status"] for r in wh.sql(
        "SELECT asset, partition, status FROM runs WHERE run_id = $r",
        {"r": result.run_id}).to_pylist()}
    assert runs == {("learning_claim", "learning_claim"): "success",
                    **{("eval_samples", f"arith1_heldout|{m}"): "success" for m in by_model}}
    calls = wh.sql("SELECT count(*) AS n FROM llm_calls WHERE run_id = $r",
                   {"r": result.run_id}).to_pylist()[0]["n"]
    assert calls == 120
    vs_base, vs_sft = claims
    assert (vs_base["reference_value"], vs_base["treatment_value"]) == (0.0, 1.0)
    assert vs_base["verdict"] == "reproduced" and vs_base["n"] == 20
    assert vs_sft["diff"] == pytest.approx(0.5)


def test_a_grpo_checkpoint_from_another_start_is_refused(lineage_of_two, weft_home):
    instance, server = lineage_of_two
    other = weft_home / "models" / "demo_sft-cccc3333"
    _checkpoint(Warehouse(), other, "demo_sft-cccc3333", "", str(embedded_model_dir()),
                {"dataset": "builtin:arith_sft", "dataset_limit": 64, "seed": 1})
    _report(instance, "sft_checkpoint", "demo_sft-cccc3333", other)
    result = _materialize(instance, server, heldout_n=4)
    assert not result.success
    failure = result.get_step_failure_events()[0].event_specific_data.error.message
    assert "was not trained from the latest sft_checkpoint" in failure
    assert "eval_samples" not in Warehouse().tables()
