"""What trained a model, read from the warehouse: the ``model_lineage`` view's row of a
checkpoint plus the asset that wrote the rows it trained on.

Dagster-free; the evaluation assets turn it into links on an evaluation's page."""

from __future__ import annotations

from typing import Any


def model_lineage(wh: Any, model_id: str) -> dict[str, Any] | None:
    """The ``model_lineage`` view's row of ``model_id`` (what trained it; see the view's SQL),
    plus ``dataset_written_by``: the asset that wrote the rows it trained on (read from the
    dataset table's lineage column), or None. None when the model is not a weft checkpoint
    (a remote endpoint, the embedded base model) or unknown."""
    rows = wh.sql("SELECT * FROM model_lineage WHERE model_id = $id AND checkpoint_id IS NOT "
                  "NULL ORDER BY trained_at DESC LIMIT 1", {"id": model_id}).to_pylist()
    if not rows:
        return None
    row = rows[0]
    row["dataset_written_by"] = None
    table, part = row.get("dataset_table"), row.get("dataset_partition")
    if table and table in wh.tables():
        where, params = ("WHERE partition = $p", {"p": part}) if part else ("", None)
        found = wh.sql(f'SELECT DISTINCT asset FROM "{table}" {where} ORDER BY 1',
                       params).column("asset").to_pylist()
        written = [a for a in found if a]
        row["dataset_written_by"] = written[0] if len(written) == 1 else (written or None)
    return row
