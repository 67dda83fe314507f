"""DUET's budget claim (DUET §4.2, Table 1 and Figure 3) judged from the newest ``duet_sweep``:
at budget ``b`` DUET matches or exceeds full-budget GRPO's held-out accuracy (``no_worse`` with
margin :data:`DUET_ACCURACY_MARGIN`, fixed before any run: the largest drop a reader of Table 1
would still call "matches"), and takes less wall clock per step (steps paired: same prompts,
seed and step count). The generated tokens per step are compared too; below full budget that
part is a setup check, not a claim: DUET §4.1 states that halving the rollouts per prompt
halves the per-step token cost, so fewer tokens at half budget hold by construction. At full
budget (the same rollout count) fewer tokens is a claim (App. A.7: the marker-gated abort).
The paper reports budgets 1, 0.5 and 0.25 (Table 1, Table 6, Figure 3); others are refused.

Plain functions over the warehouse (``duet_sweep`` arms, ``train_metrics`` per step,
``eval_samples`` per problem); the ``duet_budget_claim`` asset wires them.

What the abort did is shown beside the verdict (:func:`arm_steps`, :func:`arm_summary`): per
step of each compared arm, the marker rate (the share of rollouts whose text reached the
answer marker by the abort gate, ``p_marker`` of Theorem 3), the abort rate (the share aborted
at ``K2 + G`` and masked out), DUET's two length thresholds K1 (the polling threshold: the
earliest token the marker check turns on, p30 of natural stopping lengths) and K2 (the abort
threshold, p80; DUET §3.2), the mean rollouts per prompt ``n_q`` (the allocator's counts, Eq.
4), the share cut by the length cap, and the tokens generated against the step's budget
(``budget_used`` = generated / B); and their means per arm. Plain GRPO has no gate: its
DUET-only figures are None; its tokens are every completion token.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from eval.claims import CHECK, CLAIM, Claim, ClaimError, judge
from eval.claims.paper_reports import paper_value
from eval.claims.readers import problem_scores, rows_of
from training.arms import finite_mean, metrics_logs
from training.duet.sweep import duet_diagnostics

DUET_ACCURACY_MARGIN = 0.10
EXPERIMENT = "duet_budget_claim"
PAPER_BUDGETS = (1.0, 0.5, 0.25)  # the budgets the paper reports (Table 1, Table 6, Figure 3)


def claim_parts(budget: float = 0.5) -> dict[str, Claim]:
    """The claim's parts at ``budget`` (``accuracy``, ``tokens``, ``wall``) with the paper's
    figures for that budget; ``tokens`` is a setup check below full budget (module docstring).
    ClaimError for a budget the paper does not report."""
    matches = [b for b in PAPER_BUDGETS if abs(b - budget) < 1e-9]
    if not matches:
        raise ClaimError(f"DUET budget {budget!r}: the paper reports budgets "
                         f"{', '.join(f'{b:g}' for b in PAPER_BUDGETS)} of GRPO's rollouts "
                         "(Table 1, Table 6, Figure 3); compare at one of them")
    tag = f"b={matches[0]:g}"
    common = {"paper": "DUET", "reference": "GRPO full budget", "treatment": f"DUET {tag}"}
    fewer_rollouts = matches[0] < 1.0
    tokens_statement = (
        f"DUET at {tag} generates fewer tokens per step (setup check: it draws {matches[0]:g} "
        "of GRPO's rollouts per step, and by DUET §4.1 halving the rollouts halves the token "
        "cost)" if fewer_rollouts
        else "DUET generates fewer tokens per step at the same rollout count")
    section = {1.0: "Table 1 (full budget)", 0.5: "Table 1 (half budget)",
               0.25: "Table 6 (quarter budget)"}[matches[0]]
    return {
        "accuracy": Claim(**common, section=section, metric="held-out accuracy",
                          kind="no_worse", margin=DUET_ACCURACY_MARGIN, bounds=(0.0, 1.0),
                          statement=f"DUET at {tag} matches or exceeds full-budget GRPO's "
                                    "accuracy",
                          paper_value=paper_value(EXPERIMENT, f"accuracy {tag}")),
        "tokens": Claim(**common, section="Figure 3 (speed)",
                        metric="generated tokens per step", higher_is_better=False,
                        role=CHECK if fewer_rollouts else CLAIM, statement=tokens_statement,
                        paper_value=paper_value(EXPERIMENT, f"tokens {tag}")),
        "wall": Claim(**common, section="Figure 3 (speed)", metric="seconds per step",
                      higher_is_better=False,
                      statement="DUET takes less wall clock per step",
                      paper_value=paper_value(EXPERIMENT, f"wall {tag}")),
    }


def step_series(wh: Any, checkpoint_id: str, duet: bool) -> dict[str, dict[int, float]]:
    """Per-step generated tokens and wall clock of one arm (DUET logs the tokens it really
    generated as ``duet/tokens_generated``; plain GRPO's column counts every completion)."""
    rows = wh.sql("SELECT step, tokens_generated, seconds_per_step, logs_json FROM train_metrics "
                  "WHERE checkpoint_id = $ck AND step IS NOT NULL ORDER BY step",
                  {"ck": checkpoint_id}).to_pylist()
    tokens: dict[int, float] = {}
    wall: dict[int, float] = {}
    for r in rows:
        logs = json.loads(r["logs_json"] or "{}")
        value = logs.get("duet/tokens_generated") if duet else None
        value = r["tokens_generated"] if value is None else value
        if value is not None:
            tokens[int(r["step"])] = float(value)
        if r["seconds_per_step"] is not None:
            wall[int(r["step"])] = float(r["seconds_per_step"])
    if not tokens or not wall:
        raise ClaimError(f"checkpoint {checkpoint_id}: no per-step tokens or wall clock in "
                         "train_metrics")
    return {"tokens": tokens, "wall": wall}


def sweep_arms(wh: Any, sweep: str | None = None) -> list[dict[str, Any]]:
    """The ``duet_sweep`` rows of sweep ``sweep`` (its partition; None: the newest sweep).
    ClaimError naming the stored sweeps when there is no such sweep."""
    return rows_of(wh, "duet_sweep", "sweep", sweep, asset="duet_sweep",
                   missing=f"no duet_sweep rows of sweep {sweep!r}")


def compared_arms(wh: Any, budget: float = 0.5,
                  sweep: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(full-budget GRPO arm, DUET arm at ``budget``) rows of sweep ``sweep`` (None: the
    newest ``duet_sweep``)."""
    arms = sweep_arms(wh, sweep)
    grpo = [a for a in arms if a["method"] == "grpo"]
    duet = [a for a in arms if a["method"] == "duet" and abs(a["budget_fraction"] - budget) < 1e-9]
    if not grpo or not duet:
        raise ClaimError(f"the newest duet_sweep has no GRPO arm or no DUET arm at budget "
                         f"{budget:g} (arms: {[a['arm'] for a in arms]}); run the sweep with "
                         f"budgets including {budget:g}")
    return grpo[0], duet[0]


def duet_claims(wh: Any, budget: float = 0.5,
                accuracy: Callable[[Mapping[str, Any]], Mapping[str, float]] | None = None,
                sweep: str | None = None) -> list[dict[str, Any]]:
    """The DUET claim's three parts (:func:`claim_parts`) from sweep ``sweep`` (None: the newest
    ``duet_sweep`` in ``wh``). ``accuracy(arm row) -> {problem: score}`` scores an arm's
    checkpoint (default: its evaluation on the sweep's benchmark in ``eval_samples``)."""
    parts = claim_parts(budget)
    grpo, duet = compared_arms(wh, budget, sweep)
    bench = grpo["benchmark"]
    if accuracy is None:
        def accuracy(arm: Mapping[str, Any]) -> dict[str, float]:
            return problem_scores(wh, arm["checkpoint_id"], bench)
    g_steps = step_series(wh, grpo["checkpoint_id"], duet=False)
    d_steps = step_series(wh, duet["checkpoint_id"], duet=True)
    return [
        judge(parts["accuracy"], accuracy(grpo), accuracy(duet)),
        judge(parts["tokens"], g_steps["tokens"], d_steps["tokens"]),
        judge(parts["wall"], g_steps["wall"], d_steps["wall"]),
    ]


# per-step figures shown and averaged per arm (training.duet.sweep.DIAGNOSTIC_KEYS names)
STEP_FIGURES = ("marker_rate", "abort_rate", "k1", "k2", "abort_at", "n_q_mean", "cap_cut_rate",
                "tokens_generated", "token_budget", "budget_used")


def arm_steps(wh: Any, arm: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per logged step of one ``duet_sweep`` arm (ascending): ``step`` and
    :data:`STEP_FIGURES` from its ``train_metrics`` rows. A DUET arm's come from its ``duet/*``
    logs (None where a step did not log one); a GRPO arm has only ``tokens_generated`` (every
    completion token) and ``cap_cut_rate`` (TRL's ``completions/clipped_ratio``), the rest
    None."""
    rows = wh.sql("SELECT step, tokens_generated, logs_json FROM train_metrics "
                  "WHERE checkpoint_id = $ck AND step IS NOT NULL ORDER BY step",
                  {"ck": arm["checkpoint_id"]}).to_pylist()
    if arm["method"] == "duet":
        return [{"step": d["step"], **{k: d.get(k) for k in STEP_FIGURES}}
                for d in duet_diagnostics(rows)]
    out = []
    for r in rows:
        clipped = metrics_logs(r).get("completions/clipped_ratio")
        item: dict[str, Any] = {"step": int(r["step"]), **dict.fromkeys(STEP_FIGURES)}
        item["tokens_generated"] = (None if r["tokens_generated"] is None
                                    else float(r["tokens_generated"]))
        item["cap_cut_rate"] = float(clipped) if isinstance(clipped, (int, float)) else None
        out.append(item)
    return out


def arm_summary(arm: Mapping[str, Any], steps: list[dict[str, Any]]) -> dict[str, Any]:
    """One arm's means over its steps of :data:`STEP_FIGURES` (None where no step has one),
    with ``arm``, ``method``, ``budget_fraction``, ``checkpoint_id`` and ``steps``. The spend
    against the budget is also given as a sum: ``spend_over_budget`` = all tokens generated
    / the sum of the steps' budgets."""
    out: dict[str, Any] = {"arm": arm["arm"], "method": arm["method"],
                           "budget_fraction": arm.get("budget_fraction"),
                           "checkpoint_id": arm["checkpoint_id"], "steps": len(steps)}
    for name in STEP_FIGURES:
        out[name] = finite_mean([s.get(name) for s in steps])
    budgets = [(s["tokens_generated"], s["token_budget"]) for s in steps
               if s.get("tokens_generated") is not None and s.get("token_budget")]
    out["spend_over_budget"] = (sum(t for t, _ in budgets) / sum(b for _, b in budgets)
                                if budgets else None)
    return out


def abort_diagnostics(wh: Any, budget: float = 0.5, sweep: str | None = None) -> dict[str, Any]:
    """What the claim's page shows of the compared arms' rollouts: ``summaries`` (one
    :func:`arm_summary` per arm, GRPO first) and ``steps`` (arm label -> :func:`arm_steps`),
    from sweep ``sweep`` (None: the newest ``duet_sweep``)."""
    arms = compared_arms(wh, budget, sweep)
    steps = {a["arm"]: arm_steps(wh, a) for a in arms}
    return {"summaries": [arm_summary(a, steps[a["arm"]]) for a in arms], "steps": steps}
