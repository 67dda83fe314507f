"""Partition keys: one spelling, Dagster's, in every table, folder and run record.

A partition key is the string a table's ``partition`` column holds and its folder is named
after. Where the rows belong to a Dagster partition, the key is exactly Dagster's partition
key: a multi-partitioned asset's key joins its dimension values with ``|`` in the order of the
dimension names (Dagster's ``MultiPartitionKey``), so the evaluation of ``gsm8k`` by
``smollm2-135m-instruct`` is ``gsm8k|smollm2-135m-instruct`` in Dagster, in ``eval_samples``,
``eval_scores``, ``runs`` and ``llm_calls`` alike, and tables join on ``partition`` with each
other and with a run's ``dagster/partition`` tag. Keys that are no Dagster partition but
combine several values (an experiment under an Engagement Process partition; a Tandem RL
benchmark, senior and junior) join them with the same ``|``, Dagster's dimension order first.
Build keys with :func:`partition_key` (:func:`eval_partition` for an evaluation), never by
hand, and look partitions up with the same functions.

Folder names are the key itself where the file system allows it; ``/``, ``%``, a leading
``.`` and characters outside :data:`FOLDER_SAFE` are percent-quoted (``partition_dir_name``),
so the mapping stays reversible (``partition_from_dir``).

Warehouses written before this spelling used ``@`` between the values and quoted it in folder
names (``gsm8k%40smollm2-135m-instruct``), and their `runs` / `llm_calls` rows held the per-run
folder key in ``partition``; the data migration ``009_partition_spelling``
(``warehouse.migrations.partition_spelling``) respells them once (:func:`respell`).
Not handled: a value that itself contained ``@`` in an old key is split there too.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

SEPARATOR = "|"
# The separator warehouses used before keys followed Dagster's spelling.
LEGACY_SEPARATOR = "@"
# Characters a folder name keeps as they are (besides ASCII letters and digits).
FOLDER_SAFE = "-_.=|:+@,"


def partition_key(*parts: str) -> str:
    """The key of a partition made of ``parts``, in order, joined by ``|`` (Dagster's order of
    dimension names first). Raises ``ValueError`` for no part, an empty part or a part that
    holds ``|`` itself (the key could not be split back; Dagster refuses such keys too)."""
    if not parts:
        raise ValueError("partition_key needs at least one part")
    for part in parts:
        if not isinstance(part, str) or not part:
            raise ValueError(f"partition key parts must be non-empty strings, got {part!r} in "
                             f"{parts!r}")
        if SEPARATOR in part:
            raise ValueError(f"partition key part {part!r} contains {SEPARATOR!r}, the separator "
                             "of a partition key's parts; rename it (model ids and benchmark "
                             f"names may not contain {SEPARATOR!r})")
    return SEPARATOR.join(parts)


def eval_partition(benchmark: str, model: str) -> str:
    """The partition of an evaluation of ``model`` (a model id or an evaluation's label) on
    ``benchmark``: Dagster's key of the evaluation assets' (benchmark, model) partition, and
    the ``partition`` of its ``eval_samples``, ``eval_scores``, `runs` and `llm_calls` rows."""
    return partition_key(benchmark, model)


def split_partition(key: str) -> list[str]:
    """The parts of ``key`` (:func:`partition_key` reversed)."""
    return key.split(SEPARATOR)


def partition_dir_name(partition: str) -> str:
    """Filesystem-safe, reversible folder name for a partition key: the key itself, with
    ``/``, ``%``, a leading ``.`` and characters outside :data:`FOLDER_SAFE` percent-quoted."""
    if not isinstance(partition, str) or not partition:
        raise ValueError("partition key must be a non-empty string")
    name = quote(partition, safe=FOLDER_SAFE)
    return "%2E" + name[1:] if name.startswith(".") else name


def partition_from_dir(name: str) -> str:
    """The partition key a folder name stands for (:func:`partition_dir_name` reversed)."""
    return unquote(name)


def respell(key: str) -> str:
    """An old-spelling key (values joined by ``@``) in the current spelling."""
    return key.replace(LEGACY_SEPARATOR, SEPARATOR)
