"""SxS assets: `traces` → `sxs_alignments` → `sxs_sft_dataset` (+ its standard variant).

``traces`` ingests (problem, reasoning, response, gold) triples from the trace sources
(``pipelines.ingest.traces``: s1K, LIMO, OpenMathReasoning; local files or the hub).
``sxs_alignments`` asks the configured LLM judge, for every reasoning prefix of every trace,
how many answer blocks it already supports (all prefixes of a sample in parallel, pending
calls cancelled once full coverage is seen), repairs the levels and interleaves; one row per
sample. ``sxs_sft_dataset`` turns each alignment into TRL prompt/completion rows, in two
variants: ``sxs`` (interleaved think/speak) and ``standard`` (all reasoning, then the answer),
with dataset-level content-latency metrics (ARI/ABO/AIRW) of both in the asset metadata.

The rows are computed by ``pipelines.sxs_dataset`` (and ``pipelines.sxs_align``); this module wires
them to the ``llm`` resource and the warehouse.
"""

from collections import Counter

import dagster as dg

from assets.common import lineage, md_table, now, run_record
from assets.resources import LLMResource, WarehouseResource
from pipelines.sxs_dataset import (
    LATENCY_COLUMNS,
    align_traces,
    alignment_problems,
    alignment_rows,
    check_judge,
    check_max_example_tokens,
    judge_bounds,
    latency_table,
    make_judge,
    round_trip_problems,
    rounded,
    select_traces,
    sft_dataset_rows,
)
from warehouse.runs import record_run

TRACE_SOURCE_NAMES = ("s1k", "limo", "openmathreasoning")


class TracesConfig(dg.Config):
    sources: list[str] = list(TRACE_SOURCE_NAMES)
    limit: int | None = None  # per source
    prefer: str = "local"


@dg.asset(group_name="ingest", kinds={"python", "parquet"},
          description="(problem, reasoning, response, gold) triples from reasoning-trace datasets.")
def traces(context: dg.AssetExecutionContext, config: TracesConfig,
           warehouse: WarehouseResource) -> dg.MaterializeResult:
    from pipelines.ingest import load_traces

    started = now()
    wh = warehouse.get()
    counts, rejected = {}, 0
    for name in config.sources:
        result = load_traces(name, prefer=config.prefer, limit=config.limit)
        lin = lineage(context, config.model_dump(), partition=name)
        wh.write("traces", [t.to_row() for t in result.traces], lineage=lin)
        wh.write("rejects", [r.to_row() for r in result.rejects],
                 lineage=lineage(context, config.model_dump(), partition=f"traces/{name}"))
        counts[name] = len(result.traces)
        rejected += len(result.rejects)
    for stale in set(wh.partitions("traces")) - set(config.sources):
        wh.delete_partition("traces", stale)
    record_run(wh, lineage(context, config.model_dump()), started_at=started,
               rows_written=sum(counts.values()), config=config.model_dump())
    return dg.MaterializeResult(metadata={"rows": sum(counts.values()), "rejects": rejected,
                                          "rows_per_source": dg.MetadataValue.json(counts)})


class AlignConfigModel(dg.Config):
    limit: int | None = None  # traces in total (deterministic: ordered by trace_id)
    # "llm": the `llm` resource judges (SxS App. B.1); "evidence": the scripted
    # pipelines.sxs_judge.EvidenceJudge, for models too small to judge (no LLM call)
    judge: str = "llm"
    mode: str = "parallel"  # or "sequential" (one prefix at a time; for comparison)
    prefilter: bool = False
    judge_max_tokens: int = 32  # the judge decodes greedily (SxS App. B): only its cap is set
    max_concurrency: int = 8


@dg.asset(deps=[traces], group_name="synthesize", kinds={"python", "parquet"},
          description="Per trace: reasoning/answer blocks, raw and repaired coverage levels, "
                      "judge calls made/saved/failed, the interleaved tagged stream.")
def sxs_alignments(context: dg.AssetExecutionContext, config: AlignConfigModel, llm: LLMResource,
                   warehouse: WarehouseResource) -> dg.MaterializeResult:
    from pipelines.sxs_align import AlignConfig, summarize_alignments
    from warehouse.samples import sxs_preview

    started = now()
    wh = warehouse.get()
    try:
        check_judge(config.judge)
        rows = select_traces(wh.read("traces").to_pylist(), config.limit)
    except ValueError as exc:
        raise dg.Failure(str(exc)) from exc
    requests, prompt_chars = judge_bounds(rows)
    align_cfg = AlignConfig(mode=config.mode, prefilter=config.prefilter)
    with run_record(context, wh, config.model_dump(), started_at=started) as rec:
        client = None
        if config.judge == "llm":
            client = rec.track(llm.client(config.judge_max_tokens, requests=requests,
                                          progress=context.log.info,
                                          max_concurrency=config.max_concurrency,
                                          prompt_chars=prompt_chars, per_request_timeout=True))
            client.check_reachable()
        judge, model = make_judge(config.judge, client, config.judge_max_tokens)
        results = align_traces(rows, judge, align_cfg, client)
        out, rejects, alignments = alignment_rows(results, model)
        rec.write("sxs_alignments", out)  # after the run's llm_calls; the runs row comes last
        rec.write("rejects", rejects, counted=False, lineage=lineage(
            context, config.model_dump(), partition="sxs_alignments"))
    return dg.MaterializeResult(metadata={
        "samples": len(out), "rejected": len(rejects), "judge_model": model,
        "alignments_preview": dg.MetadataValue.md(sxs_preview(out)),
        **rounded(summarize_alignments(alignments)),
    })


class SxsDatasetConfig(dg.Config):
    style: str = "chat"  # TRL conversational prompt/completion ("chat") or plain text ("text")
    tokenizer_path: str = ""  # for the latency metrics; "" = the embedded model's tokenizer
    # leave out traces (both variants) whose longer variant, prompt and completion text, has
    # more tokens than this: a training max_length above it (plus the chat template's few
    # tokens) then never cuts an answer off; None keeps every trace
    max_example_tokens: int | None = None


@dg.asset(deps=[sxs_alignments], group_name="synthesize", kinds={"python", "parquet"},
          description="TRL prompt/completion rows: `sxs` (interleaved) and `standard` variants.")
def sxs_sft_dataset(context: dg.AssetExecutionContext, config: SxsDatasetConfig,
                    warehouse: WarehouseResource) -> dg.MaterializeResult:
    from eval.latency import summarize_variants
    from pipelines.models import convert
    from pipelines.sxs_align import hf_tokenizer, summarize_alignments, variant_segments

    started = now()
    wh = warehouse.get()
    aligned = wh.read("sxs_alignments").to_pylist()
    if not aligned:
        raise dg.Failure("no alignments: materialize `sxs_alignments` first")
    try:
        check_max_example_tokens(config.max_example_tokens)
        tokenizer = hf_tokenizer(config.tokenizer_path or str(convert()))
        problems = {r["trace_id"]: r["problem"] for r in wh.read("traces").to_pylist()}
        rows, alignments, too_long = sft_dataset_rows(
            aligned, problems, style=config.style,
            max_example_tokens=config.max_example_tokens, tokenizer=tokenizer)
    except ValueError as exc:
        raise dg.Failure(str(exc)) from exc
    lin = lineage(context, config.model_dump())
    wh.write("sxs_sft_dataset", rows, lineage=lin)
    record_run(wh, lin, started_at=started, rows_written=len(rows), config=config.model_dump())
    summary = {**summarize_alignments(alignments),
               **summarize_variants(map(variant_segments, alignments), tokenizer)}
    return dg.MaterializeResult(metadata={
        "rows": len(rows),
        "samples": summary["samples"],
        "left_out_too_long": too_long,
        "mean_reasoning_blocks": summary["mean_reasoning_blocks"],
        "mean_answer_blocks": summary["mean_answer_blocks"],
        "mean_visible_segments": summary["mean_visible_segments"],
        "share_collapsed": summary["share_collapsed"],
        "calls_saved_by_cancellation": summary["calls_saved"],
        "latency": md_table(latency_table(summary), LATENCY_COLUMNS),
        "variants": dg.MetadataValue.json(dict(Counter(r["variant"] for r in rows))),
    })


@dg.asset_check(asset=sxs_alignments, description="Levels monotone, terminal safeguard, block counts.")
def check_sxs_alignments_consistent(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    rows = warehouse.get().read("sxs_alignments").to_pylist()
    bad = alignment_problems(rows)
    return dg.AssetCheckResult(passed=bool(rows) and not bad,
                               metadata={"samples": len(rows), "inconsistent": len(bad),
                                         "examples": dg.MetadataValue.json(dict(list(bad.items())[:5]))})


@dg.asset_check(asset=sxs_sft_dataset, description="Round trip: think and speak projections "
                "reproduce the original reasoning and answer blocks exactly, in order.")
def check_sxs_sft_dataset_round_trip(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    wh = warehouse.get()
    originals = {r["trace_id"]: r for r in wh.read("traces").to_pylist()}
    rows = wh.read("sxs_sft_dataset").to_pylist()
    bad = round_trip_problems(rows, originals)
    return dg.AssetCheckResult(passed=bool(rows) and not bad,
                               metadata={"rows": len(rows), "failing": len(bad),
                                         "examples": dg.MetadataValue.json(dict(list(bad.items())[:5]))})
