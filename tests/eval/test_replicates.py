"""Claims pooled over seeds: the random-effects estimator against closed forms and a weighted
least-squares transcription, and the pooling of claim_history rows (newest run per seed, same
scale and design, verdict by the claims rule)."""

import json
import math
import zlib

import numpy as np
import pytest

from eval.claims import Claim, judge, row_verdict
from eval.claims.__main__ import main
from eval.replicates import Z_975, pool, pooled_rows, run_seed, se_from_ci, seeds_table
from warehouse import Lineage, Warehouse

# Student's t 0.975 quantiles from printed tables (df = 1, 2, 3)
T975 = {1: 12.7062047, 2: 4.3026527, 3: 3.1824463}


def test_equal_errors_and_a_wide_spread_give_the_t_interval_of_the_run_means():
    # tau^2 = (Q - 2) / (300 - 100) = 0.99, so every run weighs 1 and the Hartung-Knapp
    # variance is sd(y)^2 / k: the plain t interval on the three run means
    p = pool([0.0, 1.0, 2.0], [0.1, 0.1, 0.1])
    assert p.tau2 == pytest.approx(0.99)
    assert p.value == pytest.approx(1.0)
    half = T975[2] * 1.0 / math.sqrt(3)
    assert (p.ci_low, p.ci_high) == pytest.approx((1.0 - half, 1.0 + half), rel=1e-6)


def test_runs_that_agree_exactly_keep_at_least_the_random_effects_width():
    # Q = 0: tau^2 = 0 and the Hartung-Knapp variance is 0; the correction keeps 1 / sum(w)
    p = pool([0.5, 0.5], [0.1, 0.1])
    assert p.tau2 == 0.0 and p.value == pytest.approx(0.5)
    half = T975[1] * math.sqrt(0.01 / 2)
    assert (p.ci_low, p.ci_high) == pytest.approx((0.5 - half, 0.5 + half), rel=1e-6)


def test_unequal_errors_match_a_weighted_least_squares_transcription():
    y = np.array([0.30, -0.10, 0.05, 0.22])
    s = np.array([0.05, 0.12, 0.08, 0.20])
    # DerSimonian-Laird by its moment equation, then an intercept-only weighted regression:
    # the Hartung-Knapp variance is the regression's residual variance times (X'WX)^-1
    w = 1 / s ** 2
    x = np.ones((4, 1))
    beta_f = np.linalg.solve(x.T @ np.diag(w) @ x, x.T @ np.diag(w) @ y)
    q = float((w * (y - x @ beta_f) ** 2).sum())
    c = w.sum() - (w ** 2).sum() / w.sum()
    tau2 = max(0.0, (q - 3) / c)
    big_w = np.diag(1 / (s ** 2 + tau2))
    xtwx_inv = np.linalg.inv(x.T @ big_w @ x)
    mu = float((xtwx_inv @ x.T @ big_w @ y)[0])
    resid = y - mu
    var = max(float(resid @ big_w @ resid) / 3 * xtwx_inv[0, 0], xtwx_inv[0, 0])
    p = pool(y, s)
    assert tau2 > 0  # this example has between-run spread
    assert p.tau2 == pytest.approx(tau2, rel=1e-12)
    assert p.value == pytest.approx(mu, rel=1e-12)
    assert p.se == pytest.approx(math.sqrt(var), rel=1e-12)
    assert p.ci_high - p.value == pytest.approx(T975[3] * math.sqrt(var), rel=1e-6)


def test_zero_width_runs_are_floored_and_all_exact_runs_weigh_equally():
    floored = pool([0.0, 1.0], [0.0, 0.2])
    assert floored.value == pytest.approx(pool([0.0, 1.0], [0.2, 0.2]).value)
    exact = pool([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
    half = T975[2] * 1.0 / math.sqrt(3)
    assert (exact.value, exact.ci_low, exact.ci_high) == pytest.approx((2.0, 2 - half, 2 + half))
    with pytest.raises(ValueError, match="at least 2 runs"):
        pool([1.0], [0.1])
    with pytest.raises(ValueError, match="finite"):
        pool([1.0, float("nan")], [0.1, 0.1])


def test_se_from_a_normal_95_interval():
    assert se_from_ci(1.0 - Z_975 * 0.3, 1.0 + Z_975 * 0.3) == pytest.approx(0.3)
    with pytest.raises(ValueError):
        se_from_ci(2.0, 1.0)


CLAIM = Claim(paper="P", section="S", statement="t beats r", metric="m", reference="r",
              treatment="t")


def _row(shift, seed, run_id, when, design="d1", scale="cpu", config=None, n=40):
    rng = np.random.default_rng(zlib.crc32(run_id.encode()))
    ref = rng.normal(0.0, 1.0, n)
    row = judge(CLAIM, ref, ref + shift + rng.normal(0.0, 0.2, n), n_boot=400)
    return dict(row, experiment="x", scale=scale, design=design, seed=seed, run_id=run_id,
                created_at=when, config_json=json.dumps(config or {}))


def test_pooled_rows_take_the_newest_run_of_each_seed_within_one_design_and_scale():
    rows = [_row(0.5, 0, "a-old", "2026-01-01"), _row(0.1, 0, "a-new", "2026-01-03"),
            _row(0.3, 1, "b", "2026-01-02"), _row(0.4, 2, "c", "2026-01-02"),
            _row(5.0, 3, "other-design", "2026-01-04", design="d2"),
            _row(5.0, 4, "other-scale", "2026-01-04", scale="paper"),
            _row(5.0, None, "no-seed", "2026-01-04")]
    (p,) = pooled_rows(rows)
    assert p["k"] == 3 and p["seeds"] == "0, 1, 2"
    assert p["run_ids"] == "a-new, b, c"  # seed 0's older run is a replay of the same draw
    used = [rows[1], rows[2], rows[3]]
    expected = pool([r["diff"] for r in used],
                    [se_from_ci(r["diff_ci_low"], r["diff_ci_high"]) for r in used])
    assert (p["diff"], p["diff_ci_low"], p["diff_ci_high"]) == pytest.approx(
        (expected.value, expected.ci_low, expected.ci_high))
    # n is one run's units (each seed evaluates the same 40 problems), not 3 x 40
    assert p["n"] == 40 and p["verdict"] == row_verdict(p)
    assert [s for s, _, _ in p["per_seed"]] == [0, 1, 2]
    # seeds from an older row's config when its seed column is empty
    assert run_seed({"seed": None, "config_json": json.dumps({"seed": 7})}) == 7
    assert run_seed({"seed": None, "config_json": "{}"}) is None


def test_seeds_that_disagree_widen_the_pooled_interval_past_each_run():
    rows = [_row(0.6, 0, "a", "2026-01-01"), _row(-0.4, 1, "b", "2026-01-02")]
    assert {r["verdict"] for r in rows} == {"reproduced", "not reproduced"}
    (p,) = pooled_rows(rows)
    assert p["verdict"] == "inconclusive"
    assert p["diff_ci_low"] < min(r["diff_ci_low"] for r in rows)
    assert p["diff_ci_high"] > max(r["diff_ci_high"] for r in rows)
    # p-value: the t tail of the pooled estimate in the claimed direction
    assert 0.0 < p["p_value"] < 1.0


def test_a_single_seed_pools_nothing():
    assert pooled_rows([_row(0.5, 0, "a", "2026-01-01"), _row(0.5, 0, "b", "2026-01-02")]) == []


def test_no_variation_in_every_seed_stays_inconclusive():
    flat = judge(CLAIM, [0.0] * 10, [0.0] * 10, n_boot=100)
    rows = [dict(flat, experiment="x", scale="cpu", design="d", seed=s, run_id=str(s),
                 created_at="2026-01-01", config_json="{}") for s in (0, 1, 2)]
    (p,) = pooled_rows(rows)
    assert p["verdict"] == "inconclusive" and p["diff"] == 0.0


def test_cli_prints_the_pooled_table_or_says_what_to_run(weft_home, capsys):
    wh = Warehouse()
    assert main(["--seeds"]) == 1
    assert "another seed" in capsys.readouterr().err
    for shift, seed, run_id in ((0.5, 0, "r0"), (0.7, 1, "r1")):
        row = {k: v for k, v in _row(shift, seed, run_id, "").items()
               if k not in ("run_id", "created_at")}
        wh.write("claim_history", [row], lineage=Lineage(run_id=run_id, asset="x",
                                                           partition="x"),
                 folder=f"x/{run_id}")
    assert main(["--seeds", "x"]) == 0
    out = capsys.readouterr().out
    assert "| P | S | m | d1 | 0: +" in out and "reproduced; 1: +" in out and "(k = 2)" in out
    assert seeds_table(pooled_rows(wh.sql("SELECT * FROM claim_history").to_pylist())) in out
    assert main(["--seeds", "nothing-here"]) == 1


def test_pooled_rows_keep_the_role_and_the_most_units_that_differ_in_one_run():
    check = Claim(paper="P", section="S", statement="t beats r by construction", metric="m",
                  reference="r", treatment="t", role="check")
    rows = []
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        ref = rng.normal(0.0, 1.0, 20)
        row = judge(check, ref, ref + 1.0 + rng.normal(0.0, 0.1, 20), n_boot=300)
        rows.append(dict(row, experiment="x", scale="cpu", design="d", seed=seed,
                         run_id=str(seed), created_at="2026-01-01", config_json="{}"))
    (p,) = pooled_rows(rows)
    assert p["role"] == "check" and p["n_discordant"] == 20  # 20 differing units per run
    assert p["n"] == 20
    assert p["verdict"] == "reproduced" and p["inconclusive_reason"] is None
    assert "**check passed** (k = 2)" in seeds_table([p])
    # a run stored before units were counted: the pooled count is unknown, not a partial sum
    (old,) = pooled_rows([rows[0], dict(rows[1], n_discordant=None)])
    assert old["n_discordant"] is None
    # three runs of 2 discordant units each are not 6: the pooled part stays inconclusive
    few = [dict(r, n_discordant=2, seed=s, run_id=str(s)) for s, r in
           enumerate([rows[0], rows[1], rows[0]])]
    (p3,) = pooled_rows(few)
    assert p3["n_discordant"] == 2 and p3["inconclusive_reason"] == "few_discordant_units"


def test_a_run_with_an_invalid_arm_is_left_out_of_the_pool():
    rows = [_row(0.5, 0, "a", "2026-01-01"), _row(0.4, 1, "b", "2026-01-02"),
            dict(_row(-3.0, 2, "c", "2026-01-03"), invalid_arm="t collapsed")]
    (p,) = pooled_rows(rows)
    assert p["seeds"] == "0, 1" and p["seeds_left_out"] == "2" and p["invalid_arm"] is None
    expected = pool([r["diff"] for r in rows[:2]],
                    [se_from_ci(r["diff_ci_low"], r["diff_ci_high"]) for r in rows[:2]])
    assert p["diff"] == pytest.approx(expected.value)
    # fewer than two valid runs: the pooled part is invalid, naming the seeds
    (q,) = pooled_rows([rows[0], rows[2], dict(rows[1], invalid_arm="r collapsed")])
    assert q["invalid_arm"] == "seed 1: r collapsed; seed 2: t collapsed"
    assert (q["verdict"], q["inconclusive_reason"]) == ("inconclusive", "invalid_arm")
