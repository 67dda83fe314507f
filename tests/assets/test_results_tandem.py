"""assets/results/tandem_results.py: the Tandem RL claim (§4.2-4.5) as a result asset.

The claim's four parts are computed from warehouse rows whose differences are known by
construction and checked against independent computations (per-problem means, pass@1 as the
share right, token-weighted cross-entropy, and the jackknife of the survival-curve area
recomputed here with numpy from the closed-form log-ratio). The slow test runs the job on the
real trainer (both arms, one step each, from a one-step demo SFT) and the real local vLLM
servers (both seniors and the junior), on 4 held-out problems.
"""

from __future__ import annotations

import json

import dagster as dg
import numpy as np
import pytest
import torch

from assets.results.tandem_results import TANDEM, TandemClaimConfig, arm_overrides, heldout_sets
from eval.claims import ClaimError
from eval.handoff_team import handoff_label
from eval.tandem_metrics import drift_by_problem
from training.heldout import HELDOUT_BENCHMARK, heldout_benchmark, heldout_chain
from training.tandem.study import (
    ARM_NAMES,
    TANDEM_SOLO_MARGIN,
    collapse_check,
    invalid_arm_text,
    tandem_claims,
)
from warehouse import Lineage, Warehouse
from warehouse.partitions import eval_partition, partition_key

VOCAB = 8


def _jackknife(senior: dict, junior: dict, problems: list, min_count: int, a: float = 0.5):
    """Pseudo-values of the mean |log-ratio| on the junior's frequent tokens, from the
    closed form log((c_s + a) / N_s) - log((c_j + a) / N_j), written out with numpy."""
    s = np.array([senior[p] for p in problems], dtype=float)
    j = np.array([junior[p] for p in problems], dtype=float)

    def theta(cs, cj, tokens):
        ratio = np.log((cs[tokens] + a) / cs.sum()) - np.log((cj[tokens] + a) / cj.sum())
        return float(np.mean(np.abs(ratio)))

    tokens = np.nonzero(j.sum(0) >= min_count)[0]
    full = theta(s.sum(0), j.sum(0), tokens)
    n = len(problems)
    return {p: n * full - (n - 1) * theta(s.sum(0) - s[i], j.sum(0) - j[i], tokens)
            for i, p in enumerate(problems)}, full


def test_drift_pseudo_values_match_a_hand_written_jackknife():
    rng = np.random.default_rng(3)
    problems = [f"b/p{i}" for i in range(7)]
    junior = {p: rng.integers(0, 6, VOCAB).tolist() for p in problems}
    senior = {p: rng.integers(0, 6, VOCAB).tolist() for p in problems}
    got, theta, frequent = drift_by_problem(
        {p: torch.tensor(v, dtype=torch.float64) for p, v in senior.items()},
        {p: torch.tensor(v, dtype=torch.float64) for p, v in junior.items()},
        problems=problems, min_count=12)
    expected, full = _jackknife(senior, junior, problems, 12)
    assert theta == pytest.approx(full)
    assert frequent == int((np.array(list(junior.values())).sum(0) >= 12).sum())
    assert got == pytest.approx(expected)
    # a senior with the junior's exact counts has log-ratio 0 on every token, left out or not
    same, theta0, _ = drift_by_problem(
        {p: torch.tensor(v, dtype=torch.float64) for p, v in junior.items()},
        {p: torch.tensor(v, dtype=torch.float64) for p, v in junior.items()},
        problems=problems, min_count=12)
    assert theta0 == pytest.approx(0.0) and all(v == pytest.approx(0.0) for v in same.values())
    with pytest.raises(ClaimError, match="no token occurs 1000"):
        drift_by_problem({p: torch.tensor(v, dtype=torch.float64) for p, v in senior.items()},
                         {p: torch.tensor(v, dtype=torch.float64) for p, v in junior.items()},
                         problems=problems, min_count=1000)


# ---- the four parts from synthetic warehouse rows ---------------------------------------------

PIDS = [f"q{i}" for i in range(12)]
JUNIOR = "ck-start"
MODELS = {"grpo": "ck-grpo", "tandem": "ck-tandem"}
K = 4


def _tokens(text: str) -> list[int]:
    return [int(t) for t in text.split()]


def _write(wh, label: str, rows: list[dict], run: str) -> None:
    wh.write("eval_samples", rows, lineage=Lineage(run_id=run, asset="eval_samples",
                                                   partition=eval_partition(HELDOUT_BENCHMARK, label)))


def _samples(label: str, correct: dict, outputs: dict | None = None, mode: str = "single",
             handoffs: list[int] | None = None):
    return [{"model": label, "benchmark": HELDOUT_BENCHMARK, "problem_id": p,
             "sample_index": i, "correct": bool(c), "mode": mode, "gen_error": None,
             "output": (outputs or {}).get(p, ["0"] * K)[i],
             "handoffs": None if handoffs is None else handoffs[i]}
            for p, cs in correct.items() for i, c in enumerate(cs)]


# handoffs of each team sample, by sample index: GRPO's teams 0, 1, 2, 3; Tandem's 2 each
HANDOFFS = {"grpo": [0, 1, 2, 3], "tandem": [2, 2, 2, 2]}


def _world(wh, rng):
    """Solo: both seniors right on the same samples. Handoff: the Tandem team right on every
    sample, GRPO's on the first of four. Legibility: Tandem's cross-entropy 0.4 nats below
    GRPO's on every position. Drift: the junior writes tokens 1-4 evenly, the Tandem senior
    the same, the GRPO senior mostly token 5."""
    solo = {p: [int(x) for x in rng.integers(0, 2, K)] for p in PIDS}
    junior_out = {p: ["1 2 3 4"] * K for p in PIDS}
    grpo_out = {p: ["5 5 5 1"] * K for p in PIDS}
    for label, outputs in ((MODELS["grpo"], grpo_out), (MODELS["tandem"], junior_out),
                           (JUNIOR, junior_out)):
        _write(wh, label, _samples(label, solo, outputs), f"solo-{label}")
    # an older evaluation of the GRPO senior that must not be read
    _write(wh, MODELS["grpo"], _samples(MODELS["grpo"], {p: [1] * K for p in PIDS}), "old")
    _write(wh, MODELS["grpo"], _samples(MODELS["grpo"], solo, grpo_out), "solo-grpo-new")
    team = {"grpo": {p: [1, 0, 0, 0] for p in PIDS}, "tandem": {p: [1] * K for p in PIDS}}
    for arm, model in MODELS.items():
        for starts in ("senior", "junior"):
            label = handoff_label(model, JUNIOR, starts)
            _write(wh, label, _samples(label, team[arm], mode="handoff",
                                       handoffs=HANDOFFS[arm]), f"{arm}-{starts}")
    ce = {}
    for arm, model in MODELS.items():
        ce[arm] = {p: [(1.0 + 0.1 * i - (0.4 if arm == "tandem" else 0.0), 2 + i)
                       for i in range(2)] for p in PIDS}
        rows = [{"model": model, "junior": JUNIOR, "benchmark": HELDOUT_BENCHMARK,
                 "problem_id": p, "sample_index": i, "tokens": t, "junior_ce_nats": v,
                 "overlap": 0.5} for p in PIDS for i, (v, t) in enumerate(ce[arm][p])]
        wh.write("tandem_legibility", rows, lineage=Lineage(
            partition=partition_key(HELDOUT_BENCHMARK, model, JUNIOR)))
    return solo, team, ce, {"grpo": grpo_out, "tandem": junior_out, "junior": junior_out}


def test_tandem_claims_from_rows_known_by_construction(weft_home):
    wh = Warehouse()
    solo, _team, ce, outputs = _world(wh, np.random.default_rng(0))
    rows, details = tandem_claims(wh, MODELS, JUNIOR, [HELDOUT_BENCHMARK], tokenize=_tokens,
                                  vocab_size=VOCAB, handoff_k=1, min_count=4, n_boot=500)
    by = {r["section"].split()[0]: r for r in rows}
    assert set(by) == {"§4.2", "§4.3", "§4.4", "§4.5"}
    assert all(r["reference"] == ARM_NAMES["grpo"] and r["treatment"] == ARM_NAMES["tandem"]
               for r in rows)
    # solo: identical per-problem accuracy (the newest GRPO run, not the all-right old one)
    acc = by["§4.2"]
    assert acc["kind"] == "no_worse" and acc["margin"] == TANDEM_SOLO_MARGIN
    assert acc["reference_value"] == pytest.approx(np.mean([np.mean(solo[p]) for p in PIDS]))
    # every problem scores the same in both arms: the CI [0, 0] says nothing (the same model
    # evaluated twice gives it), so the part is inconclusive and says why
    assert acc["diff"] == pytest.approx(0.0) and acc["n_discordant"] == 0
    assert (acc["verdict"], acc["inconclusive_reason"]) == ("inconclusive",
                                                            "no_discordant_units")
    assert (acc["bound_low"], acc["bound_high"]) == (0.0, 1.0)
    # handoff pass@1 = the share right, the mean of both starts: 1 vs 1/4
    hand = by["§4.3"]
    assert hand["diff"] == pytest.approx(1.0 - 0.25) and hand["n"] == len(PIDS)
    assert hand["verdict"] == "reproduced" and hand["metric"].startswith("handoff pass@1")
    assert details["handoff_by_start"][f"{HELDOUT_BENCHMARK}/grpo"] == {
        "senior": pytest.approx(0.25), "junior": pytest.approx(0.25)}
    # legibility: token-weighted per-problem means, 0.4 lower for Tandem
    leg = by["§4.5"]
    weighted = {a: np.mean([sum(v * t for v, t in ce[a][p]) / sum(t for _, t in ce[a][p])
                            for p in PIDS]) for a in ce}
    assert leg["reference_value"] == pytest.approx(weighted["grpo"])
    assert leg["diff"] == pytest.approx(-0.4) and leg["verdict"] == "reproduced"
    assert leg["higher_is_better"] is False
    # drift: the jackknife of the survival-curve area, recomputed from the outputs' counts
    counts = {who: {f"{HELDOUT_BENCHMARK}/{p}": np.bincount(
        [t for text in outs[p] for t in _tokens(text)], minlength=VOCAB).tolist()
        for p in PIDS} for who, outs in outputs.items()}
    keys = sorted(counts["junior"])
    pseudo = {a: _jackknife(counts[a], counts["junior"], keys, 4)[0] for a in ("grpo", "tandem")}
    drift = by["§4.4"]
    assert drift["diff"] == pytest.approx(np.mean([pseudo["tandem"][k] - pseudo["grpo"][k]
                                                   for k in keys]))
    assert drift["treatment_value"] == pytest.approx(0.0, abs=1e-12)
    assert drift["verdict"] == "reproduced" and details["drift_frequent_tokens"] == 4
    # every arm scores the start's solo accuracy: no collapse, no part marked invalid
    assert details["collapse"]["collapsed"] == []
    assert all(r["invalid_arm"] is None for r in rows)
    # handoffs per team answer: GRPO's teams (0+1+2+3)/4 = 1.5 from each start, Tandem's 2
    per_answer = details["handoffs_per_answer"]
    assert per_answer["grpo/senior"] == per_answer["grpo/junior"] == pytest.approx(1.5)
    assert per_answer["tandem/senior"] == per_answer["tandem/junior"] == pytest.approx(2.0)
    assert per_answer["all"] == pytest.approx(1.75)
    assert per_answer["share_with_one"] == pytest.approx((3 / 4 + 1) / 2)
    assert per_answer["answers"] == 4 * len(PIDS) * K


# ---- the validity rule: a collapsed arm says nothing about drift or cross-entropy ----------------

def test_collapse_rule_on_constructed_scores():
    """Means over the problems all three were scored on, threshold half the start's mean,
    strictly below it collapses; worked out by hand."""
    start = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.0, "extra": 0.0}  # 3/4 on a-d; "extra" unscored
    grpo = {"a": 1.0, "b": 1.0, "c": 0.5, "d": 0.5}  # 3/4
    tandem = {"a": 0.5, "b": 0.0, "c": 0.0, "d": 0.0}  # 1/8, below 3/8
    check = collapse_check({"grpo": grpo, "tandem": tandem}, start)
    assert check["problems"] == 4
    assert check["start"] == pytest.approx(0.75) and check["threshold"] == pytest.approx(0.375)
    assert check["arms"] == {"grpo": pytest.approx(0.75), "tandem": pytest.approx(0.125)}
    assert check["collapsed"] == ["tandem"]
    text = invalid_arm_text(check)
    assert text.startswith("Tandem RL collapsed") and "0.125" in text and "0.750" in text
    assert "GRPO" not in text and "4 problems" in text
    # exactly at the threshold (3/8 = 0.5 x 3/4) is not below it
    at = {"a": 0.5, "b": 0.5, "c": 0.5, "d": 0.0}
    assert collapse_check({"grpo": grpo, "tandem": at}, start)["collapsed"] == []
    # both arms below it; the reference named first
    both = collapse_check({"grpo": tandem, "tandem": tandem}, start)
    assert both["collapsed"] == ["grpo", "tandem"]
    assert invalid_arm_text(both).startswith("GRPO collapsed") and "Tandem RL collapsed" in \
        invalid_arm_text(both)
    # a start that solves nothing: nothing can fall below 0
    zero = {p: 0.0 for p in start}
    assert collapse_check({"grpo": tandem, "tandem": zero}, zero)["collapsed"] == []
    assert invalid_arm_text(collapse_check({"grpo": grpo, "tandem": grpo}, start)) is None
    with pytest.raises(ClaimError, match="evaluate the junior alone"):
        collapse_check({"grpo": grpo, "tandem": tandem}, {"z": 1.0})


def _collapse(wh, arm: str) -> None:
    """A newer solo evaluation of ``arm``'s senior, wrong on every sample (same outputs)."""
    model = MODELS[arm]
    outputs = {p: ["5 5 5 1"] * K for p in PIDS} if arm == "grpo" else None
    _write(wh, model, _samples(model, {p: [0] * K for p in PIDS}, outputs), f"collapsed-{arm}")


@pytest.mark.parametrize("arm", ["tandem", "grpo"])
def test_a_collapsed_arm_makes_drift_and_cross_entropy_inconclusive(weft_home, arm):
    """The world of the test above, where drift and cross-entropy favour Tandem RL, with one
    senior's newest solo run wrong everywhere (the start is right on about half): those two
    parts turn inconclusive for the invalid arm, named in the row; solo and handoff are judged
    as before (a collapse is what they measure)."""
    wh = Warehouse()
    solo, _team, _ce, _out = _world(wh, np.random.default_rng(0))
    start_mean = np.mean([np.mean(solo[p]) for p in PIDS])
    assert start_mean > 0.2  # so an arm right nowhere is below half of it
    _collapse(wh, arm)
    rows, details = tandem_claims(wh, MODELS, JUNIOR, [HELDOUT_BENCHMARK], tokenize=_tokens,
                                  vocab_size=VOCAB, handoff_k=1, min_count=4, n_boot=500)
    by = {r["section"].split()[0]: r for r in rows}
    assert details["collapse"]["collapsed"] == [arm]
    assert details["collapse"]["start"] == pytest.approx(start_mean)
    for part in ("§4.4", "§4.5"):
        assert (by[part]["verdict"], by[part]["inconclusive_reason"]) == ("inconclusive",
                                                                          "invalid_arm")
        assert by[part]["invalid_arm"].startswith(f"{ARM_NAMES[arm]} collapsed")
    assert by["§4.2"]["invalid_arm"] is None and by["§4.3"]["invalid_arm"] is None
    assert by["§4.3"]["verdict"] == "reproduced"  # the handoff rows did not change
    # the collapsed arm's accuracy is the solo part's evidence: a drop of the start's mean
    sign = -1 if arm == "tandem" else 1
    assert by["§4.2"]["diff"] == pytest.approx(sign * start_mean)
    if arm == "tandem":
        assert by["§4.2"]["verdict"] == "not reproduced"


def test_the_wrong_direction_is_not_reproduced(weft_home):
    """Swap the arms: GRPO's rows under the Tandem id and the other way round."""
    wh = Warehouse()
    _world(wh, np.random.default_rng(1))
    swapped = {"grpo": MODELS["tandem"], "tandem": MODELS["grpo"]}
    rows, _ = tandem_claims(wh, swapped, JUNIOR, [HELDOUT_BENCHMARK], tokenize=_tokens,
                            vocab_size=VOCAB, handoff_k=1, min_count=4, n_boot=500)
    verdicts = {r["section"].split()[0]: r["verdict"] for r in rows}
    # §4.2: the arms' solo scores are identical per problem (no unit differs): inconclusive
    assert verdicts == {"§4.2": "inconclusive", "§4.3": "not reproduced",
                        "§4.4": "not reproduced", "§4.5": "not reproduced"}


def test_missing_legibility_or_handoff_rows_say_what_to_do(weft_home):
    wh = Warehouse()
    _world(wh, np.random.default_rng(2))
    with pytest.raises(ClaimError, match="samples of model 'ck-other'.*evaluate that arm"):
        tandem_claims(wh, {"grpo": MODELS["grpo"], "tandem": "ck-other"}, JUNIOR,
                      [HELDOUT_BENCHMARK], tokenize=_tokens, vocab_size=VOCAB)
    with pytest.raises(ClaimError, match="no problem of .* has 5 answered team samples"):
        tandem_claims(wh, MODELS, JUNIOR, [HELDOUT_BENCHMARK], tokenize=_tokens,
                      vocab_size=VOCAB, handoff_k=5)
    wh.delete_partition("tandem_legibility", partition_key(HELDOUT_BENCHMARK, MODELS["tandem"], JUNIOR))
    with pytest.raises(ClaimError, match="no tandem_legibility rows of ck-tandem"):
        tandem_claims(wh, MODELS, JUNIOR, [HELDOUT_BENCHMARK], tokenize=_tokens,
                      vocab_size=VOCAB)


# ---- the experiment's setup ---------------------------------------------------------------------

def test_arms_differ_in_the_method_only_and_the_reference_must_be_plain_grpo(embedded_model_dir):
    config = TandemClaimConfig(**TANDEM.run_config("cpu")["ops"]["tandem_claim"]["config"])
    args = arm_overrides(config, str(embedded_model_dir), "demo_sft-x")
    assert args["tandem"] == [*args["grpo"], "kind=tandem"]
    assert f"model_name_or_path={embedded_model_dir}" in args["grpo"]
    assert "seed=0" in args["grpo"] and f"max_steps={config.max_steps}" in args["grpo"]
    with pytest.raises(dg.Failure, match="not plain GRPO"):
        arm_overrides(config.model_copy(update={"recipe": "tandem_grpo.cpu"}), "", "")
    paper = TandemClaimConfig(**TANDEM.run_config("paper")["ops"]["tandem_claim"]["config"])
    assert paper.start_from == "" and paper.benchmarks and paper.max_steps == 200


def test_heldout_chains_leave_out_what_the_arms_and_the_start_train_on(weft_home):
    """The CPU task: held-out chain problems of another draw, none of them in the arms'
    training set or in the start's SFT set (read through its ``checkpoints`` row), each with
    several steps, prompted with the boxed instruction then the problem."""
    from training.config import load_config
    from training.data import builtin_chain, load_dataset

    config = TandemClaimConfig(**TANDEM.run_config("cpu")["ops"]["tandem_claim"]["config"])
    args = arm_overrides(config, "", "")["grpo"]
    sft = load_config(config.start_recipe, [])
    wh = Warehouse()
    wh.write("checkpoints", [{"checkpoint_id": "chain_sft.cpu-x", "kind": "sft",
                              "recipe": config.start_recipe, "parent_checkpoint": None,
                              "config_json": json.dumps({"dataset": sft.dataset,
                                                         "dataset_limit": sft.dataset_limit,
                                                         "seed": sft.seed})}])
    ((bench, rows),) = heldout_sets(config, args, "chain_sft.cpu-x", wh)
    assert bench.name == "chain_heldout" and len(rows) == config.heldout_chain
    grpo = load_config(config.recipe, args)
    trained = {r["problem"] for r in load_dataset(grpo.dataset, limit=grpo.dataset_limit,
                                                  seed=grpo.seed).rows}
    sft_rows = load_dataset(sft.dataset, limit=sft.dataset_limit, seed=sft.seed).rows
    started = {r["prompt"][-1]["content"] for r in sft_rows}
    assert grpo.dataset.startswith("builtin:chain") and sft.dataset == "builtin:chain_sft"
    assert len(trained) == grpo.dataset_limit and len(started) == sft.dataset_limit
    texts = [r["problem"] for r in rows]
    assert len(set(texts)) == len(texts) and not (trained | started) & set(texts)
    assert all(2 <= r["steps"] <= 5 for r in rows)
    prompt = bench.render(rows[0])
    assert prompt.endswith("\n\n" + rows[0]["problem"]) and "\\boxed{}" in prompt
    # the draw of another seed, in its order, with the excluded texts skipped
    drawn = builtin_chain(3 + 10, 3)
    assert [r["problem"] for r in heldout_chain(10, seed=3, exclude={d["problem"] for d in drawn[:3]})
            ] == [d["problem"] for d in drawn[3:]]
    with pytest.raises(dg.Failure, match="set one of heldout_chain and heldout_arith"):
        heldout_sets(config.model_copy(update={"heldout_arith": 8}), args, "", None)


def test_heldout_problems_leave_out_what_either_recipe_trains_on():
    from training.config import load_config
    from training.data import load_dataset

    config = TandemClaimConfig(heldout_arith=60, heldout_chain=0, start_recipe="demo_sft",
                               start_from="sft_checkpoint", recipe="demo_grpo")
    ((bench, rows),) = heldout_sets(config, ["seed=0", "max_steps=8"], "", None)
    assert bench.name == HELDOUT_BENCHMARK and len(rows) == 60
    trained = set()
    for recipe in ("demo_grpo", "demo_sft"):
        cfg = load_config(recipe, [])
        data = load_dataset(cfg.dataset, fallback=cfg.dataset_fallback,
                            limit=cfg.dataset_limit, seed=cfg.seed).rows
        trained |= {r.get("problem") or r["prompt"][-1]["content"] for r in data}
    assert trained and not trained & {r["problem"] for r in rows}
    prompt = heldout_benchmark().render(rows[0])
    assert prompt.endswith("\n\n" + rows[0]["problem"]) and "\\boxed{}" in prompt


# ---- one tiny real run --------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.server
def test_tiny_real_claim_job(weft_home, embedded_model_dir):
    """A one-step chain SFT, then the claim job at its CPU settings but smaller: both arms one
    real GRPO step (plain and Tandem) on chain problems through Pipes, both seniors and the
    junior on real local vLLM servers, solo and in handoff mode on 4 held-out chains x 2
    samples, legibility on the real models."""
    import time

    from assets.resources import GraderResource, LLMResource, WarehouseResource
    from assets.results.experiments import claim_job
    from assets.results.tandem_results import tandem_claim
    from assets.training import CHECKPOINT_ASSETS, TrainerLauncher

    chain_sft = CHECKPOINT_ASSETS["chain_sft_checkpoint"]
    resources = {"trainer": TrainerLauncher(), "warehouse": WarehouseResource(),
                 "llm": LLMResource(max_concurrency=4), "grader": GraderResource(processes=1)}
    instance = dg.DagsterInstance.ephemeral()
    t0 = time.perf_counter()
    sft = dg.materialize([chain_sft], resources=resources, instance=instance,
                         run_config={"ops": {"chain_sft_checkpoint": {"config": {
                             "recipe": "chain_sft.cpu",
                             "overrides": [f"model_name_or_path={embedded_model_dir}",
                                           "max_steps=1"]}}}})
    assert sft.success
    t1 = time.perf_counter()
    defs = dg.Definitions(assets=[chain_sft, tandem_claim], jobs=[claim_job(TANDEM)],
                          resources=resources)
    cpu = TANDEM.run_config("cpu")["ops"]["tandem_claim"]["config"]
    result = defs.resolve_job_def("tandem_claim_job").execute_in_process(
        instance=instance, raise_on_error=False, run_config={"scale": "cpu", "ops": {
            "tandem_claim": {"config": {
                "max_steps": 1, "heldout_chain": 4, "sampling": {"k": 2}, "min_count": 2,
                "n_boot": 200,
                "overrides": [*(o for o in cpu["overrides"] if not o.startswith("torch_")),
                              "torch_threads=1"]}}}})
    t2 = time.perf_counter()
    print(f"[timing] sft {t1 - t0:.0f}s, claim job {t2 - t1:.0f}s")
    wh = Warehouse()
    steps = wh.sql("SELECT checkpoint_id, max(step) AS s FROM train_metrics WHERE "
                   "checkpoint_id LIKE 'demo_grpo%' GROUP BY 1").to_pylist()
    assert sorted(r["s"] for r in steps) == [1, 1]
    evals = wh.sql("SELECT model, mode, count(*) AS n, count(DISTINCT problem_id) AS p FROM "
                   "eval_samples GROUP BY 1, 2").to_pylist()
    assert len(evals) == 7  # two seniors and the junior solo, two teams x two starts
    assert all((r["n"], r["p"]) == (8, 4) for r in evals)
    teams = wh.sql("SELECT handoff_starts, segment_authors FROM eval_samples WHERE mode = "
                   "'handoff'").to_pylist()
    assert all(r["segment_authors"][0] == r["handoff_starts"][0].upper() for r in teams)
    share, mean = wh.sql("SELECT avg(CASE WHEN handoffs >= 1 THEN 1.0 ELSE 0.0 END) AS s, "
                         "avg(handoffs) AS m FROM eval_samples WHERE mode = 'handoff' AND "
                         "gen_error IS NULL").to_pylist()[0].values()
    print(f"[handoff] share of team answers with at least one handoff: {share:.2f}, "
          f"mean handoffs {mean:.2f}")
    assert wh.sql("SELECT count(DISTINCT model) AS n FROM tandem_summary").to_pylist()[0]["n"] == 2
    if result.success:
        rows = wh.sql("SELECT * FROM claims").to_pylist()
        assert sorted(r["section"].split()[0] for r in rows) == ["§4.2", "§4.3", "§4.4", "§4.5"]
        assert all(r["n"] >= 2 and r["experiment"] == TANDEM.name for r in rows)
        stored = json.loads(rows[0]["config_json"])
        assert stored["arms"]["grpo"]["steps"] == stored["arms"]["tandem"]["steps"] == 1
        assert all("invalid_arm" in r for r in rows)
        (mat,) = result.asset_materializations_for_node("tandem_claim")
        page = mat.metadata
        assert page["handoffs_per_team_answer"].value == pytest.approx(mean)
        assert "solo_vs_start" in page and "collapse_rule" in page
        print("[claims]", [(r["section"], r["diff"], r["verdict"]) for r in rows])
    else:  # too few answered problems for a part: a recorded, explained failure
        failed = wh.sql("SELECT status, error FROM runs WHERE asset = 'tandem_claim'"
                        ).to_pylist()
        assert failed and failed[0]["status"] == "failed", failed
