-- Engagement Process comparisons (Engagement Process §5.2, App. D-E), written by
-- assets/engagement.py. ep_scores is declared in warehouse/schema.py.
--   ep_scores:      one row per (environment, setting, policy, method, metric): the mean and
--                   the bootstrap 95% interval over episodes (timeout rate, latency, dish
--                   rates and delays as ratios of aggregates)
--   ep_leaderboard: the latest scores, one row per (environment, experiment, setting, policy,
--                   method) with
--                   utility and its interval, the environment's second headline metric
--                   (assistant: timeout rate; kitchen: critical-dish success) and the rank by
--                   utility within (environment, experiment, setting, policy); an experiment
--                   is one setting, policy, size and seed (rows written before experiments
--                   were recorded read as 'legacy')
CREATE OR REPLACE VIEW ep_leaderboard AS
WITH latest AS (
    SELECT * FROM ep_scores
    WHERE created_at = (SELECT max(created_at) FROM ep_scores)
), wide AS (
    SELECT environment, coalesce(experiment, 'legacy') AS experiment, setting, policy, method,
           max(episodes) AS episodes,
           max(value) FILTER (WHERE metric = 'utility') AS utility,
           max(low) FILTER (WHERE metric = 'utility') AS utility_low,
           max(high) FILTER (WHERE metric = 'utility') AS utility_high,
           max(value) FILTER (WHERE metric = 'timeout') AS timeout_rate,
           max(value) FILTER (WHERE metric = 'critical') AS critical_success,
           max(value) FILTER (WHERE metric = 'latency') AS latency,
           max(value) FILTER (WHERE metric = 'balanced') AS balanced
    FROM latest
    GROUP BY environment, coalesce(experiment, 'legacy'), setting, policy, method
)
SELECT rank() OVER (PARTITION BY environment, experiment, setting, policy ORDER BY utility DESC)
           AS rank,
       *
FROM wide
ORDER BY environment, experiment, setting, policy, rank;
