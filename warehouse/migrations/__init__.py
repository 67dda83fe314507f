"""Data migrations written in Python, for changes SQL cannot make (renaming partition folders).

The SQL data migrations are the ``NNN_<name>.sql`` files of this folder; these share their
version numbers and their record (``weft_migrations``, ``warehouse.catalog``) and run in the
same version order at a catalog refresh, on warehouses opened with the default migrations
folder. Each one must be idempotent and leave every partition whole when interrupted: it is
recorded only after it finished, so an interrupted one runs again, from the start, at the next
refresh.
"""

from __future__ import annotations

from warehouse.catalog import DataMigration
from warehouse.migrations import partition_spelling

DATA_MIGRATIONS: tuple[DataMigration, ...] = (
    DataMigration(partition_spelling.VERSION, partition_spelling.NAME, partition_spelling.migrate),
)
