-- run_status: every run's outcome. A finished run as its `runs` row says; a run in progress
-- (a heartbeat in `run_heartbeats`, no `runs` row yet) 'running' until its alive_until, then
-- 'crashed' (killed with SIGKILL, out of memory, the machine stopped); a run that wrote
-- `llm_calls` but neither a `runs` row nor a heartbeat 'crashed' too. last_seen_at: when it
-- finished, or its last heartbeat or call.
CREATE OR REPLACE VIEW run_status AS
WITH beating AS (
    SELECT h.* FROM run_heartbeats h
    WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.asset = h.asset
                      AND r.partition = h.partition AND r.run_id = h.run_id)
), unrecorded AS (
    SELECT c.asset, c.partition, c.run_id, min(c.created_at) AS started_at,
           max(c.created_at) AS last_seen_at
    FROM llm_calls c
    WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.asset = c.asset
                      AND r.partition = c.partition AND r.run_id = c.run_id)
      AND NOT EXISTS (SELECT 1 FROM run_heartbeats h WHERE h.asset = c.asset
                      AND h.partition = c.partition AND h.run_id = c.run_id)
    GROUP BY c.asset, c.partition, c.run_id
)
SELECT asset, partition, run_id, status, error, started_at, finished_at,
       finished_at AS last_seen_at, rows_written, config_json, git_sha
FROM runs
UNION ALL BY NAME
SELECT asset, partition, run_id,
       CASE WHEN alive_until > now() THEN 'running' ELSE 'crashed' END AS status,
       CASE WHEN alive_until > now() THEN NULL
            ELSE 'no runs row: the run stopped without recording its end (killed, out of '
                 || 'memory, or the machine stopped); last heartbeat at '
                 || CAST(heartbeat_at AS VARCHAR) END AS error,
       started_at, CAST(NULL AS TIMESTAMPTZ) AS finished_at, heartbeat_at AS last_seen_at,
       rows_written, config_json, git_sha
FROM beating
UNION ALL BY NAME
SELECT asset, partition, run_id, 'crashed' AS status,
       'no runs row: the run wrote llm_calls, then stopped without recording its end (killed, '
       || 'out of memory, or the machine stopped)' AS error,
       started_at, CAST(NULL AS TIMESTAMPTZ) AS finished_at, last_seen_at,
       CAST(NULL AS BIGINT) AS rows_written, CAST(NULL AS VARCHAR) AS config_json,
       CAST(NULL AS VARCHAR) AS git_sha
FROM unrecorded;
