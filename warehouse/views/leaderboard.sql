-- leaderboard: model x benchmark, mean correctness (avg@k) with its bootstrap 95% CI, pass@1.
CREATE OR REPLACE VIEW leaderboard AS
SELECT a.model, a.benchmark, a.k AS samples_per_problem, a.n_problems,
       a.value AS accuracy, a.ci_low, a.ci_high,
       p.value AS pass_at_1, a.checkpoint_id, a.created_at
FROM latest_scores a
LEFT JOIN latest_scores p
  ON p.model = a.model AND p.benchmark = a.benchmark AND p.metric = 'pass@k' AND p.k = 1
WHERE a.metric = 'avg@k';
