"""The Engagement Process paper's Table 5 claim (Engagement Process §5.3, App. F) judged from
the newest ``ep_budget_table``: the EP-aware arm's budgeted success at the smallest budget beats
each RLVR arm's, on the same held-out problems (per-problem BS@B, paired by problem).

The part's metric names the budget by how it was set, not by its value: ``BS@p25`` when the
budgets are percentiles of the start's own answer lengths (measured per run, so every seed has
its own token budget and the seeds of one design are still one part to pool), ``BS@<tokens>``
when the budgets are the recipe's fixed ones.

A plain function over the warehouse; the ``ep_budget_claim`` asset wires it.
"""

from __future__ import annotations

from typing import Any

from eval.budget import per_problem_at_b
from eval.claims import Claim, ClaimError, judge
from eval.claims.paper_reports import PAPER_REPORTS, paper_value
from eval.claims.readers import newest_samples, rows_of
from training.ep_budget import ARM_EP, HELDOUT_BENCHMARK, TABLE

EXPERIMENT = "ep_budget_claim"


def budget_metric(row: dict[str, Any]) -> str:
    """The metric's name for the budget of score row ``row``: ``BS@p<q>`` for a budget measured
    as the start's ``q``-th answer-length percentile, else ``BS@<budget>``."""
    q = row.get("budget_percentile")
    if row.get("budget_source") == "start_percentiles" and q is not None:
        return f"BS@p{float(q):g}"
    return f"BS@{int(row['budget'])}"


def table5_part(arm: str, metric: str) -> Claim:
    """The part EP-aware vs RLVR arm ``arm`` (``rlvr``: the paper's RLVR-8K, same cap as
    EP-aware; ``rlvr_x2``: RLVR-16K, twice the cap) on budgeted success ``metric``
    (:func:`budget_metric`). ClaimError for an RLVR arm the paper did not train (no figure to
    quote)."""
    if (EXPERIMENT, arm) not in PAPER_REPORTS:
        raise ClaimError(f"Table 5 reports RLVR arms at the EP-aware cap and at twice it (rlvr, "
                         f"rlvr_x2); the paper has no figure for arm {arm!r}: run "
                         "ep_budget_table with rlvr_cap_factors [1, 2]")
    return Claim(paper="Engagement Process", section="Table 5", reference=arm,
                 treatment=ARM_EP, metric=metric, bounds=(0.0, 1.0),
                 statement=f"the budget-aware reward beats {arm} on budgeted success",
                 paper_value=paper_value(EXPERIMENT, arm))


def table_rows(wh: Any, table_id: str | None = None) -> list[dict[str, Any]]:
    """The score rows of ``ep_budget_table`` run ``table_id`` (None: the newest). ClaimError
    naming the stored ids when there is no such run."""
    return rows_of(wh, TABLE, "table_id", table_id, asset="ep_budget_table",
                   missing=f"no ep_budget_table run with table_id {table_id!r}")


def table5_claims(wh: Any, table_id: str | None = None) -> list[dict[str, Any]]:
    """Table 5 from ``ep_budget_table`` run ``table_id`` (None: the newest): EP-aware vs every
    RLVR arm, per-problem budgeted success (correct within the budget) at the smallest
    budget."""
    rows = table_rows(wh, table_id)
    smallest = min(r["budget"] for r in rows)
    at_smallest = [r for r in rows if r["budget"] == smallest]
    models = {r["arm"]: r["model"] for r in at_smallest}
    metric = budget_metric(at_smallest[0])
    if ARM_EP not in models:
        raise ClaimError(f"the newest ep_budget_table has no {ARM_EP} arm (arms {sorted(models)})")
    ep = per_problem_at_b(newest_samples(wh, models[ARM_EP], HELDOUT_BENCHMARK), smallest)
    out = []
    for arm in sorted(a for a in models if a.startswith("rlvr")):
        other = per_problem_at_b(newest_samples(wh, models[arm], HELDOUT_BENCHMARK), smallest)
        out.append(judge(table5_part(arm, metric), other, ep))
    if not out:
        raise ClaimError("the newest ep_budget_table has no RLVR arm to compare with")
    return out
