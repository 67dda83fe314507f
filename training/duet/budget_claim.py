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
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from eval.claims import CHECK, CLAIM, Claim, ClaimError, judge
from eval.claims.paper_reports import paper_value
from eval.claims.readers import newest_rows, problem_scores

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


def compared_arms(wh: Any, budget: float = 0.5) -> tuple[dict[str, Any], dict[str, Any]]:
    """(full-budget GRPO arm, DUET arm at ``budget``) rows of the newest ``duet_sweep``."""
    arms = newest_rows(wh, "duet_sweep", "sweep")
    grpo = [a for a in arms if a["method"] == "grpo"]
    duet = [a for a in arms if a["method"] == "duet" and abs(a["budget_fraction"] - budget) < 1e-9]
    if not grpo or not duet:
        raise ClaimError(f"the newest duet_sweep has no GRPO arm or no DUET arm at budget "
                         f"{budget:g} (arms: {[a['arm'] for a in arms]}); run the sweep with "
                         f"budgets including {budget:g}")
    return grpo[0], duet[0]


def duet_claims(wh: Any, budget: float = 0.5,
                accuracy: Callable[[Mapping[str, Any]], Mapping[str, float]] | None = None
                ) -> list[dict[str, Any]]:
    """The DUET claim's three parts (:func:`claim_parts`) from the newest ``duet_sweep`` in
    ``wh``. ``accuracy(arm row) -> {problem: score}`` scores an arm's checkpoint (default: its
    evaluation on the sweep's benchmark in ``eval_samples``)."""
    parts = claim_parts(budget)
    grpo, duet = compared_arms(wh, budget)
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
