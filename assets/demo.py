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
logged steps (reward, share of dropped groups), and scores the base, SFT and trained models on
held-out one-digit problems no recipe trained on (avg@k at the GRPO temperature, graded by the
reward's own grader), comparing them with paired bootstraps over problems (`eval.compare`).
Training and held-out scoring use every core when they are idle at the start, else one torch
thread (:func:`training_threads`); ``--train-only`` runs just this part.
The last lines say whether the trained model is measurably better than the base model, and
whether GRPO itself added anything over its SFT start; neither is assumed.

Not guaranteed: that a few CPU steps of GRPO move held-out accuracy beyond noise; the demo
reports what it measured either way.
"""

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import dagster as dg

# DAGSTER_HOME preparation lives in assets.instance (shared with `make ui` and `weft`)
from assets.instance import (  # noqa: F401 - re-exported for callers of assets.demo
    ENV_MAX_RUN_SECONDS,
    ensure_dagster_home,
    run_monitoring_settings,
)
from pipelines.settings import data_dir, weft_home

DEMO_BENCHMARKS = ("gsm8k", "math500")
DEMO_SFT_RECIPE = "demo_sft"
CHECKPOINT_BENCHMARK = "gsm8k"  # where the trained checkpoints are evaluated like the base model
LEADERBOARD_SQL = ("SELECT benchmark, model, metric, k, round(value, 3) AS value, "
                   "round(ci_low, 3) AS ci_low, round(ci_high, 3) AS ci_high, n_problems "
                   "FROM latest_scores WHERE benchmark = 'gsm8k' ORDER BY value DESC, model")
DEMO_GRPO_RECIPE = "demo_grpo"
HELDOUT_SEED = 1
HELDOUT_PROBLEMS = 48
HELDOUT_K = 2
HELDOUT_TEMPERATURE = 1.0  # the GRPO sampling temperature: the score GRPO's reward estimates
HELDOUT_MAX_TOKENS = 32  # = demo_grpo's max_completion_length


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
    """torch threads for the demo's training and held-out scoring: ``requested`` (or
    WEFT_DEMO_THREADS) when given, else every core available to this process when nearly all
    of them are idle right now, else 1. (training.config: on 2 cores, 2 threads were 1.6x
    faster than 1 on a quiet machine and far slower beside other work.)"""
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


# ------------------------------------------------------------------ did training help?


@dataclass(frozen=True)
class LearningCheck:
    """Per-problem avg@k of three models on the same held-out problems, and paired tests."""

    base: dict[str, float]
    sft: dict[str, float]
    trained: dict[str, float]
    k: int
    temperature: float
    trained_vs_base: Any  # eval.compare.PairedResult
    trained_vs_sft: Any

    @property
    def improved(self) -> bool:
        """The trained model beats the base model: the 95% CI of the difference is above 0."""
        return self.trained_vs_base.ci_low > 0.0


def problem_text(row: dict[str, Any]) -> str:
    """The problem of a training row: its ``problem`` column, or the last user message of its
    ``prompt`` (SFT rows)."""
    if "problem" in row:
        return str(row["problem"])
    from training.data import as_messages

    prompt = as_messages(row["prompt"], "prompt")
    if isinstance(prompt, str):
        return prompt
    return [m["content"] for m in prompt if m["role"] == "user"][-1]


def training_problems(runs: list[tuple[str, list[str]]]) -> set[str]:
    """Every problem text the (recipe, overrides) runs train on (read through their dataset
    specs)."""
    from training.config import load_config
    from training.data import load_dataset

    seen: set[str] = set()
    for recipe, overrides in runs:
        config = load_config(recipe, overrides)
        data = load_dataset(config.dataset, fallback=config.dataset_fallback,
                            limit=config.dataset_limit, seed=config.seed)
        seen.update(problem_text(r) for r in data.rows)
    return seen


def heldout_arith(n: int, seed: int = HELDOUT_SEED, exclude: set[str] | frozenset[str] = frozenset()
                  ) -> list[dict]:
    """``n`` one-digit problems (``training.data.builtin_arith1``, all 207 in the order of
    ``seed``) whose text is not in ``exclude`` (the training problems)."""
    from training.data import ARITH1_SIZE, builtin_arith1

    if n < 2:
        raise ValueError(f"held-out problems: need at least 2 for a paired test, got {n}")
    rows = [r for r in builtin_arith1(ARITH1_SIZE, seed) if r["problem"] not in exclude]
    if len(rows) < n:
        raise ValueError(f"only {len(rows)} one-digit problems are left after excluding the "
                         f"{len(exclude)} training problems; ask for at most {len(rows)}")
    return rows[:n]


def sample_scores(model_path: str, rows: list[dict], *, k: int, temperature: float,
                  max_new_tokens: int, seed: int = 0, batch_size: int = 32,
                  threads: int = 1) -> dict[str, float]:
    """avg@k per problem: ``k`` sampled completions per problem from the model at
    ``model_path`` (transformers, CPU, the boxed-format prompt GRPO trains on), each graded by
    ``training.rewards.is_correct`` (the reward's grader). Deterministic for a given seed."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.data import grpo_examples
    from training.rewards import is_correct

    torch.set_num_threads(threads)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    prompts = [tokenizer.apply_chat_template(e["prompt"], tokenize=False,
                                             add_generation_prompt=True)
               for e in grpo_examples(rows, "boxed")]
    torch.manual_seed(seed)
    scores: dict[str, float] = {}
    for start in range(0, len(rows), batch_size):
        batch = tokenizer(prompts[start:start + batch_size], return_tensors="pt", padding=True,
                          add_special_tokens=False)
        with torch.inference_mode():
            out = model.generate(**batch, do_sample=True, temperature=temperature, top_p=1.0,
                                 top_k=0, max_new_tokens=max_new_tokens, num_return_sequences=k,
                                 pad_token_id=tokenizer.pad_token_id)
        texts = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:],
                                       skip_special_tokens=True)
        for i, row in enumerate(rows[start:start + batch_size]):
            right = sum(is_correct(t, row["answer"], "boxed") for t in texts[i * k:(i + 1) * k])
            scores[row["problem_id"]] = right / k
    return scores


def learning_check(base: str, sft: str, trained: str, rows: list[dict], *, k: int,
                   temperature: float, max_new_tokens: int, threads: int = 1) -> LearningCheck:
    """Score the base, SFT and trained models on the same held-out rows and compare them with
    paired bootstraps over problems (``eval.compare.paired_bootstrap``: 95% CI of the mean
    difference, two-sided p)."""
    from eval.compare import paired_bootstrap

    scores = {name: sample_scores(path, rows, k=k, temperature=temperature,
                                  max_new_tokens=max_new_tokens, threads=threads)
              for name, path in (("base", base), ("sft", sft), ("trained", trained))}
    return LearningCheck(scores["base"], scores["sft"], scores["trained"], k, temperature,
                         paired_bootstrap(scores["trained"], scores["base"]),
                         paired_bootstrap(scores["trained"], scores["sft"]))


def describe_learning(check: LearningCheck, n_steps: int, reward_first: float | None,
                      reward_last: float | None) -> list[str]:
    """The demo's closing lines: what was measured and whether the model got better."""

    def line(label: str, r: Any) -> str:
        return (f"  {label}: {r.mean_a:.3f} vs {r.mean_b:.3f}, difference {r.diff:+.3f} "
                f"(95% CI {r.ci_low:+.3f} to {r.ci_high:+.3f}, p={r.p_value:.3g}, "
                f"n={r.n} problems, paired bootstrap)")

    n = check.trained_vs_base.n
    out = [(f"[demo] held-out arithmetic ({n} problems never trained on), avg@{check.k} at "
            f"temperature {check.temperature:g}:"),
           line("trained (SFT+GRPO) vs base model", check.trained_vs_base),
           line("trained vs its SFT start (what GRPO added)", check.trained_vs_sft)]
    if reward_first is not None and reward_last is not None:
        out.append(f"  GRPO reward over {n_steps} steps: {reward_first:.3f} (first third) -> "
                   f"{reward_last:.3f} (last third)")
    if check.improved:
        out.append("[demo] the pipeline trained a model and measured that it got better: the "
                   "trained model beats the base model on held-out problems (CI above 0).")
    else:
        out.append("[demo] the pipeline trained a model but did NOT measure an improvement over "
                   "the base model on held-out problems (the CI includes 0 or lies below it).")
    gain = check.trained_vs_sft
    out.append("[demo] GRPO on its own: " + (
        "improved on its SFT start (CI above 0)." if gain.ci_low > 0 else
        "made it worse than its SFT start (CI below 0)." if gain.ci_high < 0 else
        "no change measurable at this size (the CI includes 0)."))
    return out


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


def checkpoint_of(instance: dg.DagsterInstance, asset: str) -> tuple[str, str]:
    """(path, checkpoint id) of the latest materialization of a checkpoint asset."""
    event = instance.get_latest_materialization_event(dg.AssetKey(asset))
    meta = event.asset_materialization.metadata  # type: ignore[union-attr]
    return str(meta["checkpoint_path"].value), str(meta["checkpoint_id"].value)


def train_and_measure(instance: dg.DagsterInstance, n_heldout: int = HELDOUT_PROBLEMS,
                      k: int = HELDOUT_K, stages: dict[str, float] | None = None,
                      threads: int | None = None) -> bool:
    """SFT on two-digit, GRPO on one-digit arithmetic through Dagster Pipes (``demo_sft``,
    ``demo_grpo``, as the recipes stand, with ``torch_threads`` from
    :func:`training_threads`), then the base, SFT and trained models on held-out one-digit
    problems with paired comparisons; prints the verdict and writes it to WEFT_HOME/reports."""
    from assets.training import demo_chain
    from training.run import resolve_model

    stages = stages if stages is not None else {}
    threads = training_threads(threads)
    print(f"[demo] training and held-out scoring with {threads} torch thread(s) (all cores only "
          f"when they are idle; set {ENV_THREADS} or --threads to choose)", flush=True)
    started = time.perf_counter()
    sft_overrides = grpo_overrides = [f"torch_threads={threads}"]  # not part of checkpoint ids
    if not demo_chain(instance, sft_recipe=DEMO_SFT_RECIPE, grpo_recipe=DEMO_GRPO_RECIPE,
                      sft_overrides=sft_overrides, grpo_overrides=grpo_overrides):
        return False
    stages["train"] = time.perf_counter() - started
    started = time.perf_counter()
    sft_path, _ = checkpoint_of(instance, "sft_checkpoint")
    trained_path, trained_id = checkpoint_of(instance, "grpo_checkpoint")
    rows = heldout_arith(n_heldout, exclude=training_problems(
        [(DEMO_SFT_RECIPE, []), (DEMO_GRPO_RECIPE, grpo_overrides)]))
    print(f"\n[demo] measuring the base, SFT and trained models on {len(rows)} held-out "
          f"arithmetic problems x {k} samples ...", flush=True)
    check = learning_check(resolve_model("embedded"), sft_path, trained_path, rows, k=k,
                           temperature=HELDOUT_TEMPERATURE, max_new_tokens=HELDOUT_MAX_TOKENS,
                           threads=threads)
    steps, first, last = reward_thirds(trained_id)
    print("\n".join(describe_learning(check, steps, first, last)))
    stages["heldout_eval"] = time.perf_counter() - started
    out = weft_home() / "reports" / "demo_learning.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "trained_checkpoint": trained_id, "k": check.k, "temperature": check.temperature,
        "improved": check.improved, "reward_first_third": first, "reward_last_third": last,
        "trained_vs_base": check.trained_vs_base.as_dict(),
        "trained_vs_sft": check.trained_vs_sft.as_dict(),
        "scores": {"base": check.base, "sft": check.sft, "trained": check.trained},
    }, indent=2, sort_keys=True))
    print(f"[demo] per-problem scores and both comparisons: {out}")
    record_heldout_claims(check, {"base": resolve_model("embedded"), "sft": sft_path,
                                  "trained": trained_path}, trained_id)
    return True


HELDOUT_EXPERIMENT = "demo_heldout"


def heldout_claims(check: LearningCheck) -> list[dict[str, Any]]:
    """The held-out comparison as ``claims`` rows (``eval.claims.judge``): the trained model
    beats the base model, and GRPO adds to its SFT start, on per-problem avg@k."""
    from eval.claims import Claim, judge

    section = f"held-out one-digit arithmetic, avg@{check.k} at T={check.temperature:g}"
    metric = f"avg@{check.k}"
    common = {"paper": "weft demo", "section": section, "metric": metric}
    return [
        judge(Claim(**common, statement="SFT then GRPO beats the base model",
                    reference="base", treatment="sft+grpo"), check.base, check.trained),
        judge(Claim(**common, statement="GRPO improves on its SFT start",
                    reference="sft", treatment="sft+grpo"), check.sft, check.trained),
    ]


def record_heldout_claims(check: LearningCheck, models: dict[str, str], trained_id: str) -> None:
    """Write :func:`heldout_claims` to the warehouse's ``claims`` table (partition
    ``demo_heldout``), so ``python -m eval.claims`` and the UI show the demo's result."""
    from warehouse import Lineage, Warehouse

    rows = [dict(r, experiment=HELDOUT_EXPERIMENT, scale="cpu",
                 config_json=json.dumps({"models": models, "k": check.k,
                                         "temperature": check.temperature,
                                         "trained_checkpoint": trained_id}, sort_keys=True))
            for r in heldout_claims(check)]
    Warehouse().write("claims", rows, lineage=Lineage(
        run_id=f"demo-{trained_id}", asset=HELDOUT_EXPERIMENT, partition=HELDOUT_EXPERIMENT))
    for r in rows:
        print(f"[demo] claims row: {r['claim']}: {r['verdict']} (diff {r['diff']:+.3f}, 95% CI "
              f"{r['diff_ci_low']:+.3f} to {r['diff_ci_high']:+.3f})")


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
    print("[demo] seconds per stage: " + ", ".join(f"{name} {s:.0f}" for name, s in stages.items())
          + f"; total {time.perf_counter() - started:.0f}")
    return 0


def run(limit: int, k: int, max_tokens: int, port: int | None, train: bool = True,
        heldout: int = HELDOUT_PROBLEMS, heldout_k: int = HELDOUT_K,
        threads: int | None = None) -> int:
    from assets import evaluation, ingest, reports
    from assets.resources import GraderResource, LLMResource, WarehouseResource
    from assets.sandbox_resource import SandboxResource
    from pipelines.models import EMBEDDED_SERVED_NAME
    from pipelines.serving import DEFAULT_PORT, LocalModelServer, free_port, served_models
    from warehouse import Warehouse
    from warehouse.__main__ import format_table

    started = time.perf_counter()
    stages: dict[str, float] = {}
    ensure_dagster_home()
    instance = dg.DagsterInstance.get()
    # On the default port the evaluation assets find and reuse this server.
    port = port or DEFAULT_PORT
    if served_models(f"http://127.0.0.1:{port}/v1") not in (None, [EMBEDDED_SERVED_NAME]):
        port = free_port()  # something else answers there; the assets start their own
    server = LocalModelServer(port=port)
    print(f"[demo] starting the local vLLM server for {server.model_path} on port {port} ...", flush=True)
    server.start()
    try:
        resources = {
            "llm": LLMResource(base_url=server.base_url, model=str(server.served_name)),
            "warehouse": WarehouseResource(),
            "grader": GraderResource(),
            "sandbox": SandboxResource(),
        }
        all_assets = [*ingest.SOURCE_ASSETS, ingest.problems, evaluation.eval_samples,
                      evaluation.eval_scores, reports.eval_reports]
        checks = [ingest.check_problems_answers_and_ids, evaluation.check_eval_samples_all_graded,
                  evaluation.check_eval_samples_runs_agree,
                  evaluation.check_eval_scores_within_unit_interval,
                  reports.check_eval_reports_pairwise_valid]
        quiet = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}
        sources = demo_sources()
        print(f"[demo] ingesting: {', '.join(sources)}", flush=True)
        selection = [f"{s}_problems" for s in sources] + ["problems"]
        result = dg.materialize([*all_assets, *checks], selection=selection, resources=resources,
                                instance=instance, tags={"weft/demo": "ingest"}, run_config=quiet)
        if not result.success:
            return 1
        from eval.models import embedded_spec

        model_id = embedded_spec().model_id
        instance.add_dynamic_partitions("models", [model_id])
        for bench in DEMO_BENCHMARKS:
            if bench not in sources:
                print(f"[demo] skipping {bench}: its file is not under WEFT_DATA_DIR", flush=True)
                continue
            print(f"[demo] evaluating on {bench}: {limit} problems x k={k} ...", flush=True)
            run_config = {**quiet, "ops": {"eval_samples": {"config": {
                "limit": limit, "k": k, "max_tokens": max_tokens, "seed": 0}}}}
            result = dg.materialize(
                [*all_assets, *checks], selection=["eval_samples", "eval_scores"],
                partition_key=dg.MultiPartitionKey({"benchmark": bench, "model": model_id}),
                resources=resources, run_config=run_config,
                instance=instance, tags={"weft/demo": "eval"},
            )
            if not result.success:
                return 1
        result = dg.materialize([*all_assets, *checks], selection=["eval_reports"], resources=resources,
                                instance=instance, tags={"weft/demo": "report"}, run_config=quiet)
        if not result.success:
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
    stages["ingest_and_eval"] = time.perf_counter() - started
    if train and not train_and_measure(instance, heldout, heldout_k, stages=stages,
                                       threads=threads):
        return 1
    if train and CHECKPOINT_BENCHMARK in sources:
        # the trained models join the leaderboard: the same evaluation as the base model's
        mark = time.perf_counter()
        for asset in ("sft_checkpoint", "grpo_checkpoint"):
            _, checkpoint_id = checkpoint_of(instance, asset)
            print(f"[demo] evaluating {asset} ({checkpoint_id}) on {CHECKPOINT_BENCHMARK}: "
                  f"{limit} problems x k={k} ...", flush=True)
            run_config = {**quiet, "ops": {"eval_samples": {"config": {
                "limit": limit, "k": k, "max_tokens": max_tokens, "seed": 0}}}}
            result = dg.materialize(
                [*all_assets, *checks], selection=["eval_samples", "eval_scores"],
                partition_key=dg.MultiPartitionKey({"benchmark": CHECKPOINT_BENCHMARK,
                                                    "model": checkpoint_id}),
                resources=resources, run_config=run_config, instance=instance,
                tags={"weft/demo": "eval"})
            if not result.success:
                return 1
        result = dg.materialize([*all_assets, *checks], selection=["eval_reports"],
                                resources=resources, instance=instance,
                                tags={"weft/demo": "report"}, run_config=quiet)
        if not result.success:
            return 1
        stages["checkpoint_eval"] = time.perf_counter() - mark
        print("\n[demo] leaderboard (python -m warehouse sql \"" + LEADERBOARD_SQL + "\"):\n")
        print(format_table(Warehouse().sql(LEADERBOARD_SQL)))
    print("[demo] seconds per stage: " + ", ".join(f"{name} {s:.0f}" for name, s in stages.items()))
    print(f"\n[demo] done in {time.perf_counter() - started:.0f}s. Everything is under {weft_home()}.")
    print(f"[demo] plots:       {weft_home() / 'reports' / 'latest'}")
    print("[demo] open the UI:  make ui   (then http://127.0.0.1:3000; runs above are listed there)")
    print("[demo] query:       .venv/bin/python -m warehouse sql \"SELECT * FROM latest_scores\"")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m assets.demo")
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
                        help=f"torch threads for training and held-out scoring (default: every "
                             f"core when they are idle, else 1; or {ENV_THREADS})")
    parser.add_argument("--prepare-dagster-home", action="store_true",
                        help="only create WEFT_HOME/dagster (used by `make ui`) and exit")
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
    if args.train_only:
        return run_training_only(args.heldout, args.heldout_k, args.threads)
    return run(args.limit, args.k, args.max_tokens, args.port, train=not args.no_train,
               heldout=args.heldout, heldout_k=args.heldout_k, threads=args.threads)


if __name__ == "__main__":
    sys.exit(main())
