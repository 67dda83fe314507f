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
