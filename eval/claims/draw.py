"""A ``claims`` row drawn for the Dagster UI: the two arms' values and the difference with their
95% CIs on one axis, coloured by verdict and titled with it (a setup check's reads ``check
passed`` / ``check failed``; :func:`claim_svg`), inlined as a data URL where the UI renders it
(:func:`inline_svg`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eval.claims import (
    INCONCLUSIVE,
    NOT_REPRODUCED,
    REPRODUCED,
    ClaimError,
    is_plumbing,
    shown_verdict,
)

INLINE_MARKDOWN_LIMIT = 999  # the Dagster UI renders Markdown metadata inline below 1,000 chars
_VERDICT_COLOURS = {REPRODUCED: "#1a7f37", NOT_REPRODUCED: "#cf222e", INCONCLUSIVE: "#9a6700"}


def _num(value: float) -> str:
    return f"{value:.3g}"


def claim_svg(row: Mapping[str, Any], width: int = 420) -> str:
    """A readable SVG of one ``claims`` row: each arm's mean as a dot on its 95% CI bar, on one
    shared axis, with the verdict and the difference's CI as the title. It is written for the
    UI's inline Markdown (a base64 data URI under :data:`INLINE_MARKDOWN_LIMIT` characters,
    :func:`inline_svg`), so it is drawn with the fewest elements that still read: two bars,
    two dots, their labels and the axis end values."""
    arms = [(str(row["reference"]), row["reference_value"], row["reference_ci_low"],
             row["reference_ci_high"]),
            (str(row["treatment"]), row["treatment_value"], row["treatment_ci_low"],
             row["treatment_ci_high"])]
    values = [v for _, m, lo, hi in arms for v in (m, lo, hi) if v is not None]
    if not values:
        raise ClaimError(f"claim {row.get('claim')!r}: no arm values to draw")
    lo_axis, hi_axis = min(values), max(values)
    if hi_axis - lo_axis < 1e-12:
        lo_axis, hi_axis = lo_axis - 0.5, hi_axis + 0.5
    left, right = 150, width - 12

    def x(v: float) -> int:
        return round(left + (v - lo_axis) / (hi_axis - lo_axis) * (right - left))

    colour = ("#888" if is_plumbing(row)
              else _VERDICT_COLOURS.get(str(row.get("verdict")), "#333"))
    diff = (f"Δ {row['diff']:+.3g} [{row['diff_ci_low']:+.3g}, {row['diff_ci_high']:+.3g}]"
            if row.get("diff") is not None else "")
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="96" '
             'font-family="sans-serif" font-size="12">'),
             (f'<text x="4" y="14" fill="{colour}" font-weight="bold">'
              f'{_escape(shown_verdict(row, with_reason=False))}</text>'),
             f'<text x="{left}" y="14">{_escape(str(row.get("metric")))} {diff}</text>']
    for i, (name, mean, low, high) in enumerate(arms):
        y = 38 + 24 * i
        label = _escape(name[:14]) + ("" if mean is None else f" {_num(mean)}")
        parts.append(f'<text x="4" y="{y + 4}">{label}</text>')
        if mean is None:
            continue
        parts.append(f'<path d="M{x(low)} {y}H{x(high)}" stroke="#555" stroke-width="3"/>'
                     f'<circle cx="{x(mean)}" cy="{y}" r="5"/>')
    parts.append(f'<text x="{left}" y="90">{_num(lo_axis)}</text>'
                 f'<text x="{right}" y="90" text-anchor="end">{_num(hi_axis)}</text></svg>')
    return "".join(parts)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def inline_svg(svg: str, alt: str = "claim") -> str | None:
    """``svg`` as Markdown image (base64 data URI), or None when it would be too long for the
    UI to render inline (then show the full-size PNG behind a link instead)."""
    import base64

    md = f"![{alt}](data:image/svg+xml;base64,{base64.b64encode(svg.encode()).decode()})"
    return md if len(md) <= INLINE_MARKDOWN_LIMIT else None

