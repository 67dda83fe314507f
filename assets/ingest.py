"""Ingestion assets: one `<source>_problems` asset per source, then the merged `problems`.

The default set is every registered source whose row says ``default_ingest``
(``pipelines.ingest.SOURCES``, including local benchmarks from ``$WEFT_BENCHMARKS`` or
``$WEFT_HOME/benchmarks.yaml``); there is no second list to keep in step. Each source asset
loads its rows through ``pipelines.ingest.load_source`` (local file under ``WEFT_DATA_DIR``,
the Hugging Face hub, or the built-in generator), writes them to the warehouse table
``source_problems`` and its rejects to ``rejects`` (both partitioned by source, so a re-run
replaces them). ``problems`` merges every ingested source into the canonical
``problems`` table, flags problems that appear in more than one source (train/test overlap),
and stamps a dataset version per source.

Each run is recorded (``assets.common.run_record``): a heartbeat while it works, then its
`runs` row: ``success``, or ``failed`` with the error. ``problems`` reads its sources strictly
(``Warehouse.read``): when a `source_problems` partition cannot be read it fails naming the
file, and leaves every `problems` partition as it was, instead of merging (and deleting)
from what it could read.
"""


import hashlib
import json
from collections import Counter

import dagster as dg

from assets.common import lineage, run_record
from assets.resources import WarehouseResource
from pipelines.ingest import SOURCES
from pipelines.text import normalize_problem_text

# Sources ingested by default (registry order); each becomes a `<name>_problems` asset.
DEFAULT_SOURCES: tuple[str, ...] = tuple(n for n, spec in SOURCES.items() if spec.default_ingest)


class IngestConfig(dg.Config):
    limit: int | None = None
    prefer: str = "local"  # "local" (WEFT_DATA_DIR first) or "hf" (hub first)


def _source_asset(source: str) -> dg.AssetsDefinition:
    @dg.asset(
        name=f"{source}_problems",
        group_name="ingest",
        kinds={"python", "parquet"},
        description=f"Problems of the `{source}` source, normalised (table source_problems).",
    )
    def _asset(context: dg.AssetExecutionContext, config: IngestConfig,
               warehouse: WarehouseResource) -> dg.MaterializeResult:
        from pipelines.ingest import load_source

        wh = warehouse.get()
        with run_record(context, wh, config.model_dump(), partition=source) as rec:
            result = load_source(source, prefer=config.prefer, limit=config.limit)
            rows = [p.to_row() for p in result.problems]
            version = _dataset_version(rows)
            for row in rows:
                row["dataset_version"] = version
            rec.write("source_problems", rows)
            rejects = [r.to_row() for r in result.rejects]
            rec.write("rejects", rejects, counted=False)
        if rejects:
            reasons = Counter(r["reason"].split(":")[0] for r in rejects)
            context.log.warning(f"{source}: {len(rejects)} rows rejected: {dict(reasons)}")
        return dg.MaterializeResult(data_version=dg.DataVersion(content_version(rows)),
                                    metadata={
            "rows": len(rows),
            "rejects": len(rejects),
            "duplicates_dropped": getattr(result, "duplicates", 0),
            "id_conflicts": result.id_conflicts,
            "control_chars_stripped": result.control_chars_stripped,
            "origin": str(result.origin),
            "dataset_version": version,
            "answer_types": dict(Counter(r["answer_type"] for r in rows)),
        })

    return _asset


def content_version(rows: list[dict]) -> str:
    """The Dagster data version of an ingest asset: a hash of every row's content, in a fixed
    order, without lineage columns. Re-ingesting byte-identical data gives the same version, so
    what was computed from it stays fresh in the UI instead of turning "Unsynced"."""
    digest = hashlib.sha256()
    skip = {"run_id", "asset", "partition", "config_hash", "created_at"}
    lines = sorted(json.dumps({k: v for k, v in r.items() if k not in skip}, sort_keys=True,
                              default=str) for r in rows)
    for line in lines:
        digest.update(line.encode())
        digest.update(b"\n")
    return digest.hexdigest()[:16]


def _dataset_version(rows: list[dict]) -> str:
    digest = hashlib.sha256()
    for pid in sorted(r["problem_id"] for r in rows):
        digest.update(pid.encode())
    return digest.hexdigest()[:12]


def build_source_assets(sources: tuple[str, ...] = DEFAULT_SOURCES) -> list[dg.AssetsDefinition]:
    return [_source_asset(s) for s in sources]


SOURCE_ASSETS = build_source_assets()


def _merge_sources(wh) -> tuple[dict[str, list[dict]], int]:
    """Every ingested source's rows (read strictly: an unreadable partition raises, naming its
    file) by source, with cross-source overlaps flagged; and the number of flagged rows."""
    rows = wh.read("source_problems").to_pylist()
    if not rows:
        raise dg.Failure(
            "no ingested sources: materialize at least one `<source>_problems` asset first"
        )
    # Cross-source overlap: the same normalised text in two sources (e.g. a benchmark problem
    # inside a training pool) is kept in both, but flagged so training can exclude it.
    seen: dict[str, list[str]] = {}
    for row in rows:
        seen.setdefault(normalize_problem_text(row["problem"]), []).append(row["partition"])
    overlap = 0
    by_source: dict[str, list[dict]] = {}
    for row in rows:
        others = sorted(set(seen[normalize_problem_text(row["problem"])]) - {row["partition"]})
        meta = json.loads(row.get("meta") or "{}")
        if others:
            meta["also_in"] = others
            overlap += 1
        row["meta"] = json.dumps(meta, sort_keys=True)
        # Partition by the ingesting asset's source name (gsm8k and gsm8k_train share the
        # `source` family "gsm8k" but stay separate partitions).
        name = row["partition"]
        for col in ("run_id", "asset", "partition", "config_hash", "created_at"):
            row.pop(col, None)
        by_source.setdefault(name, []).append(row)
    return by_source, overlap


@dg.asset(
    group_name="ingest",
    kinds={"duckdb", "parquet"},
    deps=[a.key for a in SOURCE_ASSETS],
    description="All ingested problems, one partition per source, with cross-source overlap flags.",
)
def problems(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    wh = warehouse.get()
    with run_record(context, wh, {}) as rec:
        by_source, overlap = _merge_sources(wh)
        for source, source_rows in sorted(by_source.items()):
            rec.write("problems", source_rows, lineage=lineage(context, {}, partition=source))
        # Sources that were ingested before but are gone now are removed from `problems` too.
        for stale in set(wh.partitions("problems")) - set(by_source):
            wh.delete_partition("problems", stale)
    total = sum(len(rows) for rows in by_source.values())
    counts = {name: len(v) for name, v in by_source.items()}
    merged = [dict(r, source_partition=name) for name, rs in by_source.items() for r in rs]
    return dg.MaterializeResult(data_version=dg.DataVersion(content_version(merged)), metadata={
        "rows": total,
        "sources": len(by_source),
        "rows_per_source": dg.MetadataValue.json(dict(sorted(counts.items()))),
        "cross_source_overlaps": overlap,
    })


@dg.asset_check(asset=problems, description="Every problem has a non-empty answer and a unique id.")
def check_problems_answers_and_ids(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    wh = warehouse.get()
    stats = wh.sql(
        "SELECT count(*) AS n, "
        "sum(CASE WHEN answer IS NULL OR trim(answer) = '' THEN 1 ELSE 0 END) AS empty, "
        "count(*) - count(DISTINCT problem_id) AS dup_ids FROM problems"
    ).to_pylist()[0]
    ok = (stats["empty"] or 0) == 0 and (stats["dup_ids"] or 0) == 0 and stats["n"] > 0
    return dg.AssetCheckResult(passed=bool(ok), metadata={k: int(v or 0) for k, v in stats.items()})
