-- 008: the Engagement paper's time-aware training table (Engagement Process §5.3 Table 5,
-- App. F Table 25), written by assets/ep_training.py (training.ep_budget computes the values).
-- The two tables' schemas are declared in warehouse/schema.py.
--   ep_budget_scores: one row per (table run, arm, budget): arm (base | ep_aware | rlvr |
--                     rlvr_x<f>), the evaluated model, its training cap, and on the held-out
--                     problems BS@B (correct AND tokens_used <= budget), Acc@B (correct,
--                     any length) and Tok@B (mean tokens_used) with 95% bootstrap CIs over
--                     problems; `partition` is the table run's id
--   ep_budget_tests:  EP-aware vs each other arm at the smallest budget, paired by problem:
--                     one-sided t-test and bootstrap (budgeted_success: greater, mean_tokens:
--                     less), diff = mean_a - mean_b with its 95% CI
--   ep_budget_table:  Table 5's columns for the latest materialization of every table run:
--                     BS at the smallest and largest budget, Acc at the smallest, Tok at both
CREATE OR REPLACE VIEW ep_budget_table AS
WITH latest AS (
    SELECT s.* FROM ep_budget_scores s
    WHERE s.created_at = (SELECT max(t.created_at) FROM ep_budget_scores t
                          WHERE t.partition = s.partition)
), bounds AS (
    SELECT partition, min(budget) AS budget_small, max(budget) AS budget_large
    FROM latest GROUP BY partition
)
SELECT l.partition AS table_id, l.arm, l.arm_order, l.model, l.train_cap, l.steps,
       b.budget_small, b.budget_large, max(l.n_problems) AS n_problems,
       max(l.budgeted_success) FILTER (WHERE l.budget = b.budget_small) AS bs_small,
       max(l.budgeted_success_ci_low) FILTER (WHERE l.budget = b.budget_small) AS bs_small_ci_low,
       max(l.budgeted_success_ci_high) FILTER (WHERE l.budget = b.budget_small)
           AS bs_small_ci_high,
       max(l.budgeted_success) FILTER (WHERE l.budget = b.budget_large) AS bs_large,
       max(l.budgeted_success_ci_low) FILTER (WHERE l.budget = b.budget_large) AS bs_large_ci_low,
       max(l.budgeted_success_ci_high) FILTER (WHERE l.budget = b.budget_large)
           AS bs_large_ci_high,
       max(l.accuracy) FILTER (WHERE l.budget = b.budget_small) AS acc_small,
       max(l.accuracy_ci_low) FILTER (WHERE l.budget = b.budget_small) AS acc_small_ci_low,
       max(l.accuracy_ci_high) FILTER (WHERE l.budget = b.budget_small) AS acc_small_ci_high,
       max(l.mean_tokens) FILTER (WHERE l.budget = b.budget_small) AS tok_small,
       max(l.mean_tokens) FILTER (WHERE l.budget = b.budget_large) AS tok_large,
       max(l.created_at) AS created_at
FROM latest l JOIN bounds b USING (partition)
GROUP BY l.partition, l.arm, l.arm_order, l.model, l.train_cap, l.steps, b.budget_small,
         b.budget_large
ORDER BY table_id, l.arm_order;
