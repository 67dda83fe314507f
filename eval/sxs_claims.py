"""SxS's headline latency claim judged from warehouse rows (SxS Table 1, SFT rows; §4.2-4.3):
SFT on entailment-aligned interleaved traces discloses content earlier than SFT on the same
traces in think-then-answer form, and, as the paper reports right after SFT, costs accuracy.

- :data:`LATENCY_PARTS` and :data:`ACCURACY_PART`: the claim's parts, ABO (§4.2: mean position
  of each speak block's first token) lower, AIRW (§4.2: mean think span before each speak
  block, the wait before the first one included) lower -- both ``better`` with
  ``higher_is_better=False`` -- and accuracy in the paper's direction: Table 1's SFT rows put
  SxS SFT *below* standard-CoT SFT (AIME25 38.3 vs 62.9 on Qwen3-4B, 50.8 vs 76.9 on
  Qwen3-30B-A3B), the "alignment tax" that §4.3 says RL then recovers. The paper makes no
  "keeps accuracy" claim after SFT, so the part states what Table 1 shows: standard-CoT SFT is
  more accurate than SxS SFT (``better`` with standard-CoT SFT as the treatment). The latency
  of each output, with one rule for both arms, is ``eval.latency``'s (only explicit speak
  blocks are shown; an output that shows nothing scores a block after its whole generation),
  and the ``sxs_latency_claim`` asset pairs every problem both arms generated for.
- :func:`judge_quality`: the quality figures of the alignments the arms trained on (App. B's
  judge: collapsed share, visible segments, failed calls, values disclosed before the
  reasoning wrote them).
- :func:`heldout_problems`: the evaluation's problems, those whose text is a training trace's
  problem left out.

Failures are ``eval.claims.ClaimError`` (too few paired problems) or ValueError (bad inputs),
each saying what to do. Not guaranteed: anything about how the arms were trained.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from eval.benchmarks import get as get_benchmark
from eval.claims import Claim
from eval.claims.paper_reports import paper_value
from pipelines.ingest import load_source
from pipelines.sxs_align import segment
from pipelines.sxs_judge import unsupported_disclosures

ARMS = ("standard", "sxs")  # reference, treatment: the sxs_sft_dataset variants
DATASET = "sxs_sft_dataset"
MODE = "interleaved"
SECTION = "Table 1 (SFT rows)"
EXPERIMENT = "sxs_latency_claim"
STANDARD, SXS = "standard-CoT SFT", "SxS SFT"
_COMMON = {"paper": "SxS", "reference": STANDARD, "treatment": SXS}
LATENCY_PARTS = (
    ("abo", Claim(**_COMMON, section=SECTION, metric="ABO (tokens)", higher_is_better=False,
                  statement="SxS SFT starts its visible blocks earlier (lower ABO)",
                  paper_value=paper_value(EXPERIMENT, "abo"))),
    ("airw", Claim(**_COMMON, section=SECTION, metric="AIRW (tokens)", higher_is_better=False,
                   statement="SxS SFT waits less between visible updates (lower AIRW)",
                   paper_value=paper_value(EXPERIMENT, "airw"))),
)
# the paper's direction after SFT: the standard-CoT arm is the more accurate one (Table 1)
ACCURACY_PART = Claim(paper="SxS", section=SECTION, metric="accuracy", reference=SXS,
                      treatment=STANDARD, bounds=(0.0, 1.0),
                      statement="right after SFT, standard-CoT SFT is more accurate than SxS "
                                "SFT (the alignment tax of §4.3, before RL recovers it)",
                      paper_value=paper_value(EXPERIMENT, "accuracy"))


# The validity rule, fixed before any run of the redesigned claim: every part compares what
# the arms show in interleaved mode, which only means something when each arm writes its own
# training format (standard CoT: one think block, then one speak block; SxS: a think/speak
# stream; ``eval.latency.ArmLatency.format_following``). An arm below this share of its
# outputs in its own format has not learned it yet, and the parts are inconclusive
# (``invalid_arm``) instead of read as evidence: an arm that ignores the format is scored at
# its full length, so it would lose on latency for not having learned, not for its data.
# Half is where most outputs still miss the format; the asset's warning used the same line.
FORMAT_FLOOR = 0.5


def format_invalid_text(formats: Mapping[str, Any], floor: float = FORMAT_FLOOR) -> str | None:
    """The ``invalid_arm`` value of every part (``eval.claims.mark_invalid_arm``): each arm
    whose share of outputs in its own format (``formats[arm]["format_following"]``) is below
    ``floor``, with its share and counts; None when both arms follow their format."""
    if not 0.0 < floor <= 1.0:
        raise ValueError(f"format floor must be in (0, 1], got {floor!r}")
    names = {"standard": STANDARD, "sxs": SXS}
    bad = []
    for arm in ARMS:
        figures = formats.get(arm) or {}
        rate = figures.get("format_following")
        if rate is None:
            bad.append(f"{names[arm]} has no measured output")
        elif float(rate) < floor:
            bad.append(f"{names[arm]} writes its own format in {float(rate):.0%} of its outputs "
                       f"(< {floor:.0%}; {figures.get('untagged', 0)} untagged, "
                       f"{figures.get('malformed', 0)} malformed)")
    return "; ".join(bad) or None


def judge_quality(alignments: Sequence[Mapping[str, Any]],
                  traces: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Quality figures of the alignments the arms trained on: the judge(s), how many samples
    collapsed to think-then-answer, visible segments per sample, the share of judge calls
    that failed, and the share of answer blocks shown before the last reasoning block whose
    numbers the problem and reasoning so far did not contain (``unsupported_disclosures``)."""
    if not alignments:
        raise ValueError("no alignments to describe: materialize sxs_alignments first")
    early = unsupported = 0
    for row in alignments:
        trace = traces.get(row["trace_id"])
        if trace is None:
            raise ValueError(f"alignment of trace {row['trace_id']!r} has no row in traces: "
                             "re-materialize traces and sxs_alignments together")
        e, u = unsupported_disclosures(trace["problem"], segment(trace["reasoning"]),
                                       segment(trace["response"]), list(row["repaired"]))
        early, unsupported = early + e, unsupported + u
    made = sum(int(r["calls_made"] or 0) for r in alignments)
    n = len(alignments)
    return {
        "judge": sorted({str(r["judge_model"]) for r in alignments}),
        "samples": n,
        "share_collapsed": sum(bool(r["collapsed"]) for r in alignments) / n,
        "mean_visible_segments": sum(int(r["n_visible_segments"]) for r in alignments) / n,
        "judge_calls": made,
        "share_calls_failed": (sum(int(r["calls_failed"] or 0) for r in alignments) / made
                               if made else 0.0),
        "early_answer_blocks": early,
        "share_early_blocks_unsupported": unsupported / early if early else 0.0,
    }


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", str(text)).strip().lower()


def heldout_problems(benchmark: str, limit: int | None, trace_problems: Sequence[str]
                     ) -> tuple[Any, list[dict[str, Any]], int]:
    """(benchmark, its first ``limit`` problems whose text -- compared case- and
    whitespace-insensitively -- is not a training trace's problem, how many were left out for
    that). ValueError for an unknown or code benchmark, or when no problem is left."""
    try:
        bench = get_benchmark(benchmark)
    except KeyError as exc:
        raise ValueError(f"unknown benchmark {benchmark!r}: {exc}") from exc
    if bench.grader == "code":
        raise ValueError(f"{bench.name} is a code benchmark; the SxS claim evaluates math or "
                         "multiple-choice problems (e.g. gsm8k)")
    rows = [p.to_row() for p in load_source(bench.source).problems]
    seen = {_normal(t) for t in trace_problems}
    kept = [r for r in rows if _normal(r["problem"]) not in seen]
    if not kept:
        raise ValueError(f"{bench.name}: no problem left once the training traces' problems "
                         "are taken out")
    return bench, kept[:limit] if limit is not None else kept, len(rows) - len(kept)
