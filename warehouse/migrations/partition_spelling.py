"""Migration 009: every partition in Dagster's spelling (``warehouse.partitions``).

Before it, a warehouse joined a partition's values with ``@`` (``gsm8k@smollm2-135m-instruct``),
quoted ``@``, ``:`` and ``|`` in folder names (``gsm8k%40smollm2-135m-instruct``), and its
`runs` and `llm_calls` rows held their per-run folder key (``eval_samples/gsm8k@m/<run id>``)
in ``partition``. After it, each partition folder is named ``partition_dir_name`` of its
respelled key and its rows' ``partition`` holds that key; `runs` and `llm_calls` rows hold the
partition of the run (``gsm8k|m``) and stay in one folder per run.

One folder at a time (:func:`respell_folder`): the respelled rows are written to the new
folder atomically (a temp file moved into place), then the old data file and folder are
removed. At every moment each partition is whole in its old folder, its new folder, or both
(after a crash between the two steps: the next run finds the new folder complete and removes
the old one); none is lost. When a partition already has a folder under its new key (written
by newer code before the migration ran) that folder wins, since writing a partition replaces
its rows. Folders that are symlinks are left as they are (they may point outside the
warehouse, ``warehouse.store`` quarantines those), and so are folders whose data file cannot
be read (``warehouse.files.check_data_file``; quarantined too): a partition written again
by current code gets its new folder.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING

from warehouse.files import DATA_FILE, check_data_file, write_data_file
from warehouse.partitions import partition_dir_name, partition_from_dir, respell

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

VERSION = 9
NAME = "009_partition_spelling"
# tables with one folder per run whose rows held that folder's key in `partition`
PER_RUN_TABLES = ("runs", "llm_calls")
_TABLE_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def migrate(root: Path) -> int:
    """Respell every partition folder of every table under ``root``; returns how many folders
    were renamed or rewritten (0 when all are in the current spelling)."""
    root = Path(root)
    if not root.is_dir():
        return 0
    changed = 0
    for table_dir in sorted(p for p in root.iterdir()
                            if p.is_dir() and not p.is_symlink() and _TABLE_RE.match(p.name)):
        per_run = table_dir.name in PER_RUN_TABLES
        for folder in sorted(p for p in table_dir.iterdir() if p.is_dir()):
            changed += respell_folder(folder, per_run=per_run)
    if changed:
        log.info("%s: %d partition folder(s) of %s respelled", NAME, changed, root)
    return changed


def respell_folder(folder: Path, *, per_run: bool = False) -> bool:
    """Bring one partition folder to the current spelling (module docstring); ``per_run``: a
    folder of `runs` or `llm_calls`. Returns whether anything changed. Idempotent."""
    import pyarrow.parquet as pq

    if folder.is_symlink():
        return False
    target = folder.with_name(partition_dir_name(respell(partition_from_dir(folder.name))))
    data = folder / DATA_FILE
    if data.is_file() and (reason := check_data_file(data)) is not None:
        log.warning("%s: %s left as it is: the file %s", NAME, folder, reason)
        return False
    if target == folder:
        if not data.is_file():
            return False
        rewritten = respelled_rows(pq.read_table(data), per_run=per_run)
        if rewritten is None:
            return False
        write_data_file(rewritten, data)
        return True
    if target.is_symlink():
        log.warning("%s: %s not respelled, %s is a symlink", NAME, folder, target)
        return False
    if not (target / DATA_FILE).is_file():
        if not data.is_file():
            return False  # no partition here (temp files of a writer at most)
        table = pq.read_table(data)
        target.mkdir(exist_ok=True)
        write_data_file(respelled_rows(table, per_run=per_run) or table, target / DATA_FILE)
    data.unlink(missing_ok=True)
    try:
        folder.rmdir()
    except OSError:  # it still holds other files (a writer's temp file); no partition now
        log.info("%s: %s kept (not empty) after its rows moved to %s", NAME, folder, target)
    return True


def respelled_rows(table: pa.Table, *, per_run: bool = False) -> pa.Table | None:
    """``table`` with its ``partition`` column respelled, or None when nothing changes."""
    import pyarrow as pa

    if "partition" not in table.column_names:
        return None
    values = table.column("partition").to_pylist()
    if per_run:
        assets = _column(table, "asset")
        runs = _column(table, "run_id")
        new = [run_row_partition(v, a, r) for v, a, r in zip(values, assets, runs)]
    else:
        new = [None if v is None else respell(v) for v in values]
    if new == values:
        return None
    index = table.column_names.index("partition")
    return table.set_column(index, table.schema.field(index),
                            pa.array(new, table.schema.field(index).type))


def run_row_partition(value: str | None, asset: str | None, run_id: str | None) -> str | None:
    """The partition a `runs` / `llm_calls` row belongs to, in the current spelling: an old
    per-run key ``<asset or calls name>/<partition>/<run_id>`` gives ``<partition>``; any other
    value (rows written before records were kept per run held the data partition) is only
    respelled."""
    if value is None:
        return None
    suffix = f"/{run_id}" if run_id else ""
    if suffix and value.endswith(suffix):
        inner = value[: -len(suffix)]
        if asset and inner.startswith(f"{asset}/"):
            return respell(inner[len(asset) + 1:])
        if "/" in inner:
            return respell(inner.split("/", 1)[1])
    return respell(value)


def _column(table: pa.Table, name: str) -> list:
    return (table.column(name).to_pylist() if name in table.column_names
            else [None] * table.num_rows)
