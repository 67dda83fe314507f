"""The DeepTool paper's MOSAIC claims judged from warehouse rows: Table 2's synthesis claim
(§3.6: MOSAIC's synthetic trajectories are correct more often and take more turns than the
baseline synthesizer's) and the recovery claim (§1, §3.6: training on trajectories with
injected failures teaches recovery after an interpreter error).

- :func:`synthesis_parts` / :func:`synthesis_claims`: the newest MOSAIC run at ρ against the
  newest baseline run of one source, paired by problem: per problem ``correct`` (0/1) and
  ``num_turns`` (steps of the attempt, a failed attempt counting its valid prefix), both
  ``better`` parts.
- :func:`recovery_outcome` / :func:`recovery_scores` / :func:`recovery_claim_row`: both arms
  are evaluated in tool mode with an interpreter error injected into the first code cell of
  every sample (``eval.modes.tool``, ``inject_first_cell``: one of MOSAIC's environment
  failures, drawn from the sample's seed and problem, so both arms meet the same error on the
  same sample). A sample *recovers* when it met the error and its final answer is still
  correct (MOSAIC's own ``recovered``: correct despite a perturbation; §3.6: "rectifying
  errors ... rather than terminating upon failure"); per problem the share of its samples
  that recovered, a sample without a cell counting 0, paired by problem (``judge``).

Failures are :class:`eval.claims.ClaimError` with what to run. Not guaranteed: anything about
the runs beyond the rows read (how they were synthesized, trained or evaluated is the caller's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eval.claims import Claim, ClaimError, judge
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


def recovery_outcome(sample: Mapping[str, Any]) -> tuple[bool, bool, bool]:
    """One injected tool-mode sample as ``(met the error, recovered, ran a later cell)``:
    it *met* the injected error when it wrote a code cell (the first cell is the one injected,
    ``injected_failure`` names it); it *recovered* when it met the error and its final answer
    is still correct (a sample with no verdict is not correct); it *ran a later cell* when,
    after the injected cell, at least one cell ran without an interpreter error (``cells`` run
    less ``tool_errors``, the injected one among them, is at least 1). A sample that wrote no
    cell is ``(False, False, False)``. Raises ClaimError for a sample that is not from a
    tool-mode evaluation with ``inject_first_cell`` (no ``cells``, or a cell without an
    injected failure)."""
    where = f"sample {sample.get('sample_index')} of problem {sample.get('problem_id')!r}"
    if sample.get("cells") is None or sample.get("tool_errors") is None:
        raise ClaimError(f"{where} has no cells/tool_errors: the recovery claim needs a "
                         "tool-mode evaluation (mode: tool, inject_first_cell: true)")
    cells, errors = int(sample["cells"]), int(sample["tool_errors"])
    if cells == 0:
        return False, False, False
    if not sample.get("injected_failure"):
        raise ClaimError(f"{where} ran {cells} cell(s) without an injected failure: evaluate "
                         "with inject_first_cell: true, so both arms meet the same errors")
    return True, bool(sample.get("correct")), cells - errors >= 1


def recovery_scores(samples: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Per problem, the share of its samples that recovered (:func:`recovery_outcome`), over
    ALL its samples: a sample that wrote no cell never met the error and scores 0, so the
    denominator is the evaluation's k samples of every held-out problem, the same for both
    arms whatever they learned (how many samples met the error is reported apart)."""
    hits: dict[str, list[int]] = {}
    for sample in samples:
        _, recovered, _ = recovery_outcome(sample)
        cell = hits.setdefault(str(sample["problem_id"]), [0, 0])
        cell[0] += int(recovered)
        cell[1] += 1
    return {p: h / n for p, (h, n) in hits.items()}


def check_same_injection(reference: Sequence[Mapping[str, Any]],
                         treatment: Sequence[Mapping[str, Any]]) -> int:
    """ClaimError unless the arms were evaluated on the same held-out problems and samples
    and every sample that met an injected failure in both arms met the same kind; returns
    the number of such samples."""
    def keyed(rows, arm):
        out: dict[tuple[str, int], Mapping[str, Any]] = {}
        for row in rows:
            key = (str(row["problem_id"]), int(row.get("sample_index") or 0))
            if key in out:
                raise ClaimError(f"the {arm} arm holds sample {key[1]} of problem {key[0]!r} "
                                 "twice; evaluate each arm once")
            out[key] = row
        return out

    ref, treat = keyed(reference, "reference"), keyed(treatment, "treatment")
    if set(ref) != set(treat):
        only_r, only_t = sorted(set(ref) - set(treat)), sorted(set(treat) - set(ref))
        raise ClaimError(f"the arms were evaluated on different samples ({len(only_r)} only in "
                         f"the reference, e.g. {only_r[:3]}; {len(only_t)} only in the "
                         f"treatment, e.g. {only_t[:3]}): evaluate both on the same problems "
                         "with the same k and seed")
    both = 0
    for key, row in ref.items():
        a, b = row.get("injected_failure"), treat[key].get("injected_failure")
        if a and b:
            if a != b:
                raise ClaimError(f"sample {key[1]} of problem {key[0]!r} met {a!r} in the "
                                 f"reference and {b!r} in the treatment: the arms must be "
                                 "evaluated with the same seed")
            both += 1
    return both


def _recovery_facts(arm: str, samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    outcomes = [recovery_outcome(s) for s in samples]
    kinds: dict[str, int] = {}
    for sample in samples:
        if sample.get("injected_failure"):
            kinds[str(sample["injected_failure"])] = kinds.get(str(sample["injected_failure"]),
                                                                0) + 1
    return {f"samples_{arm}": len(outcomes),
            f"met_error_{arm}": sum(o[0] for o in outcomes),
            f"wrote_no_cell_{arm}": sum(not o[0] for o in outcomes),
            f"recovered_{arm}": sum(o[1] for o in outcomes),
            f"ran_a_later_cell_{arm}": sum(o[2] for o in outcomes),
            f"correct_{arm}": sum(bool(s.get("correct")) for s in samples),
            f"injected_kinds_{arm}": dict(sorted(kinds.items()))}


def recovery_claim(rho: float = SFT_RHO) -> Claim:
    """The recovery claim of SFT at ``rho`` against SFT at ρ = 0 (DeepTool §3.6; the paper
    states it qualitatively and reports no ρ ablation)."""
    return Claim(paper=PAPER, section="§3.6 robustness (rho ablation)",
                 metric="correct answer after an injected interpreter error in the first cell "
                        "(share of samples)",
                 reference="SFT rho=0", treatment=f"SFT rho={rho:g}", bounds=(0.0, 1.0),
                 statement="SFT on trajectories with injected failures recovers from "
                           "interpreter errors more often than SFT on failure-free trajectories",
                 paper_value=paper_value("mosaic_recovery_claim", "recovery"))


def recovery_claim_row(reference_samples: Sequence[Mapping[str, Any]],
                       treatment_samples: Sequence[Mapping[str, Any]], *, rho: float = SFT_RHO,
                       n_boot: int = 10_000) -> tuple[dict[str, Any], dict[str, Any]]:
    """The recovery claim judged on two arms' injected tool-mode samples of the same held-out
    problems (:func:`check_same_injection`): per problem, the share of its samples that
    recovered (:func:`recovery_scores`), paired by problem (``eval.claims.judge``); returns
    (claims row, counts behind it)."""
    both = check_same_injection(reference_samples, treatment_samples)
    ref, treat = recovery_scores(reference_samples), recovery_scores(treatment_samples)
    facts = {"problems": len(ref), "met_the_same_error_in_both": both,
             **_recovery_facts("reference", reference_samples),
             **_recovery_facts("treatment", treatment_samples)}
    return judge(recovery_claim(rho), ref, treat, n_boot=n_boot), facts
