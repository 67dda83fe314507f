-- models: the model registry as `python -m eval.models list` shows it.
-- The `models` table holds the models registered with `eval.models add` or by training; its
-- own view is `registered_models` (warehouse/schema.py, BASE_VIEW_NAMES). This view adds the
-- embedded model's row unless a registration with the same id replaces it (newest
-- registration wins, as in eval.models.list_models). The embedded model lives in
-- WEFT_HOME/models/, next to this warehouse folder (WEFT_HOME/warehouse); its row has no
-- added_at (it was never registered).
CREATE OR REPLACE VIEW models AS
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
