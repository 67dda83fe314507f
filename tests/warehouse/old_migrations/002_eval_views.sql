-- 002: the evaluation views researchers query (README shows examples).
-- leaderboard: model x benchmark, mean correctness (avg@k) with its bootstrap 95% CI, pass@1.
CREATE OR REPLACE VIEW leaderboard AS
SELECT a.model, a.benchmark, a.k AS samples_per_problem, a.n_problems,
       a.value AS accuracy, a.ci_low, a.ci_high,
       p.value AS pass_at_1, a.checkpoint_id, a.created_at
FROM latest_scores a
LEFT JOIN latest_scores p
  ON p.model = a.model AND p.benchmark = a.benchmark AND p.metric = 'pass@k' AND p.k = 1
WHERE a.metric = 'avg@k';

-- latency: content-latency of interleaved (think/speak) outputs per model and benchmark.
CREATE OR REPLACE VIEW latency AS
SELECT model, benchmark, count(*) AS samples,
       avg(CAST(correct AS DOUBLE)) AS accuracy,
       avg(ari) AS ari, avg(abo) AS abo, avg(airw) AS airw, avg(airw_between) AS airw_between,
       avg(first_disclosure) AS first_disclosure, avg(filler_rate) AS filler_rate,
       avg(reasoning_tokens) AS reasoning_tokens, avg(response_tokens) AS response_tokens,
       avg(completion_tokens) AS completion_tokens
FROM eval_samples
WHERE ari IS NOT NULL
GROUP BY model, benchmark;

-- pairwise: the latest paired comparison of model A vs model B on the same problems.
CREATE OR REPLACE VIEW pairwise AS
SELECT * EXCLUDE (rn) FROM (
    SELECT *, row_number() OVER (
        PARTITION BY benchmark, metric, model_a, model_b ORDER BY created_at DESC) AS rn
    FROM eval_pairwise
) WHERE rn = 1;
