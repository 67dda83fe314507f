"""Paper claims as rows with a verdict: the rule that decides whether a run reproduces a claim.

A claim compares two arms on the same problems (same prompts, seeds and step counts): a
*reference* arm (plain GRPO, SFT on think-then-answer traces, ...) and a *treatment* arm (the
paper's method). Each arm gives one score per problem; the difference is ``treatment −
reference`` per problem, and its 95% CI and one-sided p-value come from the paired bootstrap
(:func:`eval.compare.paired_bootstrap`, problems resampled together). A rate that is a ratio of
aggregates (recovering / erroring samples) is compared the same way by :func:`judge_ratio`:
both arms' rates are recomputed from the same resampled problems
(:func:`eval.compare.paired_ratio_bootstrap`).

The verdict is computed from that CI only, in the units of the metric, after turning the
difference so that positive means "the direction the paper claims" (for a lower-is-better
metric such as tokens or latency, ``d' = −d``). With ``[lo, hi]`` the turned CI:

``better`` — the paper says the method beats the reference:
    - ``reproduced``      when ``lo > 0``: the CI excludes no effect, on the claimed side;
    - ``not reproduced``  when ``hi <= 0``: the CI holds no effect in the claimed direction
      (zero or the opposite direction);
    - ``inconclusive``    otherwise (the CI straddles 0).

``no_worse`` — the paper says the method keeps the reference's level ("no significant drop",
"within the CI of", "at accuracy not significantly lower"). Such a claim needs a margin
``δ > 0``, fixed before the run (the largest drop that still counts as "keeps"), because "not
significantly worse" alone is met by any run too small to see anything:
    - ``not reproduced``  when ``hi < 0``: the method is significantly worse;
    - ``reproduced``      when ``lo > −δ`` (and not significantly worse): the CI rules out a
      drop of ``δ`` or more;
    - ``inconclusive``    otherwise (the CI still admits a drop of ``δ`` or more).

Before either rule: when every problem scores the same value in both arms (both arms' CIs are
that single point, e.g. accuracy 0 against 0 with a model too small to solve any problem), the
run has no variation to compare and the verdict is ``inconclusive``, whatever the kind: a floor
or a ceiling says nothing about the claim. :func:`row_verdict` applies the whole rule to a
``claims`` row, and ``python -m eval.claims --rejudge`` re-applies it to the rows stored.

A claim with several parts (DUET: accuracy no worse *and* fewer tokens *and* less wall clock)
is ``reproduced`` when every part is, ``not reproduced`` when any part is not, and
``inconclusive`` otherwise (:func:`combine`).

One run's CIs cover the units it evaluated, not the randomness of training its arms again: a
re-run of the same experiment and config can move a verdict. ``claims`` keeps the newest run of
each experiment; ``claim_history`` keeps every run (:func:`keep_history`), and
``python -m eval.claims --history`` lists them part by part and names the verdicts that moved.
Runs of one design drawn with different seeds are pooled by :mod:`eval.replicates`
(``python -m eval.claims --seeds``), whose CI covers the seed as well.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)
KINDS = ("better", "no_worse")


class ClaimError(ValueError):
    """A claim that cannot be judged as stated (unknown kind, missing margin, bad CI)."""


@dataclass(frozen=True, kw_only=True)
class Claim:
    """One measurable statement of a paper.

    ``section`` is the table, figure or section (``"Table 2"``, ``"§4.4"``); ``statement`` the
    direction the paper states, in words; ``metric`` the per-problem score compared;
    ``higher_is_better`` the metric's direction; ``kind`` ``better`` or ``no_worse``; ``margin``
    the non-inferiority margin δ in the metric's units (``no_worse`` only); ``reference`` and
    ``treatment`` the arm names; ``paper_value`` what the paper reports, as text, for the
    README's Results table.
    """

    paper: str
    section: str
    statement: str
    metric: str
    reference: str
    treatment: str
    kind: str = "better"
    higher_is_better: bool = True
    margin: float | None = None
    paper_value: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ClaimError(f"claim {self.statement!r}: kind must be one of {KINDS}, got "
                             f"{self.kind!r}")
        if self.kind == "no_worse":
            if self.margin is None or not math.isfinite(self.margin) or self.margin <= 0:
                raise ClaimError(
                    f"claim {self.statement!r}: a no_worse claim needs a margin > 0 (the largest "
                    f"drop in {self.metric} that still counts as keeping the level), fixed before "
                    f"the run; got {self.margin!r}")
        elif self.margin is not None:
            raise ClaimError(f"claim {self.statement!r}: margin applies to no_worse claims only; "
                             "drop it or set kind: no_worse")
        if self.reference == self.treatment:
            raise ClaimError(f"claim {self.statement!r}: reference and treatment are both "
                             f"{self.reference!r}; a claim compares two different arms")


def verdict(claim: Claim, ci_low: float, ci_high: float) -> str:
    """The verdict of ``claim`` from the 95% CI ``[ci_low, ci_high]`` of ``treatment −
    reference`` in the metric's own units (the rule in the module docstring)."""
    if not (math.isfinite(ci_low) and math.isfinite(ci_high)) or ci_low > ci_high:
        raise ClaimError(f"claim {claim.statement!r}: CI [{ci_low}, {ci_high}] is not an interval "
                         "of finite numbers with low <= high")
    lo, hi = (ci_low, ci_high) if claim.higher_is_better else (-ci_high, -ci_low)
    if claim.kind == "better":
        if lo > 0:
            return REPRODUCED
        return NOT_REPRODUCED if hi <= 0 else INCONCLUSIVE
    if hi < 0:
        return NOT_REPRODUCED
    return REPRODUCED if lo > -float(claim.margin) else INCONCLUSIVE


def no_variation(row: Mapping[str, Any]) -> bool:
    """True when both arms of a ``claims`` row are one and the same point: each arm's 95% CI
    has zero width and both sit at the same value (every problem scored the same in both)."""
    points = [row.get(k) for k in ("reference_ci_low", "reference_ci_high",
                                   "treatment_ci_low", "treatment_ci_high")]
    if any(p is None or not math.isfinite(float(p)) for p in points):
        return False
    return max(points) - min(points) <= 1e-12 * max(1.0, abs(float(points[0])))


def row_margin(row: Mapping[str, Any]) -> float | None:
    """A ``claims`` row's non-inferiority margin, None when it has none (null or NaN)."""
    margin = row.get("margin")
    if margin is None or (isinstance(margin, float) and math.isnan(margin)):
        return None
    return float(margin)


def row_verdict(row: Mapping[str, Any]) -> str:
    """The verdict of one ``claims`` row (as :func:`judge` returns and the warehouse stores it)
    under the rule in the module docstring: ``inconclusive`` when the arms show no variation,
    else :func:`verdict` on the row's difference CI."""
    if no_variation(row):
        return INCONCLUSIVE
    margin = row_margin(row)
    claim = Claim(paper=str(row["paper"]), section=str(row["section"]),
                  statement=str(row["claim"]), metric=str(row["metric"]),
                  reference=str(row["reference"]), treatment=str(row["treatment"]),
                  kind=str(row["kind"]), higher_is_better=bool(row["higher_is_better"]),
                  margin=margin if row["kind"] == "no_worse" else None)
    return verdict(claim, float(row["diff_ci_low"]), float(row["diff_ci_high"]))


def combine(verdicts: Iterable[str]) -> str:
    """One verdict for a claim of several parts: all reproduced, any not, else inconclusive."""
    parts = list(verdicts)
    if not parts:
        raise ClaimError("combine needs at least one part's verdict")
    unknown = [v for v in parts if v not in VERDICTS]
    if unknown:
        raise ClaimError(f"unknown verdicts {unknown}; expected one of {VERDICTS}")
    if NOT_REPRODUCED in parts:
        return NOT_REPRODUCED
    return REPRODUCED if all(v == REPRODUCED for v in parts) else INCONCLUSIVE


def judge(claim: Claim, reference: Mapping[Hashable, float] | Sequence[float],
          treatment: Mapping[Hashable, float] | Sequence[float], *, n_boot: int = 10_000,
          seed: int = 0) -> dict[str, Any]:
    """Compare the arms' per-problem scores (paired by problem id when mappings) and return a
    ``claims`` row: each arm's mean with its 95% bootstrap CI, the paired difference
    ``treatment − reference`` with its CI and the one-sided p-value in the claimed direction
    (for ``no_worse``: against a drop of the margin), ``n`` and the verdict."""
    from eval.compare import align_paired_scores, paired_bootstrap
    from eval.metrics import bootstrap_ci

    ref, treat = align_paired_scores(reference, treatment)
    if claim.kind == "better":
        alternative = "greater" if claim.higher_is_better else "less"
        shifted = treat
    else:  # H0: the treatment is worse by the margin or more
        alternative = "greater" if claim.higher_is_better else "less"
        step = float(claim.margin) if claim.higher_is_better else -float(claim.margin)
        shifted = treat + step
    paired = paired_bootstrap(treat, ref, n_boot=n_boot, seed=seed)
    p_value = paired_bootstrap(shifted, ref, n_boot=n_boot, seed=seed,
                               alternative=alternative).p_value
    return _claim_row(claim, bootstrap_ci(ref, n_boot=n_boot, seed=seed),
                      bootstrap_ci(treat, n_boot=n_boot, seed=seed), paired, p_value)


def _claim_row(claim: Claim, reference: tuple[float, float, float],
               treatment: tuple[float, float, float], paired: Any,
               p_value: float) -> dict[str, Any]:
    """A ``claims`` row from each arm's ``(value, ci_low, ci_high)``, the paired difference
    (an :class:`eval.compare.PairedResult`) and the one-sided p-value, with its verdict."""
    row = {
        "paper": claim.paper, "section": claim.section, "claim": claim.statement,
        "metric": claim.metric, "kind": claim.kind, "higher_is_better": claim.higher_is_better,
        "margin": claim.margin, "reference": claim.reference, "treatment": claim.treatment,
        "reference_value": reference[0], "reference_ci_low": reference[1],
        "reference_ci_high": reference[2], "treatment_value": treatment[0],
        "treatment_ci_low": treatment[1], "treatment_ci_high": treatment[2],
        "diff": paired.diff, "diff_ci_low": paired.ci_low, "diff_ci_high": paired.ci_high,
        "p_value": p_value, "n": paired.n, "paper_value": claim.paper_value,
    }
    row["verdict"] = row_verdict(row)
    return row


def judge_ratio(claim: Claim, reference: Mapping[Hashable, tuple[float, float]],
                treatment: Mapping[Hashable, tuple[float, float]], *, n_boot: int = 10_000,
                seed: int = 0) -> dict[str, Any]:
    """A ``claims`` row for a rate that is a ratio of aggregates over the same units: each arm
    maps a unit (problem) to ``(numerator, denominator)`` and its rate is ``sum(num) /
    sum(den)`` (e.g. erroring samples that still end correct / erroring samples). Both arms
    must list the same units; a unit may have denominator 0 in one arm (it then weighs nothing
    in that arm's rate but is still resampled with the others). The difference's CI and
    one-sided p-value come from :func:`eval.compare.paired_ratio_bootstrap` (units resampled
    together), each arm's CI from :func:`eval.metrics.bootstrap_ratio_ci` with the same
    resamples; the verdict from :func:`row_verdict`. Only ``better`` claims: a margin on a rate
    of aggregates has no additive shift to test against, so ``no_worse`` raises ClaimError."""
    from eval.compare import paired_ratio_bootstrap
    from eval.metrics import bootstrap_ratio_ci

    if claim.kind != "better":
        raise ClaimError(f"claim {claim.statement!r}: judge_ratio judges `better` claims only, "
                         f"got kind {claim.kind!r}")
    if set(reference) != set(treatment):
        missing = sorted(set(reference) ^ set(treatment), key=repr)[:5]
        raise ClaimError(f"claim {claim.statement!r}: both arms must list the same units; these "
                         f"are in one arm only (first 5): {missing}")
    units = sorted(reference, key=repr)
    ref_num = [float(reference[u][0]) for u in units]
    ref_den = [float(reference[u][1]) for u in units]
    treat_num = [float(treatment[u][0]) for u in units]
    treat_den = [float(treatment[u][1]) for u in units]
    alternative = "greater" if claim.higher_is_better else "less"
    try:
        paired = paired_ratio_bootstrap(treat_num, treat_den, ref_num, ref_den, n_boot=n_boot,
                                        seed=seed, alternative=alternative)
    except ValueError as exc:
        raise ClaimError(f"claim {claim.statement!r}: {exc}") from None
    return _claim_row(claim, bootstrap_ratio_ci(ref_num, ref_den, n_boot=n_boot, seed=seed),
                      bootstrap_ratio_ci(treat_num, treat_den, n_boot=n_boot, seed=seed),
                      paired, paired.p_value)


# ---- the claim as a picture small enough for the UI's inline Markdown -------------------------

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

    colour = _VERDICT_COLOURS.get(str(row.get("verdict")), "#333")
    diff = (f"Δ {row['diff']:+.3g} [{row['diff_ci_low']:+.3g}, {row['diff_ci_high']:+.3g}]"
            if row.get("diff") is not None else "")
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="96" '
             'font-family="sans-serif" font-size="12">'),
             f'<text x="4" y="14" fill="{colour}" font-weight="bold">{row.get("verdict")}</text>',
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


# ---- per-problem and per-step scores, read from the warehouse ----------------------------------

def problem_scores(wh: Any, model: str, benchmark: str, *, mode: str | None = None,
                   budget: int | None = None, column: str = "correct") -> dict[str, float]:
    """Mean of ``column`` per problem over the samples of the newest evaluation run of
    ``model`` on ``benchmark`` (optionally one ``mode`` and one ``budget``) in ``eval_samples``.
    Samples with no value (a failed generation, an ungraded answer) count as 0 for ``correct``
    (a failure is not a right answer) and are left out for any other column. Raises
    ClaimError when there is no such run."""
    if column not in ("correct", "completion_tokens", "tokens_used", "ari", "abo", "airw",
                      "tool_errors", "turns"):
        raise ClaimError(f"problem_scores: unsupported column {column!r}")
    where = ["model = $model", "benchmark = $benchmark"]
    params: dict[str, Any] = {"model": model, "benchmark": benchmark}
    if mode is not None:
        where.append("mode = $mode")
        params["mode"] = mode
    if budget is not None:
        where.append("budget = $budget")
        params["budget"] = int(budget)
    cond = " AND ".join(where)
    value = (f"coalesce(CAST({column} AS DOUBLE), 0.0)" if column == "correct"
             else f"CAST({column} AS DOUBLE)")
    query = f"""
        WITH newest AS (SELECT run_id FROM eval_samples WHERE {cond}
                        ORDER BY created_at DESC LIMIT 1)
        SELECT problem_id, avg({value}) AS score FROM eval_samples
        WHERE {cond} AND run_id = (SELECT run_id FROM newest)
        GROUP BY problem_id"""
    if "eval_samples" not in wh.tables():
        raise ClaimError("the warehouse has no eval_samples table yet: evaluate the arms first")
    rows = wh.sql(query, params).to_pylist()
    scores = {r["problem_id"]: float(r["score"]) for r in rows if r["score"] is not None}
    if not scores:
        raise ClaimError(f"no {column} samples of model {model!r} on {benchmark!r}"
                         + (f" in mode {mode!r}" if mode else "")
                         + (f" at budget {budget}" if budget is not None else "")
                         + ": evaluate that arm first")
    return scores


def step_values(wh: Any, checkpoint_id: str, column: str) -> dict[int, float]:
    """``column`` of ``train_metrics`` per training step of ``checkpoint_id`` (the steps are the
    pairing unit when two arms ran the same number of steps on the same prompts)."""
    allowed = ("tokens_generated", "seconds_per_step", "generation_s", "reward_mean",
               "completion_length")
    if column not in allowed:
        raise ClaimError(f"step_values: column must be one of {allowed}, got {column!r}")
    if "train_metrics" not in wh.tables():
        raise ClaimError("the warehouse has no train_metrics table yet: train the arms first")
    rows = wh.sql(f"SELECT step, CAST({column} AS DOUBLE) AS v FROM train_metrics "
                  "WHERE checkpoint_id = $ck AND step IS NOT NULL", {"ck": checkpoint_id}
                  ).to_pylist()
    values = {int(r["step"]): float(r["v"]) for r in rows if r["v"] is not None}
    if not values:
        raise ClaimError(f"no {column} in train_metrics for checkpoint {checkpoint_id!r}")
    return values


def newest_samples(wh: Any, model: str, benchmark: str) -> list[dict[str, Any]]:
    """Every ``eval_samples`` row of the newest evaluation run of ``model`` on ``benchmark``."""
    if "eval_samples" not in wh.tables():
        raise ClaimError("the warehouse has no eval_samples table yet: evaluate the arms first")
    rows = wh.sql("""
        SELECT * FROM eval_samples WHERE model = $model AND benchmark = $benchmark
          AND run_id = (SELECT run_id FROM eval_samples WHERE model = $model
                        AND benchmark = $benchmark ORDER BY created_at DESC LIMIT 1)""",
                  {"model": model, "benchmark": benchmark}).to_pylist()
    if not rows:
        raise ClaimError(f"no samples of model {model!r} on {benchmark!r}: evaluate that arm "
                         "first")
    return rows


# ---- the Results table, read back from the warehouse ------------------------------------------

CLAIMS_TABLE = "claims"
# the newest run of each experiment's claims (an experiment re-run replaces its partition; the
# window also guards against several runs' rows landing in one read)
LATEST_CLAIMS_SQL = """
SELECT * EXCLUDE (rank_) FROM (
  SELECT *, dense_rank() OVER (PARTITION BY experiment ORDER BY created_at DESC, run_id DESC)
         AS rank_
  FROM claims)
WHERE rank_ = 1
ORDER BY paper, experiment, section, claim, metric
"""


def _value(row: Mapping[str, Any], prefix: str, digits: int) -> str:
    value, low, high = (row.get(f"{prefix}_value") if prefix else row.get("diff"),
                        row.get(f"{prefix}_ci_low" if prefix else "diff_ci_low"),
                        row.get(f"{prefix}_ci_high" if prefix else "diff_ci_high"))
    if value is None:
        return "—"
    fmt = f"{{:.{digits}f}}" if prefix else f"{{:+.{digits}f}}"

    def show(x: float) -> str:  # a float sum a hair below 0 reads 0.000, not -0.000
        return fmt.format(0.0 if round(x, digits) == 0 else x)
    return f"{show(value)} [{show(low)}, {show(high)}]"


def results_table(rows: Sequence[Mapping[str, Any]], digits: int = 3) -> str:
    """Markdown: one line per claim row — paper and where, the claim, what the paper reports,
    weft's reference and treatment values and their difference with 95% CIs, n, the verdict."""
    header = ("| paper | where | claim | metric | paper reports | weft: reference | "
              "weft: treatment | treatment − reference | n | verdict |")
    lines = [header, "|" + "---|" * 10]
    for row in rows:
        cells = [row.get("paper"), row.get("section"), row.get("claim"), row.get("metric"),
                 row.get("paper_value") or "—",
                 f"{row.get('reference')}: {_value(row, 'reference', digits)}",
                 f"{row.get('treatment')}: {_value(row, 'treatment', digits)}",
                 _value(row, "", digits), row.get("n"), f"**{row.get('verdict')}**"]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def latest_claims(wh: Any) -> list[dict[str, Any]]:
    """The newest run's rows of every experiment in ``wh``'s ``claims`` table ([] if none)."""
    if CLAIMS_TABLE not in wh.tables():
        return []
    return wh.sql(LATEST_CLAIMS_SQL).to_pylist()


CLAIM_HISTORY_TABLE = "claim_history"
HISTORY_SQL = """
SELECT * FROM claim_history {where}
ORDER BY paper, experiment, section, claim, metric, created_at, run_id
"""


def keep_history(wh: Any, experiment: str) -> int:
    """Copy the ``claims`` rows of ``experiment`` into ``claim_history``, one folder per run
    (``<experiment>/<run_id>``; the rows keep their run id, time stamp and ``partition``
    column), unless that run is there already. Returns the rows copied.

    ``claims`` holds only the newest run of an experiment (a re-run replaces its partition), so
    a writer calls this before replacing the partition (the run being replaced stays, even one
    written before the history existed) and after (the new run). A second run of the same
    experiment and config that changes a verdict is then visible: the CIs of one run cover the
    problems (or steps, episodes) it evaluated, not the randomness of training the arms again."""
    import pyarrow.compute as pc

    if CLAIMS_TABLE not in wh.tables() or experiment not in wh.partitions(CLAIMS_TABLE):
        return 0
    table = wh.read(CLAIMS_TABLE, experiment)
    have = (set(wh.partitions(CLAIM_HISTORY_TABLE))
            if CLAIM_HISTORY_TABLE in wh.tables() else set())
    copied = 0
    for run_id in sorted({str(r) for r in table.column("run_id").to_pylist()}):
        folder = f"{experiment}/{run_id}"
        if folder in have:
            continue
        rows = table.filter(pc.equal(table["run_id"], run_id))
        wh.write(CLAIM_HISTORY_TABLE, rows, partition=experiment, folder=folder)
        copied += rows.num_rows
    return copied


def claim_history(wh: Any, experiments: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Every recorded run's rows of ``experiments`` (all when empty) from ``claim_history``,
    oldest run first within each claim part ([] if none)."""
    if CLAIM_HISTORY_TABLE not in wh.tables():
        return []
    where = ""
    if experiments:
        names = ", ".join("'" + e.replace("'", "''") + "'" for e in experiments)
        where = f"WHERE experiment IN ({names})"
    return wh.sql(HISTORY_SQL.format(where=where)).to_pylist()


def _seed_of(row: Mapping[str, Any]) -> str:
    """``", seed N"`` when the row's config names its seed (the claims whose own config holds
    one), else ``""``."""
    from eval.replicates import run_seed

    seed = run_seed(row)
    return "" if seed is None else f", seed {seed}"


def history_table(rows: Sequence[Mapping[str, Any]], digits: int = 3) -> str:
    """Markdown: one line per claim part per run (the run's date, id and seed, the difference
    with its 95% CI, n, the verdict), then the parts whose verdict differs between runs."""
    lines = ["| paper | where | metric | run | treatment − reference | n | verdict |",
             "|" + "---|" * 7]
    verdicts: dict[tuple[str, str, str, str], list[str]] = {}
    for row in rows:
        stamp = row.get("created_at")
        when = stamp.strftime("%Y-%m-%d %H:%M") if hasattr(stamp, "strftime") else str(stamp)
        run = f"{when} ({str(row.get('run_id'))[:8]}{_seed_of(row)})"
        cells = [row.get("paper"), row.get("section"), row.get("metric"), run,
                 _value(row, "", digits),
                 row.get("n"), f"**{row.get('verdict')}**"]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
        part = (str(row.get("experiment")), str(row.get("section")), str(row.get("claim")),
                str(row.get("metric")))
        verdicts.setdefault(part, []).append(str(row.get("verdict")))
    moved = [(part, v) for part, v in verdicts.items() if len(set(v)) > 1]
    if moved:
        lines += ["", "Verdicts that differ between runs of the same experiment:"]
        lines += [f"- {exp} {section} {metric}: {' -> '.join(v)}"
                  for (exp, section, _claim, metric), v in moved]
    return "\n".join(lines)


def rejudge(wh: Any) -> list[tuple[str, str, str, str, str]]:
    """Re-apply the verdict rule to every row stored in ``wh``'s ``claims`` table (after the rule
    changed) and rewrite the experiments whose verdicts moved; every other column, the run id
    and the time stamp included, is kept. Returns ``(experiment, section, metric, old, new)``
    for each row that changed."""
    if CLAIMS_TABLE not in wh.tables():
        return []
    changed: list[tuple[str, str, str, str, str]] = []
    for partition in wh.partitions(CLAIMS_TABLE):
        table = wh.read(CLAIMS_TABLE, partition)
        rows = table.to_pylist()
        moved = False
        for row in rows:
            new = row_verdict(row)
            if new != row["verdict"]:
                changed.append((str(row.get("experiment")), str(row["section"]),
                                str(row["metric"]), str(row["verdict"]), new))
                row["verdict"] = new
                moved = True
        if moved:
            import pyarrow as pa

            wh.write(CLAIMS_TABLE, pa.Table.from_pylist(rows, schema=table.schema),
                     partition=partition)
    return changed


def main(argv: list[str] | None = None) -> int:
    """``python -m eval.claims``: print the Results table from the warehouse."""
    import argparse
    import sys

    from warehouse import Warehouse

    parser = argparse.ArgumentParser(
        prog="python -m eval.claims",
        description="Print every paper claim's latest verdict from the warehouse's claims table "
                    "as a Markdown table (the README's Results section).")
    parser.add_argument("--warehouse", help="warehouse folder (default: WEFT_HOME/warehouse)")
    parser.add_argument("--digits", type=int, default=3, help="decimals shown (default 3)")
    parser.add_argument("--history", nargs="*", metavar="EXPERIMENT",
                        help="print every recorded run of these experiments (all when none is "
                             "named), one line per claim part per run, instead of the newest "
                             "run's table")
    parser.add_argument("--seeds", nargs="*", metavar="EXPERIMENT",
                        help="pool every claim part over the newest run of each seed recorded "
                             "for these experiments (all when none is named; same scale and "
                             "design), instead of the newest run's table")
    parser.add_argument("--rejudge", action="store_true",
                        help="first re-apply the current verdict rule to the stored rows and "
                             "rewrite those whose verdict changed (prints each change)")
    args = parser.parse_args(argv)
    wh = Warehouse(args.warehouse)
    if args.rejudge:
        for experiment, section, metric, old, new in rejudge(wh):
            print(f"rejudged {experiment} {section} {metric}: {old} -> {new}", file=sys.stderr)
    if args.seeds is not None:
        from eval.replicates import pooled_rows, seeds_table

        pooled = pooled_rows(claim_history(wh, args.seeds))
        if not pooled:
            print("no claim part of "
                  f"{', '.join(args.seeds) or 'any experiment'} has runs with two different "
                  "seeds (same scale and design) in claim_history: run the experiment's job "
                  "again with another seed (docs/results.md says where each seed is)",
                  file=sys.stderr)
            return 1
        print(seeds_table(pooled, digits=args.digits))
        return 0
    if args.history is not None:
        history = claim_history(wh, args.history)
        if not history:
            print("no claim history in this warehouse for "
                  f"{', '.join(args.history) or 'any experiment'}: it is kept from the first "
                  "result run that writes claims", file=sys.stderr)
            return 1
        print(history_table(history, digits=args.digits))
        return 0
    rows = latest_claims(wh)
    if not rows:
        print("no claims recorded yet in this warehouse: materialize an asset of the `results` "
              "group (the Dagster UI, or `weft materialize`), then run this again",
              file=sys.stderr)
        return 1
    print(results_table(rows, digits=args.digits))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
