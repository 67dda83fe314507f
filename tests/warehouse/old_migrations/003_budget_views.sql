-- 003: budget curves and thinking-cap cost-effectiveness, computed in Python and stored.
--
-- budget_curve: Engagement Process §5.3 / App. F metrics per (model, benchmark, budget) as
-- eval.budget.budget_curve computes them: each problem's samples are averaged first, then
-- problems; 95% percentile-bootstrap CIs over problems. Rows come from the budget_scores
-- table that eval_reports writes; this view keeps the latest row per key.
--   budgeted_success: share correct AND tokens_used <= budget (BS@B)
--   accuracy:         share correct regardless of length (Acc@B)
--   mean_tokens:      mean tokens_used, correct or not (Tok@B; tokens, EOS not counted)
CREATE OR REPLACE VIEW budget_curve AS
SELECT * EXCLUDE (rn) FROM (
    SELECT model, benchmark, budget, n_problems, n_samples,
           budgeted_success, budgeted_success_ci_low, budgeted_success_ci_high,
           accuracy, accuracy_ci_low, accuracy_ci_high,
           mean_tokens, mean_tokens_ci_low, mean_tokens_ci_high,
           generation_limit, checkpoint_id, created_at,
           row_number() OVER (
               PARTITION BY model, benchmark, budget ORDER BY created_at DESC) AS rn
    FROM budget_scores
) WHERE rn = 1;

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
