-- eff_curve: DeepTool §3.5 Eq. 12 per thinking cap, against the no-thinking baseline run of the
-- same model on the same problems (eval.budget.eff_curve, written by eval_reports).
--   eff = (accuracy - baseline_accuracy) / mean_tokens * 1000
-- Units: accuracy is a fraction in [0, 1], so eff is the accuracy gained (as a fraction of
-- problems) per 1,000 tokens the capped run spends on average per problem; multiply by 100 for
-- percentage points per 1k tokens (the scale of the paper's Figure 5).
CREATE OR REPLACE VIEW eff_curve AS
SELECT * EXCLUDE (rn) FROM (
    SELECT model, benchmark, baseline, thinking_cap, n_problems,
           accuracy, baseline_accuracy, mean_tokens, baseline_mean_tokens,
           eff, eff_ci_low, eff_ci_high, created_at,
           row_number() OVER (
               PARTITION BY model, benchmark, thinking_cap ORDER BY created_at DESC) AS rn
    FROM eff_scores
) WHERE rn = 1;
