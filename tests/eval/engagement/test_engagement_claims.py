"""The toy claims' rows pair the arms by training seed (each arm's mean over the seed's
evaluation episodes): the difference is recomputed here from the simulations themselves."""

from dataclasses import replace

import numpy as np
import pytest

from eval.claims import judge
from eval.engagement import deliberation as D
from eval.engagement import patrol as P
from eval.engagement.claims import deliberation_claims, patrol_claims


def test_deliberation_claim_rows_match_a_direct_run():
    """Units are training seeds: each arm's score of a seed is its mean over the seed's
    evaluation episodes; recomputed here by training and evaluating each seed directly."""
    ret, tout = deliberation_claims("single", training_seeds=2, train_episodes=800,
                                    eval_episodes=40, n_boot=300)
    diffs, share_diffs = [], []
    for seed in (D.SINGLE_TASK.seed, D.SINGLE_TASK.seed + 1000):
        cfg = replace(D.SINGLE_TASK, seed=seed)
        res = {t: D.evaluate(cfg, D.train(cfg, t, 800), D.EP, 40) for t in D.TIMINGS}
        diffs.append(float(np.mean(res[D.EP].returns) - np.mean(res[D.STEP].returns)))
        share = {t: np.mean(res[t].timeouts / res[t].tasks) for t in D.TIMINGS}
        share_diffs.append(float(share[D.EP] - share[D.STEP]))
    assert ret["diff"] == pytest.approx(float(np.mean(diffs)))
    assert tout["diff"] == pytest.approx(float(np.mean(share_diffs)))
    assert ret["n"] == tout["n"] == 2 and tout["higher_is_better"] is False


def test_patrol_claim_compares_ep_with_the_tables_strongest_baseline():
    (row,) = patrol_claims("state2", training_seeds=2, train_episodes=100, eval_episodes=20,
                           n_boot=300)
    assert row["reference"] == "patchpro" and row["n"] == 2
    diffs = []
    for seed in (P.STATE_LEVEL[2].seed, P.STATE_LEVEL[2].seed + 1000):
        cfg = replace(P.STATE_LEVEL[2], seed=seed)
        pol = P.policies(cfg, 100)
        ep, ref = (P.evaluate(cfg, pol[n], 20).returns for n in ("ep", "patchpro"))
        diffs.append(float(np.mean(ep) - np.mean(ref)))
    assert row["diff"] == pytest.approx(float(np.mean(diffs)))
    with pytest.raises(ValueError, match="patrol setting must be one of"):
        patrol_claims("state4")


def test_assistant_claim_pairs_episodes_of_both_methods():
    from eval.engagement.claims import assistant_claims
    from eval.engagement.llm_runs import run_comparison

    comp = run_comparison("assistant", ["agentloop", "ep"], setting="single", n_seeds=3,
                          episodes_per_seed=2, log=False)
    utility, timeout = assistant_claims(comp, n_boot=300)
    rows = {(r["method"], r["seed"], r["episode"]): r for r in comp.episodes}
    keys = sorted({(s, e) for _, s, e in rows})
    assert utility["n"] == timeout["n"] == len(keys) == 6
    assert utility["diff"] == pytest.approx(float(np.mean(
        [rows[("ep", *k)]["utility"] - rows[("agentloop", *k)]["utility"] for k in keys])))

    def share(r):
        return r["timeouts"] / r["scored"] if r["scored"] else 0.0

    assert timeout["diff"] == pytest.approx(float(np.mean(
        [share(rows[("ep", *k)]) - share(rows[("agentloop", *k)]) for k in keys])))
    assert utility["section"] == "Table 3 (single, scripted)"
    # scripted triage and outputs: both parts are setup checks, not claims
    assert utility["role"] == timeout["role"] == "check"
    assert "setup check" in utility["claim"] and "setup check" in timeout["claim"]
    assert "0.533" in timeout["paper_value"] and "2.293" in utility["paper_value"]


def test_kitchen_claim_refuses_the_scripted_controller():
    from eval.engagement.claims import kitchen_claims
    from eval.engagement.llm_runs import run_comparison

    comp = run_comparison("kitchen", ["reflexpatch", "ep"], setting="one", cases_per_cell=1,
                          log=False)
    with pytest.raises(ValueError, match="needs the LLM controller"):
        kitchen_claims(comp)


def test_kitchen_claim_pairs_cases_under_the_llm_controller():
    from eval.engagement import kitchen as K
    from eval.engagement.claims import kitchen_claims
    from eval.engagement.llm_runs import run_comparison
    from tests.eval.engagement.test_kitchen import PreferenceClient

    comp = run_comparison("kitchen", ["reflexpatch", "ep"], setting="one", cases_per_cell=1,
                          client=PreferenceClient(), log=False)
    (row,) = kitchen_claims(comp, n_boot=300)
    by = {(r["method"], r["case_id"]): r["utility"] for r in comp.episodes}
    cases = sorted({c for _, c in by})
    assert row["n"] == len(cases) == len(K.make_cases(K.KitchenConfig(setting="one",
                                                                       cases_per_cell=1)))
    assert row["diff"] == pytest.approx(float(np.mean(
        [by[("ep", c)] - by[("reflexpatch", c)] for c in cases])))
    assert row["section"] == "Table 4 (one, preference)"


def _simulated(rng, seeds: int, episodes: int, truth: float):
    """{(seed, episode): value} of both arms: the treatment's advantage varies between seeds
    (sd 5 around ``truth``), every episode adds noise of sd 40 to each arm."""
    ref, treat = {}, {}
    for s in range(seeds):
        effect = truth + rng.normal(0.0, 5.0)
        for e in range(episodes):
            ref[(s, e)] = rng.normal(0.0, 40.0)
            treat[(s, e)] = effect + rng.normal(0.0, 40.0)
    return ref, treat


def test_the_ci_resamples_training_seeds_and_covers_the_truth():
    """Simulated runs (true difference +3, between-seed sd 5, episode sd 40): the claim's CI
    over the means of 10 seeds covers the truth in about 90% of runs; the design it replaced,
    3 seeds x 300 episodes with (seed, episode) pairs resampled as if independent, far less
    often."""
    import numpy as np

    from eval.compare import paired_bootstrap
    from eval.engagement.claims import deliberation_parts, seed_means

    rng = np.random.default_rng(7)
    truth, runs = 3.0, 200
    claim = deliberation_parts("single")[0]
    by_seed = by_pair = 0
    for _ in range(runs):
        ref, treat = _simulated(rng, 10, 100, truth)
        row = judge(claim, seed_means(ref), seed_means(treat), n_boot=1000)
        assert row["n"] == 10
        by_seed += row["diff_ci_low"] <= truth <= row["diff_ci_high"]
        ref, treat = _simulated(rng, 3, 300, truth)
        pairs = paired_bootstrap(np.array(list(treat.values())), np.array(list(ref.values())),
                                 n_boot=1000)
        by_pair += pairs.ci_low <= truth <= pairs.ci_high
    assert by_seed / runs >= 0.85
    assert by_pair / runs <= 0.80


def test_fewer_than_two_training_seeds_is_refused():
    from eval.engagement.claims import deliberation_claims

    with pytest.raises(ValueError, match="resamples training seeds"):
        deliberation_claims("single", training_seeds=1)
