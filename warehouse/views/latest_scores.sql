-- latest_scores: for each (model, benchmark, metric, k) the most recently written score.
CREATE OR REPLACE VIEW latest_scores AS
SELECT * EXCLUDE (rn) FROM (
    SELECT *, row_number() OVER (
        PARTITION BY model, benchmark, metric, k ORDER BY created_at DESC) AS rn
    FROM eval_scores
) WHERE rn = 1;
