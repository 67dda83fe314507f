"""Shared glue for asset bodies: lineage stamps, the `runs` table, metadata helpers."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from typing import Any, Mapping

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
                             capture_output=True, text=True, timeout=5)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def record_run(wh: Warehouse, lin: Lineage, *, started_at: dt.datetime, rows_written: int,
               config: Mapping[str, Any] | None = None, status: str = "success") -> None:
    """One row in `runs` per asset materialization (partition key: asset/partition/run)."""
    row = {
        "status": status,
        "started_at": started_at,
        "finished_at": dt.datetime.now(dt.timezone.utc),
        "rows_written": int(rows_written),
        "config_json": json.dumps(dict(config or {}), sort_keys=True, default=str),
        "git_sha": git_sha(),
    }
    wh.write("runs", [row], lineage=lin, partition=f"{lin.asset}/{lin.partition}/{lin.run_id}")


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


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
