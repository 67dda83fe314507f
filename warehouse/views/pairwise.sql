-- pairwise: the latest paired comparison of model A vs model B on the same problems.
CREATE OR REPLACE VIEW pairwise AS
SELECT * EXCLUDE (rn) FROM (
    SELECT *, row_number() OVER (
        PARTITION BY benchmark, metric, model_a, model_b ORDER BY created_at DESC) AS rn
    FROM eval_pairwise
) WHERE rn = 1;
