"""Fixed cost of one evaluation through weft's real entry point, and weft against lm-eval.

For N GSM8K problems (greedy, one sample each) this times, in a WEFT_HOME of its own:
- weft, first run: ``weft job eval_job --partition 'gsm8k|MODEL'`` with an empty LLM response
  cache, from the command's start to its exit (the row in ``eval_scores`` is written by then);
- weft, cached re-run: the same command again, every answer replayed from the cache;
- lm-evaluation-harness (when ``lm_eval`` is importable by ``--lm-eval-python``, default this
  interpreter), its CLI on the same problems, prompt (weft's rendered GSM8K prompt as the one
  user message, the server applying the chat template), max tokens, temperature 0, no stop
  strings and the same concurrency, against the same server (``local-chat-completions``).

Each weft run's generation time is what the run recorded as time spent generating
(``eval_samples`` metadata ``generating_s``: the span in which the server was generating
answers); overhead is wall time minus that. Runs alternate (weft first in even pairs, lm-eval
first in odd ones) so a drifting machine load hits both, and so does the server's prefix cache:
whichever tool runs second in a pair finds the prompts' prefixes cached (use two pairs or more). Prints one JSON line per run and a
summary line: median walls and overheads, weft's first-run wall over lm-eval's (the sum over
pairs), and how many outputs were byte-identical between the two. With ``--baseline-root``
(another checkout) it instead alternates fully cached re-runs of this checkout and that one.

    .venv/bin/python bench/eval_overhead.py [--problems 24] [--pairs 1] [--max-tokens 256]
        [--concurrency 8] [--base-url URL --model NAME] [--lm-eval-python /tmp/lmeval-venv/bin/python]
    .venv/bin/python bench/eval_overhead.py --baseline-root /tmp/weft-before --pairs 3
    .venv/bin/python bench/eval_overhead.py --busy 4 --pairs 2

``--busy N`` keeps N processes spinning on the CPU for the whole measurement (a shared machine:
the server generates slower than weft's first deadline expects, and weft and lm-eval compete
for the cores too), so weft's request deadlines are tested against a server slowed by other
load; every row records N.

Without ``--base-url`` the embedded model's server is found (or started, and then stopped at
the end) as weft finds it. lm-eval may live in another virtualenv (``pip install
'lm-eval[api]==0.4.13'``, or this project's ``bench`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TASK = "weft_gsm8k_overhead"


def weft_command(root: Path = ROOT) -> list[str]:
    """The ``weft`` command of the checkout at ``root`` (this one: the installed script)."""
    weft = Path(sys.executable).with_name("weft")
    if root == ROOT and weft.exists():
        return [str(weft)]
    # checkouts from before the command moved out of the code location have assets/instance.py
    module = "cli.instance" if (root / "cli" / "instance.py").is_file() else "assets.instance"
    code = (f"import sys; sys.path.insert(0, {str(root)!r}); "
            f"from {module} import main; sys.exit(main())")
    return [sys.executable, "-c", code]


def run_weft(args: list[str], env: dict[str, str], root: Path = ROOT) -> tuple[float, str]:
    """Wall seconds of one ``weft`` command of the checkout at ``root`` (its run process
    imports that checkout's code: it runs there) and its output; RuntimeError when it fails."""
    started = time.perf_counter()
    proc = subprocess.run([*weft_command(root), *args], check=False, env=env, cwd=root,
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"weft {' '.join(args)} exited {proc.returncode}:\n"
                           f"{(proc.stdout + proc.stderr)[-3000:]}")
    return wall, proc.stdout + proc.stderr


def latest_eval_metadata(dagster_home: Path, partition: str) -> dict:
    """The metadata of the newest ``eval_samples`` materialization of ``partition``."""
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(dagster_home)
    with dg.DagsterInstance.get() as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("eval_samples"))
        if event is None or event.asset_materialization is None:
            raise RuntimeError("no eval_samples materialization was recorded")
        mat = event.asset_materialization
        if mat.partition != partition:
            raise RuntimeError(f"the newest eval_samples materialization is {mat.partition}, "
                               f"not {partition}")
        return {k: v.value for k, v in mat.metadata.items()}


def weft_outputs(partition: str) -> dict[str, str]:
    from warehouse import Warehouse

    rows = Warehouse().read("eval_samples", partition=partition).to_pylist()
    return {r["problem_id"]: r["output"] or "" for r in rows}


def write_lm_eval_task(folder: Path, problems: list[dict], max_tokens: int) -> None:
    """A local lm-eval task over ``problems`` (rows with ``prompt``), no stop strings."""
    data = folder / "problems.jsonl"
    with data.open("w", encoding="utf-8") as fh:
        for p in problems:
            fh.write(json.dumps(p) + "\n")
    (folder / f"{TASK}.yaml").write_text(
        f"task: {TASK}\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\n"
        "test_split: test\n"
        "output_type: generate_until\n"
        "doc_to_text: '{{prompt}}'\n"
        "doc_to_target: '{{answer}}'\n"
        "target_delimiter: ''\n"
        "generation_kwargs:\n"
        "  until: []\n"
        f"  max_gen_toks: {max_tokens}\n"
        "  do_sample: false\n"
        "  temperature: 0.0\n"
        "metric_list:\n"
        "  - metric: exact_match\n"
        "    aggregation: mean\n"
        "    higher_is_better: true\n")


def run_lm_eval(python: str, tasks: Path, out: Path, base_url: str, model: str,
                concurrency: int) -> tuple[float, dict[str, str]]:
    """Wall seconds of one lm-eval CLI run and its outputs by problem id."""
    shutil.rmtree(out, ignore_errors=True)
    model_args = (f"model={model},base_url={base_url}/chat/completions,"
                  f"num_concurrent={concurrency},max_retries=3,tokenized_requests=False")
    command = [python, "-m", "lm_eval", "--model", "local-chat-completions",
               "--model_args", model_args, "--tasks", TASK, "--include_path", str(tasks),
               "--apply_chat_template", "--batch_size", "1", "--output_path", str(out),
               "--log_samples"]
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", OPENAI_API_KEY="EMPTY")
    started = time.perf_counter()
    proc = subprocess.run(command, check=False, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"lm_eval exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-3000:]}")
    outputs: dict[str, str] = {}
    for path in out.rglob(f"samples_{TASK}_*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            resp = record.get("resps") or [[""]]
            outputs[record["doc"]["problem_id"]] = resp[0][0] if resp and resp[0] else ""
    return wall, outputs


def compare_cached(baseline: Path, args: argparse.Namespace, env: dict[str, str],
                   partition: str, config: dict) -> int:
    """Fully cached re-runs of this checkout and of ``baseline``, alternated, after one run
    that fills the cache; one JSON line per run and a summary with the ratio of the medians."""
    if not any((baseline / folder / "instance.py").is_file() for folder in ("cli", "assets")):
        raise SystemExit(f"--baseline-root {baseline} is not a weft checkout (no "
                         "cli/instance.py); e.g. `git worktree add /tmp/base HEAD~4`")
    command = ["job", "eval_job", "--partition", partition, "--config-json", json.dumps(config)]
    run_weft(command, env)  # fills the cache
    walls: dict[str, list[float]] = {"current": [], "baseline": []}
    for pair in range(args.pairs):
        order = ("current", "baseline") if pair % 2 == 0 else ("baseline", "current")
        for code in order:
            wall, _ = run_weft(command, env, ROOT if code == "current" else baseline)
            meta = latest_eval_metadata(Path(env["DAGSTER_HOME"]), partition)
            walls[code].append(wall)
            print(json.dumps({"bench": "eval_overhead", "tool": "weft", "run": "cached",
                              "code": code, "pair": pair, "problems": args.problems,
                              "wall_s": round(wall, 2), "cached_calls": meta.get("cached_calls"),
                              "generating_s": meta.get("generating_s"),
                              "load_avg_1m": round(os.getloadavg()[0], 2)}), flush=True)
    current, base = statistics.median(walls["current"]), statistics.median(walls["baseline"])
    print(json.dumps({"bench": "eval_overhead", "summary": True, "compare": "cached re-runs",
                      "pairs": args.pairs, "problems": args.problems,
                      "current_cached_wall_s": round(current, 2),
                      "baseline_cached_wall_s": round(base, 2),
                      "current_over_baseline": round(current / base, 3),
                      "baseline_root": str(baseline), "cpus": os.cpu_count()}), flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=24)
    ap.add_argument("--pairs", type=int, default=1, help="alternated weft / lm-eval pairs")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--base-url", default=None, help="OpenAI-compatible …/v1 (default: the "
                                                     "embedded model's server, as weft finds it)")
    ap.add_argument("--model", default=None, help="served model name (with --base-url)")
    ap.add_argument("--lm-eval-python", default=None,
                    help="interpreter with lm_eval installed (default: this one, if it has it)")
    ap.add_argument("--keep-home", default=None, help="use (and keep) this WEFT_HOME")
    ap.add_argument("--baseline-root", default=None,
                    help="another checkout of weft: after one run that fills the cache, time "
                         "cached re-runs of this checkout and of that one, alternated (no "
                         "lm-eval)")
    ap.add_argument("--busy", type=int, default=0, metavar="N",
                    help="N processes spinning on the CPU during the whole measurement")
    args = ap.parse_args()
    if args.problems < 1 or args.pairs < 1:
        ap.error("--problems and --pairs must be at least 1")
    if args.busy < 0:
        ap.error("--busy must be 0 or more")
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(args.busy)]
    try:
        return measure(args, ap)
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()


def measure(args: argparse.Namespace, ap: argparse.ArgumentParser) -> int:
    if args.base_url and not args.model:
        ap.error("--base-url needs --model (the served model name)")

    from pipelines.models import EMBEDDED_SERVED_NAME, convert

    lm_python = args.lm_eval_python
    if lm_python is None:
        import importlib.util

        lm_python = sys.executable if importlib.util.find_spec("lm_eval") else None
    embedded = None if args.base_url else convert()  # in the caller's WEFT_HOME
    home = Path(args.keep_home or tempfile.mkdtemp(prefix="weft-eval-overhead-")).resolve()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["WEFT_HOME"] = str(home)
    env = dict(os.environ, WEFT_HOME=str(home), DAGSTER_HOME=str(home / "dagster"))
    server = None
    try:
        if args.base_url:
            from eval.models import ModelSpec, register_model

            base_url, served = args.base_url.rstrip("/"), args.model
            model_id = f"{served}-endpoint"
            register_model(ModelSpec(model_id=model_id, kind="endpoint", base_url=base_url,
                                     served_model=served))
        else:
            from pipelines.serving import LocalModelServer

            models = home / "models"
            models.mkdir(exist_ok=True)
            link = models / embedded.name
            if not link.exists():
                link.symlink_to(embedded, target_is_directory=True)
            server = LocalModelServer().start()  # reuses one already serving the model
            base_url, served, model_id = server.base_url, str(server.served_name), EMBEDDED_SERVED_NAME
        partition = f"gsm8k|{model_id}"
        # the whole benchmark, as a user has it; the evaluation takes its first N by problem id
        run_weft(["materialize", "--select", "gsm8k_problems,problems"], env)
        run_weft(["add-model-partition", model_id], env)

        from eval.benchmarks import get
        from eval.runner import select_problems
        from warehouse import Warehouse

        bench = get("gsm8k")
        chosen = select_problems(Warehouse().read("problems", partition="gsm8k").to_pylist(),
                                 args.problems)
        config = {"ops": {"eval_samples": {"config": {
            "limit": args.problems,
            "sampling": {"max_tokens": args.max_tokens, "temperature": 0.0},
            "max_concurrency": args.concurrency}}}}
        tasks = home / "lm_eval_task"
        tasks.mkdir(exist_ok=True)
        write_lm_eval_task(tasks, [{"problem_id": p["problem_id"], "prompt": bench.render(p),
                                    "answer": p["answer"]} for p in chosen], args.max_tokens)
        cache = home / "cache"

        def weft_pair(pair: int) -> tuple[dict, dict, dict[str, str]]:
            shutil.rmtree(cache, ignore_errors=True)  # the first run asks the server for all
            out = []
            for kind in ("first", "cached"):
                wall, _ = run_weft(["job", "eval_job", "--partition", partition,
                                    "--config-json", json.dumps(config)], env)
                meta = latest_eval_metadata(home / "dagster", partition)
                generating = float(meta.get("generating_s") or 0.0)
                row = {"bench": "eval_overhead", "tool": "weft", "run": kind, "pair": pair,
                       "problems": args.problems, "wall_s": round(wall, 2),
                       "generating_s": round(generating, 2),
                       "eval_generation_s": meta.get("generation_s"),
                       "overhead_s": round(wall - generating, 2),
                       "cached_calls": meta.get("cached_calls"), "busy": args.busy,
                       "load_avg_1m": round(os.getloadavg()[0], 2)}
                print(json.dumps(row), flush=True)
                out.append(row)
            return out[0], out[1], weft_outputs(partition)

        def lm_eval_run(pair: int) -> tuple[dict, dict[str, str]]:
            wall, outputs = run_lm_eval(lm_python, tasks, home / "lm_eval_out", base_url, served,
                                        args.concurrency)
            row = {"bench": "eval_overhead", "tool": "lm_eval", "run": "first", "pair": pair,
                   "problems": args.problems, "wall_s": round(wall, 2),
                   "outputs": len(outputs), "busy": args.busy,
                   "load_avg_1m": round(os.getloadavg()[0], 2)}
            print(json.dumps(row), flush=True)
            return row, outputs

        if args.baseline_root:
            return compare_cached(Path(args.baseline_root).resolve(), args, env, partition,
                                  config)

        firsts, cacheds, lm_rows = [], [], []
        identical = compared = 0
        for pair in range(args.pairs):
            order = ("weft", "lm_eval") if pair % 2 == 0 else ("lm_eval", "weft")
            ours = theirs = None
            for tool in order:
                if tool == "weft":
                    first, cached, ours = weft_pair(pair)
                    firsts.append(first)
                    cacheds.append(cached)
                elif lm_python:
                    row, theirs = lm_eval_run(pair)
                    lm_rows.append(row)
            if ours is not None and theirs:
                shared = set(ours) & set(theirs)
                compared += len(shared)
                identical += sum(ours[k] == theirs[k] for k in shared)

        def med(rows: list[dict], key: str) -> float | None:
            return round(statistics.median(r[key] for r in rows), 2) if rows else None

        summary = {
            "bench": "eval_overhead", "summary": True, "problems": args.problems,
            "pairs": args.pairs, "max_tokens": args.max_tokens, "concurrency": args.concurrency,
            "busy": args.busy,
            "weft_first_wall_s": med(firsts, "wall_s"),
            "weft_first_overhead_s": med(firsts, "overhead_s"),
            "weft_cached_wall_s": med(cacheds, "wall_s"),
            "weft_cached_overhead_s": med(cacheds, "overhead_s"),
            "lm_eval_wall_s": med(lm_rows, "wall_s"),
            "weft_over_lm_eval": (round(sum(r["wall_s"] for r in firsts)
                                        / sum(r["wall_s"] for r in lm_rows), 3)
                                  if lm_rows else None),
            "identical_outputs": f"{identical}/{compared}" if lm_rows else None,
            "lm_eval": lm_python or "not installed (pip install 'lm-eval[api]==0.4.13')",
            "python": platform.python_version(), "cpus": os.cpu_count(),
        }
        print(json.dumps(summary), flush=True)
    finally:
        if server is not None:
            server.stop()  # only a server this script started
        if args.keep_home is None:
            shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
