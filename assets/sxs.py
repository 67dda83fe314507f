"""SxS assets: `traces` → `sxs_alignments` → `sxs_sft_dataset` (+ its standard variant).

``traces`` ingests (problem, reasoning, response, gold) triples from the trace sources
(``pipelines.ingest.traces``: s1K, LIMO, OpenMathReasoning; local files or the hub).
``sxs_alignments`` asks the configured LLM judge, for every reasoning prefix of every trace,
how many answer blocks it already supports (all prefixes of a sample in parallel, pending
calls cancelled once full coverage is seen), repairs the levels and interleaves; one row per
sample. ``sxs_sft_dataset`` turns each alignment into TRL prompt/completion rows, in two
variants: ``sxs`` (interleaved think/speak) and ``standard`` (all reasoning, then the answer),
with dataset-level content-latency metrics (ARI/ABO/AIRW) of both in the asset metadata.
"""

import asyncio
import json
from collections import Counter

import dagster as dg

from assets.common import lineage, md_table, now, run_record
from assets.resources import LLMResource, WarehouseResource
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


def judge_bounds(rows: list[dict]) -> tuple[int, int]:
    """(judge calls the batch may make, longest judge prompt in characters) for the ``llm``
    resource's deadlines and watchdog: one call per reasoning prefix (SxS Algorithm 1), each
    with room for the client's one JSON repair turn; the prompt holds the judge template,
    the problem, a prefix of the reasoning and the answer blocks."""
    from pipelines.sxs import segment
    from pipelines.sxs_judge import JUDGE_PROMPT_PATH

    template = len(JUDGE_PROMPT_PATH.read_text(encoding="utf-8"))
    calls = sum(2 * max(len(segment(r["reasoning"])) - 1, 1) for r in rows)
    longest = max((len(r["problem"]) + len(r["reasoning"]) + len(r["response"]) for r in rows),
                  default=0)
    return calls, template + longest


JUDGES = ("llm", "evidence")


class AlignConfigModel(dg.Config):
    limit: int | None = None  # traces in total (deterministic: ordered by trace_id)
    # "llm": the `llm` resource judges (SxS App. B.1); "evidence": the scripted
    # pipelines.sxs_judge.EvidenceJudge, for models too small to judge (no LLM call)
    judge: str = "llm"
    mode: str = "parallel"  # or "sequential" (one prefix at a time; for comparison)
    prefilter: bool = False
    judge_max_tokens: int = 32
    max_concurrency: int = 8


@dg.asset(deps=[traces], group_name="synthesize", kinds={"python", "parquet"},
          description="Per trace: reasoning/answer blocks, raw and repaired coverage levels, "
                      "judge calls made/saved/failed, the interleaved tagged stream.")
def sxs_alignments(context: dg.AssetExecutionContext, config: AlignConfigModel, llm: LLMResource,
                   warehouse: WarehouseResource) -> dg.MaterializeResult:
    from pipelines.llm import SamplingParams
    from pipelines.sxs import AlignConfig, align_sample, summarize_alignments
    from pipelines.sxs_judge import EvidenceJudge, LLMJudge

    started = now()
    if config.judge not in JUDGES:
        raise dg.Failure(f"sxs_alignments: judge must be one of {JUDGES}, got {config.judge!r} "
                         "(llm: the llm resource; evidence: the scripted evidence judge)")
    wh = warehouse.get()
    rows = sorted(wh.read("traces").to_pylist(), key=lambda r: r["trace_id"])
    if config.limit:
        rows = rows[: config.limit]
    if not rows:
        raise dg.Failure("no traces: materialize `traces` first")
    requests, prompt_chars = judge_bounds(rows)
    align_cfg = AlignConfig(mode=config.mode, prefilter=config.prefilter)
    with run_record(context, wh, config.model_dump(), started_at=started) as rec:
        client = None
        if config.judge == "evidence":
            judge, model = EvidenceJudge(), EvidenceJudge.name
        else:
            client = rec.track(llm.client(config.judge_max_tokens, requests=requests,
                                          progress=context.log.info,
                                          max_concurrency=config.max_concurrency,
                                          prompt_chars=prompt_chars, per_request_timeout=True))
            model = client.model
            client.check_reachable()
            judge = LLMJudge(client, params=SamplingParams(temperature=0.0,
                                                           max_tokens=config.judge_max_tokens))

        async def one(row):
            try:
                return row, await align_sample(row["problem"], row["reasoning"], row["response"],
                                               judge, align_cfg), None
            except ValueError as err:  # nothing to interleave: quarantine the sample
                return row, None, str(err)

        async def run_all():
            if client is None:
                return [await one(row) for row in rows]
            try:
                return await client.map(one, rows, desc="sxs alignment")
            finally:
                await client.aclose()

        results = asyncio.run(run_all())
        out, rejects, alignments = [], [], []
        for row, alignment, error in results:
            if alignment is None:
                rejects.append({"source": row["source"], "origin": f"traces/{row['trace_id']}",
                                "line": -1, "reason": f"sxs alignment: {error}",
                                "raw": row["problem"][:500]})
                continue
            alignments.append(alignment)
            out.append({"trace_id": row["trace_id"], "problem_id": row["problem_id"],
                        "source": row["source"], "judge_model": model, **alignment.to_row()})
        rec.write("sxs_alignments", out)  # after the run's llm_calls; the runs row comes last
        rec.write("rejects", rejects, counted=False, lineage=lineage(
            context, config.model_dump(), partition="sxs_alignments"))
    summary = summarize_alignments(alignments)
    from warehouse.samples import sxs_preview

    return dg.MaterializeResult(metadata={
        "samples": len(out), "rejected": len(rejects), "judge_model": model,
        "alignments_preview": dg.MetadataValue.md(sxs_preview(out)),
        **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in summary.items() if v is not None},
    })


def _alignment_from_row(row: dict):
    from pipelines.formats import parse_tagged
    from pipelines.sxs import Alignment, Segment, segment

    segments = [Segment(kind, tuple(segment(text))) for kind, text in parse_tagged(row["tagged"])]
    return Alignment(k_r=row["k_r"], k_a=row["k_a"], raw=list(row["raw"]), status=list(row["status"]),
                     repaired=list(row["repaired"]), segments=segments, mode=row["mode"],
                     prefilter=bool(row["prefilter"]), rounds=int(row["rounds"]),
                     elapsed_s=float(row["elapsed_s"] or 0.0))


class SxsDatasetConfig(dg.Config):
    style: str = "chat"  # TRL conversational prompt/completion ("chat") or plain text ("text")
    tokenizer_path: str = ""  # for the latency metrics; "" = the embedded model's tokenizer
    # leave out traces (both variants) whose longer variant, prompt and completion text, has
    # more tokens than this: a training max_length above it (plus the chat template's few
    # tokens) then never cuts an answer off; None keeps every trace
    max_example_tokens: int | None = None


def example_tokens(sft: dict, tokenizer) -> int:
    """Tokens of one SFT row's text: every prompt and completion message's content (chat rows)
    or the prompt and completion strings (text rows); the chat template's own tokens are not
    counted."""
    def texts(value):
        return [value] if isinstance(value, str) else [m["content"] for m in value]

    return sum(len(tokenizer.encode(t, add_special_tokens=False))
               for part in ("prompt", "completion") for t in texts(sft[part]))


@dg.asset(deps=[sxs_alignments], group_name="synthesize", kinds={"python", "parquet"},
          description="TRL prompt/completion rows: `sxs` (interleaved) and `standard` variants.")
def sxs_sft_dataset(context: dg.AssetExecutionContext, config: SxsDatasetConfig,
                    warehouse: WarehouseResource) -> dg.MaterializeResult:
    from eval.latency import summarize_variants
    from pipelines.models import convert
    from pipelines.sxs import hf_tokenizer, sft_rows, summarize_alignments, variant_segments

    started = now()
    wh = warehouse.get()
    aligned = wh.read("sxs_alignments").to_pylist()
    if not aligned:
        raise dg.Failure("no alignments: materialize `sxs_alignments` first")
    if config.max_example_tokens is not None and config.max_example_tokens <= 0:
        raise dg.Failure(f"sxs_sft_dataset: max_example_tokens must be a positive token count "
                         f"or None, got {config.max_example_tokens}")
    tokenizer = hf_tokenizer(config.tokenizer_path or str(convert()))
    problems = {r["trace_id"]: r["problem"] for r in wh.read("traces").to_pylist()}
    rows, alignments, too_long = [], [], 0
    for row in aligned:
        alignment = _alignment_from_row(row)
        variants = sft_rows(problems[row["trace_id"]], alignment, style=config.style)
        if config.max_example_tokens is not None and max(
                example_tokens(sft, tokenizer) for sft in variants.values()
        ) > config.max_example_tokens:
            too_long += 1
            continue
        alignments.append(alignment)
        for variant, sft in variants.items():
            rows.append({"trace_id": row["trace_id"], "problem_id": row["problem_id"],
                         "source": row["source"], "variant": variant,
                         "prompt": json.dumps(sft["prompt"]) if config.style == "chat" else sft["prompt"],
                         "completion": json.dumps(sft["completion"]) if config.style == "chat" else sft["completion"],
                         "n_visible_segments": alignment.n_visible_segments if variant == "sxs" else 1})
    if not rows:
        raise dg.Failure(f"sxs_sft_dataset: all {too_long} traces have more than "
                         f"max_example_tokens={config.max_example_tokens} tokens; raise it or "
                         "set it to None")
    lin = lineage(context, config.model_dump())
    wh.write("sxs_sft_dataset", rows, lineage=lin)
    record_run(wh, lin, started_at=started, rows_written=len(rows), config=config.model_dump())
    summary = {**summarize_alignments(alignments),
               **summarize_variants(map(variant_segments, alignments), tokenizer)}
    table = []
    for variant in ("sxs", "standard"):
        lat = summary[f"latency_{variant}"]
        table.append({"variant": variant, **{k: lat.get(f"mean_{k}") for k in ("ari", "abo", "airw", "airw_between", "first_disclosure",
                                                                       "total_tokens", "filler_rate")}})
    return dg.MaterializeResult(metadata={
        "rows": len(rows),
        "samples": summary["samples"],
        "left_out_too_long": too_long,
        "mean_reasoning_blocks": summary["mean_reasoning_blocks"],
        "mean_answer_blocks": summary["mean_answer_blocks"],
        "mean_visible_segments": summary["mean_visible_segments"],
        "share_collapsed": summary["share_collapsed"],
        "calls_saved_by_cancellation": summary["calls_saved"],
        "latency": md_table(table, ["variant", "ari", "abo", "airw", "airw_between", "first_disclosure", "total_tokens", "filler_rate"]),
        "variants": dg.MetadataValue.json(dict(Counter(r["variant"] for r in rows))),
    })


@dg.asset_check(asset=sxs_alignments, description="Levels monotone, terminal safeguard, block counts.")
def check_sxs_alignments_consistent(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    from pipelines.sxs import validate_alignment

    bad = {}
    rows = warehouse.get().read("sxs_alignments").to_pylist()
    for row in rows:
        problems = validate_alignment(_alignment_from_row(row))
        if problems:
            bad[row["trace_id"]] = problems[:3]
    return dg.AssetCheckResult(passed=bool(rows) and not bad,
                               metadata={"samples": len(rows), "inconsistent": len(bad),
                                         "examples": dg.MetadataValue.json(dict(list(bad.items())[:5]))})


@dg.asset_check(asset=sxs_sft_dataset, description="Round trip: think and speak projections "
                "reproduce the original reasoning and answer blocks exactly, in order.")
def check_sxs_sft_dataset_round_trip(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    from pipelines.sxs import segment, validate_tagged

    wh = warehouse.get()
    originals = {r["trace_id"]: r for r in wh.read("traces").to_pylist()}
    rows = wh.read("sxs_sft_dataset").to_pylist()
    bad = {}
    for row in rows:
        completion = row["completion"]
        if completion.lstrip().startswith("[{"):
            completion = json.loads(completion)[-1]["content"]
        trace = originals.get(row["trace_id"])
        if trace is None:
            bad[f"{row['trace_id']}/{row['variant']}"] = ["trace no longer exists"]
            continue
        problems = validate_tagged(completion, segment(trace["reasoning"]), segment(trace["response"]))
        if problems:
            bad[f"{row['trace_id']}/{row['variant']}"] = problems[:3]
    return dg.AssetCheckResult(passed=bool(rows) and not bad,
                               metadata={"rows": len(rows), "failing": len(bad),
                                         "examples": dg.MetadataValue.json(dict(list(bad.items())[:5]))})
