-- 005: Tandem RL legibility, drift and paired tests (tandem.txt §4.4, §4.5, §5.3), written by
-- assets/tandem.py. The base views below stand in (empty, typed) until the first rows exist;
-- once a table has Parquet files the catalog's own view over them is used instead.
--   tandem_legibility: one row per senior solo sample: junior cross-entropy (nats/token) on
--                      the senior's output and the mean overlap sum_v min(p_s, p_j) (§4.5)
--   tandem_drift:      one row per token frequent in the junior's outputs: counts and the
--                      signed log-ratio log q_senior - log q_junior of the marginals (§4.4)
--   tandem_summary:    one row per (model, junior, benchmark): KL(q_s || q_j), the survival
--                      curve of |log-ratio|, mean cross-entropy and overlap
--   tandem_pairwise:   paired one-sided tests of model A vs model B (§5.3)
CREATE VIEW IF NOT EXISTS tandem_legibility AS
SELECT CAST(NULL AS VARCHAR) AS model, CAST(NULL AS VARCHAR) AS junior,
       CAST(NULL AS VARCHAR) AS benchmark, CAST(NULL AS VARCHAR) AS problem_id,
       CAST(NULL AS BIGINT) AS sample_index, CAST(NULL AS BIGINT) AS tokens,
       CAST(NULL AS DOUBLE) AS junior_ce_nats, CAST(NULL AS DOUBLE) AS overlap,
       CAST(NULL AS VARCHAR) AS checkpoint_id, CAST(NULL AS TIMESTAMPTZ) AS created_at
WHERE false;

CREATE VIEW IF NOT EXISTS tandem_drift AS
SELECT CAST(NULL AS VARCHAR) AS model, CAST(NULL AS VARCHAR) AS junior,
       CAST(NULL AS VARCHAR) AS benchmark, CAST(NULL AS BIGINT) AS token_id,
       CAST(NULL AS VARCHAR) AS token, CAST(NULL AS BIGINT) AS senior_count,
       CAST(NULL AS BIGINT) AS junior_count, CAST(NULL AS DOUBLE) AS log_ratio,
       CAST(NULL AS DOUBLE) AS abs_log_ratio, CAST(NULL AS TIMESTAMPTZ) AS created_at
WHERE false;

CREATE VIEW IF NOT EXISTS tandem_summary AS
SELECT CAST(NULL AS VARCHAR) AS model, CAST(NULL AS VARCHAR) AS junior,
       CAST(NULL AS VARCHAR) AS benchmark, CAST(NULL AS DOUBLE) AS kl,
       CAST(NULL AS BIGINT) AS frequent_tokens, CAST(NULL AS BIGINT) AS min_count,
       CAST(NULL AS DOUBLE[]) AS survival_thresholds, CAST(NULL AS DOUBLE[]) AS survival,
       CAST(NULL AS BIGINT) AS samples, CAST(NULL AS DOUBLE) AS junior_ce_nats,
       CAST(NULL AS DOUBLE) AS overlap, CAST(NULL AS VARCHAR) AS checkpoint_id,
       CAST(NULL AS TIMESTAMPTZ) AS created_at
WHERE false;

CREATE VIEW IF NOT EXISTS tandem_pairwise AS
SELECT CAST(NULL AS VARCHAR) AS benchmark, CAST(NULL AS VARCHAR) AS model_a,
       CAST(NULL AS VARCHAR) AS model_b, CAST(NULL AS VARCHAR) AS junior,
       CAST(NULL AS VARCHAR) AS statistic, CAST(NULL AS VARCHAR) AS starts,
       CAST(NULL AS BIGINT) AS k, CAST(NULL AS VARCHAR) AS alternative, CAST(NULL AS BIGINT) AS n,
       CAST(NULL AS DOUBLE) AS mean_a, CAST(NULL AS DOUBLE) AS mean_b, CAST(NULL AS DOUBLE) AS diff,
       CAST(NULL AS DOUBLE) AS ci_low, CAST(NULL AS DOUBLE) AS ci_high, CAST(NULL AS DOUBLE) AS t,
       CAST(NULL AS DOUBLE) AS p_ttest, CAST(NULL AS DOUBLE) AS p_bootstrap,
       CAST(NULL AS TIMESTAMPTZ) AS created_at
WHERE false;

-- tandem_summary_latest: the latest summary per (model, junior, benchmark), the rows the
-- survival-curve and legibility plots draw.
CREATE OR REPLACE VIEW tandem_summary_latest AS
SELECT * EXCLUDE (rn) FROM (
    SELECT *, row_number() OVER (
        PARTITION BY model, junior, benchmark ORDER BY created_at DESC) AS rn
    FROM tandem_summary
) WHERE rn = 1;

-- tandem_pairwise_latest: the latest test per (benchmark, A, B, junior, statistic, starts, k).
CREATE OR REPLACE VIEW tandem_pairwise_latest AS
SELECT * EXCLUDE (rn) FROM (
    SELECT *, row_number() OVER (
        PARTITION BY benchmark, model_a, model_b, junior, statistic, starts, k
        ORDER BY created_at DESC) AS rn
    FROM tandem_pairwise
) WHERE rn = 1;

