"""The toy claims' rows pair the same (training seed, evaluation episode) of both arms: the
difference is recomputed here from the simulations themselves."""

from dataclasses import replace

import numpy as np
import pytest

from eval.engagement import deliberation as D
from eval.engagement import patrol as P
from eval.engagement.claims import deliberation_claims, patrol_claims


def test_deliberation_claim_rows_match_a_direct_run():
    ret, tout = deliberation_claims("single", training_seeds=1, train_episodes=800,
                                    eval_episodes=40, n_boot=300)
    cfg = D.SINGLE_TASK
    res = {t: D.evaluate(cfg, D.train(cfg, t, 800), D.EP, 40) for t in D.TIMINGS}
    assert ret["diff"] == pytest.approx(float(np.mean(res[D.EP].returns - res[D.STEP].returns)))
    share = {t: res[t].timeouts / res[t].tasks for t in D.TIMINGS}
    assert tout["diff"] == pytest.approx(float(np.mean(share[D.EP] - share[D.STEP])))
    assert ret["n"] == tout["n"] == 40 and tout["higher_is_better"] is False


def test_patrol_claim_compares_ep_with_the_tables_strongest_baseline():
    (row,) = patrol_claims("state2", training_seeds=1, train_episodes=100, eval_episodes=20,
                           n_boot=300)
    assert row["reference"] == "patchpro" and row["n"] == 20
    cfg = replace(P.STATE_LEVEL[2])
    pol = P.policies(cfg, 100)
    ep, ref = (P.evaluate(cfg, pol[n], 20).returns for n in ("ep", "patchpro"))
    assert row["diff"] == pytest.approx(float(np.mean(ep - ref)))
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
