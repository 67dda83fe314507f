"""Sandbox performance figures, printed as one JSON line.

- cold start of a stateless run (``python -c pass`` through the whole ``run`` path), median of
  N, bubblewrap jail vs the bare-subprocess path (same driver, same rlimits, no jail), and the
  ratio (of medians, and of the fastest runs); measured interleaved so machine load hits both
  alike; plain ``python3 -c pass`` for reference.
- stateful cell round trip (``session.execute("x")``), median.
- warm runner latency (one program through a fork-server worker), median.
- HumanEval canonical solutions graded on a warm pool: programs per second, and the old
  in-process programs (solution + test in one process), interleaved round by round: on a pool
  as the old path had it (no warm imports) and on the same pool as the grader; and the same
  grader on runners whose candidates share their jail's namespaces (the cost of a mount, IPC
  and pid namespace and a fresh /tmp per candidate). CPU seconds per
  program (the host process and the pool's jails, from /proc) are reported next to the wall
  figures, which a loaded machine distorts (each wake-up waits for a core).
- the fixed cost of a candidate, interleaved in the same rounds: the grader on candidates that
  do no work (each task's entry point returns None at once, so every item fails) and plain
  ``pass`` programs on the same pool; no solution can be graded faster than the first, and
  ``humaneval_goal_over_noop`` is the 600 programs/s goal over it. Page faults per program
  (the whole machine's, from /proc/vmstat) are printed for the grader and both of these.
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


def _tree_cpu_s() -> float:
    """CPU seconds of every process below this one (the pools' jails and what they reaped),
    from /proc; 0.0 where /proc is missing."""
    me, parents, cpu = os.getpid(), {}, {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        parents[int(entry.name)] = int(fields[1])
        cpu[int(entry.name)] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    total, front = 0, [me]
    while front:
        parent = front.pop()
        for pid, ppid in parents.items():
            if ppid == parent:
                total += cpu[pid]
                front.append(pid)
    return total / os.sysconf("SC_CLK_TCK")


def _page_faults() -> int:
    """Page faults taken on the whole machine so far (``pgfault`` in /proc/vmstat); 0 where
    it cannot be read."""
    try:
        with open("/proc/vmstat") as fh:
            for line in fh:
                if line.startswith("pgfault "):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _timed_cpu(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and its descendants) of one call."""
    wall, cpu, tree = time.perf_counter(), time.process_time(), _tree_cpu_s()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu + _tree_cpu_s() - tree


def humaneval_throughput(workers: int, rounds: int = 3) -> dict:
    """Canonical HumanEval solutions graded on a warm pool (relay harness preloaded in the
    runners, host replay of ``check``) and, interleaved round by round, the old in-process
    programs on a pool without warm imports (as the old path ran) and on the grader's pool."""
    problems = load_benchmark("humaneval")
    candidates = [p["canonical_solution"] for p in problems]
    limits = Limits(timeout_s=10)
    jobs = [RunJob(_in_process_program(p), limits=limits) for p in problems]
    # what a candidate costs when it does no work: every task's recorded calls answered by a
    # function that returns None at once (all fail), and a plain program of `pass` per task
    noop = [_noop_candidate(p) for p in problems]
    empty = [RunJob("pass", limits=limits)] * len(problems)
    runs: dict[str, list[tuple[float, float]]] = {
        "graded": [], "old": [], "same_pool": [], "shared_ns": [], "noop": [], "empty": []}
    shared_box = LocalSandbox(isolation="bwrap", candidate_namespaces=False)
    with SandboxPool(LocalSandbox(isolation="bwrap"), workers=workers) as pool, \
            SandboxPool(LocalSandbox(isolation="bwrap"), workers=workers,
                        warm_imports=()) as old_pool, \
            SandboxPool(shared_box, workers=workers) as shared_pool:
        for warm in (pool, old_pool, shared_pool):
            warm.warm_up()
        results = grade_code_many(candidates, problems, pool=pool)  # records every task once
        shared = grade_code_many(candidates, problems, pool=shared_pool)
        noop_results = grade_code_many(noop, problems, pool=pool)
        pool.run_many(jobs[:8])
        old_pool.run_many(jobs[:8])
        steps = {"graded": lambda: results.__setitem__(
                     slice(None), grade_code_many(candidates, problems, pool=pool)),
                 "old": lambda: old_pool.run_many(jobs),
                 "same_pool": lambda: pool.run_many(jobs),
                 "shared_ns": lambda: shared.__setitem__(
                     slice(None), grade_code_many(candidates, problems, pool=shared_pool)),
                 "noop": lambda: noop_results.__setitem__(
                     slice(None), grade_code_many(noop, problems, pool=pool)),
                 "empty": lambda: pool.run_many(empty)}
        order = list(steps)
        faults: dict[str, list[int]] = {name: [] for name in steps}
        for r in range(rounds):
            for name in order[r % len(order):] + order[:r % len(order)]:
                before = _page_faults()
                runs[name].append(_timed_cpu(steps[name]))
                faults[name].append(_page_faults() - before)
        old = old_pool.run_many(jobs)
    best = {name: min(w for w, _ in done) for name, done in runs.items()}
    cpu_ms = {name: round(1000 * min(c for _, c in done) / len(jobs), 2)
              for name, done in runs.items()}
    return {"humaneval_programs": len(results),
            "humaneval_passed": sum(r.passed for r in results),
            "humaneval_programs_per_s": round(len(results) / best["graded"], 1),
            "humaneval_in_process_programs_per_s": round(len(jobs) / best["old"], 1),
            "humaneval_in_process_same_pool_programs_per_s":
                round(len(jobs) / best["same_pool"], 1),
            "humaneval_in_process_passed": sum("__weft_result_0__true" in r.stdout for r in old),
            # time per program, grader / old in-process path (below 1: the grader is faster)
            "humaneval_ratio_vs_in_process": round(best["graded"] / best["old"], 2),
            "humaneval_ratio_vs_in_process_same_pool": round(best["graded"] / best["same_pool"], 2),
            "humaneval_cpu_ms_per_program": cpu_ms["graded"],
            "humaneval_in_process_cpu_ms_per_program": cpu_ms["old"],
            "humaneval_in_process_same_pool_cpu_ms_per_program": cpu_ms["same_pool"],
            "humaneval_cpu_ratio_vs_in_process": round(cpu_ms["graded"] / cpu_ms["old"], 2),
            # the same grader on runners whose candidates share the jail's namespaces (killed by
            # pid, work dir wiped): what a mount, IPC and pid namespace per candidate costs
            "humaneval_shared_ns_programs_per_s": round(len(shared) / best["shared_ns"], 1),
            "humaneval_shared_ns_passed": sum(r.passed for r in shared),
            "humaneval_ratio_vs_shared_ns": round(best["graded"] / best["shared_ns"], 2),
            "humaneval_shared_ns_cpu_ms_per_program": cpu_ms["shared_ns"],
            # the fixed cost of a candidate, which no program's speed can go above: the same
            # grading path with a candidate that does no work (its items all fail), and a
            # plain program of `pass` per task on the same pool
            "humaneval_noop_programs_per_s": round(len(noop) / best["noop"], 1),
            "humaneval_noop_failed": sum(not r.passed for r in noop_results),
            "humaneval_noop_cpu_ms_per_program": cpu_ms["noop"],
            "empty_programs_per_s": round(len(empty) / best["empty"], 1),
            "empty_cpu_ms_per_program": cpu_ms["empty"],
            # page faults per program on the whole machine (host, drivers, templates,
            # candidates; median of the rounds): what a fork per candidate costs
            **{f"{key}_page_faults_per_program":
               round(statistics.median(faults[name]) / len(problems), 1)
               for key, name in (("humaneval", "graded"), ("humaneval_noop", "noop"),
                                 ("empty", "empty"))},
            # at or above 1, the goal is above what a candidate doing nothing reaches
            "humaneval_goal_over_noop": round(HUMANEVAL_GOAL / (len(noop) / best["noop"]), 3),
            "humaneval_workers": workers, "humaneval_rounds": rounds}


# The throughput goal for canonical HumanEval programs on two idle cores (programs/s).
HUMANEVAL_GOAL = 600.0


def _noop_candidate(problem: dict) -> str:
    """A candidate for ``problem`` that defines its entry point and does nothing else: each
    recorded call returns None (a wrong answer), so grading it costs everything a candidate
    costs but the work of a solution."""
    return f"def {problem['entry_point']}(*args, **kwargs):\n    return None\n"


# One grading measurement, run by the interpreter of the checkout given as argv[1] (this one or
# a baseline), with this file's CPU accounting prepended: a warm pool, the tasks recorded once,
# then `passes` timed passes over every canonical solution; prints the best pass's wall and CPU
# seconds (this process and its jails).
GRADE_ONCE = r"""
import sys
sys.path.insert(0, sys.argv[1])
from eval.code_grader import grade_code_many, load_benchmark
from pipelines.sandbox import LocalSandbox, SandboxPool
problems = load_benchmark("humaneval")
candidates = [p["canonical_solution"] for p in problems]
with SandboxPool(LocalSandbox(isolation="bwrap"), workers=int(sys.argv[2])) as pool:
    pool.warm_up()
    passed = sum(r.passed for r in grade_code_many(candidates, problems, pool=pool))
    best = min((_timed_cpu(lambda: grade_code_many(candidates, problems, pool=pool))
                for _ in range(int(sys.argv[3]))), key=lambda wc: wc[0])
print(json.dumps({"programs": len(candidates), "passed": passed, "wall_s": best[0],
                  "cpu_s": best[1]}))
"""


def _grade_in(root: Path, workers: int, passes: int) -> dict:
    """One GRADE_ONCE measurement with the checkout at ``root`` (its own interpreter when it
    has a ``.venv``, else this one), in a process of its own."""
    import inspect

    program = "\n".join(["import json, os, time", "from pathlib import Path",
                          inspect.getsource(_tree_cpu_s), inspect.getsource(_timed_cpu),
                          GRADE_ONCE])
    python = root / ".venv" / "bin" / "python"
    out = subprocess.run([str(python if python.exists() else sys.executable), "-c", program,
                          str(root), str(workers), str(passes)],
                         check=True, capture_output=True, text=True, cwd=root)
    return json.loads(out.stdout.strip().splitlines()[-1])


def against_baseline(baseline: Path, workers: int, rounds: int, passes: int = 2) -> dict:
    """HumanEval grading on a warm pool, this checkout against the one at ``baseline`` (for
    example the commit before a change to the runners), alternated round by round (the order
    flips each round), each measurement in a fresh process with its own pool; the best pass of
    each side gives programs/s and CPU ms per program, and the ratio is this / baseline."""
    sides = {"this": Path(__file__).resolve().parents[1], "baseline": baseline.resolve()}
    runs: dict[str, list[dict]] = {name: [] for name in sides}
    for r in range(rounds):
        for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
            runs[name].append(_grade_in(sides[name], workers, passes))
    figures = {"baseline_root": str(sides["baseline"]), "workers": workers, "rounds": rounds}
    for name, done in runs.items():
        best = min(done, key=lambda d: d["wall_s"])
        figures[f"{name}_programs_per_s"] = round(best["programs"] / best["wall_s"], 1)
        figures[f"{name}_cpu_ms_per_program"] = round(
            1000 * min(d["cpu_s"] for d in done) / best["programs"], 2)
        figures[f"{name}_passed"] = best["passed"]
    figures["throughput_ratio_this_vs_baseline"] = round(
        figures["this_programs_per_s"] / figures["baseline_programs_per_s"], 3)
    return figures


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
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved HumanEval rounds per configuration")
    parser.add_argument("--only-humaneval", action="store_true",
                        help="only the HumanEval throughput figures")
    parser.add_argument("--baseline-root", type=Path, default=None,
                        help="another checkout: alternate HumanEval grading of this checkout "
                             "and that one (each in fresh processes) and print their ratio")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.workers < 1 or args.rounds < 1:
        raise SystemExit("--runs, --workers and --rounds must be at least 1")
    figures: dict = {"bench": "sandbox", "machine": platform.node(), "cpus": os.cpu_count(),
                     "load_avg_1m_before": round(os.getloadavg()[0], 2)}
    if args.baseline_root is not None:
        if not (args.baseline_root / "pipelines" / "sandbox").is_dir():
            raise SystemExit(f"--baseline-root {args.baseline_root}: not a weft checkout "
                             "(no pipelines/sandbox); make one with `git worktree add`")
        figures.update(against_baseline(args.baseline_root, args.workers, args.rounds))
        figures["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
        print(json.dumps(figures))
        return figures
    if not args.only_humaneval:
        figures.update(cold_start(args.runs))
        figures.update(session_round_trip(max(args.runs * 4, 50)))
        figures.update(runner_latency(args.runs))
    figures.update(humaneval_throughput(args.workers, args.rounds))
    if not args.only_humaneval:
        figures.update(flood_host_memory())
    figures["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    figures["targets"] = {"cold_start_ratio_max": 1.5, "cell_round_trip_ms_max": 5.0,
                          "humaneval_programs_per_s_min": 30.0}
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
