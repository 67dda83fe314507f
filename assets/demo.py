"""`make demo`: the main job on the embedded model, offline, on a laptop CPU.

Converts the embedded model (once), starts the local vLLM server, materializes the ingestion
assets (the built-in generator plus every shared benchmark file that is present), evaluates the
embedded model on a small slice of GSM8K and MATH-500 (20 problems each, k=2) by materializing
`eval_samples`, `eval_scores` and `eval_reports` into a persistent Dagster instance under
WEFT_HOME (so the runs appear in the UI), prints the scores from DuckDB with SQL, stops the
server it started, then trains a short SFT -> GRPO chain on CPU through Dagster Pipes.
"""

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import dagster as dg

from pipelines.settings import data_dir, weft_home

DEMO_BENCHMARKS = ("gsm8k", "math500")


ENV_MAX_RUN_SECONDS = "WEFT_MAX_RUN_SECONDS"


def run_monitoring_settings() -> dict:
    """Dagster run monitoring (keys checked against dagster 1.13's instance schema), run by the
    daemon that `dagster dev` starts: runs stuck starting or cancelling are failed after 3
    minutes. The default run launcher cannot probe a run worker's health, so a killed run is
    marked failed when it passes ``max_runtime_seconds`` (default 6 h; override with
    WEFT_MAX_RUN_SECONDS, or per run with the tag ``dagster/max_runtime_seconds``)."""
    max_runtime = int(os.environ.get(ENV_MAX_RUN_SECONDS) or 6 * 3600)
    if max_runtime < 1:
        raise ValueError(f"{ENV_MAX_RUN_SECONDS} must be a positive number of seconds, "
                         f"got {max_runtime}")
    return {"enabled": True, "start_timeout_seconds": 180, "cancel_timeout_seconds": 180,
            "max_runtime_seconds": max_runtime, "poll_interval_seconds": 30}


def ensure_dagster_home() -> Path:
    """A persistent DAGSTER_HOME under WEFT_HOME (telemetry off, run monitoring on, first-run
    modal dismissed). An existing dagster.yaml keeps its settings and gains the missing ones."""
    import yaml

    home = Path(os.environ.get("DAGSTER_HOME") or weft_home() / "dagster")
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "dagster.yaml"
    settings = (yaml.safe_load(cfg.read_text()) if cfg.exists() else None) or {}
    if not isinstance(settings, dict):
        raise TypeError(f"{cfg} is not a YAML mapping; fix or remove it (weft recreates it)")
    if "telemetry" not in settings or "run_monitoring" not in settings:
        settings.setdefault("telemetry", {"enabled": False})
        settings.setdefault("run_monitoring", run_monitoring_settings())
        cfg.write_text(yaml.safe_dump(settings, sort_keys=False))
    nux = home / ".nux" / "nux.yaml"
    nux.parent.mkdir(exist_ok=True)
    if not nux.exists():
        nux.write_text("seen: 1\n")
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def demo_sources() -> list[str]:
    from pipelines.ingest import SOURCES

    sources = ["reasoning_gym"]
    root = data_dir()
    for name in ("gsm8k", "math500", "aime24", "aime25", "amc23", "minerva_math",
                 "olympiadbench", "gpqa_diamond"):
        spec = SOURCES[name]
        if root is not None and spec.local_path and (root / spec.local_path).exists():
            sources.append(name)
    return sources


def run(limit: int, k: int, max_tokens: int, port: int | None, train: bool = True) -> int:
    from assets import evaluation, ingest, reports
    from assets.resources import GraderResource, LLMResource, WarehouseResource
    from assets.sandbox_resource import SandboxResource
    from pipelines.models import EMBEDDED_SERVED_NAME
    from pipelines.serving import DEFAULT_PORT, LocalModelServer, free_port, served_models
    from warehouse import Warehouse
    from warehouse.__main__ import format_table

    started = time.perf_counter()
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
    if train:
        from assets.training import demo_chain

        if not demo_chain(instance):
            return 1
    print(f"\n[demo] done in {time.perf_counter() - started:.0f}s. Everything is under {weft_home()}.")
    print(f"[demo] plots:       {weft_home() / 'reports' / 'latest'}")
    print("[demo] open the UI:  make ui   (then http://127.0.0.1:3000; runs above are listed there)")
    print("[demo] query:       .venv/bin/python -m warehouse sql \"SELECT * FROM latest_scores\"")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m assets.demo")
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=384)
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--no-train", action="store_true", help="skip the SFT -> GRPO chain")
    parser.add_argument("--prepare-dagster-home", action="store_true",
                        help="only create WEFT_HOME/dagster (used by `make ui`) and exit")
    args = parser.parse_args(argv)
    if args.prepare_dagster_home:
        print(ensure_dagster_home())
        return 0
    logging.basicConfig(level=logging.WARNING)
    return run(args.limit, args.k, args.max_tokens, args.port, train=not args.no_train)


if __name__ == "__main__":
    sys.exit(main())
