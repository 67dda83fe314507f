"""The Engagement Process paper's Table 5 claim (Engagement Process §5.3, App. F) judged from
the newest ``ep_budget_table``: the EP-aware arm's budgeted success at the smallest budget beats
each RLVR arm's, on the same held-out problems (per-problem BS@B, paired by problem).

A plain function over the warehouse; the ``ep_budget_claim`` asset wires it.
"""

from __future__ import annotations

from typing import Any

from eval.budget import per_problem_at_b
from eval.claims import Claim, ClaimError, judge
from eval.claims.paper_reports import PAPER_REPORTS, paper_value
from eval.claims.readers import newest_rows, newest_samples
from training.ep_budget import ARM_EP, HELDOUT_BENCHMARK, TABLE

EXPERIMENT = "ep_budget_claim"


def table5_part(arm: str, budget: int) -> Claim:
    """The part EP-aware vs RLVR arm ``arm`` (``rlvr``: the paper's RLVR-8K, same cap as
    EP-aware; ``rlvr_x2``: RLVR-16K, twice the cap) on BS@``budget``. ClaimError for an RLVR
    arm the paper did not train (no figure to quote)."""
    if (EXPERIMENT, arm) not in PAPER_REPORTS:
        raise ClaimError(f"Table 5 reports RLVR arms at the EP-aware cap and at twice it (rlvr, "
                         f"rlvr_x2); the paper has no figure for arm {arm!r}: run "
                         "ep_budget_table with rlvr_cap_factors [1, 2]")
    return Claim(paper="Engagement Process", section="Table 5", reference=arm,
                 treatment=ARM_EP, metric=f"BS@{budget}", bounds=(0.0, 1.0),
                 statement=f"the budget-aware reward beats {arm} on budgeted success",
                 paper_value=paper_value(EXPERIMENT, arm))


def table5_claims(wh: Any) -> list[dict[str, Any]]:
    """Table 5 from the newest ``ep_budget_table``: EP-aware vs every RLVR arm, per-problem
    budgeted success (correct within the budget) at the smallest budget."""
    rows = newest_rows(wh, TABLE, "table_id")
    smallest = min(r["budget"] for r in rows)
    models = {r["arm"]: r["model"] for r in rows if r["budget"] == smallest}
    if ARM_EP not in models:
        raise ClaimError(f"the newest ep_budget_table has no {ARM_EP} arm (arms {sorted(models)})")
    ep = per_problem_at_b(newest_samples(wh, models[ARM_EP], HELDOUT_BENCHMARK), smallest)
    out = []
    for arm in sorted(a for a in models if a.startswith("rlvr")):
        other = per_problem_at_b(newest_samples(wh, models[arm], HELDOUT_BENCHMARK), smallest)
        out.append(judge(table5_part(arm, smallest), other, ep))
    if not out:
        raise ClaimError("the newest ep_budget_table has no RLVR arm to compare with")
    return out
