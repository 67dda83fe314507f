"""Evaluation assets: `eval_samples` (generate + grade) → `eval_scores`, partitioned by benchmark.

``eval_samples`` renders each benchmark's prompt, samples k completions per problem from the
configured endpoint, grades them in a process pool, and writes one row per sample to the
warehouse (partition ``<benchmark>@<model>``, so re-running replaces that model's rows);
every LLM call is logged to ``llm_calls``. ``eval_scores`` aggregates the samples into avg@k,
pass@k and maj@k with bootstrap 95% confidence intervals.
"""


import asyncio
from typing import Optional

import dagster as dg

from assets.common import lineage, md_table, now, record_run
from assets.ingest import problems
from assets.resources import GraderResource, LLMResource, WarehouseResource
from eval.benchmarks import BENCHMARKS, get as get_benchmark
from eval.runner import EvalConfig, evaluate, score

benchmark_partitions = dg.StaticPartitionsDefinition(sorted(BENCHMARKS))


class EvalSamplesConfig(dg.Config):
    limit: Optional[int] = 20  # problems per benchmark (deterministic slice); None = all
    k: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 512
    seed: int = 0


def table_partition(benchmark: str, model: str) -> str:
    return f"{benchmark}@{model}"


@dg.asset(
    partitions_def=benchmark_partitions,
    deps=[problems],
    group_name="evaluate",
    kinds={"python", "parquet"},
    description="One graded row per (problem, sample) for a benchmark and the configured model.",
)
def eval_samples(context: dg.AssetExecutionContext, config: EvalSamplesConfig, llm: LLMResource,
                 warehouse: WarehouseResource, grader: GraderResource) -> dg.MaterializeResult:
    started = now()
    bench = get_benchmark(context.partition_key)
    cfg = EvalConfig(k=config.k, temperature=config.temperature, top_p=config.top_p,
                     max_tokens=config.max_tokens, seed=config.seed, limit=config.limit)
    wh = warehouse.get()
    rows = wh.read("problems", partition=bench.source).to_pylist()
    if not rows:
        raise dg.Failure(
            f"no problems for {bench.name}: materialize `{bench.source}_problems` and `problems` first"
        )
    client = llm.client()
    client.check_reachable()
    model = llm.model_label()
    context.log.info(f"evaluating {model} on {bench.name}: {min(len(rows), cfg.limit or len(rows))} problems x k={cfg.k}")

    async def run():
        try:
            with grader.pool() as pool:
                return await evaluate(client, bench, rows, cfg, model_label=model, pool=pool)
        finally:
            await client.aclose()

    result = asyncio.run(run())
    lin = lineage(context, config.model_dump(), partition=table_partition(bench.name, model))
    wh.write("eval_samples", result.samples, lineage=lin)
    calls = client.drain_records()
    wh.write("llm_calls", calls, lineage=lin)
    record_run(wh, lin, started_at=started, rows_written=len(result.samples), config=config.model_dump())
    graded = sum(1 for r in result.samples if r["correct"] is not None)
    tok_s = result.completion_tokens / result.generation_s if result.generation_s else 0.0
    return dg.MaterializeResult(metadata={
        "model": model,
        "samples": len(result.samples),
        "graded": graded,
        "accuracy": sum(bool(r["correct"]) for r in result.samples) / max(1, len(result.samples)),
        "generation_errors": result.errors,
        "generation_s": round(result.generation_s, 2),
        "grading_s": round(result.grading_s, 2),
        "completion_tokens": result.completion_tokens,
        "tokens_per_s": round(tok_s, 1),
        "cached_calls": sum(1 for c in calls if c.get("cached")),
    })


@dg.asset(
    partitions_def=benchmark_partitions,
    deps=[eval_samples],
    group_name="evaluate",
    kinds={"python", "duckdb"},
    description="avg@k, pass@k and maj@k with bootstrap 95% CIs per benchmark and model.",
)
def eval_scores(context: dg.AssetExecutionContext, llm: LLMResource,
                warehouse: WarehouseResource) -> dg.MaterializeResult:
    started = now()
    bench = context.partition_key
    wh = warehouse.get()
    model = llm.model_label()
    samples = wh.read("eval_samples", partition=table_partition(bench, model)).to_pylist()
    if not samples:
        raise dg.Failure(f"no eval_samples for {bench} and model {model}: materialize eval_samples first")
    scores = score(samples, model_label=model, benchmark=bench)
    lin = lineage(context, {}, partition=table_partition(bench, model))
    wh.write("eval_scores", scores, lineage=lin)
    record_run(wh, lin, started_at=started, rows_written=len(scores))
    meta = {"model": model, "n_problems": scores[0]["n_problems"] if scores else 0,
            "scores": md_table(scores, ["metric", "k", "value", "ci_low", "ci_high"])}
    for s in scores:
        meta[f"{s['metric'].replace('@k', '')}@{s['k']}"] = float(s["value"])
    return dg.MaterializeResult(metadata=meta)


@dg.asset_check(asset=eval_samples, description="Every sample has been graded (correct is set).")
def check_eval_samples_all_graded(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    stats = warehouse.get().sql(
        "SELECT count(*) AS samples, sum(CASE WHEN correct IS NULL THEN 1 ELSE 0 END) AS ungraded "
        "FROM eval_samples").to_pylist()[0]
    ungraded = int(stats["ungraded"] or 0)
    return dg.AssetCheckResult(passed=stats["samples"] > 0 and ungraded == 0,
                               metadata={"samples": int(stats["samples"]), "ungraded": ungraded})


@dg.asset_check(asset=eval_scores, description="Every score and CI bound lies within [0, 1].")
def check_eval_scores_within_unit_interval(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    stats = warehouse.get().sql(
        "SELECT count(*) AS scores, sum(CASE WHEN value < 0 OR value > 1 OR ci_low < 0 OR ci_high > 1 "
        "OR ci_low > value + 1e-9 OR ci_high < value - 1e-9 OR value IS NULL THEN 1 ELSE 0 END) AS bad "
        "FROM eval_scores").to_pylist()[0]
    bad = int(stats["bad"] or 0)
    return dg.AssetCheckResult(passed=stats["scores"] > 0 and bad == 0,
                               metadata={"scores": int(stats["scores"]), "out_of_range": bad})
