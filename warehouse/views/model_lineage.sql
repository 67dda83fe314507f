-- model_lineage: for every model of the registry (the `models` view) and every checkpoint
-- (registered or not: a claim's arms are evaluated under their checkpoint id), what trained it: the
-- checkpoint's training kind and recipe, the dataset spec it really read (as the training run
-- recorded it in `checkpoints.dataset_fingerprints`, after any fallback), its rows and
-- fingerprint, the warehouse table (and partition) it read (NULL for generated built-in sets,
-- files, hub datasets and `problems:<source>`, which loads the ingest source directly: no
-- weft table fed them), the checkpoint it started from, the asset that trained it and the Dagster run. Models that are not weft checkpoints (a remote endpoint, the
-- embedded base model) have NULL training columns. Join it to scores on the model id:
--   SELECT s.benchmark, s.metric, s.value, l.dataset, l.recipe
--   FROM latest_scores s JOIN model_lineage l ON l.model_id = s.model
CREATE OR REPLACE VIEW model_lineage AS
WITH latest_checkpoint AS (
    SELECT * EXCLUDE (rn) FROM (
        SELECT *, row_number() OVER (PARTITION BY checkpoint_id ORDER BY created_at DESC) AS rn
        FROM checkpoints
    ) WHERE rn = 1
), trained AS (
    SELECT *, json_extract_string(dataset_fingerprints, '$.train.spec') AS dataset,
           CASE WHEN dataset LIKE 'warehouse:_%' THEN split_part(substr(dataset, 11), '?', 1)
           END AS warehouse_source
    FROM latest_checkpoint
)
SELECT coalesce(m.model_id, t.checkpoint_id) AS model_id, m.kind AS model_kind,
       coalesce(m.baseline, false) AS baseline, t.checkpoint_id,
       t.kind AS trained_as, t.recipe, t.dataset,
       CAST(json_extract(t.dataset_fingerprints, '$.train.rows') AS BIGINT) AS dataset_rows,
       json_extract_string(t.dataset_fingerprints, '$.train.fingerprint') AS dataset_fingerprint,
       json_extract_string(t.dataset_fingerprints, '$.train.fallback_from') AS dataset_fallback_from,
       NULLIF(split_part(t.warehouse_source, '/', 1), '') AS dataset_table,
       NULLIF(split_part(t.warehouse_source, '/', 2), '') AS dataset_partition,
       t.base_model, NULLIF(t.parent_checkpoint, '') AS parent_checkpoint,
       t.asset AS trained_by_asset, t.run_id AS training_run_id, t.status AS checkpoint_status,
       t.created_at AS trained_at
FROM models m
FULL OUTER JOIN trained t ON t.checkpoint_id = NULLIF(m.checkpoint_id, '');
