"""Evaluation assets: `eval_samples` (generate + grade) → `eval_scores` → `eval_reports`.

``eval_samples`` and ``eval_scores`` are partitioned by (benchmark, model). Models are a
dynamic partition dimension: every model in the registry (``eval.models``: the embedded model,
registered endpoints, checkpoints that training registers) becomes a partition, added by the
``models_sensor`` or the nightly schedule. ``eval_samples`` serves the model if it is a local
folder (on demand, stopped afterwards) or calls its endpoint, samples k completions per problem
in the benchmark's generation mode, grades them with the benchmark's grader, and writes one row
per sample (warehouse partition ``<benchmark>@<model>``, replaced on re-runs); every LLM call is
logged to ``llm_calls``. ``eval_scores`` aggregates avg@k, pass@k and maj@k with bootstrap CIs.
"""

import asyncio
from typing import List, Optional

import dagster as dg

from assets.common import lineage, md_table, now, record_run
from assets.ingest import problems
from assets.resources import GraderResource, WarehouseResource
from assets.sandbox_resource import SandboxResource
from eval.benchmarks import BENCHMARKS, get as get_benchmark
from eval.runner import EvalConfig, evaluate, score

benchmark_partitions = dg.StaticPartitionsDefinition(sorted(BENCHMARKS))
model_partitions = dg.DynamicPartitionsDefinition(name="models")
eval_partitions = dg.MultiPartitionsDefinition(
    {"benchmark": benchmark_partitions, "model": model_partitions}
)


class EvalSamplesConfig(dg.Config):
    limit: Optional[int] = 20  # problems per benchmark (deterministic slice); None = all
    k: Optional[int] = None  # samples per problem; None = the benchmark's default k
    temperature: Optional[float] = None  # None: 0.0 for k=1, else 0.6
    top_p: float = 0.95
    max_tokens: int = 512
    seed: int = 0
    max_concurrency: int = 8
    # generation mode (eval.modes): single | interleaved | budgeted | tool
    mode: str = "single"
    budgets: List[int] = [1000, 2000, 4000, 8000]
    budget_overrun: float = 1.5
    thinking_caps: List[int] = []
    context_policy: str = "state_preserved"
    max_turns: int = 6
    tokenizer_path: str = ""  # interleaved latency metrics; "" = the model's own folder or the embedded one


def table_partition(benchmark: str, model: str) -> str:
    return f"{benchmark}@{model}"


def partition_dims(context: dg.AssetExecutionContext) -> tuple[str, str]:
    keys = context.partition_key.keys_by_dimension
    return keys["benchmark"], keys["model"]


def eval_config(config: EvalSamplesConfig, default_k: int, tokenizer_path: str = "") -> EvalConfig:
    from eval.modes import ModeConfig

    k = config.k or default_k
    temperature = config.temperature if config.temperature is not None else (0.0 if k == 1 else 0.6)
    mode = ModeConfig(mode=config.mode, budgets=tuple(config.budgets),
                      budget_overrun=config.budget_overrun, thinking_caps=tuple(config.thinking_caps),
                      context_policy=config.context_policy, max_turns=config.max_turns,
                      tokenizer_path=config.tokenizer_path or tokenizer_path or None)
    return EvalConfig(k=k, temperature=temperature, top_p=config.top_p if temperature > 0 else 1.0,
                      max_tokens=config.max_tokens, seed=config.seed, limit=config.limit, mode=mode)


@dg.asset(
    partitions_def=eval_partitions,
    deps=[problems],
    group_name="evaluate",
    kinds={"python", "parquet"},
    description="One graded row per (problem, sample) for a benchmark and a registered model.",
)
def eval_samples(context: dg.AssetExecutionContext, config: EvalSamplesConfig,
                 warehouse: WarehouseResource, grader: GraderResource,
                 sandbox: SandboxResource) -> dg.MaterializeResult:
    from eval.models import get_model
    from pipelines.llm import LLMClient

    started = now()
    bench_name, model_id = partition_dims(context)
    bench = get_benchmark(bench_name)
    wh = warehouse.get()
    rows = wh.read("problems", partition=bench.source).to_pylist()
    if not rows:
        raise dg.Failure(
            f"no problems for {bench.name}: materialize `{bench.source}_problems` and `problems` first"
        )
    spec = get_model(model_id, wh)
    cfg = eval_config(config, bench.default_k, tokenizer_path=spec.path)
    context.log.info(f"evaluating {model_id} on {bench.name}: "
                     f"{min(len(rows), cfg.limit or len(rows))} problems x k={cfg.k}")

    with spec.serve() as (base_url, served, api_key):
        client = LLMClient(base_url, served, api_key=api_key, max_concurrency=config.max_concurrency,
                           timeout_s=900.0)
        client.check_reachable()

        needs_sandbox = bench.grader == "code" or cfg.mode.mode == "tool"

        async def run():
            try:
                with grader.pool() as pool:
                    return await evaluate(client, bench, rows, cfg, model_label=model_id, pool=pool,
                                          sandbox=sandbox.get_pool() if needs_sandbox else None,
                                          checkpoint_id=spec.checkpoint_id or None)
            finally:
                await client.aclose()

        result = asyncio.run(run())
    lin = lineage(context, config.model_dump(), partition=table_partition(bench.name, model_id))
    wh.write("eval_samples", result.samples, lineage=lin)
    calls = client.drain_records()
    wh.write("llm_calls", calls, lineage=lin)
    record_run(wh, lin, started_at=started, rows_written=len(result.samples), config=config.model_dump())
    tok_s = result.completion_tokens / result.generation_s if result.generation_s else 0.0
    total_s = result.generation_s + result.grading_s
    return dg.MaterializeResult(metadata={
        "model": model_id,
        "samples": len(result.samples),
        "graded": sum(1 for r in result.samples if r["correct"] is not None),
        "accuracy": sum(bool(r["correct"]) for r in result.samples) / max(1, len(result.samples)),
        "generation_errors": result.errors,
        "generation_s": round(result.generation_s, 2),
        "grading_s": round(result.grading_s, 2),
        "generation_share": round(result.generation_s / total_s, 3) if total_s else 0.0,
        "samples_per_s": round(len(result.samples) / total_s, 3) if total_s else 0.0,
        "completion_tokens": result.completion_tokens,
        "tokens_per_s": round(tok_s, 1),
        "cached_calls": sum(1 for c in calls if c.get("cached")),
    })


@dg.asset(
    partitions_def=eval_partitions,
    deps=[eval_samples],
    group_name="evaluate",
    kinds={"python", "duckdb"},
    description="avg@k, pass@k and maj@k with bootstrap 95% CIs per benchmark and model.",
)
def eval_scores(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    started = now()
    bench, model = partition_dims(context)
    wh = warehouse.get()
    samples = wh.read("eval_samples", partition=table_partition(bench, model)).to_pylist()
    if not samples:
        raise dg.Failure(f"no eval_samples for {bench} and model {model}: materialize eval_samples first")
    scores = score(samples, model_label=model, benchmark=bench)
    checkpoint = samples[0].get("checkpoint_id")
    for s in scores:
        s["checkpoint_id"] = checkpoint
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
