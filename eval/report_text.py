"""The evaluation report's figures as text the Dagster UI shows inline.

The UI renders a Markdown metadata value on the asset page only while it is under 1,000
characters; a PNG that small is a thumbnail nobody can read. So every report plot also gets a
text figure that fits: a fenced block of one line per series, with the plotted values written
out and drawn as bars (``█`` cells on a fixed width, for one value on a fixed scale) or as a
sparkline (one of ``▁▂▃▄▅▆▇█`` per point, lowest to highest, for a curve). The numbers are
the figure; the glyphs only make the ordering visible at a glance. When the series do not all
fit, the figure keeps the first ones (in the plot's order) and says how many it left out and
where the full plot is (``plot_<name>_full``).

:func:`bar` and :func:`spark` draw one value and one curve; :func:`fit` wraps lines into the
Markdown block under the limit; the ``*_text`` functions take the same rows as the plots of
``eval.reports`` (``plot_leaderboard`` ... ``plot_eff_curve``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

# Dagster 1.13's asset page renders a Markdown metadata value inline when it is shorter than
# 1,000 characters (ui-core MetadataEntry: `expandSmallValues && mdStr.length < 1000`), and
# behind a "[Show Markdown]" link otherwise
UI_INLINE_LIMIT = 999
# a line fits the metadata table's value column at 1,600 px (about 58 monospace characters)
BAR_WIDTH = 12
SPARK = "▁▂▃▄▅▆▇█"
LABEL_WIDTH = 20


def bar(value: float, lo: float = 0.0, hi: float = 1.0, width: int = BAR_WIDTH) -> str:
    """``value`` on the scale ``[lo, hi]`` as ``width`` cells: ``round((value - lo) / (hi - lo)
    * width)`` of them filled (``█``), the rest dotted (``·``); values outside the scale are
    drawn at its ends."""
    if not hi > lo:
        raise ValueError(f"a bar's scale needs hi > lo, got [{lo}, {hi}]")
    filled = max(0, min(width, round((value - lo) / (hi - lo) * width)))
    return "█" * filled + "·" * (width - filled)


def spark(values: Sequence[float], lo: float | None = None, hi: float | None = None) -> str:
    """One glyph of ``▁▂▃▄▅▆▇█`` per value: level ``round((v - lo) / (hi - lo) * 7)`` on the
    scale ``[lo, hi]`` (default: the values' own range; a flat series is drawn at the middle
    level)."""
    if not values:
        return ""
    lo = min(values) if lo is None else lo
    hi = max(values) if hi is None else hi
    if hi - lo < 1e-12:
        return SPARK[3] * len(values)
    return "".join(SPARK[max(0, min(7, round((v - lo) / (hi - lo) * 7)))] for v in values)


def _label(text: str, width: int = LABEL_WIDTH) -> str:
    text = str(text)
    return (text if len(text) <= width else text[: width - 1] + "…").ljust(width)


def _num(value: Any, digits: int = 3) -> str:
    return "—" if value is None else f"{float(value):.{digits}g}"


def fit(name: str, title: str, lines: Sequence[str], limit: int = UI_INLINE_LIMIT) -> str | None:
    """``title`` then ``lines`` in a fenced block, as many lines as fit under ``limit``
    characters; lines left out are counted in a last line that points at the full plot
    (``plot_<name>_full``). None when not even one line fits."""

    def render(kept: Sequence[str], left: int) -> str:
        body = list(kept)
        if left:
            body.append(f"… {left} more: the full plot is plot_{name}_full")
        return f"**{title}**\n```text\n" + "\n".join(body) + "\n```"

    for keep in range(len(lines), 0, -1):
        md = render(lines[:keep], len(lines) - keep)
        if len(md) <= limit:
            return md
    return None


def leaderboard_text(board: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per (benchmark, model) in the leaderboard plot's order: the accuracy as a bar on
    [0, 1], its value and 95% CI."""
    rows = sorted((r for r in board if r.get("accuracy") is not None),
                  key=lambda r: (r["benchmark"], r["model"]))
    return [f"{_label(' '.join((str(r['benchmark']), str(r['model']))))} "
            f"{bar(float(r['accuracy']))} "
            f"{float(r['accuracy']):.3f} [{_num(r.get('ci_low'))}, {_num(r.get('ci_high'))}]"
            for r in rows]


def latency_text(latency: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per model and benchmark with an ARI, lowest ARI first (the Pareto plot's x):
    ARI and accuracy, the accuracy as a bar on [0, 1]."""
    points = sorted((r for r in latency if r.get("ari") is not None),
                    key=lambda r: (float(r["ari"]), str(r["model"])))
    return [f"{_label(' '.join((str(r['model']), str(r['benchmark']))))} ARI {_num(r['ari'])} "
            f"acc {bar(float(r['accuracy'] or 0.0), width=8)} {_num(r['accuracy'])}"
            for r in points]


def _curves(rows: Sequence[Mapping[str, Any]], x: str) -> list[tuple[str, list[Mapping[str, Any]]]]:
    lines: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        lines[(str(r["model"]), str(r["benchmark"]))].append(r)
    return [(f"{model} {bench}", sorted(pts, key=lambda r: r[x]))
            for (model, bench), pts in sorted(lines.items())]


def budget_text(curve: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per model and benchmark, two lines: budgeted success (BS@B) and accuracy (Acc@B) over
    the budgets, ascending, as a sparkline on [0, 1] and the values."""
    out = []
    for label, pts in _curves(curve, "budget"):
        budgets = ",".join(str(p["budget"]) for p in pts)
        out.append(f"{_label(label).rstrip()}  B = {budgets}")
        for key, name in (("budgeted_success", "BS@B "), ("accuracy", "Acc@B")):
            values = [float(p[key]) for p in pts]
            out.append(f"  {name} {spark(values, 0.0, 1.0)} "
                       + " ".join(f"{v:.2f}" for v in values))
    return out


def sweep_text(curves: Mapping[str, Sequence[Any]]) -> list[str]:
    """Per sweep (``label -> SweepPoint``s): accuracy over the thinking caps, ascending, as a
    sparkline on [0, 1] and the values."""
    out = []
    for label, pts in sorted(curves.items()):
        if not pts:
            continue
        values = [float(p.accuracy) for p in pts]
        out.append(f"{_label(label).rstrip()}  cap = {','.join(f'{p.cap:g}' for p in pts)}")
        out.append(f"  acc {spark(values, 0.0, 1.0)} " + " ".join(f"{v:.2f}" for v in values))
    return out


def eff_text(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per model and benchmark: Eff (accuracy gained per 1k tokens over the no-thinking
    baseline) at each thinking cap, ascending, as a sparkline on the curves' common range
    (with 0, the baseline) and the values with the mean tokens."""
    curves = _curves(rows, "thinking_cap")
    effs = [float(p["eff"]) for _, pts in curves for p in pts]
    lo, hi = min([0.0, *effs]), max([0.0, *effs])
    out = []
    for label, pts in curves:
        values = [float(p["eff"]) for p in pts]
        out.append(f"{_label(label).rstrip()}  cap = "
                   f"{','.join(str(p['thinking_cap']) for p in pts)}")
        out.append(f"  Eff {spark(values, lo, hi)} " + " ".join(
            f"{v:+.2g}@{float(p['mean_tokens']):.0f}tok" for v, p in zip(values, pts)))
    return out
