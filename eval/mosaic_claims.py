"""The DeepTool paper's MOSAIC claims judged from warehouse rows: Table 2's synthesis claim
(§3.6: MOSAIC's synthetic trajectories are correct more often and take more turns than the
baseline synthesizer's) and the recovery claim (§1, §3.6: training on trajectories with
injected failures teaches recovery after an interpreter error).

- :func:`synthesis_parts` / :func:`synthesis_claims`: the newest MOSAIC run at ρ against the
  newest baseline run of one source, paired by problem: per problem ``correct`` (0/1) and
  ``num_turns`` (steps of the attempt, a failed attempt counting its valid prefix), both
  ``better`` parts.
- :func:`recovery_counts` / :func:`recovery_claim_row`: a sample *recovers* when its run had at
  least one interpreter error (``tool_errors >= 1``) and its final answer is still correct.
  Each arm's rate is recovering / erroring samples over the held-out problems both arms
  answered (a ratio of aggregates: a problem weighs by its erroring samples), and the
  difference gets its CI from the paired bootstrap over problems (``eval.claims.judge_ratio``).

Failures are :class:`eval.claims.ClaimError` with what to run. Not guaranteed: anything about
the runs beyond the rows read (how they were synthesized, trained or evaluated is the caller's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eval.claims import Claim, ClaimError, judge, judge_ratio
from eval.claims.paper_reports import paper_value
from pipelines.mosaic.synthesis_runs import TABLE_BASELINE, TABLE_MOSAIC, mosaic_partition

PAPER = "DeepTool"
SFT_RHO = 0.1  # DeepTool §3.1 and App. A.1 Table 3: the SFT data is synthesized with ρ = 0.1
REFERENCE_RHO = 0.0  # the recovery claim's reference arm: no injected failure
# a synthesis run's settings both arms must share to be paired
SHARED_SYNTHESIS_SETTINGS = ("max_steps", "seed")


def newest_run_rows(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows of the run that wrote last (by ``created_at``, then ``run_id``)."""
    if not rows:
        return []
    newest = max(rows, key=lambda r: (str(r.get("created_at") or ""), str(r.get("run_id") or "")))
    return [r for r in rows if r.get("run_id") == newest.get("run_id")]


def _by_problem(rows: Sequence[Mapping[str, Any]], arm: str) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        pid = str(row["problem_id"])
        if pid in out:
            raise ClaimError(f"the {arm} run holds problem {pid!r} twice; re-materialize it")
        out[pid] = row
    return out


def synthesis_arms(wh: Any, source: str, rho: float = SFT_RHO, *, partition_suffix: str = ""
                   ) -> tuple[dict[str, Mapping[str, Any]], dict[str, Mapping[str, Any]]]:
    """(MOSAIC rows, baseline rows) by problem: the newest MOSAIC run at ``rho`` and the newest
    baseline run of ``source`` (in the partitions the assets write, plus ``partition_suffix``).
    Raises ClaimError when an arm is missing, or when the two runs did not synthesize the same
    problems with the same T_max and seed."""
    mosaic_rows = newest_run_rows(wh.read(
        TABLE_MOSAIC, partition=mosaic_partition(source, rho) + partition_suffix).to_pylist())
    baseline_rows = newest_run_rows(wh.read(TABLE_BASELINE, partition=source + partition_suffix)
                                    .to_pylist())
    if not mosaic_rows:
        raise ClaimError(f"no MOSAIC trajectories of {source!r} at rho={rho:g}: materialize "
                         f"mosaic_trajectories (partition {source}, rho {rho:g}) first")
    if not baseline_rows:
        raise ClaimError(f"no baseline trajectories of {source!r}: materialize "
                         f"mosaic_baseline_trajectories (partition {source}) first")
    mosaic, baseline = _by_problem(mosaic_rows, "MOSAIC"), _by_problem(baseline_rows, "baseline")
    if set(mosaic) != set(baseline):
        only_m, only_b = sorted(set(mosaic) - set(baseline)), sorted(set(baseline) - set(mosaic))
        raise ClaimError(f"the MOSAIC and baseline runs of {source!r} synthesized different "
                         f"problems ({len(only_m)} only in MOSAIC, e.g. {only_m[:3]}; "
                         f"{len(only_b)} only in the baseline, e.g. {only_b[:3]}): run both with "
                         "the same split and limit (the claim's job does)")
    for key in SHARED_SYNTHESIS_SETTINGS:
        values = {r.get(key) for r in [*mosaic_rows, *baseline_rows]}
        if len(values) > 1:
            raise ClaimError(f"the MOSAIC and baseline runs of {source!r} used different {key} "
                             f"({sorted(values, key=str)}): run both with the same settings")
    return mosaic, baseline


def _scores(rows: Mapping[str, Mapping[str, Any]], column: str) -> dict[str, float]:
    if column == "correct":
        return {p: 1.0 if r.get("correct") else 0.0 for p, r in rows.items()}
    return {p: float(r.get(column) or 0) for p, r in rows.items()}


def synthesis_parts(source: str, rho: float = SFT_RHO) -> tuple[Claim, Claim]:
    """Table 2's two parts for ``source`` (section ``Table 2 (<source>)``): trajectory accuracy
    (a 0/1 score per problem, bounded by 0 and 1) and turns per trajectory."""
    common = {"paper": PAPER, "section": f"Table 2 ({source})", "reference": "baseline",
              "treatment": f"MOSAIC rho={rho:g}"}
    accuracy = Claim(**common, metric="synthetic trajectory accuracy", bounds=(0.0, 1.0),
                     statement="MOSAIC's synthesized trajectories end with the correct answer "
                               "more often than the baseline synthesizer's",
                     paper_value=paper_value("mosaic_synthesis_claim", "accuracy"))
    turns = Claim(**common, metric="turns per trajectory",
                  statement="MOSAIC's synthesized trajectories take more tool-use turns than the "
                            "baseline's",
                  paper_value=paper_value("mosaic_synthesis_claim", "turns"))
    return accuracy, turns


def synthesis_claims(wh: Any, source: str, rho: float = SFT_RHO, *, partition_suffix: str = "",
                     n_boot: int = 10_000) -> list[dict[str, Any]]:
    """Table 2's two parts for ``source`` (:func:`synthesis_parts`) judged on the arms of
    :func:`synthesis_arms`, paired by problem."""
    mosaic, baseline = synthesis_arms(wh, source, rho, partition_suffix=partition_suffix)
    accuracy, turns = synthesis_parts(source, rho)
    return [judge(accuracy, _scores(baseline, "correct"), _scores(mosaic, "correct"),
                  n_boot=n_boot),
            judge(turns, _scores(baseline, "num_turns"), _scores(mosaic, "num_turns"),
                  n_boot=n_boot)]


def recovery_counts(samples: Sequence[Mapping[str, Any]]) -> tuple[dict[str, tuple[int, int]], int]:
    """Per problem, ``(recovering samples, erroring samples)``: the samples with at least one
    interpreter error (``tool_errors >= 1``) whose final answer is correct (a sample with no
    verdict counts as not correct), and all samples with such an error; every problem of
    ``samples`` is listed, ``(0, 0)`` when none of its samples erred. Returns (counts, the
    number of erroring samples). Raises ClaimError when a sample has no ``tool_errors`` (not a
    tool-mode evaluation)."""
    counts: dict[str, list[int]] = {}
    erring = 0
    for sample in samples:
        errors = sample.get("tool_errors")
        if errors is None:
            raise ClaimError(f"sample of problem {sample.get('problem_id')!r} has no tool_errors: "
                             "the recovery rate needs a tool-mode evaluation (mode: tool)")
        cell = counts.setdefault(str(sample["problem_id"]), [0, 0])
        if int(errors) >= 1:
            erring += 1
            cell[1] += 1
            cell[0] += 1 if sample.get("correct") else 0
    return {p: (c[0], c[1]) for p, c in counts.items()}, erring


def _recovery_facts(ref: Mapping[str, tuple[int, int]], treat: Mapping[str, tuple[int, int]],
                    shared: Sequence[str], ref_errors: int, treat_errors: int) -> dict[str, Any]:
    return {"problems": len(shared),
            "problems_in_one_arm_only": len(set(ref) ^ set(treat)),
            "erroring_samples_reference": ref_errors,
            "erroring_samples_treatment": treat_errors,
            "recovered_samples_reference": sum(ref[p][0] for p in shared),
            "recovered_samples_treatment": sum(treat[p][0] for p in shared),
            "problems_with_errors_reference": sum(1 for p in shared if ref[p][1]),
            "problems_with_errors_treatment": sum(1 for p in shared if treat[p][1]),
            "problems_with_errors_in_both": sum(1 for p in shared if ref[p][1] and treat[p][1])}


def recovery_claim(rho: float = SFT_RHO) -> Claim:
    """The recovery claim of SFT at ``rho`` against SFT at ρ = 0 (DeepTool §3.6; the paper
    states it qualitatively and reports no ρ ablation)."""
    return Claim(paper=PAPER, section="§3.6 robustness (rho ablation)",
                 metric="recovery after an interpreter error (recovering / erroring samples)",
                 reference="SFT rho=0", treatment=f"SFT rho={rho:g}", bounds=(0.0, 1.0),
                 statement="SFT on trajectories with injected failures recovers from "
                           "interpreter errors more often than SFT on failure-free trajectories",
                 paper_value=paper_value("mosaic_recovery_claim", "recovery"))


def recovery_claim_row(reference_samples: Sequence[Mapping[str, Any]],
                       treatment_samples: Sequence[Mapping[str, Any]], *, rho: float = SFT_RHO,
                       n_boot: int = 10_000) -> tuple[dict[str, Any], dict[str, Any]]:
    """The recovery claim judged on two arms' tool-mode samples of the same held-out problems:
    (claims row, counts behind it). Each arm's rate is recovering / erroring samples over all
    problems evaluated in both arms; raises ClaimError when an arm has no erroring sample (no
    rate; no value is made up)."""
    ref, ref_errors = recovery_counts(reference_samples)
    treat, treat_errors = recovery_counts(treatment_samples)
    shared = sorted(set(ref) & set(treat))
    facts = _recovery_facts(ref, treat, shared, ref_errors, treat_errors)
    for arm, counts in (("reference (rho=0)", ref), (f"treatment (rho={rho:g})", treat)):
        if not any(counts[p][1] for p in shared):
            raise ClaimError(
                f"the {arm} arm hit no interpreter error on any of the {len(shared)} held-out "
                "problems both arms answered, so it has no recovery rate (nothing to recover "
                f"from); counts: {facts}. Evaluate more problems or more samples per problem "
                "(eval_limit, sampling.k)")
    row = judge_ratio(recovery_claim(rho), {p: ref[p] for p in shared}, {p: treat[p] for p in shared},
                      n_boot=n_boot)
    return row, facts
