-- sample_stats: per (model, benchmark) sample counts, accuracy, tokens and latency.
CREATE OR REPLACE VIEW sample_stats AS
SELECT model, benchmark,
       count(*) AS samples,
       count(DISTINCT problem_id) AS problems,
       avg(CAST(correct AS DOUBLE)) AS accuracy,
       avg(completion_tokens) AS mean_completion_tokens,
       avg(latency_s) AS mean_latency_s,
       sum(CASE WHEN gen_error IS NOT NULL THEN 1 ELSE 0 END) AS generation_errors
FROM eval_samples
GROUP BY model, benchmark;
