"""Declared schemas of the core warehouse tables and the lineage columns every row carries.

A declared schema gives a table a typed (empty) view before any Parquet exists, so SQL over a
fresh warehouse works. Writers may add columns beyond the declaration (views use
``union_by_name``); they may not change the type of a declared column.
"""

from __future__ import annotations

import pyarrow as pa

LINEAGE_FIELDS: list[pa.Field] = [
    pa.field("run_id", pa.string()),
    pa.field("asset", pa.string()),
    pa.field("partition", pa.string()),
    pa.field("config_hash", pa.string()),
    pa.field("created_at", pa.timestamp("us", tz="UTC")),
]
LINEAGE_COLUMNS = [f.name for f in LINEAGE_FIELDS]


def _schema(*fields: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field(name, dtype) for name, dtype in fields] + LINEAGE_FIELDS)


TABLES: dict[str, pa.Schema] = {
    "problems": _schema(
        ("problem_id", pa.string()),
        ("source", pa.string()),
        ("split", pa.string()),
        ("problem", pa.string()),
        ("answer", pa.string()),
        ("solution", pa.string()),
        ("answer_type", pa.string()),
        ("meta", pa.string()),
        ("dataset_version", pa.string()),
    ),
    "rejects": _schema(
        ("source", pa.string()),
        ("origin", pa.string()),
        ("line", pa.int64()),
        ("reason", pa.string()),
        ("raw", pa.string()),
    ),
    "llm_calls": _schema(
        ("call_id", pa.string()),
        ("tag", pa.string()),
        ("base_url", pa.string()),
        ("model", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("latency_s", pa.float64()),
        ("cached", pa.bool_()),
        ("attempts", pa.int64()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("finish_reason", pa.string()),
        ("cache_key", pa.string()),
    ),
    "eval_samples": _schema(
        ("model", pa.string()),
        ("benchmark", pa.string()),
        ("problem_id", pa.string()),
        ("sample_index", pa.int64()),
        ("prompt", pa.string()),
        ("output", pa.string()),
        ("extracted", pa.string()),
        ("extraction_method", pa.string()),
        ("gold", pa.string()),
        ("correct", pa.bool_()),
        ("grade_error", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("latency_s", pa.float64()),
        ("finish_reason", pa.string()),
        ("gen_error", pa.string()),
        ("seed", pa.int64()),
        ("checkpoint_id", pa.string()),
        # generation mode and its per-sample measurements (NULL where they do not apply)
        ("mode", pa.string()),  # single | tool | interleaved | budgeted
        ("budget", pa.int64()),  # requested token budget (budgeted mode)
        ("generation_limit", pa.int64()),  # decoding limit, the same for every budget
        ("tokens_used", pa.int64()),  # tokens counted against the budget (no EOS)
        ("thinking_cap", pa.int64()),  # per-step thinking-token cap (sweep)
        ("context_policy", pa.string()),  # preserved | discarded (tool mode)
        ("turns", pa.int64()),
        ("tool_errors", pa.int64()),
        ("ari", pa.float64()),
        ("abo", pa.float64()),
        ("airw", pa.float64()),  # SxS AIRW with the wait before the first speak block
        ("airw_between", pa.float64()),  # AIRW between consecutive speak blocks only
        ("first_disclosure", pa.float64()),
        ("filler_rate", pa.float64()),
        ("reasoning_tokens", pa.int64()),
        ("response_tokens", pa.int64()),
    ),
    "eval_scores": _schema(
        ("model", pa.string()),
        ("benchmark", pa.string()),
        ("metric", pa.string()),
        ("k", pa.int64()),
        ("value", pa.float64()),
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
        ("n_problems", pa.int64()),
        ("n_samples", pa.int64()),  # answered samples the score is computed from
        ("checkpoint_id", pa.string()),
        ("failed", pa.int64()),  # samples left out because their generation failed
    ),
    # budget curves from eval.budget.budget_curve (per-problem means, bootstrap CIs over
    # problems), written by eval_reports; view budget_curve (migration 003)
    "budget_scores": _schema(
        ("model", pa.string()),
        ("benchmark", pa.string()),
        ("budget", pa.int64()),
        ("n_problems", pa.int64()),
        ("n_samples", pa.int64()),
        ("budgeted_success", pa.float64()),
        ("budgeted_success_ci_low", pa.float64()),
        ("budgeted_success_ci_high", pa.float64()),
        ("accuracy", pa.float64()),
        ("accuracy_ci_low", pa.float64()),
        ("accuracy_ci_high", pa.float64()),
        ("mean_tokens", pa.float64()),
        ("mean_tokens_ci_low", pa.float64()),
        ("mean_tokens_ci_high", pa.float64()),
        ("generation_limit", pa.int64()),
        ("checkpoint_id", pa.string()),
    ),
    # thinking-cap sweep with DeepTool Eq. 12 cost-effectiveness against a no-thinking baseline
    # (eval.budget.eff_curve), written by eval_reports; view eff_curve (migration 003)
    "eff_scores": _schema(
        ("model", pa.string()),
        ("benchmark", pa.string()),
        ("baseline", pa.string()),
        ("thinking_cap", pa.int64()),
        ("n_problems", pa.int64()),
        ("accuracy", pa.float64()),
        ("baseline_accuracy", pa.float64()),
        ("mean_tokens", pa.float64()),
        ("baseline_mean_tokens", pa.float64()),
        ("eff", pa.float64()),
        ("eff_ci_low", pa.float64()),
        ("eff_ci_high", pa.float64()),
    ),
    "eval_pairwise": _schema(
        ("benchmark", pa.string()),
        ("metric", pa.string()),
        ("model_a", pa.string()),
        ("model_b", pa.string()),
        ("n", pa.int64()),
        ("mean_a", pa.float64()),
        ("mean_b", pa.float64()),
        ("diff", pa.float64()),
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
        ("p_bootstrap", pa.float64()),
        ("p_ttest", pa.float64()),
        ("alternative", pa.string()),
    ),
    "models": _schema(
        ("model_id", pa.string()),
        ("kind", pa.string()),
        ("base_url", pa.string()),
        ("served_model", pa.string()),
        ("path", pa.string()),
        ("api_key_env", pa.string()),
        ("checkpoint_id", pa.string()),
        ("baseline", pa.bool_()),
        ("added_at", pa.timestamp("us", tz="UTC")),
    ),
    "runs": _schema(
        ("status", pa.string()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("finished_at", pa.timestamp("us", tz="UTC")),
        ("rows_written", pa.int64()),
        ("config_json", pa.string()),
        ("git_sha", pa.string()),
        ("error", pa.string()),  # why the run failed (status 'failed'); NULL on success
    ),
    # one row per logged training step; partition = checkpoint id (training/callbacks.py)
    "train_metrics": _schema(
        ("checkpoint_id", pa.string()),
        ("kind", pa.string()),
        ("step", pa.int64()),
        ("epoch", pa.float64()),
        ("loss", pa.float64()),
        ("reward_mean", pa.float64()),
        ("reward_std", pa.float64()),
        ("kl", pa.float64()),
        ("completion_length", pa.float64()),
        ("filtered_group_share", pa.float64()),
        ("seconds_per_step", pa.float64()),
        ("generation_s", pa.float64()),
        ("reward_s", pa.float64()),
        ("scoring_s", pa.float64()),
        ("optimisation_s", pa.float64()),
        ("tokens_generated", pa.int64()),
        ("learning_rate", pa.float64()),
        ("grad_norm", pa.float64()),
        ("entropy", pa.float64()),
        ("logs_json", pa.string()),
    ),
    # one row per training run, rewritten at each save; status partial | complete
    "checkpoints": _schema(
        ("checkpoint_id", pa.string()),
        ("kind", pa.string()),
        ("status", pa.string()),
        ("path", pa.string()),
        ("base_model", pa.string()),
        ("recipe", pa.string()),
        ("parent_checkpoint", pa.string()),
        ("dataset_fingerprints", pa.string()),
        ("global_step", pa.int64()),
        ("train_loss", pa.float64()),
        ("train_runtime_s", pa.float64()),
        ("config_json", pa.string()),
    ),
    # reasoning traces (x, r, a) ingested for SxS (pipelines/ingest_traces.py); meta is JSON
    "traces": _schema(
        ("trace_id", pa.string()),
        ("problem_id", pa.string()),
        ("source", pa.string()),
        ("problem", pa.string()),
        ("reasoning", pa.string()),
        ("response", pa.string()),
        ("answer", pa.string()),
        ("meta", pa.string()),
    ),
    # expert tool-integrated trajectories (pipelines/tir.py); steps_json rebuilds the steps
    "tir_trajectories": _schema(
        ("trajectory_id", pa.string()),
        ("problem_id", pa.string()),
        ("source", pa.string()),
        ("problem", pa.string()),
        ("answer", pa.string()),
        ("num_steps", pa.int64()),
        ("text", pa.string()),
        ("steps_json", pa.string()),
        ("meta", pa.string()),
    ),
}
