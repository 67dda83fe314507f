"""The Results table as a committed file: ``python -m eval.claims --export PATH`` writes every
claim part of the warehouse (the newest run of each experiment) to a CSV, with the part pooled
over seeds (:func:`eval.replicates.pooled_rows`) beside it where two seeds or more of that run's
design were recorded; ``python -m eval.claims --render PATH`` prints the Markdown table of such a
file. The docs page's table is that rendering, so every figure on it can be traced to a row of
the export, and a row of the export to a run id in the warehouse.

In the rendered table a part with seeds shows the pooled figures (each arm, the difference and
its 95% CI across seeds, the verdict across seeds) and lists its seeds; a part of one run shows
that run's figures and its seed. Claim parts come first, then setup checks, then plumbing runs,
each under the heading :mod:`eval.claims.readers` gives it.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from eval.claims import is_check, is_plumbing, shown_verdict
from eval.claims.readers import (
    CHECKS_HEADING,
    PLUMBING_HEADING,
    _value,
    claim_history,
    latest_claims,
)

# what a run row contributes (the ``claims`` columns a reader needs to trace and judge it)
RUN_COLUMNS = (
    "experiment", "paper", "section", "claim", "metric", "role", "kind", "higher_is_better",
    "margin", "bound_low", "bound_high", "paper_value", "reference", "reference_value",
    "reference_ci_low", "reference_ci_high", "treatment", "treatment_value", "treatment_ci_low",
    "treatment_ci_high", "diff", "diff_ci_low", "diff_ci_high", "n", "n_discordant", "verdict",
    "inconclusive_reason", "invalid_arm", "scale", "seed", "design", "run_id", "created_at")
# the same part pooled over the newest run of each seed of that design (empty without seeds)
POOLED_COLUMNS = (
    "seeds", "k", "pooled_reference_value", "pooled_reference_ci_low",
    "pooled_reference_ci_high", "pooled_treatment_value", "pooled_treatment_ci_low",
    "pooled_treatment_ci_high", "pooled_diff", "pooled_diff_ci_low", "pooled_diff_ci_high",
    "pooled_n", "pooled_n_discordant", "pooled_verdict", "pooled_inconclusive_reason",
    "pooled_run_ids", "pooled_seeds_left_out", "pooled_invalid_arm")
COLUMNS = RUN_COLUMNS + POOLED_COLUMNS
_NUMBERS = {"margin", "bound_low", "bound_high", "reference_value", "reference_ci_low",
            "reference_ci_high", "treatment_value", "treatment_ci_low", "treatment_ci_high",
            "diff", "diff_ci_low", "diff_ci_high", "pooled_reference_value",
            "pooled_reference_ci_low", "pooled_reference_ci_high", "pooled_treatment_value",
            "pooled_treatment_ci_low", "pooled_treatment_ci_high", "pooled_diff",
            "pooled_diff_ci_low", "pooled_diff_ci_high"}
_COUNTS = {"n", "n_discordant", "seed", "k", "pooled_n", "pooled_n_discordant"}


def _key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return (row.get("experiment"), row.get("scale"), row.get("design"), row.get("section"),
            row.get("claim"), row.get("metric"))


def export_rows(wh: Any) -> list[dict[str, Any]]:
    """One row per claim part of the newest run of every experiment in ``wh``, with the pooled
    columns filled where ``claim_history`` holds two seeds or more of that run's design."""
    latest = latest_claims(wh)
    pooled = {}
    if latest:
        from eval.replicates import pooled_rows

        experiments = sorted({str(r["experiment"]) for r in latest})
        pooled = {_key(p): p for p in pooled_rows(claim_history(wh, experiments))}
    out = []
    for row in latest:
        record = {c: row.get(c) for c in RUN_COLUMNS}
        p = pooled.get(_key(row))
        if p is not None:
            record.update({
                "seeds": p["seeds"], "k": p["k"], "pooled_n": p["n"],
                "pooled_n_discordant": p["n_discordant"], "pooled_verdict": p["verdict"],
                "pooled_inconclusive_reason": p["inconclusive_reason"],
                "pooled_run_ids": p["run_ids"],
                "pooled_seeds_left_out": p.get("seeds_left_out") or None,
                "pooled_invalid_arm": p.get("invalid_arm"),
                **{f"pooled_{c}": p[c] for c in (
                    "reference_value", "reference_ci_low", "reference_ci_high",
                    "treatment_value", "treatment_ci_low", "treatment_ci_high", "diff",
                    "diff_ci_low", "diff_ci_high")}})
        out.append(record)
    return out


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def write_csv(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write export rows to ``path`` (CSV, the columns :data:`COLUMNS`, empty = null)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: _cell(row.get(c)) for c in COLUMNS})
    return path


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    """The rows of an export file, typed back (numbers, counts, booleans, null)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no claims export at {path}: write one with "
                                f"`python -m eval.claims --export {path}`")
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path} is not a claims export: it lacks the columns {missing}; "
                             "write it again with `python -m eval.claims --export`")
        rows = []
        for raw in reader:
            row: dict[str, Any] = {}
            for c in COLUMNS:
                text = raw[c]
                if text == "":
                    row[c] = None
                elif c in _NUMBERS:
                    row[c] = float(text)
                elif c in _COUNTS:
                    row[c] = int(text)
                elif c == "higher_is_better":
                    row[c] = text == "true"
                else:
                    row[c] = text
            rows.append(row)
    return rows


def shown_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The figures a table shows for an export row: the pooled ones where it has seeds."""
    if row.get("pooled_verdict") is None:
        return dict(row)
    shown = dict(row)
    for c in ("reference_value", "reference_ci_low", "reference_ci_high", "treatment_value",
              "treatment_ci_low", "treatment_ci_high", "diff", "diff_ci_low", "diff_ci_high",
              "n", "n_discordant", "verdict", "inconclusive_reason", "invalid_arm"):
        shown[c] = row[f"pooled_{c}"]
    return shown


def _seeds_cell(row: Mapping[str, Any]) -> str:
    if row.get("pooled_verdict") is not None:
        out = f"{row['k']} pooled ({row['seeds']})"
        if row.get("pooled_seeds_left_out"):
            out += f"; left out (invalid arm): {row['pooled_seeds_left_out']}"
        return out
    return "1 run" if row.get("seed") is None else f"1 (seed {row['seed']})"


def _lines(rows: Sequence[Mapping[str, Any]], digits: int, last: str) -> list[str]:
    header = ("| paper | where | claim | metric | paper reports | weft: reference | weft: treatment "
              f"| treatment − reference | n | seeds | {last} |")
    lines = [header, "|" + "---|" * 11]
    for row in rows:
        shown = shown_row(row)
        differ = shown.get("n_discordant")
        n = f"{shown.get('n')}" + ("" if differ is None else f" ({differ} differ)")
        cells = [row.get("paper"), row.get("section"), row.get("claim"), row.get("metric"),
                 row.get("paper_value") or "—",
                 f"{row.get('reference')}: {_value(shown, 'reference', digits)}",
                 f"{row.get('treatment')}: {_value(shown, 'treatment', digits)}",
                 _value(shown, "", digits), n, _seeds_cell(row),
                 f"**{shown_verdict(shown)}**"]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return lines


def render(rows: Sequence[Mapping[str, Any]], digits: int = 3) -> str:
    """Markdown of export rows: claim parts, then setup checks and plumbing runs under their
    headings; a part with seeds shows its pooled figures and verdict."""
    ordered = sorted(rows, key=lambda r: tuple(str(r.get(c)) for c in (
        "paper", "experiment", "section", "claim", "metric")))
    claims = [r for r in ordered if not is_check(r) and not is_plumbing(r)]
    lines = _lines(claims, digits, "verdict") if claims else []
    for heading, group, last in ((CHECKS_HEADING, [r for r in ordered if is_check(r)], "check"),
                                 (PLUMBING_HEADING, [r for r in ordered if is_plumbing(r)],
                                  "plumbing")):
        if group:
            lines += ([""] if lines else []) + [heading, ""] + _lines(group, digits, last)
    return "\n".join(lines)
