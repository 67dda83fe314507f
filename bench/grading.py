"""Benchmark: grade 10,000 real (prediction, gold) pairs in a GradingPool vs in one process.

Golds come from the shared benchmark files (gsm8k, MATH-500, Minerva, AMC, AIME, OlympiadBench);
predictions are a fixed, seeded mix of a correct boxed answer, a wrong boxed answer (first
integer of the gold plus one) and unboxed text ("The answer is X." or no answer at all). Pool
and serial rounds alternate so that changing machine load hits both; both grade the same pairs
and any disagreement is printed to stderr (under heavy load an inner math-verify timeout can
fire on one side only). Besides wall time it reports CPU seconds (serial process, pool parent,
pool workers via /proc), which show the pool's overhead independently of machine load. Both
sides are warmed up before the timed rounds (the pool's workers started and ready, math-verify
imported in the serial process) on pairs outside the measured set; the pool's start-up is
reported on its own, and a second speed-up includes it (a one-shot pool).
Prints one JSON line.

``--adversarial`` times answer extraction instead, on degenerate outputs of about ``--size``
characters (1 MB: unclosed ``\\boxed{``, deeply nested boxes, unclosed ``\\(``, thousands of
answer phrases on one line, with or without full stops, long whitespace after "answer", boxes
joined by "or", unclosed ``<answer>`` tags, ...).
Each case runs in a child process killed after ``--limit`` seconds (reported as null), at a
quarter of the size and at the full size: the ratio of the two is ~4 for linear work and ~16 for
quadratic. With ``--baseline-root`` (a checkout of an older commit) every case also runs on that
code, side by side, and the old/new ratio is printed. One JSON line per case, then a summary,
then one reward call over sympy bombs per inner timeout (1 s, 5 s) against its stated bound.

``--startup`` times a pool's start under a main module like weft's entry points: a module run
with ``python -m`` that imports weft's launcher (and with it Dagster and weft's definitions)
before it starts the pool, in a fresh process per round: wall seconds until the call that
warms the pool returns (``start_background``; ``start`` in checkouts without it) and until every
worker is ready, and the workers' CPU seconds and resident memory by then (from /proc). With
``--baseline-root`` the same probe runs on that checkout's code, alternated round by round.

    python bench/grading.py [--pairs 10000] [--processes 2] [--rounds 4]
    python bench/grading.py --adversarial [--size 1000000] [--limit 60] [--baseline-root DIR]
    python bench/grading.py --startup [--rounds 6] [--processes 2] [--baseline-root DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import re
import subprocess
import sys
import time
from pathlib import Path

MATH_FILES = ["gsm8k_test", "math500", "minerva_math", "amc23", "aime24", "aime25", "olympiadbench"]


def _rows(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load_golds(bench_dir: Path) -> list[str]:
    from pipelines.text import last_boxed

    golds: list[str] = []
    for name in MATH_FILES:
        for row in _rows(bench_dir / f"{name}.jsonl"):
            if name == "gsm8k_test":
                golds.append(row["answer"].split("####")[-1].strip())
            elif name == "minerva_math":
                golds.append(last_boxed(row["solution"]) or "")
            elif name == "olympiadbench":
                golds.append(", ".join(row["final_answer"]))
            else:
                golds.append(str(row["answer"]))
    return [g for g in golds if g.strip()]


def make_pairs(golds: list[str], n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs: list[tuple[str, str]] = []
    for i in range(n):
        gold = golds[i % len(golds)]
        kind = rng.randrange(4)
        if kind == 0:
            pairs.append((f"We simplify step by step and get \\boxed{{{gold}}}.", gold))
        elif kind == 1:
            m = re.search(r"\d+", gold)
            wrong = gold[: m.start()] + str(int(m.group()) + 1) + gold[m.end():] if m else f"{gold}+1"
            pairs.append((f"After checking, the result is \\boxed{{{wrong}}}.", gold))
        elif kind == 2:
            pairs.append((f"Putting it together, the answer is {gold}.", gold))
        else:
            pairs.append(("I tried 12 and 15 but could not finish the computation.", gold))
    rng.shuffle(pairs)
    return pairs


# name -> (code that builds `text` from `n` repeats, call timed on it, characters per repeat)
ADVERSARIAL = {
    "unclosed_boxed": ('text = "\\\\boxed{" * n', "extract_answer(text)", 7),
    "nested_boxed": ('text = "\\\\boxed{" * n + "}" * n', "extract_answer(text)", 8),
    "unclosed_paren_after_phrase": ('text = "The answer is " + "\\\\(" * n',
                                    "extract_answer(text)", 2),
    "phrases_on_one_line": ('text = "answer: . " * n', "extract_answer(text)", 10),
    "phrases_on_many_lines": ('text = "answer: **\\n" * n', "extract_answer(text)", 11),
    "digit_groups": ('text = "1," * n', "extract_answer(text, LENIENT_POLICY)", 2),
    "choice_unclosed_boxed": ('text = "\\\\boxed{" * n', "extract_choice(text)", 7),
    "choice_phrase_then_spaces": ('text = "answer" + " " * n + "!"', "extract_choice(text)", 1),
    "choice_boxed_text_spaces": ('text = "\\\\boxed{\\\\text{" + " " * n + "!}"',
                                 "extract_choice(text)", 1),
    "choice_markers": ('text = "(E) " * n', "extract_choice(text)", 4),
    "phrases_without_full_stop": ('text = "answer is foo bar baz " * n', "extract_answer(text)",
                                  22),
    "phrases_then_equations": ('text = "the answer is 1 = " * n', "extract_answer(text)", 18),
    "boxes_joined_by_or": ('text = "\\\\boxed{1} or " * n', "extract_answer(text)", 13),
    "tir_unclosed_answer": ('text = "<answer>" * n', "answer_region(text, 'tir')", 8),
    "sxs_unclosed_tags": ('text = "<think><speak>" * n', "answer_region(text, 'sxs')", 14),
}
_CHILD = """
import time
from eval.graders import LENIENT_POLICY, extract_answer, extract_choice
from pipelines.formats import answer_region
n = {n}
{build}
times = []
while not times or (len(times) < 3 and min(times) < 0.5):  # quick cases: best of 3
    start = time.perf_counter()
    {call}
    times.append(time.perf_counter() - start)
print(min(times))
"""


def _time_case(root: Path, name: str, chars: int, limit_s: float) -> float | None:
    """Seconds one extraction takes on about ``chars`` characters, in a fresh child process
    running the code under ``root``; None when it was killed after ``limit_s``."""
    build, call, unit = ADVERSARIAL[name]
    code = _CHILD.format(n=max(1, chars // unit), build=build, call=call)
    env = {**os.environ, "PYTHONPATH": str(root)}
    try:
        out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, timeout=limit_s,
                             capture_output=True, text=True, check=True)
    except subprocess.TimeoutExpired:
        return None
    return round(float(out.stdout.strip().splitlines()[-1]), 4)


def adversarial(size: int, limit_s: float, baseline_root: Path | None) -> None:
    """Time every :data:`ADVERSARIAL` case (see the module docstring); prints JSON lines."""
    here = Path(__file__).resolve().parent.parent
    roots = {"new": here} | ({"old": baseline_root.resolve()} if baseline_root else {})
    summary = {}
    for name in ADVERSARIAL:
        row: dict = {"bench": "grading_adversarial", "case": name, "chars": size}
        for label, root in roots.items():
            full = _time_case(root, name, size, limit_s)
            # (no quarter-size run when the full size was killed: its growth is unknown anyway)
            quarter = None if full is None else _time_case(root, name, size // 4, limit_s)
            row[f"{label}_s"] = full
            row[f"{label}_quarter_s"] = quarter
            # ~4 when the work is linear in the input, ~16 when quadratic
            row[f"{label}_growth_x4"] = (round(full / quarter, 1)
                                         if full is not None and quarter else None)
        if baseline_root:
            old = row["old_s"]
            new_s = max(row["new_s"] or 0.0, 1e-4) if row["new_s"] is not None else None
            row["old_over_new"] = (None if new_s is None else round(old / new_s, 1)
                                   if old is not None else f">{limit_s / new_s:.0f}")
        summary[name] = row
        print(json.dumps(row), flush=True)
    print(json.dumps({"bench": "grading_adversarial_summary", "chars": size, "limit_s": limit_s,
                      "new_max_s": max(limit_s if r["new_s"] is None else r["new_s"]
                                      for r in summary.values()),
                      "killed_new": [n for n, r in summary.items() if r["new_s"] is None],
                      "killed_old": [n for n, r in summary.items() if r.get("old_s", 0) is None],
                      "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                  "load_avg_1m": round(os.getloadavg()[0], 2)}}))


BOMBS = ["\\boxed{9^{9^{9^9}}}", "\\boxed{10000000!}",
         "\\boxed{" + "\\frac{1}{" * 2000 + "2" + "}" * 4000 + "}", "\\boxed{" * 150_000]


def bomb_call(timeout_s: int) -> dict:
    """One outcome-reward call over a correct answer and :data:`BOMBS`, made from a non-main
    thread once the grading pool is warm: seconds taken vs the stated bound."""
    import threading

    from training.rewards import get_outcome_reward
    from training.verdicts import Verdicts, call_bound_s

    verdicts = Verdicts()
    fn = get_outcome_reward("boxed", timeout_s=timeout_s, verdicts=verdicts)
    fn(completions=["\\boxed{1}"], answer=["1"])  # starts the pool (not part of the bound)
    out: dict = {}

    def call() -> None:
        start = time.perf_counter()
        out["values"] = fn(completions=["so \\boxed{7}", *BOMBS], answer=["7"] + ["2"] * len(BOMBS))
        out["seconds"] = round(time.perf_counter() - start, 2)

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    return {"bench": "grading_bombs", "timeout_s": timeout_s, "processes": verdicts.processes,
            "seconds": out["seconds"],
            "bound_s": call_bound_s(1 + len(BOMBS), verdicts.processes, timeout_s),
            "rewards": out["values"]}


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process (Linux /proc), None where unavailable."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _workers_cpu(pool) -> dict[int, float | None]:
    return {pid: _cpu_seconds(pid) for pid in pool.worker_pids()}


# The --startup probe: a main module that imports a weft entry point first, as
# ``python -m cli.launcher`` does, then starts a pool and reports as one JSON line.
_STARTUP_PROBE = """import json, os, sys, time
import cli.launcher  # noqa: F401 - the entry point's imports (Dagster, weft's definitions)
from eval.grading_pool import GradingPool


def cpu(pid):
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid):
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        kib = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
    return kib / 1024


if __name__ == "__main__":
    pool = GradingPool(processes=int(sys.argv[1]))
    start = time.perf_counter()
    # how long warming the pool keeps the caller (checkouts before start_background: start())
    getattr(pool, "start_background", pool.start)()
    returned = time.perf_counter() - start
    pool.start(wait=True)
    ready = time.perf_counter() - start
    workers = sum(cpu(pid) for pid in pool.worker_pids())
    rss = sum(rss_mib(pid) for pid in pool.worker_pids())
    ok = pool.grade_many([("The answer is \\\\boxed{4}", "4")], kind="math")[0].correct
    pool.close()
    print(json.dumps({"returned_s": round(returned, 3), "ready_s": round(ready, 3),
                      "workers_cpu_s": round(workers, 3),
                      "workers_rss_mib": round(rss, 1), "graded": ok}))
"""


def startup(rounds: int, processes: int, baseline_root: Path | None) -> None:
    """The ``--startup`` comparison (module docstring); prints one JSON line per run and a
    summary of medians."""
    import statistics
    import tempfile

    here = Path(__file__).resolve().parent.parent
    roots = {"current": here} | ({"baseline": baseline_root.resolve()} if baseline_root else {})
    rows: dict[str, list[dict]] = {label: [] for label in roots}
    with tempfile.TemporaryDirectory() as probe_dir:
        (Path(probe_dir) / "weft_pool_start_probe.py").write_text(_STARTUP_PROBE)
        for r in range(rounds):
            order = list(roots) if r % 2 == 0 else list(roots)[::-1]
            for label in order:
                env = {**os.environ, "PYTHONPATH": os.pathsep.join([probe_dir, str(roots[label])])}
                out = subprocess.run([sys.executable, "-m", "weft_pool_start_probe",
                                      str(processes)], cwd=roots[label], env=env, timeout=300,
                                     capture_output=True, text=True, check=True)
                row = {"bench": "grading_pool_startup", "code": label, "round": r,
                       **json.loads(out.stdout.strip().splitlines()[-1]),
                       "load_avg_1m": round(os.getloadavg()[0], 2)}
                rows[label].append(row)
                print(json.dumps(row), flush=True)
    summary: dict = {"bench": "grading_pool_startup_summary", "rounds": rounds,
                     "processes": processes, "cpus": os.cpu_count()}
    for label, got in rows.items():
        summary[f"{label}_returned_s"] = round(
            statistics.median(x["returned_s"] for x in got), 3)
        summary[f"{label}_ready_s"] = round(statistics.median(x["ready_s"] for x in got), 3)
        summary[f"{label}_workers_cpu_s"] = round(
            statistics.median(x["workers_cpu_s"] for x in got), 3)
        summary[f"{label}_workers_rss_mib"] = round(
            statistics.median(x["workers_rss_mib"] for x in got), 1)
    if baseline_root:
        summary["ready_current_over_baseline"] = round(
            summary["current_ready_s"] / summary["baseline_ready_s"], 3)
        summary["cpu_current_over_baseline"] = round(
            summary["current_workers_cpu_s"] / summary["baseline_workers_cpu_s"], 3)
    print(json.dumps(summary), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10_000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4, help="alternating pool/serial rounds")
    parser.add_argument("--adversarial", action="store_true",
                        help="time extraction on degenerate outputs instead")
    parser.add_argument("--size", type=int, default=1_000_000, help="adversarial input chars")
    parser.add_argument("--limit", type=float, default=60.0, help="seconds before a case is killed")
    parser.add_argument("--baseline-root", type=Path, default=None,
                        help="checkout of older code to time side by side (--adversarial, "
                             "--startup)")
    parser.add_argument("--startup", action="store_true",
                        help="time the pool's start under a weft entry point instead")
    args = parser.parse_args()
    if args.startup:
        startup(args.rounds, args.processes, args.baseline_root)
        return
    if args.adversarial:
        adversarial(args.size, args.limit, args.baseline_root)
        for timeout_s in (1, 5):
            print(json.dumps(bomb_call(timeout_s)), flush=True)
        return

    from eval.graders import grade_many_serial
    from eval.grading_pool import GradingPool
    from pipelines.settings import require_data_dir

    load_start = os.getloadavg()[0]
    pairs = make_pairs(load_golds(require_data_dir() / "benchmarks"), args.pairs)
    # Interleave pool and serial rounds (alternating which goes first) so that a change in
    # machine load during the run hits both sides alike.
    rounds = max(1, args.rounds)
    chunks = [pairs[i::rounds] for i in range(rounds)]
    pooled: list = []
    serial: list = []
    pool_s = serial_s = pool_parent_cpu_s = serial_cpu_s = 0.0
    worker_cpu_s: float | None = 0.0
    warm_up = [("\\boxed{\\frac{1}{2}}", "1/2"), ("the answer is 3", "4"), ("\\boxed{x^2}", "x^{2}")]
    t0 = time.perf_counter()
    with GradingPool(processes=args.processes) as pool:
        pool.start(wait=True)
        startup_s = time.perf_counter() - t0
        pool.grade_many(warm_up * args.processes)
        grade_many_serial(warm_up)
        for r, chunk in enumerate(chunks):
            for side in ((0, 1) if r % 2 == 0 else (1, 0)):
                start, cpu = time.perf_counter(), time.process_time()
                if side == 0:
                    before = _workers_cpu(pool)
                    pooled.extend(pool.grade_many(chunk))
                    pool_s += time.perf_counter() - start
                    pool_parent_cpu_s += time.process_time() - cpu
                    after = _workers_cpu(pool)
                    if worker_cpu_s is not None and before.keys() == after.keys() \
                            and None not in before.values() and None not in after.values():
                        worker_cpu_s += sum(after[p] - before[p] for p in after)  # type: ignore[operator]
                    else:  # a worker was replaced or /proc is missing: no CPU figure
                        worker_cpu_s = None
                else:
                    serial.extend(grade_many_serial(chunk))
                    serial_s += time.perf_counter() - start
                    serial_cpu_s += time.process_time() - cpu
        timeouts = pool.timeouts
    pool_total_s = pool_s + startup_s

    mismatches = 0
    for pair, a, b in zip([p for chunk in chunks for p in chunk], pooled, serial):
        if a != b:  # e.g. an inner math-verify timeout on one side only, under heavy load
            mismatches += 1
            print(f"mismatch {pair!r:.200}: pool={a} serial={b}", file=sys.stderr)
    print(json.dumps({
        "bench": "grading",
        "pairs": len(pairs),
        "processes": args.processes,
        "rounds": rounds,
        "pool_s": round(pool_s, 3),
        "pool_startup_s": round(startup_s, 3),
        "serial_s": round(serial_s, 3),
        "serial_cpu_s": round(serial_cpu_s, 3),
        "pool_parent_cpu_s": round(pool_parent_cpu_s, 3),
        "pool_workers_cpu_s": None if worker_cpu_s is None else round(worker_cpu_s, 3),
        # CPU work per pair, serial vs pool (1.0 = no overhead): what the pool would turn into
        # speed-up with free cores; the wall ratio above is what this machine gave right now.
        "cpu_efficiency_pool_vs_serial": None if not worker_cpu_s else
            round(serial_cpu_s / (worker_cpu_s + pool_parent_cpu_s), 3),
        "pool_pairs_per_s": round(len(pairs) / pool_s, 1),
        "serial_pairs_per_s": round(len(pairs) / serial_s, 1),
        "speedup_pool_vs_serial": round(serial_s / pool_s, 3),
        "speedup_with_pool_startup": round(serial_s / pool_total_s, 3),
        "correct_fraction": round(sum(r.correct for r in serial) / len(serial), 4),
        "pool_timeouts": timeouts,
        "pool_serial_mismatches": mismatches,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_avg_1m_start": round(load_start, 2),
                    "load_avg_1m_end": round(os.getloadavg()[0], 2)},
    }))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout
    main()
