"""Declared schemas of the warehouse tables and the lineage columns every row carries.

Every table weft writes is declared here (``tests/warehouse/test_store.py`` checks it). A
declared schema gives a table a typed (empty) view before any Parquet exists, so SQL over a
fresh warehouse works, including the derived views in ``warehouse/views``. Every declared
column is written, NULL where a row does not set it. Writers may add columns beyond the
declaration (a table whose files differ in their columns gets a view with ``union_by_name``); they may not change the type of a declared column
(``Warehouse.write`` refuses such rows, naming the column).
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


# TRL conversational messages ({"role", "content"} in that order, as the writers build them)
MESSAGES = pa.list_(pa.struct([pa.field("role", pa.string()), pa.field("content", pa.string())]))

# MOSAIC synthesis records (DeepTool §2.1), one row per trajectory of the manager/actor run
# (mosaic_trajectories) or of the actor-only baseline (mosaic_baseline_trajectories, no
# manager_model), written by assets/mosaic.py from pipelines.mosaic.records.TrajectoryRecord
_MOSAIC_TRAJECTORY = (
    ("trajectory_id", pa.string()),
    ("method", pa.string()),
    ("problem_id", pa.string()),
    ("source", pa.string()),
    ("problem", pa.string()),
    ("answer", pa.string()),
    ("status", pa.string()),
    ("failure_reason", pa.string()),
    ("failure_detail", pa.string()),
    ("valid", pa.bool_()),
    ("final_answer", pa.string()),
    ("correct", pa.bool_()),
    ("grade_method", pa.string()),
    ("grade_error", pa.string()),
    ("num_turns", pa.int64()),
    ("code_steps", pa.int64()),
    ("perturbed_steps", pa.int64()),
    ("perturbed_generation", pa.int64()),
    ("perturbed_environment", pa.int64()),
    ("error_steps", pa.int64()),
    ("recovered", pa.bool_()),
    ("early_answer", pa.bool_()),
    ("correction_steps", pa.int64()),
    ("deviation_corrections", pa.int64()),
    ("seconds", pa.float64()),
    ("rho", pa.float64()),
    ("max_steps", pa.int64()),
    ("seed", pa.int64()),
    ("text", pa.string()),
    ("steps_json", pa.string()),
    ("manager_model", pa.string()),
    ("actor_model", pa.string()),
)

# the columns of a claim row (eval.claims.judge, stamped by the result assets)
_CLAIM = (
    ("experiment", pa.string()),
    ("scale", pa.string()),
    ("paper", pa.string()),
    ("section", pa.string()),
    ("claim", pa.string()),
    ("metric", pa.string()),
    ("kind", pa.string()),
    ("higher_is_better", pa.bool_()),
    ("margin", pa.float64()),
    ("reference", pa.string()),
    ("treatment", pa.string()),
    ("reference_value", pa.float64()),
    ("reference_ci_low", pa.float64()),
    ("reference_ci_high", pa.float64()),
    ("treatment_value", pa.float64()),
    ("treatment_ci_low", pa.float64()),
    ("treatment_ci_high", pa.float64()),
    ("diff", pa.float64()),
    ("diff_ci_low", pa.float64()),
    ("diff_ci_high", pa.float64()),
    ("p_value", pa.float64()),
    ("n", pa.int64()),
    ("verdict", pa.string()),
    # why an inconclusive part could not inform its claim (eval.claims.REASONS); null otherwise
    ("inconclusive_reason", pa.string()),
    ("n_discordant", pa.int64()),  # units whose scores differ between the arms; null: not counted
    ("role", pa.string()),  # claim | check (a setup check, never counted); null reads as claim
    ("bound_low", pa.float64()),  # the metric's lowest / highest possible value; null: unbounded
    ("bound_high", pa.float64()),
    ("paper_value", pa.string()),
    ("config_json", pa.string()),
    ("seed", pa.int64()),  # the seed that drew the run (training and sampling); null: none
    ("design", pa.string()),  # hash of the run config without its seed (replicates share it)
    # an arm the experiment found unfit for this part (e.g. collapsed), in words; null: none
    ("invalid_arm", pa.string()),
)

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
    # one partition per source, written by each `<source>_problems` asset (assets/ingest.py);
    # `problems` is built from it with cross-source overlap flags
    "source_problems": _schema(
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
        # the evaluation's math extraction rule, strict | flexible (eval.extraction.EXTRACTION_RULES;
        # NULL for choice and code benchmarks and for rows written before it was recorded)
        ("extraction_rule", pa.string()),
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
        ("extraction_rule", pa.string()),  # the samples' extraction rule (as in eval_samples)
    ),
    # budget curves from eval.budget.budget_curve (per-problem means, bootstrap CIs over
    # problems), written by eval_reports; view budget_curve (warehouse/views)
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
    # (eval.budget.eff_curve), written by eval_reports; view eff_curve (warehouse/views)
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
    # one row per paper claim per experiment run (eval.claims.judge): the arms' values with 95%
    # bootstrap CIs, the paired treatment - reference difference with its CI and one-sided
    # p-value, and the verdict from the rule in eval.claims; partition = the experiment
    "claims": _schema(*_CLAIM),
    # every run's claims rows, one folder per run (<experiment>/<run_id>, rows keep their
    # lineage): `claims` holds only the newest run of an experiment, this keeps the ones it
    # replaced (eval.claims.readers.keep_history), so verdicts can be compared across re-runs
    "claim_history": _schema(*_CLAIM),
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
        ("error", pa.string()),  # why the run stopped (status 'failed' or 'canceled'); NULL on success
    ),
    # a run in progress (warehouse.runs.RunRecord, once started): rewritten at each heartbeat,
    # removed when its `runs` row is written; alive_until passed without a `runs` row: the run
    # crashed (the view run_status). One folder per run, like `runs`.
    "run_heartbeats": _schema(
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("heartbeat_at", pa.timestamp("us", tz="UTC")),
        ("alive_until", pa.timestamp("us", tz="UTC")),
        ("rows_written", pa.int64()),
        ("config_json", pa.string()),
        ("git_sha", pa.string()),
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
    # reasoning traces (x, r, a) ingested for SxS (pipelines/ingest/traces.py); meta is JSON
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
    # SxS Algorithm 1 alignments, one row per trace (assets/sxs.py, pipelines.sxs_align.Alignment):
    # raw judge levels (NULL: no valid answer), each call's status, the repaired monotone levels
    "sxs_alignments": _schema(
        ("trace_id", pa.string()),
        ("problem_id", pa.string()),
        ("source", pa.string()),
        ("judge_model", pa.string()),
        ("k_r", pa.int64()),
        ("k_a", pa.int64()),
        ("raw", pa.list_(pa.int64())),
        ("status", pa.list_(pa.string())),
        ("repaired", pa.list_(pa.int64())),
        ("calls_made", pa.int64()),
        ("calls_saved", pa.int64()),
        ("calls_cancelled", pa.int64()),
        ("calls_failed", pa.int64()),
        ("calls_prefiltered", pa.int64()),
        ("n_segments", pa.int64()),
        ("n_visible_segments", pa.int64()),
        ("collapsed", pa.bool_()),
        ("mode", pa.string()),
        ("prefilter", pa.bool_()),
        ("rounds", pa.int64()),
        ("elapsed_s", pa.float64()),
        ("tagged", pa.string()),
    ),
    # SxS SFT rows, variants sxs | standard (assets/sxs.py); prompt and completion are the TRL
    # conversational messages as JSON (style chat) or plain text (style text)
    "sxs_sft_dataset": _schema(
        ("trace_id", pa.string()),
        ("problem_id", pa.string()),
        ("source", pa.string()),
        ("variant", pa.string()),
        ("prompt", pa.string()),
        ("completion", pa.string()),
        ("n_visible_segments", pa.int64()),
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
    # MOSAIC TIR SFT rows (DeepTool §2.2), one partition per rendering (state_preserved |
    # state_discarded), written by assets/mosaic.py from pipelines.tir.sft_rows: prompt and
    # completion are TRL conversational messages
    "tir_sft_dataset": _schema(
        ("prompt", MESSAGES),
        ("completion", MESSAGES),
        ("rendering", pa.string()),
        ("step_index", pa.int64()),
        ("num_steps", pa.int64()),
        ("trajectory_id", pa.string()),
        ("problem_id", pa.string()),
        ("source", pa.string()),
        ("origin", pa.string()),
    ),
    # process-supervised GRPO instances, one per expert step (DeepTool §2.3), written by
    # assets/mosaic.py from pipelines.mosaic.decomposition.StepInstance.to_row
    "step_instances": _schema(
        ("instance_id", pa.string()),
        ("trajectory_id", pa.string()),
        ("problem_id", pa.string()),
        ("source", pa.string()),
        ("step_index", pa.int64()),
        ("num_steps", pa.int64()),
        ("is_last_step", pa.bool_()),
        ("rendering", pa.string()),
        ("prompt", MESSAGES),
        ("reference_thought", pa.string()),
        ("reference_action", pa.string()),
        ("reference_kind", pa.string()),
        ("reference_output", pa.string()),
        ("answer", pa.string()),
        ("history_json", pa.string()),
        ("origin", pa.string()),
    ),
    "mosaic_trajectories": _schema(*_MOSAIC_TRAJECTORY),
    "mosaic_baseline_trajectories": _schema(*_MOSAIC_TRAJECTORY),
    # one row per MOSAIC or baseline run of a source (assets/mosaic.py, pipelines.mosaic
    # summarize_records); failed_<reason> counts pipelines.mosaic.FAILURE_REASONS, a reason
    # added there becomes an extra column
    "mosaic_summary": _schema(
        ("method", pa.string()),
        ("source", pa.string()),
        ("model", pa.string()),
        ("rho", pa.float64()),
        ("failures_json", pa.string()),
        ("trajectories", pa.int64()),
        ("complete", pa.int64()),
        ("valid", pa.int64()),
        ("correct", pa.int64()),
        ("accuracy", pa.float64()),
        ("avg_turns", pa.float64()),
        ("avg_turns_complete", pa.float64()),
        ("early_answers", pa.int64()),
        ("correction_steps", pa.int64()),
        ("deviation_corrections", pa.int64()),
        ("code_steps", pa.int64()),
        ("error_steps", pa.int64()),
        ("perturbed_steps", pa.int64()),
        ("perturbation_rate", pa.float64()),
        ("perturbed_trajectories", pa.int64()),
        ("recovered", pa.int64()),
        ("recovery_rate", pa.float64()),
        ("seconds_per_trajectory", pa.float64()),
        ("failed_manager_invalid_json", pa.int64()),
        ("failed_actor_invalid_format", pa.int64()),
        ("failed_max_steps", pa.int64()),
        ("failed_endpoint_error", pa.int64()),
        ("failed_sandbox_error", pa.int64()),
    ),
    # DUET §4 sweep, one row per arm (assets/duet.py, training.duet.sweep.sweep_rows): training
    # cost, evaluation with its CI, mean DUET diagnostics (NULL for the GRPO arm) and the
    # GRPO arm's wall clock and rollout tokens over the arm's (speedup, token_ratio)
    "duet_sweep": _schema(
        ("arm", pa.string()),
        ("method", pa.string()),
        ("budget_fraction", pa.float64()),
        ("checkpoint_id", pa.string()),
        ("checkpoint_path", pa.string()),
        ("steps", pa.int64()),
        ("train_wall_s", pa.float64()),
        ("seconds_per_step", pa.float64()),
        ("rollout_tokens", pa.float64()),
        ("tokens_per_step", pa.float64()),
        ("reward_mean", pa.float64()),
        ("benchmark", pa.string()),
        ("eval_problems", pa.int64()),
        ("accuracy", pa.float64()),
        ("accuracy_ci_low", pa.float64()),
        ("accuracy_ci_high", pa.float64()),
        ("mean_lambda", pa.float64()),
        ("mean_n_q_mean", pa.float64()),
        ("mean_abort_rate", pa.float64()),
        ("mean_marker_rate", pa.float64()),
        ("mean_k1", pa.float64()),
        ("mean_k2", pa.float64()),
        ("mean_cap_cut_rate", pa.float64()),
        ("mean_is_weight_mean", pa.float64()),
        ("mean_token_budget", pa.float64()),
        ("mean_budget_used", pa.float64()),
        ("mean_overhead_s", pa.float64()),
        ("speedup", pa.float64()),
        ("token_ratio", pa.float64()),
        ("sweep", pa.string()),
        ("recipe", pa.string()),
        ("seed", pa.int64()),
    ),
    # Tandem RL (assets/tandem.py) and Engagement Process (assets/engagement.py,
    # assets/ep_training.py) result tables
    "tandem_legibility": _schema(
        ("model", pa.string()),
        ("junior", pa.string()),
        ("benchmark", pa.string()),
        ("problem_id", pa.string()),
        ("sample_index", pa.int64()),
        ("tokens", pa.int64()),
        ("junior_ce_nats", pa.float64()),
        ("overlap", pa.float64()),
        ("checkpoint_id", pa.string()),
    ),
    "tandem_drift": _schema(
        ("model", pa.string()),
        ("junior", pa.string()),
        ("benchmark", pa.string()),
        ("token_id", pa.int64()),
        ("token", pa.string()),
        ("senior_count", pa.int64()),
        ("junior_count", pa.int64()),
        ("log_ratio", pa.float64()),
        ("abs_log_ratio", pa.float64()),
    ),
    "tandem_summary": _schema(
        ("model", pa.string()),
        ("junior", pa.string()),
        ("benchmark", pa.string()),
        ("kl", pa.float64()),
        ("frequent_tokens", pa.int64()),
        ("min_count", pa.int64()),
        ("survival_thresholds", pa.list_(pa.float64())),
        ("survival", pa.list_(pa.float64())),
        ("samples", pa.int64()),
        ("junior_ce_nats", pa.float64()),
        ("overlap", pa.float64()),
        ("checkpoint_id", pa.string()),
        # positions the legibility figures average over; the KL's shared support: the number
        # of distinct tokens and the share of each model's tokens it covers
        ("tokens", pa.int64()),
        ("kl_tokens", pa.int64()),
        ("kl_senior_mass", pa.float64()),
        ("kl_junior_mass", pa.float64()),
    ),
    "tandem_pairwise": _schema(
        ("benchmark", pa.string()),
        ("model_a", pa.string()),
        ("model_b", pa.string()),
        ("junior", pa.string()),
        ("statistic", pa.string()),
        ("starts", pa.string()),
        ("k", pa.int64()),
        ("alternative", pa.string()),
        ("n", pa.int64()),
        ("mean_a", pa.float64()),
        ("mean_b", pa.float64()),
        ("diff", pa.float64()),
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
        ("t", pa.float64()),
        ("p_ttest", pa.float64()),
        ("p_bootstrap", pa.float64()),
    ),
    # Engagement Process episodes (§5.2), one row each, partition <environment>.<method>
    # (assets/engagement.py). The digital assistant (§5.2.1) fills seed, task_id and the
    # main/email columns; the kitchen (§5.2.2) fills case_id, family and the dish/tutor columns;
    # the other environment's columns are NULL. switches and interruptions are counts the
    # assistant reports as floats, hence DOUBLE for both.
    "ep_episodes": _schema(
        ("environment", pa.string()),
        ("experiment", pa.string()),  # setting, policy, sizes, seed, config hash
        ("policy", pa.string()),
        ("method", pa.string()),
        ("setting", pa.string()),
        ("seed", pa.int64()),
        ("episode", pa.int64()),
        ("task_id", pa.string()),
        ("case_id", pa.string()),
        ("family", pa.string()),
        ("utility", pa.float64()),
        # digital assistant
        ("main", pa.float64()),
        ("email", pa.float64()),
        ("balanced", pa.float64()),
        ("emails", pa.float64()),
        ("scored", pa.float64()),
        ("on_time", pa.float64()),
        ("timeouts", pa.float64()),
        ("latency_sum", pa.float64()),
        ("main_complete", pa.float64()),
        ("resumptions", pa.float64()),
        # both
        ("switches", pa.float64()),
        ("interruptions", pa.float64()),
        # kitchen
        ("dish_success", pa.int64()),
        ("dishes", pa.int64()),
        ("critical_success", pa.int64()),
        ("criticals", pa.int64()),
        ("soft_quality", pa.float64()),
        ("softs", pa.int64()),
        ("tutor_done", pa.int64()),
        ("tutors", pa.int64()),
        ("ticks", pa.int64()),
        ("checks", pa.int64()),
        ("fired", pa.int64()),
        ("visibility_delay", pa.int64()),
        ("finish_delay", pa.int64()),
    ),
    # event timelines of the first episodes of an ep_episodes partition: one row per event,
    # intervention or utility at a tick; payload is JSON (eval.engagement.core)
    "ep_timelines": _schema(
        ("method", pa.string()),
        ("episode", pa.int64()),
        ("seed", pa.int64()),
        ("tick", pa.int64()),
        ("kind", pa.string()),
        ("name", pa.string()),
        ("payload", pa.string()),
        ("environment", pa.string()),
        ("setting", pa.string()),
        ("policy", pa.string()),
        ("experiment", pa.string()),
    ),
    "ep_scores": _schema(
        ("environment", pa.string()),
        ("experiment", pa.string()),
        ("setting", pa.string()),
        ("policy", pa.string()),
        ("method", pa.string()),
        ("metric", pa.string()),
        ("value", pa.float64()),
        ("low", pa.float64()),
        ("high", pa.float64()),
        ("episodes", pa.int64()),
    ),
    "ep_budget_scores": _schema(
        ("arm", pa.string()),
        ("arm_order", pa.int64()),
        ("model", pa.string()),
        ("recipe", pa.string()),
        ("checkpoint_id", pa.string()),
        ("train_cap", pa.int64()),
        ("benchmark", pa.string()),
        ("budget", pa.int64()),
        ("n_problems", pa.int64()),
        ("n_samples", pa.int64()),
        ("failed", pa.int64()),
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
        ("steps", pa.int64()),
        ("train_wall_s", pa.float64()),
        ("train_reward", pa.float64()),
        ("train_completion_length", pa.float64()),
        ("table_id", pa.string()),
        ("train_data", pa.string()),
        ("heldout", pa.string()),
    ),
    # the EP-aware arm's GRPO training rows (training.ep_budget.training_examples), one
    # partition per data fingerprint: the budget each row got; prompt (messages, or text when
    # the dataset's prompts are text) and the dataset's own columns follow the dataset
    "ep_budget_train": _schema(
        ("budget", pa.int64()),
    ),
    "ep_budget_tests": _schema(
        ("budget", pa.int64()),
        ("statistic", pa.string()),
        ("alternative", pa.string()),
        ("arm_a", pa.string()),
        ("model_a", pa.string()),
        ("arm_b", pa.string()),
        ("model_b", pa.string()),
        ("n", pa.int64()),
        ("mean_a", pa.float64()),
        ("mean_b", pa.float64()),
        ("diff", pa.float64()),
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
        ("t", pa.float64()),
        ("p_ttest", pa.float64()),
        ("p_bootstrap", pa.float64()),
        ("table_id", pa.string()),
    ),
}
