"""DUET's budget claim (DUET §4.3, Table 1 and Figure 3) judged from the newest ``duet_sweep``:
at half budget DUET keeps full-budget GRPO's held-out accuracy (``no_worse`` with margin
:data:`DUET_ACCURACY_MARGIN`, fixed before any run: the largest drop a reader of Table 1 would
still call "matches"), with fewer generated tokens per step and less wall clock per step (steps
paired: same prompts, seed and step count).

Plain functions over the warehouse (``duet_sweep`` arms, ``train_metrics`` per step,
``eval_samples`` per problem); the ``duet_budget_claim`` asset wires them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from eval.claims import Claim, ClaimError, judge
from eval.claims.readers import newest_rows, problem_scores

DUET_ACCURACY_MARGIN = 0.10


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
    """The DUET claim's three parts from the newest ``duet_sweep`` in ``wh``. ``accuracy(arm
    row) -> {problem: score}`` scores an arm's checkpoint (default: its evaluation on the
    sweep's benchmark in ``eval_samples``)."""
    grpo, duet = compared_arms(wh, budget)
    common = {"paper": "DUET", "reference": "GRPO full budget",
              "treatment": f"DUET b={budget:g}"}
    acc = Claim(**common, section="Table 1 (half budget)", metric="held-out accuracy",
                kind="no_worse", margin=DUET_ACCURACY_MARGIN,
                statement=f"DUET at b={budget:g} keeps full-budget GRPO's accuracy",
                paper_value="within GRPO's CI")
    tok = Claim(**common, section="Figure 3 (speed)", metric="generated tokens per step",
                higher_is_better=False, statement="DUET generates fewer tokens per step",
                paper_value="fewer (budget-bound)")
    wall = Claim(**common, section="Figure 3 (speed)", metric="seconds per step",
                 higher_is_better=False, statement="DUET takes less wall clock per step",
                 paper_value="2.51x speedup at half budget (GPU)")
    bench = grpo["benchmark"]
    if accuracy is None:
        def accuracy(arm: Mapping[str, Any]) -> dict[str, float]:
            return problem_scores(wh, arm["checkpoint_id"], bench)
    g_steps = step_series(wh, grpo["checkpoint_id"], duet=False)
    d_steps = step_series(wh, duet["checkpoint_id"], duet=True)
    return [
        judge(acc, accuracy(grpo), accuracy(duet)),
        judge(tok, g_steps["tokens"], d_steps["tokens"]),
        judge(wall, g_steps["wall"], d_steps["wall"]),
    ]
