"""Tandem RL's evaluation protocol and headline claim (Tandem RL §4.2-4.5, §5.3) as plain
functions; the ``tandem_*`` assets and ``tandem_claim`` wire them.

- :func:`recipe_method`: whether a resolved GRPO config trains Tandem RL or the KL-to-junior
  ablation (§5.2).
- :func:`tandem_evaluations`: the evaluations of one senior and its junior: each alone (§4.2)
  and the two as a handoff team from each start (§4.3).
- :func:`legibility_partition`, :func:`pairwise_partition`: where one senior's §4.4-4.5 rows
  and one A-vs-B test are stored.
- :func:`arm_differences`: the config keys in which the claim's two arms differ (they may
  differ only in the method and the names of their outputs).
- :func:`tandem_claims`: the claim's four parts from the warehouse, each paired by held-out
  problem: solo accuracy (``no_worse``, margin :data:`TANDEM_SOLO_MARGIN`), handoff pass@k (the
  mean of both starts), drift (the survival-curve area made per problem by the jackknife,
  ``eval.tandem_metrics.drift_by_problem``) and junior legibility (per-problem junior
  cross-entropy). The design is written out in the ``tandem_claim`` asset's module.
- :func:`collapse_check`, :func:`invalid_arm_text`: the validity rule of the drift and
  cross-entropy parts (an arm that lost most of its start's solo accuracy has collapsed, and
  its drift and legibility say nothing about the paper's constructs).
- :data:`HELDOUT_CHAIN_SEED`: the draw of the CPU task's held-out chains
  (``training.heldout.heldout_chain``, benchmark ``chain_heldout``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from eval.claims import Claim, ClaimError, judge, mark_invalid_arm
from eval.claims.paper_reports import paper_value
from eval.claims.readers import newest_samples, problem_scores
from eval.handoff_team import handoff_label
from eval.modes import build_mode
from eval.recorded import Evaluation
from eval.runner import EvalConfig
from warehouse.partitions import partition_key

STARTS = ("senior", "junior")

# Fixed before any run. Tandem RL §4.2 reads GRPO and TRL solo pass@k as tracking each other
# "within typical run-to-run variance"; weft's other claim on this task (DUET's accuracy part)
# calls a drop of less than 10 points of held-out accuracy "keeps", and the same margin is used
# here so that both read the same on one task and one held-out set.
TANDEM_SOLO_MARGIN = 0.10
# Fixed before any run: the validity rule of the drift (§4.4) and cross-entropy (§4.5) parts.
# An arm whose mean solo pass@1 on the held-out problems is below this fraction of its start's
# (the junior's, evaluated on the same problems in the same run) has collapsed: RL is meant to
# keep or raise the start's accuracy, and a senior that lost over half of it writes something
# else than the task's reasoning (in one CPU draw a collapsed Tandem senior answered 0.24
# against plain GRPO's 0.84 and wrote vector notation instead of arithmetic). Its token
# marginals and the junior's surprise at its outputs then measure that failure, not how far a
# working senior drifted, so either arm collapsing makes both parts inconclusive, with the
# arm named. Solo accuracy and handoff pass@k stay judged: a collapse is what they measure.
# The fraction is not tuned to any run: half is where most of what the start could do is gone.
# At the CPU scale (64 held-out chains, one sample each, a start right on about 0.3 of them)
# the threshold sits about 0.15 below the start, some 2.5 standard errors of an arm's mean, so
# sampling noise alone rarely crosses it; seed 2's collapse of the earlier design (0.24
# against GRPO's 0.84, start about 0.5) was far beyond it.
COLLAPSE_FRACTION = 0.5
# Parts the validity rule applies to (keys of :func:`claim_parts`).
COLLAPSE_PARTS = ("drift", "legibility")
ARMS = ("grpo", "tandem")  # reference, treatment
ARM_NAMES = {"grpo": "GRPO", "tandem": "Tandem RL"}
PAPER = "Tandem RL"
EXPERIMENT = "tandem_claim"


def recipe_method(config: Any) -> str:
    """``tandem`` or ``kl_junior`` for a resolved GRPO config; ValueError for other recipes."""
    if getattr(config, "method", None) == "tandem":
        return "tandem"
    if float(getattr(config, "beta", 0.0) or 0.0) > 0.0:
        return "kl_junior"
    raise ValueError("tandem_checkpoint trains Tandem RL (recipe tandem_grpo or .cpu) or the "
                     "KL-to-junior ablation (kl_junior_grpo or .cpu, beta > 0); this recipe is "
                     "plain GRPO: materialize grpo_checkpoint for it instead")


def tandem_evaluations(senior: Any, junior: Any, *, cfg: EvalConfig,
                       starts: list[str] | tuple[str, ...] = STARTS,
                       schedule: str = "alternate", handoff_p: float = 0.5, solo: bool = True,
                       solo_junior: bool = True, senior_key: str = "senior",
                       junior_key: str = "junior") -> list[Any]:
    """The ``eval.recorded.Evaluation`` items of Tandem RL §4.2-4.3 for one senior and its
    junior (``eval.models.ModelSpec`` each): with ``solo``, the senior alone and (with
    ``solo_junior``) the junior alone; then the two as a handoff team, once per
    entry of ``starts``. ``cfg`` is the ``eval.runner.EvalConfig`` every run shares (its mode
    is replaced: single for the solo runs, handoff for the teams); ``senior_key`` and
    ``junior_key`` are the served models' keys in ``evaluate_recorded``'s specs. Rows are
    labelled with the senior's model id, the junior's, and ``eval.handoff_team.handoff_label``
    for the team. ValueError for bad handoff settings."""
    bad = [s for s in starts if s not in STARTS]
    if bad or not starts:
        raise ValueError(f"starts must be a non-empty list of {STARTS}, got {list(starts)}")
    senior_ck = senior.checkpoint_id or None
    out = []
    if solo:
        out.append(Evaluation(senior.model_id, dataclasses.replace(cfg, mode=build_mode()),
                              senior_key, checkpoint_id=senior_ck))
        if solo_junior:
            out.append(Evaluation(junior.model_id, dataclasses.replace(cfg, mode=build_mode()),
                                  junior_key, checkpoint_id=junior.checkpoint_id or None))
    for who in starts:
        mode = build_mode(mode="handoff", handoff_partner=junior.model_id, handoff_starts=who,
                          handoff_schedule=schedule, handoff_p=handoff_p)
        label = handoff_label(senior.model_id, junior.model_id, who, schedule, handoff_p)
        out.append(Evaluation(label, dataclasses.replace(cfg, mode=mode), senior_key,
                              partner=junior_key, checkpoint_id=senior_ck))
    return out


def legibility_partition(benchmark: str, senior: str, junior: str) -> str:
    """The partition of one senior's legibility and drift rows against ``junior``
    (``tandem_legibility``, ``tandem_drift``, ``tandem_summary``): ``<benchmark>|<senior>|
    <junior>``, the evaluation's partition key followed by the junior."""
    return partition_key(benchmark, senior, junior)


def pairwise_partition(benchmark: str, model_a: str, model_b: str, junior: str) -> str:
    """The ``tandem_pairwise`` partition of model A against model B with ``junior``:
    ``<benchmark>|<a>|vs|<b>|<junior>``."""
    return partition_key(benchmark, model_a, "vs", model_b, junior)


# outputs that name the run, not how it trains
RUN_NAMES = ("tandem", "checkpoint_id", "output_dir", "logging_dir", "run_name")


def arm_differences(grpo: Any, tandem: Any) -> list[str]:
    """The fields of two resolved configs (the claim's GRPO and Tandem arms) whose values
    differ, other than the method itself and the names of the runs' outputs
    (:data:`RUN_NAMES`): the arms must train alike in everything else."""
    values = [{k: v for k, v in vars(cfg).items() if not k.startswith("_")}
              for cfg in (grpo, tandem)]
    differ = sorted(k for k in set(values[0]) | set(values[1])
                    if repr(values[0].get(k)) != repr(values[1].get(k)))
    return [k for k in differ if k not in RUN_NAMES]


HELDOUT_CHAIN_SEED = 3  # the draw of held-out chains (training sets use other seeds)


def collapse_check(solo: Mapping[str, Mapping[str, float]], start: Mapping[str, float], *,
                   fraction: float = COLLAPSE_FRACTION) -> dict[str, Any]:
    """The validity rule (:data:`COLLAPSE_FRACTION`) on per-problem solo pass@1 of each arm
    (``solo``: ``{arm: {problem: score}}``) and of the start (the junior), over the problems
    all of them were scored on: each mean, the threshold ``fraction`` x the start's mean, and
    the arms below it (``collapsed``, in :data:`ARMS` order)."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"collapse fraction must be in (0, 1), got {fraction!r}")
    shared = set(start)
    for scores in solo.values():
        shared &= set(scores)
    if not shared:
        raise ClaimError("the collapse rule needs solo scores of both arms and of the start "
                         "(the junior) on the same problems; evaluate the junior alone too")
    problems = sorted(shared)

    def mean(scores: Mapping[str, float]) -> float:
        return sum(float(scores[p]) for p in problems) / len(problems)

    start_mean = mean(start)
    arms = {arm: mean(solo[arm]) for arm in ARMS}
    threshold = fraction * start_mean
    return {"fraction": fraction, "problems": len(problems), "start": start_mean,
            "threshold": threshold, "arms": arms,
            "collapsed": [arm for arm in ARMS if arms[arm] < threshold]}


def invalid_arm_text(check: Mapping[str, Any]) -> str | None:
    """The ``invalid_arm`` value of a part the rule applies to: which arm collapsed, with its
    figures; None when no arm did."""
    if not check["collapsed"]:
        return None
    named = "; ".join(f"{ARM_NAMES[a]} collapsed (solo pass@1 {check['arms'][a]:.3f} < "
                      f"{check['fraction']:g} x the start's {check['start']:.3f})"
                      for a in check["collapsed"])
    return f"{named}, on {check['problems']} problems"


def claim_parts(handoff_k: int) -> dict[str, Claim]:
    """The claim's four parts (``solo``, ``handoff``, ``drift``, ``legibility``), each with the
    paper's figures (``eval.claims.paper_reports``); pass@k parts are bounded by 0 and 1."""
    common = {"paper": PAPER, "reference": ARM_NAMES["grpo"], "treatment": ARM_NAMES["tandem"]}
    return {
        "solo": Claim(**common, section="§4.2 (Figure 2)", metric="solo pass@1",
                      kind="no_worse", margin=TANDEM_SOLO_MARGIN, bounds=(0.0, 1.0),
                      statement="the Tandem-trained senior keeps plain GRPO's solo accuracy",
                      paper_value=paper_value(EXPERIMENT, "solo")),
        "handoff": Claim(**common, section="§4.3 (Figure 3)",
                         metric=f"handoff pass@{handoff_k} (mean of both starts)",
                         bounds=(0.0, 1.0),
                         statement="with the frozen junior, alternating at every reasoning "
                                   "step, the Tandem senior's team solves more",
                         paper_value=paper_value(EXPERIMENT, "handoff")),
        "drift": Claim(**common, section="§4.4 (Figure 4)",
                       metric="mean |log-ratio| to the junior on its frequent tokens "
                              "(survival-curve area, jackknife per problem)",
                       higher_is_better=False,
                       statement="the Tandem senior's token marginals drift less from the "
                                 "junior's",
                       paper_value=paper_value(EXPERIMENT, "drift")),
        "legibility": Claim(**common, section="§4.5 (Table 1)",
                            metric="junior cross-entropy (nats/token)", higher_is_better=False,
                            statement="the junior finds the Tandem senior's outputs more "
                                      "predictable",
                            paper_value=paper_value(EXPERIMENT, "legibility")),
    }


def _key(bench: str, problem_id: str) -> str:
    return f"{bench}/{problem_id}"


def solo_rows(wh: Any, model: str, bench: str) -> list[dict[str, Any]]:
    """The solo (mode ``single``) samples of the newest evaluation of ``model`` on ``bench``
    that generated an answer (the drift and legibility corpora)."""
    return [r for r in newest_samples(wh, model, bench)
            if r.get("mode") in (None, "single") and r.get("gen_error") is None]


def handoff_scores(wh: Any, senior: str, junior: str, bench: str, *, k: int,
                   schedule: str = "alternate", p: float = 0.5,
                   handoffs: dict[str, list[int]] | None = None
                   ) -> dict[str, dict[str, float]]:
    """Per-problem handoff pass@k of ``senior`` with ``junior`` on ``bench``, for each start
    (``{"senior": {...}, "junior": {...}}``; newest evaluation of each team). ``handoffs``,
    when given, receives per start the handoff count of every answered team sample."""
    from eval.tandem_metrics import per_problem

    out = {}
    for starts in ("senior", "junior"):
        rows = newest_samples(wh, handoff_label(senior, junior, starts, schedule, p), bench)
        if handoffs is not None:
            handoffs.setdefault(starts, []).extend(
                int(r["handoffs"]) for r in rows
                if r.get("gen_error") is None and r.get("handoffs") is not None)
        out[starts] = per_problem(rows, "pass@k", k)
        if not out[starts]:
            raise ClaimError(f"handoff pass@{k}: no problem of {bench} has {k} answered team "
                             f"samples of {senior} with {junior} ({starts} first); evaluate "
                             f"with k >= {k}")
    return out


def problem_counts(rows: Sequence[Mapping[str, Any]], tokenize: Callable[[str], list[int]],
                   vocab_size: int, bench: str) -> dict[str, Any]:
    """Token counts of each problem's outputs (``eval.tandem_metrics.token_counts``), keyed
    ``<bench>/<problem_id>``."""
    from eval.tandem_metrics import token_counts

    by_problem: dict[str, list[list[int]]] = {}
    for r in rows:
        by_problem.setdefault(_key(bench, r["problem_id"]), []).append(
            tokenize(r.get("output") or ""))
    return {p: token_counts(ids, vocab_size) for p, ids in by_problem.items()}


def tandem_claims(wh: Any, models: Mapping[str, str], junior: str, benchmarks: Sequence[str], *,
                  tokenize: Callable[[str], list[int]], vocab_size: int, handoff_k: int = 1,
                  schedule: str = "alternate", handoff_p: float = 0.5, min_count: int = 20,
                  smoothing: float = 0.5, n_boot: int = 10_000
                  ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The claim's four rows from the newest evaluations of the two seniors (``models``:
    ``{"grpo": model id, "tandem": model id}``) and ``junior`` on ``benchmarks`` (problems
    pooled over benchmarks, keyed ``<bench>/<problem_id>``), and the figures beside them
    (each start's handoff means, each arm's θ and the frequent tokens). Legibility rows are
    read from ``tandem_legibility`` (partition ``<bench>|<senior>|<junior>``)."""
    from eval.tandem_metrics import drift_by_problem, per_problem

    claims = claim_parts(handoff_k)
    solo: dict[str, dict[str, float]] = {a: {} for a in ARMS}
    team: dict[str, dict[str, float]] = {a: {} for a in ARMS}
    legible: dict[str, dict[str, float]] = {a: {} for a in ARMS}
    counts: dict[str, dict[str, Any]] = {a: {} for a in (*ARMS, "junior")}
    start_solo: dict[str, float] = {}
    handoffs: dict[str, dict[str, list[int]]] = {a: {} for a in ARMS}
    details: dict[str, Any] = {"handoff_by_start": {}}
    for bench in benchmarks:
        start_solo.update({_key(bench, p): v for p, v in
                           problem_scores(wh, junior, bench, mode="single").items()})
        for arm in ARMS:
            model = models[arm]
            solo[arm].update({_key(bench, p): v for p, v in
                              problem_scores(wh, model, bench, mode="single").items()})
            starts = handoff_scores(wh, model, junior, bench, k=handoff_k, schedule=schedule,
                                    p=handoff_p, handoffs=handoffs[arm])
            both = set(starts["senior"]) & set(starts["junior"])
            team[arm].update({_key(bench, p): (starts["senior"][p] + starts["junior"][p]) / 2
                              for p in both})
            details["handoff_by_start"][f"{bench}/{arm}"] = {
                s: sum(v.values()) / len(v) for s, v in starts.items()}
            leg = wh.read("tandem_legibility",
                          partition=legibility_partition(bench, model, junior)).to_pylist()
            if not leg:
                raise ClaimError(f"no tandem_legibility rows of {model} with junior {junior} on "
                                 f"{bench}: compute legibility for this arm first")
            legible[arm].update({_key(bench, p): v for p, v in
                                 per_problem(leg, "junior_ce_nats").items()})
            counts[arm].update(problem_counts(solo_rows(wh, model, bench), tokenize,
                                              vocab_size, bench))
        counts["junior"].update(problem_counts(solo_rows(wh, junior, bench), tokenize,
                                               vocab_size, bench))
    shared = sorted(set(counts["junior"]) & set(counts["grpo"]) & set(counts["tandem"]))
    drift, theta = {}, {}
    for arm in ARMS:
        drift[arm], theta[arm], frequent = drift_by_problem(
            counts[arm], counts["junior"], problems=shared, min_count=min_count,
            smoothing=smoothing)
    collapse = collapse_check(solo, start_solo)
    details.update({"drift_theta": theta, "drift_frequent_tokens": frequent,
                    "drift_problems": len(shared), "collapse": collapse,
                    "handoffs_per_answer": handoffs_per_answer(handoffs)})
    invalid = invalid_arm_text(collapse)
    scores = {"solo": solo, "handoff": team, "drift": drift, "legibility": legible}
    rows = [mark_invalid_arm(judge(claims[part], scores[part]["grpo"], scores[part]["tandem"],
                               n_boot=n_boot), invalid if part in COLLAPSE_PARTS else None)
            for part in ("solo", "handoff", "drift", "legibility")]
    return rows, details


def handoffs_per_answer(handoffs: Mapping[str, Mapping[str, Sequence[int]]]
                        ) -> dict[str, Any]:
    """Mean handoffs per answered team sample: per ``<arm>/<start>`` and over all of them
    (``all``), with the share of team answers that have at least one (``share_with_one``);
    None where there are no samples."""
    def mean(values: Sequence[int]) -> float | None:
        return sum(values) / len(values) if values else None

    out: dict[str, Any] = {f"{arm}/{start}": mean(list(v))
                           for arm, by_start in handoffs.items() for start, v in by_start.items()}
    pooled = [h for by_start in handoffs.values() for v in by_start.values() for h in v]
    out["all"] = mean(pooled)
    out["share_with_one"] = mean([int(h >= 1) for h in pooled])
    out["answers"] = len(pooled)
    return out


def evaluation_summary(done: Sequence[Any], k: int) -> list[dict[str, Any]]:
    """One row per recorded evaluation (``eval.recorded.Recorded``) of ``tandem_eval``: its
    label, mode, samples, failed generations, pass@1, pass@k and the senior's share of the
    team's tokens (handoff runs)."""
    out = []
    for recorded in done:
        result = recorded.result
        metrics = {(s["metric"], s["k"]): s["value"] for s in result.scores}
        shares = [float(r["senior_share"]) for r in result.samples
                  if r.get("senior_share") is not None]
        out.append({"model": recorded.evaluation.label, "mode": recorded.evaluation.cfg.mode.mode,
                    "samples": len(result.samples), "failed": result.errors,
                    "pass@1": metrics.get(("pass@k", 1)), f"pass@{k}": metrics.get(("pass@k", k)),
                    "senior_share": sum(shares) / len(shares) if shares else None})
    return out


def pairwise_tests(wh: Any, model_a: str, model_b: str, junior: str, bench: str, *,
                   ks: Sequence[int], schedule: str = "alternate", handoff_p: float = 0.5,
                   n_boot: int = 5000) -> tuple[list[dict[str, Any]], list[str]]:
    """Tandem RL §5.3's paired one-sided tests of model A against model B with ``junior`` on
    ``bench``: per-problem handoff pass@k from both starts at each k, then junior cross-entropy
    and overlap (``eval.tandem_metrics.paired_tandem_tests``). Returns (one row per test, a
    line per test that could not run and why)."""
    from eval.tandem_metrics import paired_tandem_tests, per_problem
    from warehouse.partitions import eval_partition

    out: list[dict[str, Any]] = []
    skipped: list[str] = []

    def add(statistic: str, rows_a, rows_b, stat: str, k: int | None, starts: str | None):
        sa, sb = per_problem(rows_a, stat, k), per_problem(rows_b, stat, k)
        try:
            res = paired_tandem_tests(sa, sb, statistic=statistic, n_boot=n_boot)
        except ValueError as exc:
            skipped.append(f"{statistic} k={k} starts={starts}: {exc}")
            return
        out.append({"benchmark": bench, "model_a": model_a, "model_b": model_b,
                    "junior": junior, "k": k, "starts": starts, **res})

    for starts in STARTS:
        team = {m: wh.read("eval_samples", partition=eval_partition(bench, handoff_label(
            m, junior, starts, schedule, handoff_p))).to_pylist() for m in (model_a, model_b)}
        for k in ks:
            add("handoff_pass@k", team[model_a], team[model_b], "pass@k", k, starts)
    leg = {m: wh.read("tandem_legibility",
                      partition=legibility_partition(bench, m, junior)).to_pylist()
           for m in (model_a, model_b)}
    for stat in ("junior_ce_nats", "overlap"):
        add(stat, leg[model_a], leg[model_b], stat, None, None)
    return out, skipped
