-- tandem_pairwise_latest: the latest test per (benchmark, A, B, junior, statistic, starts, k).
CREATE OR REPLACE VIEW tandem_pairwise_latest AS
SELECT * EXCLUDE (rn) FROM (
    SELECT *, row_number() OVER (
        PARTITION BY benchmark, model_a, model_b, junior, statistic, starts, k
        ORDER BY created_at DESC) AS rn
    FROM tandem_pairwise
) WHERE rn = 1;
