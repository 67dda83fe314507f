"""The SxS latency claim: the claim's parts judged from interleaved-mode samples whose
differences are known by construction, the judge's quality figures, the two arms' settings and
data, and one tiny real run (two SFT arms on the embedded model, served and evaluated)."""

import json

import dagster as dg
import numpy as np
import pytest

from assets.results.core import claim_job
from assets.results.sxs import (
    SXS,
    SXS_ACCURACY_MARGIN,
    SxsClaimConfig,
    arm_overrides,
    checked_arms,
    claims_of,
    judge_quality,
    same_traces,
)
from eval.claims import ClaimError
from warehouse import Lineage, Warehouse


def _samples(wh, model, values, run_id, mode="interleaved", partition=None):
    """``values``: problem -> [(correct, abo, airw), ...] one tuple per sample."""
    rows = [{"model": model, "benchmark": "gsm8k", "problem_id": pid, "sample_index": i,
             "mode": mode, "correct": bool(c), "abo": abo, "airw": airw}
            for pid, samples in values.items() for i, (c, abo, airw) in enumerate(samples)]
    wh.write("eval_samples", rows, lineage=Lineage(run_id=run_id, asset="eval_samples",
                                                   partition=partition or f"gsm8k@{model}"))


def test_claim_parts_from_interleaved_samples(weft_home):
    wh = Warehouse()
    rng = np.random.default_rng(1)
    pids = [f"p{i:02d}" for i in range(24)]
    standard = {p: [(int(rng.integers(0, 2)), float(rng.uniform(300, 400)), None)
                    for _ in range(2)] for p in pids}
    standard = {p: [(c, abo, abo - 1) for c, abo, _ in s] for p, s in standard.items()}
    sxs = {p: [(int(rng.integers(0, 2)), float(rng.uniform(50, 150)), float(rng.uniform(10, 60)))
               for _ in range(2)] for p in pids}
    # the standard arm never reached its answer on p00 (both samples), SxS on one sample of p01
    standard["p00"] = [(0, None, None), (0, None, None)]
    sxs["p01"] = [sxs["p01"][0], (0, None, None)]
    _samples(wh, "ck-std", standard, "r1")
    _samples(wh, "ck-sxs", sxs, "r2")
    abo, airw, acc = claims_of(wh, "ck-std", "ck-sxs", "gsm8k", n_boot=2000)[0]

    def per_problem(arm, index):
        out = {}
        for p, samples in arm.items():
            vals = [s[index] for s in samples if s[index] is not None]
            if vals:
                out[p] = sum(vals) / len(vals)
        return out

    for row, index in ((abo, 1), (airw, 2)):
        ref, treat = per_problem(standard, index), per_problem(sxs, index)
        paired = sorted(set(ref) & set(treat))
        assert paired == pids[1:]  # p00 has no standard value; p01 keeps its one SxS sample
        assert row["n"] == 23
        assert row["diff"] == pytest.approx(np.mean([treat[p] - ref[p] for p in paired]))
        assert row["higher_is_better"] is False and row["verdict"] == "reproduced"
    accuracy = {name: {p: np.mean([s[0] for s in arm[p]]) for p in pids}
                for name, arm in (("std", standard), ("sxs", sxs))}
    assert acc["n"] == 24 and acc["kind"] == "no_worse" and acc["margin"] == SXS_ACCURACY_MARGIN
    assert acc["diff"] == pytest.approx(np.mean([accuracy["sxs"][p] - accuracy["std"][p]
                                                 for p in pids]))
    coverage = claims_of(wh, "ck-std", "ck-sxs", "gsm8k", n_boot=200)[1]
    assert coverage["reference_samples_without_speak"] == 2
    assert coverage["treatment_samples_without_speak"] == 1
    assert coverage["abo"] == {"problems_paired": 23, "reference_problems": 23,
                               "treatment_problems": 24}


def test_latency_the_wrong_way_is_not_reproduced(weft_home):
    wh = Warehouse()
    pids = [f"p{i}" for i in range(12)]
    _samples(wh, "ck-std", {p: [(1, 100.0 + i, 99.0 + i)] for i, p in enumerate(pids)}, "r1")
    _samples(wh, "ck-sxs", {p: [(1, 500.0 + i, 400.0)] for i, p in enumerate(pids)}, "r2")
    abo, airw, acc = claims_of(wh, "ck-std", "ck-sxs", "gsm8k", n_boot=500)[0]
    assert abo["diff"] == pytest.approx(400.0) and abo["verdict"] == "not reproduced"
    assert airw["verdict"] == "not reproduced"
    # every problem right in both arms: no variation to compare, whatever the kind
    assert acc["diff"] == 0.0 and acc["verdict"] == "inconclusive"


def test_too_few_answered_problems_is_a_claim_error(weft_home):
    wh = Warehouse()
    _samples(wh, "ck-std", {"a": [(0, None, None)], "b": [(0, 12.0, 11.0)]}, "r1")
    _samples(wh, "ck-sxs", {"a": [(0, 3.0, 2.0)], "b": [(0, 4.0, 1.0)]}, "r2")
    with pytest.raises(ClaimError, match="only 1 held-out problem"):
        claims_of(wh, "ck-std", "ck-sxs", "gsm8k")
    # single-mode rows of the same models are not read
    _samples(wh, "ck-std", {"a": [(0, 5.0, 4.0)], "b": [(0, 12.0, 11.0)]}, "r3", mode="single",
             partition="gsm8k@ck-std/single")
    with pytest.raises(ClaimError, match="only 1 held-out problem"):
        claims_of(wh, "ck-std", "ck-sxs", "gsm8k")


def test_judge_quality_counts_values_shown_before_the_reasoning_wrote_them():
    traces = {"t1": {"problem": "What is 2 + 3?", "reasoning": "Add them.\n\nWe get 5.\n\nCheck.",
                     "response": "The sum is 5.\n\nDone."},
              "t2": {"problem": "What is 6 * 7?", "reasoning": "Multiply.\n\nIt is 42.",
                     "response": "So 42.\n\nAnswer: 42"}}
    alignments = [
        # t1: "The sum is 5." shown after R1 (5 not yet written) -> unsupported; "Done." after R2
        {"trace_id": "t1", "repaired": [1, 2, 2], "judge_model": "m", "collapsed": False,
         "n_visible_segments": 2, "calls_made": 2, "calls_failed": 1},
        # t2: everything at the last block (terminal safeguard): collapsed, nothing early
        {"trace_id": "t2", "repaired": [0, 2], "judge_model": "m", "collapsed": True,
         "n_visible_segments": 1, "calls_made": 1, "calls_failed": 0}]
    q = judge_quality(alignments, traces)
    assert q["judge"] == ["m"] and q["samples"] == 2
    assert q["share_collapsed"] == 0.5 and q["mean_visible_segments"] == 1.5
    assert q["judge_calls"] == 3 and q["share_calls_failed"] == pytest.approx(1 / 3)
    assert q["early_answer_blocks"] == 2 and q["share_early_blocks_unsupported"] == 0.5
    with pytest.raises(ValueError, match="has no row in traces"):
        judge_quality(alignments, {"t1": traces["t1"]})


def test_both_scales_configure_the_job_and_the_arms_differ_in_data_only():
    job = claim_job(SXS)
    assert job.name == "sxs_latency_claim_job"
    for scale in ("cpu", "paper"):
        ops = SXS.run_config(scale)["ops"]
        assert set(SXS.upstream) <= set(ops)
        config = SxsClaimConfig(**ops["sxs_latency_claim"]["config"])
        std, sxs = arm_overrides(config, "standard"), arm_overrides(config, "sxs")
        differ = [(a, b) for a, b in zip(std, sxs) if a != b]
        assert len(std) == len(sxs) and differ == [
            ('dataset="warehouse:sxs_sft_dataset?variant=standard"',
             'dataset="warehouse:sxs_sft_dataset?variant=sxs"')]
        assert 'dataset_fallback=""' in std  # a missing table fails, never trains on other data
    assert SXS.run_config("cpu")["ops"]["sxs_alignments"]["config"]["judge"] == "evidence"
    paper = SXS.run_config("paper")["ops"]["sxs_latency_claim"]["config"]
    assert (paper["benchmark"], paper["k"], paper["temperature"]) == ("aime25", 16, 1.0)
    cpu = SxsClaimConfig(**SXS.run_config("cpu")["ops"]["sxs_latency_claim"]["config"])
    assert set(checked_arms(cpu)) == {"standard", "sxs"}  # the CPU recipe resolves for both


def test_arms_must_train_on_the_same_traces(weft_home):
    wh = Warehouse()
    rows = [{"trace_id": t, "problem_id": t, "source": "s", "variant": v, "prompt": "[]",
             "completion": "[]", "n_visible_segments": 1}
            for t, v in (("a", "sxs"), ("a", "standard"), ("b", "sxs"), ("c", "standard"))]
    wh.write("sxs_sft_dataset", rows)
    config = SxsClaimConfig(dataset_limit=1)
    assert same_traces(config) == ["a"]
    with pytest.raises(dg.Failure, match="not the same traces"):
        same_traces(SxsClaimConfig(dataset_limit=2))


@pytest.mark.slow
def test_tiny_real_claim_job(weft_home, shared_data, embedded_model_dir):
    """Two real SFT arms (1 step each) on 2 real traces, both served on vLLM and evaluated in
    interleaved mode on 4 GSM8K problems; the claims rows (or, when an arm showed nothing, the
    failed run) come from those samples."""
    from assets.resources import GraderResource, LLMResource, WarehouseResource
    from assets.results.sxs import sxs_latency_claim
    from assets.sxs import sxs_alignments, sxs_sft_dataset, traces
    from assets.training import TrainerLauncher

    config = {"ops": {
        "traces": {"config": {"sources": ["openmathreasoning"], "limit": 2}},
        "sxs_alignments": {"config": {"judge": "evidence"}},
        "sxs_sft_dataset": {"config": {"max_example_tokens": 1000,
                                       "tokenizer_path": str(embedded_model_dir)}},
        "sxs_latency_claim": {"config": {
            "scale": "cpu", "recipe": "sxs_sft.cpu", "max_steps": 1, "dataset_limit": 2,
            "overrides": [f"model_name_or_path={embedded_model_dir}", "max_length=1100",
                          "per_device_train_batch_size=1", 'save_strategy="no"'],
            "benchmark": "gsm8k", "eval_limit": 4, "max_tokens": 48,
            "tokenizer_path": str(embedded_model_dir), "n_boot": 500}}}}
    resources = {"trainer": TrainerLauncher(), "warehouse": WarehouseResource(),
                 "llm": LLMResource(), "grader": GraderResource()}
    result = dg.materialize([traces, sxs_alignments, sxs_sft_dataset, sxs_latency_claim],
                            resources=resources, run_config=config, raise_on_error=False)
    wh = Warehouse()
    judged = wh.sql("SELECT DISTINCT judge_model FROM sxs_alignments").to_pylist()
    assert judged == [{"judge_model": "evidence"}]
    ckpts = wh.sql("SELECT DISTINCT model FROM eval_samples").to_pylist()
    assert len(ckpts) == 2  # both arms evaluated, nothing else
    per_model = wh.sql("SELECT model, count(*) AS n, count(DISTINCT problem_id) AS problems, "
                       "min(mode) AS lo, max(mode) AS hi FROM eval_samples GROUP BY model"
                       ).to_pylist()
    assert all((r["n"], r["problems"], r["lo"], r["hi"]) == (4, 4, "interleaved", "interleaved")
               for r in per_model)
    steps = wh.sql("SELECT checkpoint_id, max(step) AS s FROM train_metrics GROUP BY 1").to_pylist()
    assert sorted(r["s"] for r in steps) == [1, 1]
    if result.success:
        rows = wh.sql("SELECT * FROM claims").to_pylist()
        assert sorted(r["metric"] for r in rows) == ["ABO (tokens)", "AIRW (tokens)", "accuracy"]
        stored = json.loads(rows[0]["config_json"])
        assert stored["judge_quality"]["judge"] == ["evidence"]
        assert stored["judge_quality"]["share_early_blocks_unsupported"] == 0.0
        meta = result.asset_materializations_for_node("sxs_latency_claim")[0].metadata
        assert meta["judge"].value == "evidence" and "latency_coverage" in meta
    else:  # an arm that showed no speak block on enough problems: a recorded, explained failure
        failed = wh.sql("SELECT status, error FROM runs WHERE asset = 'sxs_latency_claim'"
                        ).to_pylist()
        assert failed and failed[0]["status"] == "failed"
        assert "showed a speak block" in failed[0]["error"]
