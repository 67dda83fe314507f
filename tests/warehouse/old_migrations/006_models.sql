-- 006: the model registry as `python -m eval.models list` shows it.
-- The `models` table holds the models registered with `eval.models add` or by training; the
-- embedded model is always available without a registration. The base view over the Parquet
-- files is renamed `registered_models`, and `models` adds the embedded model's row unless a
-- registration with the same id replaces it (newest registration wins, as in
-- eval.models.list_models). The embedded model lives in WEFT_HOME/models/, next to this
-- warehouse folder (WEFT_HOME/warehouse); its row has no added_at (it was never registered).
-- Re-run on every catalog refresh, right after the base view `models` was rebuilt.
DROP VIEW IF EXISTS registered_models;
ALTER VIEW models RENAME TO registered_models;
CREATE VIEW models AS
SELECT * FROM registered_models
UNION ALL BY NAME
SELECT 'smollm2-135m-instruct' AS model_id, 'local' AS kind, '' AS base_url,
       'smollm2-135m-instruct' AS served_model,
       parse_dirpath('{warehouse}') || '/models/smollm2-135m-instruct' AS path,
       '' AS api_key_env, '' AS checkpoint_id, true AS baseline,
       CAST(NULL AS TIMESTAMPTZ) AS added_at,
       'builtin' AS run_id, 'models' AS asset, 'smollm2-135m-instruct' AS "partition",
       '' AS config_hash, CAST(NULL AS TIMESTAMPTZ) AS created_at
WHERE NOT EXISTS (SELECT 1 FROM registered_models WHERE model_id = 'smollm2-135m-instruct');
