-- 008: the Engagement paper's time-aware training table (engagement.txt §5.3 Table 5, App. F
-- Table 25), written by assets/ep_training.py (training.ep_budget computes the values). The
-- base views stand in (empty, typed) until the tables have rows.
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
CREATE VIEW IF NOT EXISTS ep_budget_scores AS
SELECT CAST(NULL AS VARCHAR) AS arm, CAST(NULL AS BIGINT) AS arm_order,
       CAST(NULL AS VARCHAR) AS model, CAST(NULL AS VARCHAR) AS recipe,
       CAST(NULL AS VARCHAR) AS checkpoint_id, CAST(NULL AS BIGINT) AS train_cap,
       CAST(NULL AS VARCHAR) AS benchmark, CAST(NULL AS BIGINT) AS budget,
       CAST(NULL AS BIGINT) AS n_problems, CAST(NULL AS BIGINT) AS n_samples,
       CAST(NULL AS BIGINT) AS failed,
       CAST(NULL AS DOUBLE) AS budgeted_success, CAST(NULL AS DOUBLE) AS budgeted_success_ci_low,
       CAST(NULL AS DOUBLE) AS budgeted_success_ci_high,
       CAST(NULL AS DOUBLE) AS accuracy, CAST(NULL AS DOUBLE) AS accuracy_ci_low,
       CAST(NULL AS DOUBLE) AS accuracy_ci_high,
       CAST(NULL AS DOUBLE) AS mean_tokens, CAST(NULL AS DOUBLE) AS mean_tokens_ci_low,
       CAST(NULL AS DOUBLE) AS mean_tokens_ci_high,
       CAST(NULL AS BIGINT) AS generation_limit, CAST(NULL AS BIGINT) AS steps,
       CAST(NULL AS DOUBLE) AS train_wall_s, CAST(NULL AS DOUBLE) AS train_reward,
       CAST(NULL AS DOUBLE) AS train_completion_length, CAST(NULL AS VARCHAR) AS table_id,
       CAST(NULL AS VARCHAR) AS train_data, CAST(NULL AS VARCHAR) AS heldout,
       CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS VARCHAR) AS partition,
       CAST(NULL AS TIMESTAMPTZ) AS created_at
WHERE false;

CREATE VIEW IF NOT EXISTS ep_budget_tests AS
SELECT CAST(NULL AS BIGINT) AS budget, CAST(NULL AS VARCHAR) AS statistic,
       CAST(NULL AS VARCHAR) AS alternative, CAST(NULL AS VARCHAR) AS arm_a,
       CAST(NULL AS VARCHAR) AS model_a, CAST(NULL AS VARCHAR) AS arm_b,
       CAST(NULL AS VARCHAR) AS model_b, CAST(NULL AS BIGINT) AS n,
       CAST(NULL AS DOUBLE) AS mean_a, CAST(NULL AS DOUBLE) AS mean_b, CAST(NULL AS DOUBLE) AS diff,
       CAST(NULL AS DOUBLE) AS ci_low, CAST(NULL AS DOUBLE) AS ci_high, CAST(NULL AS DOUBLE) AS t,
       CAST(NULL AS DOUBLE) AS p_ttest, CAST(NULL AS DOUBLE) AS p_bootstrap,
       CAST(NULL AS VARCHAR) AS table_id, CAST(NULL AS VARCHAR) AS partition,
       CAST(NULL AS TIMESTAMPTZ) AS created_at
WHERE false;

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
