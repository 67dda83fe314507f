"""Evaluation's grading step (``eval.runner.grade``) without a pool of its own: answers still
go to grading worker processes, so extraction and verification of each one run under one
wall-clock limit whatever the output holds, called from any thread."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

BOMBS = [
    "\\boxed{9^{9^{9^9}}}",
    "\\boxed{10000000!}",
    "\\boxed{" + "\\frac{1}{" * 2000 + "2" + "}" * 4000 + "}",
    "\\boxed{" * 150_000,  # about 1 MB
]


def test_grading_without_a_pool_uses_worker_processes():
    import os

    from eval import grading_pool
    from eval.benchmarks import get
    from eval.runner import grade

    rows = [{"problem_id": "p", "gold": "7", "output": "so \\boxed{7}", "gen_error": None},
            {"problem_id": "q", "gold": "7", "output": "\\boxed{8}", "gen_error": None}]
    grade(rows, get("math500"))
    assert [r["correct"] for r in rows] == [True, False]
    pools = list(grading_pool._shared.values())
    assert pools and all(os.getpid() not in p.worker_pids() for p in pools)
    assert any(p.worker_pids() for p in pools)


def test_bombs_graded_from_a_thread_without_a_pool_finish_under_a_hard_limit():
    """Liveness check, not a timing assertion: the child is killed after 120 s. Off the main
    thread math-verify's own alarms are off, so before grading moved to workers these outputs
    ran unbounded there."""
    code = textwrap.dedent("""
        import json, sys, threading
        from eval.benchmarks import get
        from eval.runner import grade
        bombs = json.loads(sys.stdin.read())
        rows = [{"problem_id": str(i), "gold": "2", "output": b, "gen_error": None}
                for i, b in enumerate(bombs)]
        thread = threading.Thread(target=grade, args=(rows, get("math500")))
        thread.start()
        thread.join()
        print(json.dumps([r["correct"] for r in rows]))
    """)
    try:
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, input=json.dumps(BOMBS),
                              capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("grading sympy bombs without a pool did not return within 120 s")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [False] * len(BOMBS)
