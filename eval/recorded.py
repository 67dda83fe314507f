"""One recorded evaluation path: serve, connect, check, evaluate, record.

:func:`evaluate_recorded` is the code path of every evaluation weft stores: the
``eval_samples`` asset, the DUET sweep's checkpoints (DUET §4.1), the Engagement paper's
Table 5 job (Engagement Process §5.3) and Tandem RL's solo and handoff runs (Tandem RL
§4.2-4.3). It serves each model (``eval.models.ModelSpec.serve``: a registered endpoint as
is, a local folder on a local vLLM server), builds one client per served model with the
caller's ``make_client`` (the assets pass the ``llm`` resource's ``client_for``, so every
client carries its retries, deadlines, response cap, watchdog and progress), checks each
endpoint answers (an unreachable registered endpoint fails with ``unreachable_advice``), and
then runs the :class:`Evaluation` items in order with ``eval.runner.evaluate``.

Every evaluation is one recorded run (``warehouse.runs.RunRecord``) under lineage asset
``eval_samples`` and partition ``<benchmark>|<label>`` (``eval_partition``): its `llm_calls`, then its
``eval_samples`` rows (and, with ``write_scores``, its ``eval_scores`` rows stamped with the
checkpoint id), then its `runs` row. Without ``write_scores`` the samples are not scored at all
(``EvalResult.scores`` is empty): the caller scores what was stored, once (the
``eval_samples`` asset leaves that to the ``eval_scores`` asset). The checks and views over ``eval_samples`` treat every
caller's rows alike. When serving, the reachability check or an evaluation fails, the
evaluation under way (the first one, before any has started) still writes the calls it made
and a `runs` row with status ``failed`` (``canceled`` for an interrupt) and the reason; the
evaluations after it are not run and write nothing.

Not guaranteed: that a model's several evaluations see the same server state (a shared local
server may be reused by other runs meanwhile).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from eval.runner import EvalConfig, EvalResult, Plan, evaluate
from warehouse import Lineage, Warehouse, config_hash
from warehouse.partitions import eval_partition
from warehouse.runs import RunRecord

EVAL_ASSET = "eval_samples"


@dataclass(frozen=True)
class Evaluation:
    """One evaluation to run and record.

    ``model`` names the served model (a key of ``evaluate_recorded``'s ``specs``) that
    answers; with ``partner`` (handoff mode, Tandem RL §4.3) the two answer as an
    ``eval.handoff_team.HandoffTeam(model, partner)``. Rows carry ``label`` as their model and go
    to the partition ``eval_partition(benchmark, label)`` (``<benchmark>|<label>``)."""

    label: str
    cfg: EvalConfig
    model: str
    partner: str | None = None
    checkpoint_id: str | None = None
    plan: Plan | None = None  # ``eval.runner.plan_evaluation`` of the problems, if made already


@dataclass
class Recorded:
    """A finished evaluation: its result, its LLM call records and the lineage it was written
    under (``warehouse.runs.run_partition(lineage)`` is its `llm_calls` partition)."""

    evaluation: Evaluation
    result: EvalResult
    calls: list[dict[str, Any]] = field(default_factory=list)
    lineage: Lineage = field(default_factory=Lineage)

    def summary(self) -> dict[str, Any]:
        """The evaluation in figures: samples, graded, accuracy over answered samples, failed
        generations and their share, time spent generating and grading, tokens and generation
        speed (tokens the server generated over the time spent generating them; replayed cache
        hits count apart), and the `llm_calls` partition of this run's calls."""
        result = self.result
        samples = result.samples
        answered = [r for r in samples if r.get("gen_error") is None]
        usage = result.usage
        tok_s = usage.tokens_per_s if usage is not None and usage.tokens_per_s is not None else 0.0
        total_s = result.generation_s + result.grading_s
        return {
            "samples": len(samples),
            "graded": sum(1 for r in samples if r.get("correct") is not None),
            "accuracy": sum(bool(r.get("correct")) for r in answered) / max(1, len(answered)),
            "generation_errors": result.errors,
            "failure_share": round(result.errors / max(1, len(samples)), 4),
            "llm_calls_partition": self.lineage.partition,  # with run_id, this run's calls
            "generation_s": round(result.generation_s, 2),
            "grading_s": round(result.grading_s, 2),
            "generation_share": round(result.generation_s / total_s, 3) if total_s else 0.0,
            "samples_per_s": round(len(samples) / total_s, 3) if total_s else 0.0,
            "completion_tokens": result.completion_tokens,
            "generated_tokens": usage.generated_tokens if usage is not None else 0,
            "generating_s": round(usage.generating_s, 2) if usage is not None else 0.0,
            "tokens_per_s": round(tok_s, 1),
            "cached_calls": sum(1 for c in self.calls if c.get("cached")),
        }




def evaluate_recorded(specs: Mapping[str, Any], evaluations: Sequence[Evaluation], *, bench: Any,
                      problems: Sequence[Mapping[str, Any]], wh: Warehouse, run_id: str,
                      config: Mapping[str, Any],
                      make_client: Callable[[str, str, str | None], Any],
                      started_at: dt.datetime | None = None, write_scores: bool = True,
                      pool: Any | None = None, pool_factory: Callable[[], Any] | None = None,
                      sandbox: Any | None = None,
                      progress: Callable[[str], None] | None = None,
                      heartbeat_s: float = 20.0) -> list[Recorded]:
    """Serve ``specs`` ({key: ``eval.models.ModelSpec``}), run ``evaluations`` on
    ``problems`` of ``bench`` and record each as a run of ``run_id`` (`runs` config
    ``config``); returns one :class:`Recorded` per evaluation, in order.

    ``make_client(base_url, served_model, api_key)`` builds an LLM client. Grading uses
    ``pool``, or a pool opened by ``pool_factory()`` (a context manager) around the
    evaluations; ``sandbox`` runs code benchmarks and tool mode. ``write_scores=False``
    neither scores nor writes scores (each result's ``scores`` is empty). Raises ``ValueError`` for
    an evaluation naming a model that is not in ``specs`` (before serving anything), and
    re-raises whatever stopped the run after recording it."""
    if not evaluations:
        raise ValueError("evaluate_recorded: no evaluations given; pass at least one Evaluation")
    for ev in evaluations:
        for key in (ev.model, ev.partner):
            if key is not None and key not in specs:
                raise ValueError(f"evaluation {ev.label!r} names model {key!r}, which is not "
                                 f"among the served specs {sorted(specs)}")
    started = started_at or dt.datetime.now(dt.UTC)
    records = [RunRecord(wh, Lineage(run_id=run_id, asset=EVAL_ASSET,
                                     partition=eval_partition(bench.name, ev.label),
                                     config_hash=config_hash(dict(config))),
                         config=config, started_at=started) for ev in evaluations]
    current = records[0]
    try:
        with ExitStack() as stack:
            clients = {key: _served_client(stack, spec, make_client)
                       for key, spec in specs.items()}
            for record in records:
                for client in clients.values():
                    record.track(client)
            if pool is None and pool_factory is not None:
                pool = stack.enter_context(pool_factory())

            async def run_all() -> list[Recorded]:
                nonlocal current
                done: list[Recorded] = []
                try:
                    for ev, record in zip(evaluations, records):
                        current = record
                        record.start()  # heartbeat, and its calls flushed as they complete
                        result = await evaluate(
                            _answerer(ev, clients), bench, problems, ev.cfg,
                            model_label=ev.label, pool=pool, sandbox=sandbox,
                            checkpoint_id=ev.checkpoint_id, progress=progress,
                            heartbeat_s=heartbeat_s, scored=write_scores, plan=ev.plan)
                        record.write(EVAL_ASSET, result.samples)
                        if write_scores:
                            scores = [dict(s, checkpoint_id=ev.checkpoint_id)
                                      for s in result.scores]
                            record.write("eval_scores", scores, counted=False, lineage=(
                                dataclasses.replace(record.lineage, asset="eval_scores")))
                        record.commit()
                        done.append(Recorded(ev, result, list(record.calls), record.lineage))
                finally:
                    for client in clients.values():
                        await client.aclose()
                return done

            return asyncio.run(run_all())
    except BaseException as exc:
        current.abort(exc)
        raise


def _served_client(stack: ExitStack, spec: Any, make_client: Callable[[str, str, str | None], Any]):
    """Serve ``spec`` for the life of ``stack`` and return a client that has answered."""
    from eval.models import unreachable_advice
    from pipelines.llm import EndpointUnreachable

    base_url, served, api_key = stack.enter_context(spec.serve())
    client = make_client(base_url, served, api_key)
    try:
        client.check_reachable()
    except EndpointUnreachable as err:
        if spec.kind != "endpoint":
            raise
        raise EndpointUnreachable(unreachable_advice(spec, str(err))) from None
    return client


def _answerer(ev: Evaluation, clients: Mapping[str, Any]) -> Any:
    if ev.partner is None:
        return clients[ev.model]
    from eval.handoff_team import HandoffTeam

    return HandoffTeam(clients[ev.model], clients[ev.partner])
