-- Tandem RL legibility, drift and paired tests (Tandem RL §4.4, §4.5, §5.3), written by
-- assets/tandem.py; the four tables' schemas are declared in warehouse/schema.py.
--   tandem_legibility: one row per senior solo sample: junior cross-entropy (nats/token) on
--                      the senior's output and the mean overlap sum_v min(p_s, p_j) (§4.5)
--   tandem_drift:      one row per token frequent in the junior's outputs: counts and the
--                      signed log-ratio log q_senior - log q_junior of the marginals (§4.4)
--   tandem_summary:    one row per (model, junior, benchmark): KL(q_s || q_j), the survival
--                      curve of |log-ratio|, mean cross-entropy and overlap
--   tandem_pairwise:   paired one-sided tests of model A vs model B (§5.3)
-- tandem_summary_latest: the latest summary per (model, junior, benchmark), the rows the
-- survival-curve and legibility plots draw.
CREATE OR REPLACE VIEW tandem_summary_latest AS
SELECT * EXCLUDE (rn) FROM (
    SELECT *, row_number() OVER (
        PARTITION BY model, junior, benchmark ORDER BY created_at DESC) AS rn
    FROM tandem_summary
) WHERE rn = 1;
