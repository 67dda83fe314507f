"""The SxS data chain's rows: traces aligned by a judge (SxS Algorithm 1 with App. B's
entailment judge, or the scripted evidence judge), and the alignments turned into SFT rows in
both variants (``sxs``: interleaved think/speak; ``standard``: all reasoning, then the answer).

- :func:`select_traces`, :func:`judge_bounds`, :func:`make_judge`, :func:`align_traces` and
  :func:`alignment_rows`: what ``sxs_alignments`` reads, asks and writes (one row per aligned
  sample; a sample with nothing to interleave is quarantined with the reason).
- :func:`alignment_from_row`, :func:`example_tokens`, :func:`sft_dataset_rows` and
  :func:`latency_table`: what ``sxs_sft_dataset`` writes and shows.
- :func:`alignment_problems` and :func:`round_trip_problems`: the two tables' checks.

No client is made here (the caller brings the LLM client, or none for the evidence judge) and
nothing is written. Not guaranteed: that the judge's levels are right; they are repaired to be
monotone with the terminal safeguard (``pipelines.sxs_align``), whatever the judge answered.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pipelines.formats import parse_tagged
from pipelines.llm import SamplingParams
from pipelines.sxs_align import (
    AlignConfig,
    Alignment,
    Segment,
    align_sample,
    segment,
    sft_rows,
    validate_alignment,
    validate_tagged,
)
from pipelines.sxs_judge import JUDGE_PROMPT_PATH, EvidenceJudge, LLMJudge

JUDGES = ("llm", "evidence")  # the `llm` resource (SxS App. B.1) or the scripted evidence judge
VARIANTS = ("sxs", "standard")
LATENCY_COLUMNS = ["variant", "ari", "abo", "airw", "airw_between", "first_disclosure",
                   "total_tokens", "filler_rate"]

Aligned = tuple[Mapping[str, Any], Alignment | None, str | None]  # (trace, alignment, error)


def select_traces(rows: Sequence[Mapping[str, Any]], limit: int | None) -> list[Mapping[str, Any]]:
    """The first ``limit`` traces (None or 0: all) ordered by trace id; ValueError when there
    are none."""
    chosen = sorted(rows, key=lambda r: r["trace_id"])
    if limit:
        chosen = chosen[:limit]
    if not chosen:
        raise ValueError("no traces: materialize `traces` first")
    return chosen


def check_judge(judge: str) -> None:
    """ValueError unless ``judge`` is one of :data:`JUDGES`."""
    if judge not in JUDGES:
        raise ValueError(f"sxs_alignments: judge must be one of {JUDGES}, got {judge!r} "
                         "(llm: the llm resource; evidence: the scripted evidence judge)")


def judge_bounds(rows: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(judge calls the batch may make, longest judge prompt in characters) for the ``llm``
    resource's deadlines and watchdog: one call per reasoning prefix (SxS Algorithm 1), each
    with room for the client's one JSON repair turn; the prompt holds the judge template,
    the problem, a prefix of the reasoning and the answer blocks."""
    template = len(JUDGE_PROMPT_PATH.read_text(encoding="utf-8"))
    calls = sum(2 * max(len(segment(r["reasoning"])) - 1, 1) for r in rows)
    longest = max((len(r["problem"]) + len(r["reasoning"]) + len(r["response"]) for r in rows),
                  default=0)
    return calls, template + longest


def make_judge(kind: str, client: Any = None, max_tokens: int = 32) -> tuple[Any, str]:
    """(judge, its model name): the scripted evidence judge, or the LLM judge on ``client``,
    greedy with ``max_tokens`` per answer (SxS App. B)."""
    if kind == "evidence":
        return EvidenceJudge(), EvidenceJudge.name
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    return LLMJudge(client, params=params), client.model


def align_traces(rows: Sequence[Mapping[str, Any]], judge: Any, config: AlignConfig,
                 client: Any = None) -> list[Aligned]:
    """Align every trace (all prefixes of a sample in parallel through ``client``'s batch,
    pending calls cancelled once full coverage is seen); a trace with nothing to interleave
    gets its error instead. ``client`` (None for a judge that makes no call) is closed at the
    end."""
    async def one(row):
        try:
            return row, await align_sample(row["problem"], row["reasoning"], row["response"],
                                           judge, config), None
        except ValueError as err:  # nothing to interleave: quarantine the sample
            return row, None, str(err)

    async def run_all():
        if client is None:
            return [await one(row) for row in rows]
        try:
            return await client.map(one, rows, desc="sxs alignment")
        finally:
            await client.aclose()

    return asyncio.run(run_all())


def alignment_rows(results: Sequence[Aligned], model: str
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[Alignment]]:
    """(``sxs_alignments`` rows, ``rejects`` rows, the alignments) of :func:`align_traces`'s
    results; ``model`` is the judge's name."""
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
    return out, rejects, alignments


def rounded(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The summary's figures for display: floats to 4 places, missing ones left out."""
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in summary.items()
            if v is not None}


def alignment_from_row(row: Mapping[str, Any]) -> Alignment:
    """The :class:`pipelines.sxs_align.Alignment` an ``sxs_alignments`` row stores."""
    segments = [Segment(kind, tuple(segment(text))) for kind, text in parse_tagged(row["tagged"])]
    return Alignment(k_r=row["k_r"], k_a=row["k_a"], raw=list(row["raw"]),
                     status=list(row["status"]), repaired=list(row["repaired"]),
                     segments=segments, mode=row["mode"], prefilter=bool(row["prefilter"]),
                     rounds=int(row["rounds"]), elapsed_s=float(row["elapsed_s"] or 0.0))


def example_tokens(sft: Mapping[str, Any], tokenizer: Any) -> int:
    """Tokens of one SFT row's text: every prompt and completion message's content (chat rows)
    or the prompt and completion strings (text rows); the chat template's own tokens are not
    counted."""
    def texts(value):
        return [value] if isinstance(value, str) else [m["content"] for m in value]

    return sum(len(tokenizer.encode(t, add_special_tokens=False))
               for part in ("prompt", "completion") for t in texts(sft[part]))


def check_max_example_tokens(max_example_tokens: int | None) -> None:
    """ValueError unless the cap is None or a positive token count."""
    if max_example_tokens is not None and max_example_tokens <= 0:
        raise ValueError(f"sxs_sft_dataset: max_example_tokens must be a positive token count "
                         f"or None, got {max_example_tokens}")


def _stored(value: Any, style: str) -> Any:
    return json.dumps(value) if style == "chat" else value


def sft_dataset_rows(aligned: Sequence[Mapping[str, Any]], problems: Mapping[str, str], *,
                     style: str, max_example_tokens: int | None, tokenizer: Any
                     ) -> tuple[list[dict[str, Any]], list[Alignment], int]:
    """(``sxs_sft_dataset`` rows, the alignments kept, traces left out as too long): both
    variants of every stored alignment, TRL prompt/completion (chat rows stored as JSON), a
    trace left out (both variants) when its longer variant has more than
    ``max_example_tokens`` tokens (None: keep all). ValueError when every trace is too long."""
    rows, alignments, too_long = [], [], 0
    for row in aligned:
        alignment = alignment_from_row(row)
        variants = sft_rows(problems[row["trace_id"]], alignment, style=style)
        if max_example_tokens is not None and max(
                example_tokens(sft, tokenizer) for sft in variants.values()) > max_example_tokens:
            too_long += 1
            continue
        alignments.append(alignment)
        for variant, sft in variants.items():
            rows.append({"trace_id": row["trace_id"], "problem_id": row["problem_id"],
                         "source": row["source"], "variant": variant,
                         "prompt": _stored(sft["prompt"], style),
                         "completion": _stored(sft["completion"], style),
                         "n_visible_segments": alignment.n_visible_segments
                         if variant == "sxs" else 1})
    if not rows:
        raise ValueError(f"sxs_sft_dataset: all {too_long} traces have more than "
                         f"max_example_tokens={max_example_tokens} tokens; raise it or set it "
                         "to None")
    return rows, alignments, too_long


def latency_table(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per variant (:data:`LATENCY_COLUMNS`) of the dataset's mean content-latency
    metrics (SxS §4.2: ARI, ABO, AIRW; ``eval.latency.summarize_variants``)."""
    table = []
    for variant in VARIANTS:
        lat = summary[f"latency_{variant}"]
        table.append({"variant": variant,
                      **{k: lat.get(f"mean_{k}") for k in LATENCY_COLUMNS[1:]}})
    return table


def alignment_problems(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Stored alignments that break the rules (levels monotone, terminal safeguard, block
    counts): trace id -> its first three problems."""
    bad = {}
    for row in rows:
        problems = validate_alignment(alignment_from_row(row))
        if problems:
            bad[row["trace_id"]] = problems[:3]
    return bad


def round_trip_problems(rows: Sequence[Mapping[str, Any]],
                        originals: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """SFT rows whose think and speak projections do not reproduce their trace's reasoning
    and answer blocks exactly, in order: ``<trace id>/<variant>`` -> its first three
    problems."""
    bad = {}
    for row in rows:
        completion = row["completion"]
        if completion.lstrip().startswith("[{"):
            completion = json.loads(completion)[-1]["content"]
        trace = originals.get(row["trace_id"])
        if trace is None:
            bad[f"{row['trace_id']}/{row['variant']}"] = ["trace no longer exists"]
            continue
        problems = validate_tagged(completion, segment(trace["reasoning"]),
                                   segment(trace["response"]))
        if problems:
            bad[f"{row['trace_id']}/{row['variant']}"] = problems[:3]
    return bad
