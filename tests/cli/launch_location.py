"""A tiny Dagster code location for the launch tests (not a test module): trivial assets, a
named job, a statically partitioned asset, a configurable one and one that fails, so runs made through
``cli.launcher`` and their re-execution by Dagster's own GraphQL take seconds. Each asset
appends a line to ``LAUNCH_LOG`` (a file path from the environment, when set), so a test can
count the times it really ran."""

import os

import dagster as dg

letters = dg.StaticPartitionsDefinition(["a", "b"])


def _log(line: str) -> None:
    path = os.environ.get("LAUNCH_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


@dg.asset
def numbers() -> list[int]:
    _log("numbers")
    return [1, 2, 3, 4]


@dg.asset
def total(numbers: list[int]) -> int:
    _log(f"total {sum(numbers)}")
    return sum(numbers)


class Scale(dg.Config):
    factor: int = 1


@dg.asset
def scaled(config: Scale) -> int:
    _log(f"scaled {config.factor}")
    return 10 * config.factor


@dg.asset(partitions_def=letters)
def letter(context: dg.AssetExecutionContext) -> str:
    _log(f"letter {context.partition_key}")
    return context.partition_key


@dg.asset
def broken() -> None:
    _log("broken")
    raise ValueError("broken on purpose")


sum_job = dg.define_asset_job("sum_job", selection=[numbers, total])

defs = dg.Definitions(assets=[numbers, total, scaled, letter, broken], jobs=[sum_job])
