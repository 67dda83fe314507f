"""The partitions of the evaluation assets, and the benchmarks a model is evaluated on.

Evaluations are partitioned by (benchmark, model): the benchmarks are static (every registered
benchmark), the models dynamic (a partition is added for each registered checkpoint or served
model). The warehouse partition of an evaluation is Dagster's partition key itself
(``warehouse.partitions.eval_partition``). :func:`eval_suite` is the list the nightly schedule,
the models sensor and a checkpoint's evaluation links use: ``WEFT_EVAL_SUITE`` (comma-separated
benchmark names), else ``gsm8k,math500``.
"""

from __future__ import annotations

import os

import dagster as dg

from eval.benchmarks import BENCHMARKS
from warehouse.partitions import eval_partition

DEFAULT_SUITE = ("gsm8k", "math500")

benchmark_partitions = dg.StaticPartitionsDefinition(sorted(BENCHMARKS))
model_partitions = dg.DynamicPartitionsDefinition(name="models")
eval_partitions = dg.MultiPartitionsDefinition(
    {"benchmark": benchmark_partitions, "model": model_partitions}
)


def table_partition(benchmark: str, model: str) -> str:
    """The warehouse partition of the evaluation assets' partition (``benchmark``, ``model``):
    Dagster's partition key itself (``warehouse.partitions.eval_partition``)."""
    return eval_partition(benchmark, model)


def partition_dims(context: dg.AssetExecutionContext) -> tuple[str, str]:
    keys = context.partition_key.keys_by_dimension
    return keys["benchmark"], keys["model"]

def eval_suite() -> list[str]:
    raw = os.environ.get("WEFT_EVAL_SUITE", "")
    names = [n.strip() for n in raw.split(",") if n.strip()] or list(DEFAULT_SUITE)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise ValueError(f"WEFT_EVAL_SUITE names unknown benchmarks {unknown}; known: {sorted(BENCHMARKS)}")
    return names
