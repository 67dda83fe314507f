-- duet_steps: DUET diagnostics per training step (DUET paper §3, Algorithm 1; training.duet.trainer
-- logs them every step as duet/* keys in train_metrics.logs_json). One row per logged step of a
-- DUET run; plain GRPO runs have no rows here.
--   lam               the dual lambda* that closes the step's token budget (Eq. 4)
--   k1, k2            polling start and abort threshold (p30 / p80 of natural lengths)
--   n_q_min/mean/max  rollouts allocated per prompt
--   marker_rate       share of allocated rollouts whose text reached the answer marker by the
--                     abort point (Theorem 3's p_marker; never a rollout whose coin was drawn)
--   marker_seen_rate  share whose marker the gate saw at a poll before any coin (it may trim them)
--   abort_rate        share of allocated rollouts aborted (no marker by K2 + G, coin said abort)
--   cap_cut_rate      share cut by max_completion_length (no EOS, not stopped by the gate)
--   abort_at          K2 + G: at or past the cap, the cap cuts a marker-less rollout first
--   eps_kept          marker-less rollouts kept to natural EOS by the eps coin
--   is_weight_mean    mean Eq. 6 weight 1 / (s_pre p_abort) over kept rollouts
--   tokens_generated  tokens of allocated rollouts; token_budget the step's budget B
--   calibration_chi2  surrogate-vs-within-step variance gap (App. A.4), NULL on a cold step
--   overhead_s        the controller's own seconds in the step (gate time included)
--   tokens_planned    sum of n_q L_hat_q the allocation planned; budget_used = generated / B
--   k_refit, k_window 1 on a step that refit K1/K2, and the window's size; s_floor the floor
CREATE OR REPLACE VIEW duet_steps AS
SELECT checkpoint_id, kind, step, seconds_per_step,
       TRY_CAST(logs_json->>'$."duet/lambda"' AS DOUBLE) AS lam,
       TRY_CAST(logs_json->>'$."duet/k1"' AS DOUBLE) AS k1,
       TRY_CAST(logs_json->>'$."duet/k2"' AS DOUBLE) AS k2,
       TRY_CAST(logs_json->>'$."duet/n_q_min"' AS DOUBLE) AS n_q_min,
       TRY_CAST(logs_json->>'$."duet/n_q_mean"' AS DOUBLE) AS n_q_mean,
       TRY_CAST(logs_json->>'$."duet/n_q_max"' AS DOUBLE) AS n_q_max,
       TRY_CAST(logs_json->>'$."duet/marker_rate"' AS DOUBLE) AS marker_rate,
       TRY_CAST(logs_json->>'$."duet/marker_seen_rate"' AS DOUBLE) AS marker_seen_rate,
       TRY_CAST(logs_json->>'$."duet/abort_rate"' AS DOUBLE) AS abort_rate,
       TRY_CAST(logs_json->>'$."duet/cap_cut_rate"' AS DOUBLE) AS cap_cut_rate,
       TRY_CAST(logs_json->>'$."duet/abort_at"' AS DOUBLE) AS abort_at,
       TRY_CAST(logs_json->>'$."duet/eps_kept"' AS DOUBLE) AS eps_kept,
       TRY_CAST(logs_json->>'$."duet/is_weight_mean"' AS DOUBLE) AS is_weight_mean,
       TRY_CAST(logs_json->>'$."duet/tokens_generated"' AS DOUBLE) AS tokens_generated,
       TRY_CAST(logs_json->>'$."duet/token_budget"' AS DOUBLE) AS token_budget,
       TRY_CAST(logs_json->>'$."duet/calibration_chi2"' AS DOUBLE) AS calibration_chi2,
       TRY_CAST(logs_json->>'$."duet/overhead_s"' AS DOUBLE) AS overhead_s,
       TRY_CAST(logs_json->>'$."duet/tokens_planned"' AS DOUBLE) AS tokens_planned,
       TRY_CAST(logs_json->>'$."duet/budget_used"' AS DOUBLE) AS budget_used,
       TRY_CAST(logs_json->>'$."duet/k_refit"' AS DOUBLE) AS k_refit,
       TRY_CAST(logs_json->>'$."duet/k_window"' AS DOUBLE) AS k_window,
       TRY_CAST(logs_json->>'$."duet/s_floor"' AS DOUBLE) AS s_floor,
       run_id, created_at
FROM train_metrics
WHERE json_valid(logs_json) AND logs_json->>'$."duet/lambda"' IS NOT NULL;
