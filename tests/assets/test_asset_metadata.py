"""Every asset of a small materialized graph shows, in its Dagster metadata, what the README
says it shows: counts, scores and tokens/s for evaluation, the leaderboard and its plots for
the reports (with the skipped plots named), ARI/ABO/AIRW of both variants for the SxS dataset.
A scripted OpenAI-compatible endpoint stands in for the model; the warehouse, DuckDB, the
grader and Dagster are real."""

import dagster as dg

from tests.assets.small_graph import materialize_small_graph, responder

# asset -> metadata keys that must carry a value (README: "The Dagster UI", "Evaluating models",
# "Synthesizing data and training"); markdown tables map to the columns that must be filled.
PROMISED = {
    "gsm8k_problems": {"rows": None, "origin": None, "dataset_version": None},
    "problems": {"rows": None, "rows_per_source": None},
    "eval_samples": {"samples": None, "graded": None, "accuracy": None, "tokens_per_s": None,
                     "samples_per_s": None},
    "eval_scores": {"n_problems": None, "scores": ("metric", "k", "value", "ci_low", "ci_high"),
                    "avg@2": None, "pass@1": None},
    "eval_reports": {"leaderboard": ("benchmark", "model", "accuracy", "n_problems"),
                     "leaderboard_shared_problems": ("model", "n_problems", "n_shared"),
                     "plot_leaderboard": None, "plot_leaderboard_full": None,
                     "plots_skipped": ("plot", "reason"), "report_dir": None},
    "traces": {"rows": None, "rows_per_source": None},
    "sxs_alignments": {"samples": None, "calls_made": None, "mean_answer_blocks": None,
                       "alignments_preview": ("problem", "interleaved output", "k_r", "k_a")},
    "sxs_sft_dataset": {"rows": None, "variants": None,
                        "latency": ("variant", "ari", "abo", "airw", "first_disclosure")},
}


def _table(md: str) -> list[dict[str, str]]:
    lines = [line for line in md.splitlines() if line.startswith("|")]
    if len(lines) < 2:
        return []
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(head, (c.strip() for c in line.strip("|").split("|")), strict=True))
            for line in lines[2:]]


def _empty_parts(value: dg.MetadataValue, columns) -> list[str]:
    raw = value.value
    if raw is None or (isinstance(raw, str | list | dict) and len(raw) == 0):
        return ["no value"]
    if columns is None:
        return []
    rows = _table(str(raw))
    if not rows:
        return ["a table without rows"]
    return [f"row {i} column {c}" for i, row in enumerate(rows) for c in columns
            if not row.get(c)]


def test_every_asset_shows_the_metadata_the_readme_promises(weft_home, shared_data,
                                                            embedded_model_dir):
    from pipelines.llm.testing import FakeLLMServer

    with FakeLLMServer(models=("scripted",), responder=responder) as server:
        mats = materialize_small_graph(dg.DagsterInstance.ephemeral(), server.base_url,
                                       embedded_model_dir)
    problems = {}
    for asset, promised in PROMISED.items():
        assert asset in mats, f"{asset} was not materialized"
        meta = mats[asset].metadata
        for key, columns in promised.items():
            if key not in meta:
                problems[f"{asset}.{key}"] = ["missing"]
                continue
            empty = _empty_parts(meta[key], columns)
            if empty:
                problems[f"{asset}.{key}"] = empty
    assert problems == {}
    # the SxS dataset's latency table has both variants, and the interleaved one discloses
    # answer content earlier than reason-then-answer (lower ARI), as the method intends
    latency = {r["variant"]: r for r in _table(mats["sxs_sft_dataset"].metadata["latency"].value)}
    assert set(latency) == {"sxs", "standard"}
    assert float(latency["sxs"]["ari"]) < float(latency["standard"]["ari"])
