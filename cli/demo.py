"""`make demo`: the main job on the embedded model, offline, on a laptop CPU.

Converts the embedded model (once), starts the local vLLM server, materializes the ingestion
assets (the built-in reasoning-gym generator plus every benchmark file under WEFT_DATA_DIR:
math, multiple choice and code; not the training pools), evaluates the embedded model on a
small slice of GSM8K and MATH-500 (20 problems each, k=2) by materializing `eval_samples`,
`eval_scores` and `eval_reports` into a persistent Dagster instance under WEFT_HOME (so the runs
appear in the UI), prints the scores from DuckDB with SQL and stops the server it started.

Then it trains and checks that training helped: SFT (`demo_sft`: 3 steps teach the boxed answer
format on built-in two-digit arithmetic) -> GRPO (`demo_grpo`: outcome reward on the built-in
one-digit set `builtin:arith1`, where the model is right some of the time; 4 prompts x 4
rollouts per step, degenerate groups dropped as in SxS §3.2) through Dagster Pipes, prints the
logged steps (reward, share of dropped groups), and materializes `learning_claim`: the base,
SFT and trained models, each served, evaluated like any benchmark (``eval.recorded``: rows in
`eval_samples` under `arith1_heldout`, `runs`, `llm_calls`) on held-out one-digit problems no
checkpoint of the lineage trained on (avg@k at the GRPO temperature), compared with paired
bootstraps over problems and written as `claims` rows of that run. The three models are served
once (one vLLM server each) for that comparison and the checkpoints' GSM8K evaluation after it.
Training uses every core when they are idle at the start, else one torch thread
(:func:`training_threads`); ``--train-only`` runs just this part.
The last lines say whether the trained model is measurably better than the base model, and
whether GRPO itself added anything over its SFT start; neither is assumed.

What it prints (:mod:`cli.console`): the terminal gets the demo's own lines only: each stage
as it starts and what it produced (problems per source, each model's scores, what the base
model's GSM8K answers state and why they score what they do, one line per finished training
step, the held-out comparison, where to look). Everything else (Dagster's event lines, the
training scripts' output, vLLM's server log, warnings, progress bars) goes to
``WEFT_HOME/logs/demo-<time>.log``, named on the first and last line; a failure shows its error
and that path on the terminal and exits non-zero. ``--verbose`` (or ``WEFT_VERBOSE=1``) leaves
all output on the terminal.

Not guaranteed: that a few CPU steps of GRPO move held-out accuracy beyond noise; the demo
reports what it measured either way.
"""

import argparse
import json
import logging
import os
import re
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import dagster as dg

from cli import console
from cli.console import say, stage

# DAGSTER_HOME preparation lives in cli.instance (shared with `make ui` and `weft`)
from cli.instance import (  # noqa: F401 - re-exported for callers of cli.demo
    ENV_MAX_RUN_SECONDS,
    ensure_dagster_home,
    run_monitoring_settings,
)
from pipelines.settings import data_dir, weft_home
from training.heldout import DEMO_SFT_RECIPE, HELDOUT_BENCHMARK

DEMO_BENCHMARKS = ("gsm8k", "math500")
CHECKPOINT_BENCHMARK = "gsm8k"  # where the trained checkpoints are evaluated like the base model
LEADERBOARD_SQL = ("SELECT benchmark, model, metric, k, round(value, 3) AS value, "
                   "round(ci_low, 3) AS ci_low, round(ci_high, 3) AS ci_high, n_problems "
                   "FROM latest_scores WHERE benchmark = 'gsm8k' ORDER BY value DESC, model")
DEMO_GRPO_RECIPE = "demo_grpo"
LEARNING_EXPERIMENT = "learning_claim"  # the result asset that measures the trained models
HELDOUT_PROBLEMS = 48
HELDOUT_K = 2


ENV_THREADS = "WEFT_DEMO_THREADS"


def idle_cores(interval: float = 1.0) -> float:
    """How many of this process's cores were idle over the next ``interval`` seconds (from
    /proc/stat's idle and iowait time, Linux; 0.0 where it cannot be read)."""
    def sample() -> tuple[float, float]:
        with open("/proc/stat", encoding="ascii") as fh:
            ticks = [float(x) for x in fh.readline().split()[1:9]]  # user .. steal
        return ticks[3] + ticks[4], sum(ticks)

    try:
        idle0, total0 = sample()
        time.sleep(interval)
        idle1, total1 = sample()
    except (OSError, ValueError, IndexError):
        return 0.0
    if total1 <= total0:
        return 0.0
    cores = os.cpu_count() or 1
    return cores * (idle1 - idle0) / (total1 - total0)


def training_threads(requested: int | None = None, idle: float | None = None) -> int:
    """torch threads for the demo's training: ``requested`` (or
    WEFT_DEMO_THREADS) when given, else every core available to this process when nearly all
    of them are idle right now, else 1. (training.config_base: on 2 cores, 2 threads were
    1.6x faster than 1 on a quiet machine and far slower beside other work.)"""
    if requested is None and os.environ.get(ENV_THREADS):
        try:
            requested = int(os.environ[ENV_THREADS])
        except ValueError:
            raise ValueError(f"{ENV_THREADS} must be a whole number of threads, got "
                             f"{os.environ[ENV_THREADS]!r}") from None
    if requested is not None:
        if requested < 1:
            raise ValueError(f"training threads must be at least 1, got {requested}")
        return requested
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    idle = idle_cores() if idle is None else idle
    return cores if cores > 1 and idle >= cores - 0.5 else 1


def demo_sources() -> list[str]:
    """What the demo ingests: the built-in reasoning-gym generator plus every benchmark (the
    test-split sources: math, multiple choice and code) whose file is under WEFT_DATA_DIR. The
    training pools (GSM8K/MATH train, DAPO, DeepScaleR) are left out: the demo trains on
    built-in arithmetic, and they are materialized on request (``<name>_problems``)."""
    from pipelines.ingest import SOURCES

    sources = ["reasoning_gym"]
    root = data_dir()
    for name, spec in SOURCES.items():
        if spec.split != "test" or root is None or not spec.local_path:
            continue
        if (root / spec.local_path).exists():
            sources.append(name)
    return sources


# ------------------------------------------------------------------ what the demo says

# a training step as the training script reports it through Pipes (training.callbacks
# RunRecorder) and Dagster's console logger writes it: "... - <checkpoint> step 3/8: k=v, ..."
STEP_LINE = re.compile(r" - (?P<checkpoint>[\w.:-]+) step (?P<step>\d+)/(?P<total>\d+): "
                       r"(?P<metrics>.+)$")
STEP_LABELS = {"reward_mean": "reward", "filtered_group_share": "dropped groups",
               "loss": "loss", "kl": "kl", "seconds_per_step": "s/step"}


def step_summary(line: str) -> str | None:
    """The terminal line for one finished training step found in a log line, or None when the
    line is not one: ``[demo]   <checkpoint> step 3/8  reward 0.625, dropped groups 0.5, ...``
    (the metrics of :data:`STEP_LABELS`, reward first)."""
    m = STEP_LINE.search(line)
    if m is None:
        return None
    metrics = dict(part.split("=", 1) for part in m["metrics"].split(", ") if "=" in part)
    shown = [f"{label} {metrics[key]}" for key, label in STEP_LABELS.items() if key in metrics]
    return (f"[demo]   {m['checkpoint']} step {m['step']}/{m['total']}  "
            + (", ".join(shown) or m["metrics"]))


def follow_log(line: str) -> None:
    """The demo's :class:`cli.console.Console` follower: one short terminal line per
    finished training step."""
    summary = step_summary(line)
    if summary is not None:
        say(summary)


def ingest_summary(sources: list[str]) -> list[str]:
    """Problems per ingested source in the warehouse's ``problems`` table, and rejected rows
    (``rejects``), as the demo's ingestion lines."""
    from warehouse import Warehouse

    wh = Warehouse()
    counts = {r["source"]: int(r["n"]) for r in wh.sql(
        "SELECT source, count(*) AS n FROM problems WHERE list_contains($s, source) "
        "GROUP BY source", {"s": sources}).to_pylist()}
    try:
        rejected = int(wh.sql("SELECT count(*) AS n FROM rejects WHERE list_contains($s, source)",
                              {"s": sources}).to_pylist()[0]["n"])
    except Exception:  # noqa: BLE001 - no rejects table yet: nothing was rejected
        rejected = 0
    parts = [f"{s} {counts.get(s, 0):,}" for s in sources]
    kept = (f" ({rejected:,} rows rejected: SELECT * FROM rejects)" if rejected else
            " (no rows rejected)")
    out = [f"[demo] ingested {sum(counts.values()):,} problems from {len(sources)} sources{kept}:"]
    line = ""
    for i, part in enumerate(parts):
        piece = part + ("," if i < len(parts) - 1 else "")
        if line and len(line) + 1 + len(piece) > 92:
            out.append(f"[demo]   {line}")
            line = ""
        line = f"{line} {piece}" if line else piece
    out.append(f"[demo]   {line}")
    return out


def score_line(benchmark: str, model: str, label: str) -> str:
    """One line of a model's latest scores on a benchmark (``latest_scores``): pass@1 with its
    95% CI, then the other metrics."""
    from warehouse import Warehouse

    rows = Warehouse().sql("SELECT metric, k, value, ci_low, ci_high, n_problems, n_samples "
                           "FROM latest_scores WHERE benchmark = $b AND model = $m "
                           "ORDER BY metric DESC, k", {"b": benchmark, "m": model}).to_pylist()
    if not rows:
        return f"[demo] {label} on {benchmark}: no scores were written"
    parts = []
    for r in rows:
        name = r["metric"].replace("@k", f"@{r['k']}")
        text = f"{name} {r['value']:.3f}"
        if name == "pass@1" and r["ci_low"] is not None:
            text += f" (95% CI {r['ci_low']:.3f}-{r['ci_high']:.3f})"
        parts.append(text)
    return (f"[demo] {label} on {benchmark} ({rows[0]['n_problems']} problems): "
            + ", ".join(parts))


@dataclass(frozen=True)
class AnswerDiagnosis:
    """How a model's answers on a math benchmark were read by the strict extraction rule."""

    samples: int
    stated: int  # a final answer the strict rule reads (\\boxed{} or an answer phrase)
    stated_right: int
    unstated: int
    cut_off: int  # of the unstated: generation stopped at the token limit
    flexible_right: int  # right when the last number of the output is taken (flexible rule)


def diagnose_answers(rows: list[dict[str, Any]]) -> AnswerDiagnosis:
    """Count, over ``eval_samples`` rows (``output``, ``gold``, ``extraction_method``,
    ``correct``, ``finish_reason``), the answers the strict rule read and how many were right,
    the answers with no readable final answer (and how many of those were cut off at the
    token limit), and how many the flexible rule (``eval.extraction.FLEXIBLE_POLICY``, the last
    number in the whole output) would grade right."""
    from eval.extraction import FLEXIBLE_POLICY
    from eval.graders import grade_math

    stated = [r for r in rows if r.get("extraction_method") not in (None, "none")]
    unstated = [r for r in rows if r.get("extraction_method") in (None, "none")]
    flexible = 0
    for r in rows:
        try:
            flexible += bool(grade_math(r.get("output") or "", str(r["gold"]),
                                        FLEXIBLE_POLICY).correct)
        except (TypeError, ValueError):
            pass  # an unusable gold grades as wrong under every rule
    return AnswerDiagnosis(
        samples=len(rows), stated=len(stated),
        stated_right=sum(bool(r.get("correct")) for r in stated), unstated=len(unstated),
        cut_off=sum(r.get("finish_reason") == "length" for r in unstated),
        flexible_right=flexible)


def describe_answers(d: AnswerDiagnosis, benchmark: str, score: float, max_tokens: int) -> str:
    """Why the base model scores what it does on ``benchmark`` (two lines), from
    :func:`diagnose_answers`: what its answers state, and whether reading them leniently would
    change the score."""
    if d.stated == 0:
        why = ("it never states a final answer the strict rule accepts" +
               (": the score is about format." if d.flexible_right else
                ", and its numbers are wrong too."))
    elif d.flexible_right > d.stated_right:
        why = "part of the gap is format: the last numbers are right more often."
    elif d.stated_right < d.stated:
        why = "its stated answers are wrong (the arithmetic fails, not the format)."
    else:
        why = "every answer it states is right."
    return (f"[demo] why the base model scores {score:.3f} on {benchmark}: {d.stated} of "
            f"{d.samples} answers state one (\\boxed{{}} or 'the answer is N'), "
            f"{d.stated_right} right;\n"
            f"[demo]   {d.unstated} state none ({d.cut_off} cut off at {max_tokens} tokens); the "
            f"last number (flexible rule) is right in {d.flexible_right}: {why}")


def answer_story(benchmark: str, model: str, max_tokens: int) -> str | None:
    """:func:`describe_answers` for the latest samples of ``model`` on ``benchmark`` and its
    latest avg@k, or None when there are no samples."""
    from warehouse import Warehouse

    wh = Warehouse()
    rows = wh.sql("SELECT output, gold, extraction_method, correct, finish_reason FROM "
                  "eval_samples WHERE benchmark = $b AND model = $m",
                  {"b": benchmark, "m": model}).to_pylist()
    if not rows:
        return None
    score = wh.sql("SELECT value FROM latest_scores WHERE benchmark = $b AND model = $m AND "
                   "metric = 'avg@k'", {"b": benchmark, "m": model}).to_pylist()
    return describe_answers(diagnose_answers(rows), benchmark,
                            float(score[0]["value"]) if score else 0.0, max_tokens)


def training_story(sft_id: str, grpo_id: str) -> list[str]:
    """The training stage's result lines from ``train_metrics``: SFT steps and loss, GRPO
    steps, reward of the first and last third of its steps, and the share of dropped groups."""
    from warehouse import Warehouse

    rows = Warehouse().sql(
        "SELECT checkpoint_id, step, loss, reward_mean, filtered_group_share FROM train_metrics "
        "WHERE checkpoint_id IN ($s, $g) ORDER BY step", {"s": sft_id, "g": grpo_id}).to_pylist()
    sft = [r for r in rows if r["checkpoint_id"] == sft_id]
    out = []
    if sft:
        losses = [r["loss"] for r in sft if r["loss"] is not None]
        loss = f", loss {losses[0]:.3f} -> {losses[-1]:.3f}" if losses else ""
        out.append(f"[demo] SFT {sft_id}: {len(sft)} steps{loss}")
    steps, first, last = reward_thirds(grpo_id)
    dropped = [r["filtered_group_share"] for r in rows
               if r["checkpoint_id"] == grpo_id and r["filtered_group_share"] is not None]
    line = f"[demo] GRPO {grpo_id}: {steps} steps"
    if first is not None and last is not None:
        line += f", reward {first:.3f} (first third) -> {last:.3f} (last third)"
    if dropped:
        line += (f", {sum(dropped) / len(dropped):.0%} of groups dropped (all right or all "
                 "wrong)")
    out.append(line)
    return out


# ------------------------------------------------------------------ did training help?


def describe_learning(rows: list[dict[str, Any]], n_steps: int, reward_first: float | None,
                      reward_last: float | None) -> list[str]:
    """The demo's closing lines from the ``learning_claim`` rows (``training.heldout.
    learning_claims``: trained vs base, then trained vs SFT): what was measured and whether the
    model got better."""
    vs_base, vs_sft = rows

    def line(label: str, r: dict[str, Any]) -> str:
        return (f"  {label}: {r['treatment_value']:.3f} vs {r['reference_value']:.3f}, difference "
                f"{r['diff']:+.3f} (95% CI {r['diff_ci_low']:+.3f} to {r['diff_ci_high']:+.3f}, "
                f"one-sided p={r['p_value']:.3g}, n={r['n']} problems, paired bootstrap)")

    out = [f"[demo] {vs_base['section']} ({vs_base['n']} problems never trained on):",
           line("trained (SFT+GRPO) vs base model", vs_base),
           line("trained vs its SFT start (what GRPO added)", vs_sft)]
    if reward_first is not None and reward_last is not None:
        out.append(f"  GRPO reward over {n_steps} steps: {reward_first:.3f} (first third) -> "
                   f"{reward_last:.3f} (last third)")
    if vs_base["diff_ci_low"] > 0:
        out.append("[demo] the pipeline trained a model and measured that it got better: the "
                   "trained model beats the base model on held-out problems (CI above 0).")
    else:
        out.append("[demo] the pipeline trained a model but did NOT measure an improvement over "
                   "the base model on held-out problems (the CI includes 0 or lies below it).")
    out.append("[demo] GRPO on its own: " + (
        "improved on its SFT start (CI above 0)." if vs_sft["diff_ci_low"] > 0 else
        "made it worse than its SFT start (CI below 0)." if vs_sft["diff_ci_high"] < 0 else
        "no change measurable at this size (the CI includes 0)."))
    return out


def learning_rows() -> list[dict[str, Any]]:
    """The newest ``learning_claim`` rows (trained vs base, then trained vs SFT)."""
    from eval.claims.readers import latest_claims
    from warehouse import Warehouse

    rows = [r for r in latest_claims(Warehouse()) if r["experiment"] == LEARNING_EXPERIMENT]
    return sorted(rows, key=lambda r: r["reference"] != "base")


def reward_thirds(checkpoint_id: str) -> tuple[int, float | None, float | None]:
    """(steps, mean reward of the first third of the logged GRPO steps, of the last third)."""
    from warehouse import Warehouse

    rows = Warehouse().sql("SELECT step, reward_mean FROM train_metrics WHERE checkpoint_id = "
                           "$id AND reward_mean IS NOT NULL ORDER BY step",
                           {"id": checkpoint_id}).to_pylist()
    rewards = [float(r["reward_mean"]) for r in rows]
    if len(rewards) < 3:
        return len(rewards), None, None
    third = len(rewards) // 3
    return (len(rewards), sum(rewards[:third]) / third, sum(rewards[-third:]) / third)


def demo_run_config(ops: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run config of the demo's runs: the console log at INFO, every step in the run's own
    process (the in-process executor), and the ``ops`` config. Nothing in it is tied to this
    demo's process, so a re-execution from the UI runs the same way."""
    config: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "INFO"}}},
                              "execution": {"config": {"in_process": {}}}}
    if ops:
        config["ops"] = ops
    return config


def demo_stage_run(launcher: Any, tag: str, job: str | None = None, **kwargs: Any) -> bool:
    """One stage of the demo as a run of a job of weft's code location, created and executed by
    ``launcher`` (an ``cli.launcher.Launcher``), so the UI can re-execute it; tagged
    ``weft/demo=<tag>``. True when the run succeeded; otherwise says which run to look at."""
    run = launcher.launch(job, tags={"weft/demo": tag}, **kwargs)
    if run.status == dg.DagsterRunStatus.SUCCESS:
        return True
    say(f"[demo] run {run.run_id} ({run.job_name}, {tag}) ended {run.status.value}: its log is "
        f"in the UI (make ui, then http://127.0.0.1:3000/runs/{run.run_id})")
    return False


def checkpoint_of(instance: dg.DagsterInstance, asset: str) -> tuple[str, str]:
    """(path, checkpoint id) of the latest materialization of a checkpoint asset."""
    event = instance.get_latest_materialization_event(dg.AssetKey(asset))
    meta = event.asset_materialization.metadata  # type: ignore[union-attr]
    return str(meta["checkpoint_path"].value), str(meta["checkpoint_id"].value)


def serve_measured_models(instance: dg.DagsterInstance, servers: ExitStack) -> None:
    """Start one vLLM server each for the base model and the latest SFT and GRPO checkpoints
    (unless one already serves it), stopped when ``servers`` closes. The held-out comparison
    and the checkpoints' benchmark evaluation find them through their records
    (``eval.models.ModelSpec.running_server``) instead of each starting the models again: a
    start costs 25-45 s on 2 CPU cores, and the checkpoints were started twice."""
    from eval.models import embedded_spec
    from pipelines.serving import LocalModelServer, free_port
    from training.model_path import serving_spec

    specs = [embedded_spec(), *(serving_spec(*checkpoint_of(instance, asset))
                                for asset in ("sft_checkpoint", "grpo_checkpoint"))]
    stage("[demo] serving the base, SFT and trained models (one vLLM server each, kept until "
          "the checkpoints' evaluation ends) ...")
    for spec in specs:
        if spec.running_server() is not None:
            continue
        server = LocalModelServer(model_path=spec.path, served_name=spec.served_model or
                                  spec.model_id, port=free_port())
        servers.callback(server.stop)
        server.start()


def train_and_measure(instance: dg.DagsterInstance, n_heldout: int = HELDOUT_PROBLEMS,
                      k: int = HELDOUT_K, stages: dict[str, float] | None = None,
                      threads: int | None = None, launcher: Any = None,
                      servers: ExitStack | None = None) -> bool:
    """SFT on two-digit, GRPO on one-digit arithmetic through Dagster Pipes (``demo_sft``,
    ``demo_grpo``, as the recipes stand, with ``torch_threads`` from
    :func:`training_threads`), then the base, SFT and trained models on held-out one-digit
    problems with paired comparisons; prints the verdict and writes it to WEFT_HOME/reports.
    ``servers``: where the measured models' servers are kept (:func:`serve_measured_models`)
    for the caller's next evaluations; without it they stop at the end."""
    if servers is None:
        with ExitStack() as own:
            return train_and_measure(instance, n_heldout, k, stages, threads, launcher, own)
    from cli.launcher import Launcher

    stages = stages if stages is not None else {}
    threads = training_threads(threads)
    stage(f"[demo] training: SFT ({DEMO_SFT_RECIPE}) then GRPO ({DEMO_GRPO_RECIPE}) through "
          f"Dagster Pipes, {threads} torch thread(s) (--threads or {ENV_THREADS} to choose) ...")
    started = time.perf_counter()
    sft_overrides = grpo_overrides = [f"torch_threads={threads}"]  # not part of checkpoint ids
    launcher = launcher or Launcher(instance)
    if not demo_stage_run(launcher, "train", selection=["sft_checkpoint", "grpo_checkpoint"],
                          run_config=demo_run_config(ops={
                              "sft_checkpoint": {"config": {"recipe": DEMO_SFT_RECIPE,
                                                            "overrides": sft_overrides}},
                              "grpo_checkpoint": {"config": {"recipe": DEMO_GRPO_RECIPE,
                                                             "overrides": grpo_overrides}}})):
        return False
    stages["train"] = time.perf_counter() - started
    started = time.perf_counter()
    _, sft_id = checkpoint_of(instance, "sft_checkpoint")
    _, trained_id = checkpoint_of(instance, "grpo_checkpoint")
    say("\n".join(training_story(sft_id, trained_id)))
    serve_measured_models(instance, servers)
    stage(f"[demo] measuring the base, SFT and trained models on {n_heldout} held-out "
          f"arithmetic problems x {k} samples (learning_claim) ...")
    if not demo_stage_run(launcher, "heldout", selection=[LEARNING_EXPERIMENT],
                          run_config=demo_run_config(ops={LEARNING_EXPERIMENT: {"config": {
                              "heldout_n": n_heldout, "sampling": {"k": k}}}})):
        return False
    rows = learning_rows()
    steps, first, last = reward_thirds(trained_id)
    # the reward's first and last third are on the training lines already
    say("\n".join(describe_learning(rows, steps, None, None)))
    stages["heldout_eval"] = time.perf_counter() - started
    out = weft_home() / "reports" / "demo_learning.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "trained_checkpoint": trained_id, "sft_checkpoint": sft_id, "run_id": rows[0]["run_id"],
        "improved": rows[0]["diff_ci_low"] > 0, "reward_first_third": first,
        "reward_last_third": last,
        "trained_vs_base": rows[0], "trained_vs_sft": rows[1],
    }, indent=2, sort_keys=True, default=str))
    say(f"[demo] both comparisons: {out}; per-sample rows: SELECT * FROM eval_samples WHERE "
        f"benchmark = '{HELDOUT_BENCHMARK}' AND run_id = '{rows[0]['run_id']}'")
    say("[demo] claims rows (python -m eval.claims): "
        + "; ".join(f"{r['claim']}: {r['verdict']}" for r in rows))
    return True


def run_training_only(heldout: int = HELDOUT_PROBLEMS, heldout_k: int = HELDOUT_K,
                      threads: int | None = None) -> int:
    """``--train-only``: the SFT -> GRPO chain and the held-out comparison, without the server,
    ingestion and benchmark evaluation (runs still land in the UI's instance)."""
    started = time.perf_counter()
    ensure_dagster_home()
    stages: dict[str, float] = {}
    if not train_and_measure(dg.DagsterInstance.get(), heldout, heldout_k, stages=stages,
                             threads=threads):
        return 1
    say("[demo] seconds per stage: " + ", ".join(f"{name} {s:.0f}" for name, s in stages.items())
        + f"; total {time.perf_counter() - started:.0f}")
    return 0


def evaluate_checkpoints(instance: dg.DagsterInstance, launcher: Any, limit: int, k: int,
                         max_tokens: int, stages: dict[str, float]) -> bool:
    """The trained models join the leaderboard: the base model's benchmark evaluation for the
    latest SFT and GRPO checkpoints, then the reports. False when a run failed."""
    mark = time.perf_counter()
    for asset in ("sft_checkpoint", "grpo_checkpoint"):
        _, checkpoint_id = checkpoint_of(instance, asset)
        stage(f"[demo] evaluating {asset} ({checkpoint_id}) on {CHECKPOINT_BENCHMARK}: "
              f"{limit} problems x k={k} ...")
        run_config = demo_run_config({"eval_samples": {"config": {
            "limit": limit, "sampling": {"k": k, "max_tokens": max_tokens, "seed": 0}}}})
        if not demo_stage_run(launcher, "eval", "eval_job", run_config=run_config,
                              partition=dg.MultiPartitionKey({
                                  "benchmark": CHECKPOINT_BENCHMARK, "model": checkpoint_id})):
            return False
    if not demo_stage_run(launcher, "report", selection=["eval_reports"],
                          run_config=demo_run_config()):
        return False
    stages["checkpoint_eval"] = time.perf_counter() - mark
    return True


def run(limit: int, k: int, max_tokens: int, port: int | None, train: bool = True,
        heldout: int = HELDOUT_PROBLEMS, heldout_k: int = HELDOUT_K,
        threads: int | None = None) -> int:
    from cli.launcher import Launcher
    from pipelines.models import EMBEDDED_SERVED_NAME
    from pipelines.serving import DEFAULT_PORT, LocalModelServer, free_port, served_models
    from warehouse import Warehouse
    from warehouse.output import format_table

    started = time.perf_counter()
    stages: dict[str, float] = {}
    ensure_dagster_home()
    instance = dg.DagsterInstance.get()
    launcher = Launcher(instance)  # weft's code location: every stage runs one of its jobs
    # On the default port the evaluation assets find and reuse this server.
    port = port or DEFAULT_PORT
    if served_models(f"http://127.0.0.1:{port}/v1") not in (None, [EMBEDDED_SERVED_NAME]):
        port = free_port()  # something else answers there; the assets start their own
    stage("[demo] starting the local vLLM server (the first run converts the embedded model) ...")
    server = LocalModelServer(port=port)
    server_log = server.log_path.stat().st_size if server.log_path.exists() else 0
    server.start()
    say(f"[demo] started the vLLM server for {server.served_name} on port {port} (its log "
        f"{server.log_path} is copied into this run's log when it stops)" if server.owned else
        f"[demo] reusing the vLLM server already serving {server.served_name} on port {port}")
    try:
        sources = demo_sources()
        stage(f"[demo] ingesting {len(sources)} sources (the built-in generator and the "
              "benchmark files under WEFT_DATA_DIR) ...")
        selection = [f"{s}_problems" for s in sources] + ["problems"]
        if not demo_stage_run(launcher, "ingest", "ingest_job", selection=selection,
                              run_config=demo_run_config()):
            return 1
        say("\n".join(ingest_summary(sources)))
        from eval.models import embedded_spec

        model_id = embedded_spec().model_id
        instance.add_dynamic_partitions("models", [model_id])
        for bench in DEMO_BENCHMARKS:
            if bench not in sources:
                say(f"[demo] skipping {bench}: its file is not under WEFT_DATA_DIR")
                continue
            stage(f"[demo] evaluating the base model on {bench}: {limit} problems x k={k} ...")
            run_config = demo_run_config({"eval_samples": {"config": {
                "limit": limit, "sampling": {"k": k, "max_tokens": max_tokens, "seed": 0}}}})
            if not demo_stage_run(launcher, "eval", "eval_job", run_config=run_config,
                                  partition=dg.MultiPartitionKey({"benchmark": bench,
                                                                  "model": model_id})):
                return 1
            say(score_line(bench, model_id, "base model"))
            if bench == CHECKPOINT_BENCHMARK:
                story = answer_story(bench, model_id, max_tokens)
                if story:
                    say(story)
        if not demo_stage_run(launcher, "report", selection=["eval_reports"],
                              run_config=demo_run_config()):
            return 1
        wh = Warehouse()
        query = ("SELECT benchmark, model, metric, k, round(value, 3) AS value, "
                 "round(ci_low, 3) AS ci_low, round(ci_high, 3) AS ci_high, n_problems "
                 "FROM latest_scores ORDER BY benchmark, metric, k")
        print("\n[demo] scores (python -m warehouse sql \"" + query + "\"):\n")
        print(format_table(wh.sql(query)))
        print(format_table(wh.sql("SELECT * FROM sample_stats ORDER BY benchmark")))
    finally:
        server.stop()  # free the CPU for training
        console.include(server.log_path, server_log, "vLLM server output")
    stages["ingest_and_eval"] = time.perf_counter() - started
    with ExitStack() as servers:  # the measured models' servers, up until the leaderboard
        if train and not train_and_measure(instance, heldout, heldout_k, stages=stages,
                                           threads=threads, launcher=launcher,
                                           servers=servers):
            return 1
        if train and CHECKPOINT_BENCHMARK in sources and not evaluate_checkpoints(
                instance, launcher, limit, k, max_tokens, stages):
            return 1
    if train and CHECKPOINT_BENCHMARK in sources:
        for asset in ("sft_checkpoint", "grpo_checkpoint"):
            say(score_line(CHECKPOINT_BENCHMARK, checkpoint_of(instance, asset)[1], asset))
        print("\n[demo] leaderboard (python -m warehouse sql \"" + LEADERBOARD_SQL + "\"):\n")
        print(format_table(Warehouse().sql(LEADERBOARD_SQL)))
    say(f"[demo] done in {time.perf_counter() - started:.0f}s ("
        + ", ".join(f"{name} {s:.0f}" for name, s in stages.items())
        + f"). Everything is under {weft_home()}.")
    say(f"[demo] plots:       {weft_home() / 'reports' / 'latest'}")
    say("[demo] open the UI:  make ui   (then http://127.0.0.1:3000; runs above are listed there)")
    say("[demo] query:       .venv/bin/python -m warehouse sql \"SELECT * FROM latest_scores\"")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cli.demo")
    parser.add_argument("--limit", type=int, default=12)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=384)
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--no-train", action="store_true",
                        help="skip the SFT -> GRPO chain and the held-out comparison")
    parser.add_argument("--heldout", type=int, default=HELDOUT_PROBLEMS,
                        help="held-out arithmetic problems for the before/after comparison")
    parser.add_argument("--heldout-k", type=int, default=HELDOUT_K,
                        help="samples per held-out problem (avg@k)")
    parser.add_argument("--train-only", action="store_true",
                        help="only the SFT -> GRPO chain and the held-out comparison")
    parser.add_argument("--threads", type=int, default=None,
                        help=f"torch threads for training (default: every "
                             f"core when they are idle, else 1; or {ENV_THREADS})")
    parser.add_argument("--prepare-dagster-home", action="store_true",
                        help="only create WEFT_HOME/dagster (used by `make ui`) and exit")
    parser.add_argument("--verbose", action="store_true",
                        help=f"show every library line (Dagster events, training scripts, "
                             f"warnings, progress bars) on the terminal instead of only in "
                             f"WEFT_HOME/logs/demo-<time>.log (or {console.ENV_VERBOSE}=1)")
    args = parser.parse_args(argv)
    if args.prepare_dagster_home:
        print(ensure_dagster_home())
        return 0
    logging.basicConfig(level=logging.WARNING)
    if args.heldout < 2 or args.heldout_k < 1:
        parser.error("--heldout needs at least 2 problems and --heldout-k at least 1 sample")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads needs at least 1 thread, got {args.threads}")
    if args.train_only and args.no_train:
        parser.error("--train-only and --no-train together leave nothing to run")
    try:
        verbose = console.verbose_from_env(args.verbose)
    except ValueError as exc:
        parser.error(str(exc))
    log_path = None if verbose else console.run_log_path("demo")
    if args.train_only:
        return console.run_logged(
            lambda: run_training_only(args.heldout, args.heldout_k, args.threads), log_path,
            follow=follow_log)
    return console.run_logged(
        lambda: run(args.limit, args.k, args.max_tokens, args.port, train=not args.no_train,
                    heldout=args.heldout, heldout_k=args.heldout_k, threads=args.threads),
        log_path, follow=follow_log)


if __name__ == "__main__":
    sys.exit(main())
