"""The warehouse: Parquet files as the source of truth, DuckDB views for SQL.

``Warehouse`` writes partitions atomically and answers SQL; ``python -m warehouse sql "…"``
prints query results. Never imports ``dagster``.
"""

from warehouse.store import Lineage, Warehouse, WriteResult, config_hash

__all__ = ["Lineage", "Warehouse", "WriteResult", "config_hash"]
