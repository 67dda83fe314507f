"""What every asset of the `results` group shares: the scale switch, the job per claim, and
writing a claim's rows and UI page.

A result asset tests one paper claim. Its job materializes the experiment upstream (the arms:
trained and evaluated through the existing assets and Pipes launches) and then the result asset,
which reads the arms' per-problem (or per-step, per-seed) scores from the warehouse, judges each
part of the claim with :func:`eval.claims.judge` (the verdict rule is written down there) and
writes one ``claims`` row per part, partition = the experiment name, so a re-run replaces the
experiment's previous rows. A part that is a setup check (``role`` ``check``: it holds by
construction) is shown in a table of its own on the page and never counts in the verdict.

Scale: every experiment has two run configurations, ``cpu`` (the embedded model, sizes that fit
an idle 2-core machine) and ``paper`` (the paper's model, data, steps and rollouts, for GPU
workers through the existing launchers). The job's only required choice is ``scale``; any op's
config can still be overridden under ``ops`` (merged over the scale's). ``python -m
cli.results --print-config NAME`` prints both as YAML.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from assets.common import now, run_record
from eval.claims import (
    CHECK,
    PLUMBING,
    combine,
    counts,
    is_check,
    is_plumbing,
    reason_text,
    shown_verdict,
)
from eval.claims.draw import claim_svg, inline_svg
from eval.claims.readers import CLAIMS_TABLE, keep_history
from eval.replicates import as_seed, design_hash
from pipelines.progress import heartbeat
from warehouse import Warehouse

SCALES = ("cpu", "paper")


@dataclass(frozen=True)
class Experiment:
    """One claim's experiment: its result asset's name, the upstream assets its job runs, the
    run config of each scale (Dagster ``ops`` config keyed by op name) and, per scale, what
    limits a CPU run (said beside its verdict)."""

    name: str
    paper: str
    description: str
    upstream: Sequence[str] = ()
    scales: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    limits: Mapping[str, str] = field(default_factory=dict)
    # the scales it runs at: a paper's claim has both; weft's own check (the demo's learning
    # check) has no paper setup, so only ``cpu``
    scale_names: Sequence[str] = SCALES
    # the model the `llm` resource must serve at paper scale, where the claim has it play the
    # paper's controller, judge or synthesizer ("" when the claim does not); with the embedded
    # default the asset refuses to run at paper scale (:func:`require_paper_llm`)
    paper_llm: str = ""
    paper_llm_section: str = ""
    # per scale, the parts whose run at that scale is plumbing (``eval.claims.PLUMBING``: the
    # statement needs a capable model the scale lacks), named by metric; ``"*"`` = every part.
    # Their rows are stored with role ``plumbing``, shown apart and never counted; why is said
    # in ``limits[scale]``.
    plumbing: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = [s for s in self.scale_names if s not in SCALES]
        if unknown or "cpu" not in self.scale_names:
            raise ValueError(f"experiment {self.name!r}: scales must include cpu and be among "
                             f"{SCALES}, got {list(self.scale_names)}")
        missing = [s for s in self.scale_names if s not in self.scales]
        if missing:
            raise ValueError(f"experiment {self.name!r} has no run config for scale(s) {missing}")
        stray = [s for s in self.plumbing if s not in self.scale_names]
        if stray or any(self.plumbing.values()) and not all(
                self.limits.get(s) for s, parts in self.plumbing.items() if parts):
            raise ValueError(f"experiment {self.name!r}: plumbing scales must be among its "
                             f"scales {list(self.scale_names)} (got {stray}) and each must say "
                             "in `limits` why its run cannot test the claim")

    def mark_plumbing(self, rows: Sequence[Mapping[str, Any]], scale: str
                      ) -> list[dict[str, Any]]:
        """``rows`` with role ``plumbing`` on the parts :attr:`plumbing` names at ``scale``
        (a setup check stays a check)."""
        parts = set(self.plumbing.get(scale, ()))
        return [dict(r, role=PLUMBING) if r.get("role") != CHECK
                and ("*" in parts or r.get("metric") in parts) else dict(r) for r in rows]

    def run_config(self, scale: str, ops: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The Dagster run config of ``scale`` with ``ops`` merged over it (deeply)."""
        if scale not in self.scale_names:
            raise ValueError(f"experiment {self.name!r}: scale must be one of "
                             f"{tuple(self.scale_names)}, got {scale!r}")
        merged = copy.deepcopy(dict(self.scales[scale]))
        _merge(merged, dict(ops or {}))
        # the result asset itself records which scale it judged
        merged.setdefault(self.name, {}).setdefault("config", {})["scale"] = scale
        return {"ops": merged}


def require_paper_llm(experiment: Experiment, scale: str, llm: Any) -> None:
    """At ``scale`` paper, fail before any work when ``llm`` (an ``LLMResource``) is the embedded
    default: the claim needs ``experiment.paper_llm`` behind an OpenAI-compatible endpoint."""
    if scale != "paper" or not experiment.paper_llm or getattr(llm, "base_url", ""):
        return
    raise dg.Failure(description=(
        f"{experiment.name} at scale paper needs the paper's model as the `llm` resource, not "
        f"the embedded default ({llm.model_label()}): set WEFT_LLM_BASE_URL/WEFT_LLM_MODEL to "
        f"a {experiment.paper_llm} endpoint ({experiment.paper_llm_section})"))


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


class ResultConfig(dg.Config):
    """The result asset's own config: the scale it was run at (set by the job)."""

    scale: str = "cpu"


def claim_job(experiment: Experiment) -> dg.UnresolvedAssetJobDefinition:
    """``<name>_job``: the experiment's upstream assets then its result asset, configured by
    ``scale`` (cpu | paper) and optional per-op overrides under ``ops``."""

    def config_fn(cfg: Mapping[str, Any]) -> dict[str, Any]:
        return experiment.run_config(cfg["scale"], cfg.get("ops"))

    mapping = dg.ConfigMapping(
        config_fn=config_fn,
        config_schema={
            "scale": dg.Field(dg.Enum("Scale" if tuple(experiment.scale_names) == SCALES
                                      else "CpuScale",
                                      [dg.EnumValue(s) for s in experiment.scale_names]),
                              default_value="cpu",
                              description="cpu: the embedded model at CPU size; paper: the "
                                          "paper's model, data and steps (GPU workers)"),
            "ops": dg.Field(dg.Permissive(), is_required=False,
                            description="per-op config merged over the scale's"),
        })
    return dg.define_asset_job(
        f"{experiment.name}_job", selection=[*experiment.upstream, experiment.name],
        config=mapping, description=experiment.description,
        tags={"weft/experiment": experiment.name})


def evaluate_models(context: dg.AssetExecutionContext, specs: Mapping[str, Any],
                    evaluations: Sequence[Any], bench: Any, problems: Sequence[Mapping[str, Any]],
                    config: Mapping[str, Any], wh: Warehouse, llm: Any, grader: Any, *,
                    max_tokens: int, max_concurrency: int) -> list[Any]:
    """Serve ``specs`` and run ``evaluations`` (``eval.recorded.Evaluation``) on ``problems``
    of ``bench`` through the one recorded-evaluation path (``eval_samples``, ``eval_scores``,
    ``runs`` and ``llm_calls`` rows under this run); returns ``eval.recorded.Recorded`` per
    evaluation."""
    from functools import partial

    from eval.recorded import evaluate_recorded

    context.log.info(f"evaluating on {len(problems)} {bench.name} problems: "
                     + ", ".join(e.label for e in evaluations))
    try:
        return evaluate_recorded(
            specs, evaluations, bench=bench, problems=problems, wh=wh, run_id=context.run_id,
            config=dict(config),
            make_client=partial(llm.client_for, max_tokens=max_tokens, progress=context.log.info,
                                max_concurrency=max_concurrency),
            pool_factory=grader.pool, progress=context.log.info)
    except ValueError as exc:
        raise dg.Failure(description=f"evaluation on {bench.name} failed: {exc}") from exc


def _ci(value: Any, low: Any, high: Any, signed: bool = False) -> str:
    if value is None:
        return "—"
    fmt = "{:+.3g}" if signed else "{:.3g}"
    return f"{fmt.format(value)} [{fmt.format(low)}, {fmt.format(high)}]"


def claims_table(rows: Sequence[Mapping[str, Any]], last: str = "verdict",
                 first: int = 1) -> dg.TableMetadataValue:
    """The parts of a claim as a Dagster table (the UI renders tables on the asset page at any
    length, unlike Markdown), the verdict first so that it shows without scrolling at 1,600
    pixels: the part's number (``first``, ``first + 1``, ...: the ``verdict_<n>`` and
    ``plot_<n>`` entries of the page), the verdict (column ``last``: ``verdict`` for claims,
    ``check`` for setup checks, read ``check passed`` / ``check failed``), the difference with
    its 95% CI, n, the units whose scores differ, the metric and where, both arms, and why a
    part is inconclusive."""
    columns = ["part", last, "difference", "n", "differ", "metric", "section", "reference",
               "treatment", "why inconclusive"]
    records = [dg.TableRecord({
        "part": str(first + i),
        "section": str(r["section"]), "metric": str(r["metric"]),
        "reference": f"{r['reference']}: " + _ci(r["reference_value"], r["reference_ci_low"],
                                                 r["reference_ci_high"]),
        "treatment": f"{r['treatment']}: " + _ci(r["treatment_value"], r["treatment_ci_low"],
                                                 r["treatment_ci_high"]),
        "difference": _ci(r["diff"], r["diff_ci_low"], r["diff_ci_high"], signed=True),
        "n": int(r["n"]),
        "differ": "—" if r.get("n_discordant") is None else str(r["n_discordant"]),
        last: shown_verdict(r, with_reason=False),
        "why inconclusive": reason_text(r) or "—"}) for i, r in enumerate(rows)]
    schema = dg.TableSchema(columns=[dg.TableColumn(c, "int" if c == "n" else "string")
                                     for c in columns])
    return dg.MetadataValue.table(records=records, schema=schema)


NO_CLAIM_PART = "no claim part (setup checks only)"
PLUMBING_ONLY = "plumbing run (no verdict at this scale)"


def overall_verdict(rows: Sequence[Mapping[str, Any]]) -> str:
    """The claim's verdict from its claim parts (:func:`eval.claims.combine`, setup checks and
    plumbing runs left out); :data:`PLUMBING_ONLY` when no part counts and some is plumbing,
    :data:`NO_CLAIM_PART` when every part is a check."""
    if any(counts(r) for r in rows):
        return combine(rows)
    return PLUMBING_ONLY if any(is_plumbing(r) for r in rows) else NO_CLAIM_PART


def claims_metadata(rows: Sequence[Mapping[str, Any]],
                    plot_path: Any = None) -> dict[str, Any]:
    """The result page: the overall verdict (claim parts only), a short table of the claim
    parts, then of the plumbing runs and of the setup checks (with how many passed), and per
    part its verdict and an inline plot (each small enough for the UI to render on the page
    itself). Parts are numbered in the order the tables list them, and the per-part entries use
    that number (``verdict_1``, ``plot_1``): short keys, which the UI's key column shows whole
    beside the time stamps; the plot's title names the metric."""
    claims = [r for r in rows if counts(r)]
    checks = [r for r in rows if is_check(r)]
    plumbing = [r for r in rows if is_plumbing(r)]
    meta: dict[str, Any] = {"verdict": overall_verdict(rows)}
    if claims:
        meta["claims"] = claims_table(claims)
    if plumbing:
        meta["plumbing"] = claims_table(plumbing, last="plumbing", first=len(claims) + 1)
    if checks:
        meta["checks"] = claims_table(checks, last="check",
                                      first=len(claims) + len(plumbing) + 1)
        passed = sum(shown_verdict(r, with_reason=False) == "check passed" for r in checks)
        meta["checks_passed"] = f"{passed} of {len(checks)}"
    for number, row in enumerate([*claims, *plumbing, *checks], start=1):
        kind = "check" if is_check(row) else "plumbing" if is_plumbing(row) else "verdict"
        meta[f"{kind}_{number}"] = shown_verdict(row)
        svg = inline_svg(claim_svg(row), alt=_slug(f"{row['section']} {row['metric']}"))
        if svg is not None:
            meta[f"plot_{number}"] = dg.MetadataValue.md(svg)
    if plot_path is not None:
        meta["plot_path"] = dg.MetadataValue.path(str(plot_path))
    return meta


def seeds_metadata(wh: Warehouse, experiment: str, scale: str,
                   design: str) -> dict[str, Any]:
    """The page's "across seeds" entries when ``claim_history`` holds this experiment's design
    at this scale for two seeds or more (:func:`eval.replicates.pooled_rows`): the pooled
    verdict and a table of the parts pooled over the newest run of each seed; {} otherwise."""
    from eval.claims.readers import claim_history
    from eval.replicates import pooled_rows

    pooled = [r for r in pooled_rows(claim_history(wh, [experiment]))
              if r["scale"] == scale and r["design"] == design]
    if not pooled:
        return {}
    records = [dg.TableRecord({
        "section": str(r["section"]), "metric": str(r["metric"]), "seeds": str(r["seeds"]),
        "per seed": "; ".join(f"{s}: {d:+.3g}" + ("" if is_plumbing(r) else f" {v}")
                              for s, d, v in r["per_seed"]),
        "pooled difference": _ci(r["diff"], r["diff_ci_low"], r["diff_ci_high"], signed=True),
        "verdict": shown_verdict(r)}) for r in pooled]
    columns = ["section", "metric", "seeds", "per seed", "pooled difference", "verdict"]
    return {"verdict_across_seeds": overall_verdict(pooled),
            "across_seeds": dg.MetadataValue.table(
                records=records,
                schema=dg.TableSchema(columns=[dg.TableColumn(c, "string") for c in columns]))}


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^0-9a-zA-Z]+", "_", text).strip("_").lower()


def stamp_rows(rows: Sequence[Mapping[str, Any]], experiment: str, settings: Mapping[str, Any],
               derived: Sequence[str] = ()) -> tuple[list[dict[str, Any]], str]:
    """(``rows`` stamped with the experiment, scale, config, seed and design, the design):
    the seed is ``settings["seed"]`` unless a row brings its own (drawn upstream); the design
    hashes the settings without the seed and the ``derived`` keys."""
    import json

    seed = as_seed(settings.get("seed"))
    design = design_hash({k: v for k, v in settings.items() if k != "seed" and k not in derived})
    config_json = json.dumps(dict(settings), sort_keys=True, default=str)
    return [dict(r, experiment=experiment, scale=settings["scale"], config_json=config_json,
                 seed=r.get("seed", seed), design=r.get("design", design)) for r in rows], design


def materialized_in_run(context: dg.AssetExecutionContext, asset: str,
                        key: str = "partition") -> str | None:
    """Metadata ``key`` of the materialization of ``asset`` in this asset's own Dagster run (a
    claim job runs its experiment, then judges it), None when the run did not materialize it
    (the result asset materialized alone judges the newest stored run). Read from the run's
    event log, so two claim jobs of one experiment running side by side (two seeds) each judge
    their own experiment, never the one that happened to finish last."""
    records = context.instance.all_logs(
        context.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
    found = None
    for record in records:
        event = record.dagster_event
        if event is None or event.asset_key != dg.AssetKey(asset):
            continue
        value = event.step_materialization_data.materialization.metadata.get(key)
        if value is not None:
            found = str(getattr(value, "value", value))
    return found


def record_claims(context: dg.AssetExecutionContext, wh: Warehouse, experiment: Experiment,
                  scale: str, compute: Callable[[], list[dict[str, Any]]],
                  config: Mapping[str, Any] | None = None,
                  clients: Sequence[Any] = (), derived: Sequence[str] = ()
                  ) -> dg.MaterializeResult:
    """Run ``compute`` (returns ``eval.claims.judge`` rows) inside the asset's `runs` record,
    stamp each row with the experiment, scale and config, write them to ``claims`` (partition
    = the experiment; the run it replaces and this one are kept in ``claim_history``,
    :func:`eval.claims.readers.keep_history`) and return the page's metadata. A ``compute`` that raises records a
    failed run and fails the asset with its message (nothing already in ``claims`` is lost); a
    stopped one (Ctrl-C, Dagster's interrupt) records a canceled run. The LLM calls of
    ``clients`` (LLM clients ``compute`` uses) are written with the run either way.

    Each row also gets the run's ``seed`` (``config["seed"]`` when it is an int; a row that
    ``compute`` returns with its own ``seed``, taken from the upstream run, keeps it) and its
    ``design``: :func:`design_hash` of ``config`` without the seed and without the keys named
    in ``derived`` (what the run found rather than how it was set up: checkpoint ids, counts).
    Runs with the same design and different seeds are replicates (:mod:`eval.replicates`)."""
    from eval.claims import ClaimError

    started = now()
    settings = {"scale": scale, **dict(config or {})}
    with run_record(context, wh, settings, partition=experiment.name,
                    started_at=started) as rec:
        for client in clients:
            rec.track(client)
        try:
            # a beat every 20 s with what compute() reports (pipelines.progress.report)
            with heartbeat(f"{experiment.name} ({scale})", context.log.info, every_s=20.0):
                rows = compute()
        except (ClaimError, ValueError) as exc:
            raise dg.Failure(description=f"{experiment.name}: {exc}") from exc
        if not rows:
            raise dg.Failure(description=f"{experiment.name}: no claim rows were computed")
        rows = experiment.mark_plumbing(rows, scale)
        stamped, design = stamp_rows(rows, experiment.name, settings, derived)
        keep_history(wh, experiment.name)  # the run this one replaces
        rec.write(CLAIMS_TABLE, stamped, partition=experiment.name)
        keep_history(wh, experiment.name)
    meta = claims_metadata(stamped)
    meta["scale"] = scale
    meta.update(seeds_metadata(wh, experiment.name, scale, design))
    if scale == "cpu" and experiment.limits.get("cpu"):
        meta["what_limits_it"] = experiment.limits["cpu"]
    for row in stamped:
        context.log.info(f"{experiment.paper} {row['section']} {row['metric']}: "
                         f"{shown_verdict(row)} (Δ {row['diff']:+.4g}, CI "
                         f"[{row['diff_ci_low']:+.4g}, {row['diff_ci_high']:+.4g}], "
                         f"n={row['n']}, {row.get('n_discordant')} differ)")
    return dg.MaterializeResult(metadata=meta)
