"""Shared glue for asset bodies: lineage stamps, run records, metadata helpers.

Run records live in ``warehouse.runs`` (Dagster-free): `llm_calls` first, then the data
tables, then the `runs` row, which is the commit marker. Every asset that calls an LLM records
its run through :func:`run_record` (a ``warehouse.runs.RunRecord`` stamped with the asset's
lineage), so a run that fails still writes its calls and a ``failed`` `runs` row, and a
cancelled one a ``canceled`` row. ``runs_disagreements`` finds data partitions whose writers
disagree with `runs` and `llm_calls` (a pure validator behind the asset checks).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

import dagster as dg

from warehouse import Lineage, Warehouse, config_hash
from warehouse.runs import RunRecord


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


def run_record(context: dg.AssetExecutionContext, wh: Warehouse,
               config: Mapping[str, Any] | None = None, *, partition: str | None = None,
               calls_name: str | None = None,
               started_at: dt.datetime | None = None) -> RunRecord:
    """The asset run's ``RunRecord`` (``warehouse.runs``): lineage from ``context``, `runs`
    row config ``config``; ``calls_name`` names the `llm_calls` partition prefix (default:
    the asset)."""
    return RunRecord(wh, lineage(context, config, partition=partition), config=config,
                     started_at=started_at, calls_name=calls_name)


def runs_disagreements(asset: str, data_rows: Iterable[Mapping[str, Any]],
                       run_rows: Iterable[Mapping[str, Any]],
                       call_rows: Iterable[Mapping[str, Any]] | None = None) -> list[str]:
    """Partitions of ``asset``'s data table whose writers disagree, one message each.

    ``data_rows`` are (partition, run_id) of the data table; ``run_rows`` are (asset, partition,
    run_id, status) of `runs`, ``call_rows`` (asset, partition, run_id) of `llm_calls` (None:
    not checked). A data partition agrees when all its rows come from one run, that run has a
    ``success`` row in `runs` for this asset and partition, and (when checked) that run wrote
    `llm_calls` records for it. `runs` and `llm_calls` rows hold the data partition they
    belong to (``warehouse.runs``)."""
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
        key = (partition, run_id)
        if key not in committed:
            problems.append(f"{asset} {partition}: written by run {run_id}, which has no "
                            "successful `runs` row (it crashed or failed after writing)")
        elif called is not None and key not in called:
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


def lineage_metadata(row: dict[str, Any] | None) -> dict[str, Any]:
    """Dagster metadata saying what trained a model (a :func:`model_lineage` row): links to the
    asset that trained the checkpoint and to the asset that wrote its training data, the data
    spec as the training run read it, the checkpoint it started from and the training run. The
    asset graph draws only the edges an asset declares; these say what really fed this model.
    Empty for a model weft did not train."""
    if not row:
        return {}
    meta: dict[str, Any] = {"checkpoint_id": str(row["checkpoint_id"])}
    if row.get("trained_by_asset"):
        meta["trained_by"] = dg.MetadataValue.asset(dg.AssetKey(str(row["trained_by_asset"])))
    spec = str(row.get("dataset") or "")
    if spec:
        how = f"{row['dataset_rows']} rows" if row.get("dataset_rows") is not None else ""
        if spec.startswith("builtin:"):
            how += "; generated by weft's built-in generator, no asset fed it"
        elif spec.startswith("problems:"):
            how += "; loaded from the ingest source itself, not from a warehouse table"
        if row.get("dataset_fallback_from"):
            how += f"; fallback from {row['dataset_fallback_from']}"
        meta["trained_on"] = f"{spec} ({how.strip('; ')})" if how else spec
    written_by = row.get("dataset_written_by")
    if isinstance(written_by, str):
        meta["trained_on_asset"] = dg.MetadataValue.asset(dg.AssetKey(written_by))
    elif written_by:
        meta["trained_on_assets"] = dg.MetadataValue.json(list(written_by))
    if row.get("parent_checkpoint"):
        meta["started_from_checkpoint"] = str(row["parent_checkpoint"])
    if row.get("training_run_id"):
        run = str(row["training_run_id"])
        meta["training_run"] = dg.MetadataValue.md(f"[{run[:8]}](/runs/{run})")
    return meta
