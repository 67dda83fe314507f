"""Sandbox performance figures, printed as one JSON line.

- cold start of a stateless run (``python -c pass`` through the whole ``run`` path), median of
  N, bubblewrap jail vs the bare-subprocess path (same driver, same rlimits, no jail), and the
  ratio (of medians, and of the fastest runs); measured interleaved so machine load hits both
  alike; plain ``python3 -c pass`` for reference.
- stateful cell round trip (``session.execute("x")``), median.
- warm runner latency (one program through a fork-server worker), median.
- HumanEval canonical solutions graded on a warm pool: programs per second, and the old
  in-process programs (solution + test in one process) on the same pool, interleaved.
- host memory while grading a candidate that prints 64 MiB (tracemalloc peak, peak-RSS growth).

Run: ``python bench/sandbox.py [--runs 50] [--workers 2]``. Figures depend on machine load:
the JSON records the load average and CPU count next to them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from eval.code_grader import grade_code, grade_code_many, load_benchmark
from pipelines.sandbox import Limits, LocalSandbox, RunJob, SandboxPool


def _ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def cold_start(runs: int) -> dict:
    jail = LocalSandbox(Limits(timeout_s=30), isolation="bwrap")
    bare = LocalSandbox(Limits(timeout_s=30), isolation="subprocess")
    for box in (jail, bare):  # probes, driver compilation, page cache
        box.run("pass")
        box.run("pass")
    jailed, plain, raw = [], [], []
    for _ in range(runs):
        jailed.append(_timed(lambda: jail.run("pass")))
        plain.append(_timed(lambda: bare.run("pass")))
        raw.append(_timed(lambda: subprocess.run(["/usr/bin/python3", "-c", "pass"], check=True)))
    return {"cold_start_bwrap_ms": _ms(jailed), "cold_start_subprocess_ms": _ms(plain),
            "cold_start_ratio_bwrap_vs_subprocess": round(_ms(jailed) / _ms(plain), 2),
            # the fastest run of each: the cost with the least interference from machine load
            "cold_start_bwrap_min_ms": round(min(jailed) * 1000, 2),
            "cold_start_subprocess_min_ms": round(min(plain) * 1000, 2),
            "cold_start_ratio_of_min": round(min(jailed) / min(plain), 2),
            "raw_python_c_pass_ms": _ms(raw), "cold_start_runs": runs}


def session_round_trip(runs: int) -> dict:
    jail = LocalSandbox(Limits(timeout_s=30), isolation="bwrap")
    start = time.perf_counter()
    session = jail.session()
    started = time.perf_counter() - start
    try:
        session.execute("x = 1")
        samples = [_timed(lambda: session.execute("x")) for _ in range(runs)]
    finally:
        session.close()
    return {"session_start_ms": round(started * 1000, 2), "cell_round_trip_ms": _ms(samples),
            "cell_runs": runs}


def runner_latency(runs: int) -> dict:
    jail = LocalSandbox(Limits(timeout_s=30), isolation="bwrap")
    with jail.runner() as runner:
        runner.run("pass")
        samples = [_timed(lambda: runner.run("pass")) for _ in range(runs)]
    return {"warm_runner_program_ms": _ms(samples)}


def _in_process_program(problem: dict) -> str:
    """The program the grader ran before its relay harness: solution, test and ``check`` in
    one process, a pass printed after it (gameable from inside; kept here only to compare
    throughput with what the grader does now)."""
    return (f"{problem['prompt']}{problem['canonical_solution']}\n\n{problem['test']}\n\n"
            f"check({problem['entry_point']})\nprint('__weft_result_0__true', flush=True)\n")


def humaneval_throughput(workers: int) -> dict:
    """Canonical HumanEval solutions graded on a warm pool: the grader (relay harness, host
    replay of ``check``) and, interleaved, the old in-process programs on the same pool."""
    problems = load_benchmark("humaneval")
    candidates = [p["canonical_solution"] for p in problems]
    limits = Limits(timeout_s=10)
    jobs = [RunJob(_in_process_program(p), limits=limits) for p in problems]
    graded, in_process = [], []
    with SandboxPool(LocalSandbox(isolation="bwrap"), workers=workers) as pool:
        pool.warm_up()
        results = grade_code_many(candidates, problems, pool=pool)  # records every task once
        pool.run_many(jobs[:8])
        for _ in range(3):
            graded.append(_timed(lambda: results.__setitem__(
                slice(None), grade_code_many(candidates, problems, pool=pool))))
            in_process.append(_timed(lambda: pool.run_many(jobs)))
        old = pool.run_many(jobs)
    best, best_old = min(graded), min(in_process)
    return {"humaneval_programs": len(results),
            "humaneval_passed": sum(r.passed for r in results),
            "humaneval_programs_per_s": round(len(results) / best, 1),
            "humaneval_in_process_programs_per_s": round(len(jobs) / best_old, 1),
            "humaneval_in_process_passed": sum("__weft_result_0__true" in r.stdout for r in old),
            "humaneval_ratio_vs_in_process": round(best / best_old, 2),
            "humaneval_workers": workers, "humaneval_rounds": len(graded)}


FLOOD = ("    import sys\n    sys.stdout.write('[' + '[],' * (21 * 1024 * 1024) + '[]]\\n')\n"
         "    sys.stdout.flush()\n    return None\n")


def flood_host_memory() -> dict:
    """Host memory (tracemalloc peak, growth of peak RSS) while grading one HumanEval
    candidate that prints 64 MiB of nested JSON, and how long that took."""
    problem = load_benchmark("humaneval")[0]
    with SandboxPool(LocalSandbox(Limits(timeout_s=30), isolation="bwrap"), workers=1) as pool:
        grade_code(problem["canonical_solution"], problem, pool)  # the task's recording
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        tracemalloc.start()
        try:
            start = time.perf_counter()
            verdict = grade_code(FLOOD, problem, pool, timeout_s=30)
            elapsed = time.perf_counter() - start
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss
    return {"flood_64mib_passed": verdict.passed, "flood_64mib_s": round(elapsed, 2),
            "flood_64mib_host_peak_alloc_mib": round(peak / 2**20, 2),
            "flood_64mib_host_maxrss_growth_mib": round(grown / 1024, 1)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    figures: dict = {"bench": "sandbox", "machine": platform.node(), "cpus": os.cpu_count(),
                     "load_avg_1m_before": round(os.getloadavg()[0], 2)}
    figures.update(cold_start(args.runs))
    figures.update(session_round_trip(max(args.runs * 4, 50)))
    figures.update(runner_latency(args.runs))
    figures.update(humaneval_throughput(args.workers))
    figures.update(flood_host_memory())
    figures["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    figures["targets"] = {"cold_start_ratio_max": 1.5, "cell_round_trip_ms_max": 5.0,
                          "humaneval_programs_per_s_min": 30.0}
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
