"""Shared glue for asset bodies: lineage stamps, the `runs` table, `llm_calls`, metadata helpers.

Write order and the commit marker: an asset that writes several tables writes its `llm_calls`
first, then its data tables, and its `runs` row last. The `runs` row (status ``success``) is
the commit marker: a partition whose rows come from a run without one was written by a run
that crashed before it finished. ``runs_disagreements`` finds such partitions (a pure
validator behind the asset checks). `llm_calls` and `runs` are partitioned by run
(``<asset>/<partition>/<run_id>``), so a re-run adds its records next to the earlier runs'
instead of replacing them: every real endpoint call stays counted for cost accounting.

Not guaranteed: atomicity across tables (each partition file is replaced on its own); a crash
between the data write and the `runs` row leaves the new data in place, flagged, not rolled
back.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import subprocess
from collections.abc import Iterable, Mapping
from typing import Any

import dagster as dg

from pipelines.settings import PROJECT_ROOT
from warehouse import Lineage, Warehouse, config_hash


def partition_of(context: dg.AssetExecutionContext) -> str:
    return context.partition_key if context.has_partition_key else "all"


def lineage(context: dg.AssetExecutionContext, config: Mapping[str, Any] | None = None,
            partition: str | None = None) -> Lineage:
    return Lineage(
        run_id=context.run_id,
        asset=context.asset_key.to_user_string(),
        partition=partition or partition_of(context),
        config_hash=config_hash(dict(config or {})),
    )


def git_sha() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT_ROOT,
                             capture_output=True, text=True, timeout=5, check=False)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def run_partition(lin: Lineage, name: str | None = None) -> str:
    """The per-run warehouse partition ``<name or asset>/<partition>/<run_id>``."""
    return f"{name or lin.asset}/{lin.partition}/{lin.run_id}"


def write_llm_calls(wh: Warehouse, calls: list[Mapping[str, Any]], lin: Lineage,
                    name: str | None = None) -> int:
    """Write one run's `llm_calls` records into its own partition (``run_partition``), so
    re-runs never replace the records of earlier runs; nothing is written for no calls."""
    if calls:
        wh.write("llm_calls", list(calls), lineage=lin, partition=run_partition(lin, name))
    return len(calls)


def record_run(wh: Warehouse, lin: Lineage, *, started_at: dt.datetime, rows_written: int,
               config: Mapping[str, Any] | None = None, status: str = "success",
               error: str | None = None) -> None:
    """One row in `runs` per asset materialization (partition key: asset/partition/run).
    Write it last: a ``success`` row marks the run's other writes as complete. A failed
    run records ``status='failed'`` and the reason in ``error``."""
    if status not in ("success", "failed"):
        raise ValueError(f"run status must be 'success' or 'failed', got {status!r}")
    row = {
        "status": status,
        "error": None if error is None else str(error)[:2000],
        "started_at": started_at,
        "finished_at": dt.datetime.now(dt.UTC),
        "rows_written": int(rows_written),
        "config_json": json.dumps(dict(config or {}), sort_keys=True, default=str),
        "git_sha": git_sha(),
    }
    wh.write("runs", [row], lineage=lin, partition=run_partition(lin))


def runs_disagreements(asset: str, data_rows: Iterable[Mapping[str, Any]],
                       run_rows: Iterable[Mapping[str, Any]],
                       call_rows: Iterable[Mapping[str, Any]] | None = None) -> list[str]:
    """Partitions of ``asset``'s data table whose writers disagree, one message each.

    ``data_rows`` are (partition, run_id) of the data table; ``run_rows`` are (asset, partition,
    run_id, status) of `runs`, ``call_rows`` (asset, partition, run_id) of `llm_calls` (None:
    not checked). A data partition agrees when all its rows come from one run, that run has a
    ``success`` row in `runs` for this asset and partition, and (when checked) that run wrote
    `llm_calls` records for it. `runs` and `llm_calls` partitions are ``run_partition`` keys;
    `llm_calls` written before calls were kept per run used the data partition itself."""
    writers: dict[str, set[str]] = {}
    for row in data_rows:
        writers.setdefault(row["partition"], set()).add(row["run_id"])
    committed = {(r["partition"], r["run_id"]) for r in run_rows
                 if r["asset"] == asset and r["status"] == "success"}
    called = None if call_rows is None else {
        (r["partition"], r["run_id"]) for r in call_rows if r["asset"] == asset}
    problems = []
    for partition, runs in sorted(writers.items()):
        if len(runs) > 1:
            problems.append(f"{asset} {partition}: rows from {len(runs)} runs {sorted(runs)}")
            continue
        (run_id,) = runs
        key = (f"{asset}/{partition}/{run_id}", run_id)
        if key not in committed:
            problems.append(f"{asset} {partition}: written by run {run_id}, which has no "
                            "successful `runs` row (it crashed or failed after writing)")
        elif called is not None and key not in called and (partition, run_id) not in called:
            problems.append(f"{asset} {partition}: run {run_id} recorded no llm_calls")
    return problems


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def md_table(rows: list[Mapping[str, Any]], columns: list[str]) -> dg.MetadataValue:
    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    body = "".join(
        "| " + " | ".join(_fmt(r.get(c)) for c in columns) + " |\n" for r in rows
    )
    return dg.MetadataValue.md(head + body)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "" if value is None else str(value)


def write_eval_rows(context, wh, result, calls: list[dict], label: str, bench: str, config: dict,
                started, checkpoint_id: str | None) -> None:
    """One evaluation's rows, written as the `eval_samples` asset writes its partitions
    (``<benchmark>@<label>``: llm_calls, then samples and scores, then the runs row), so the
    checks and views over `eval_samples` treat them like any other evaluation."""
    lin = Lineage(run_id=context.run_id, asset="eval_samples", partition=f"{bench}@{label}",
                  config_hash=config_hash(config))
    write_llm_calls(wh, calls, lin)
    wh.write("eval_samples", result.samples, lineage=lin)
    scores = [dict(s, checkpoint_id=checkpoint_id) for s in result.scores]
    wh.write("eval_scores", scores, lineage=dataclasses.replace(lin, asset="eval_scores"))
    record_run(wh, lin, started_at=started, rows_written=len(result.samples), config=config)
