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
