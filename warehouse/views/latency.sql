-- latency: content-latency of interleaved (think/speak) outputs per model and benchmark
-- (SxS §4.2: ARI, ABO, AIRW; eval.latency computes them per sample).
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
