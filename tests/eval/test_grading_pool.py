"""The grading pool started from a script that has no file of its own."""


def test_a_script_read_from_standard_input_can_grade():
    """``python - <<EOF``: the main module has no file, which workers would try to run."""
    import subprocess
    import sys
    from pathlib import Path

    script = ("from eval.grading_pool import GradingPool\n"
              "with GradingPool(processes=1) as pool:\n"
              "    out = pool.grade_many([('The answer is \\\\boxed{4}', '4')], kind='math')\n"
              "print('RESULT', [r.correct for r in out])\n")
    done = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=180, check=False)
    assert "RESULT [True]" in done.stdout, done.stdout + done.stderr


def _run_module(tmp_path, source: str, *args: str):
    """Run ``source`` as ``python -m weft_pool_probe`` (a module run by name, as weft's own entry
    points are) from the project root, with ``tmp_path`` on the path."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "weft_pool_probe.py").write_text(source)
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(root)]))
    return subprocess.run([sys.executable, "-m", "weft_pool_probe", *args], capture_output=True,
                          text=True, cwd=root, env=env, timeout=180, check=False)


# Every import of the module appends its process id to a file: the main process imports it
# once (as __main__); a worker that re-imports the main module adds its own line.
_PROBE_HEAD = """import os, sys
with open(sys.argv[1], "a") as f:
    f.write(f"{os.getpid()} {__name__}\\n")
from eval.graders import GradeResult, register_grader
from eval.grading_pool import GradingPool


def doubled(prediction, gold, **kw):
    ok = prediction.strip() == str(2 * int(gold))
    return GradeResult(ok, prediction, "doubled", gold, prediction, None)
"""


def test_workers_do_not_import_a_main_module_they_need_nothing_from(tmp_path):
    imports = tmp_path / "imports.txt"
    source = _PROBE_HEAD + """
if __name__ == "__main__":
    with GradingPool(processes=2) as pool:
        out = pool.grade_many([("The answer is \\\\boxed{4}", "4"), ("5", "4")], kind="math")
        print("RESULT", [r.correct for r in out], pool.with_main)
"""
    done = _run_module(tmp_path, source, str(imports))
    assert "RESULT [True, False] False" in done.stdout, done.stdout + done.stderr
    lines = imports.read_text().splitlines()
    assert [line.split()[1] for line in lines] == ["__main__"], lines


def test_a_grader_of_the_main_module_reaches_workers_also_when_registered_late(tmp_path):
    imports = tmp_path / "imports.txt"
    source = _PROBE_HEAD + """
if __name__ == "__main__":
    with GradingPool(processes=1) as pool:
        first = pool.grade_many([("\\\\boxed{4}", "4")], kind="math")  # no main in workers
        before = pool.worker_pids()
        register_grader("doubled", doubled)
        out = pool.grade_many([("8", "4"), ("4", "4")], kind="doubled")
        print("RESULT", [r.correct for r in first + out], pool.with_main,
              before != pool.worker_pids())
else:
    register_grader("doubled", doubled)  # how a worker that imports this module gets it
"""
    done = _run_module(tmp_path, source, str(imports))
    assert "RESULT [True, True, False] True True" in done.stdout, done.stdout + done.stderr
    names = [line.split()[1] for line in imports.read_text().splitlines()]
    assert names == ["__main__", "__mp_main__"], names  # the restarted worker, once


def _grader_children() -> set[int]:
    import multiprocessing

    return {p.pid for p in multiprocessing.active_children() if p.name == "weft-grader"}


def test_a_pool_started_in_the_background_starts_its_workers_once():
    import threading

    from eval.grading_pool import GradingPool

    before = _grader_children()
    pool = GradingPool(processes=2)
    try:
        pool.start_background()
        pool.start_background()  # while the first may still run: nothing more
        other = threading.Thread(target=pool.start)  # a start from another thread meanwhile
        other.start()
        out = pool.grade_many([("\\boxed{4}", "4"), ("\\boxed{5}", "4")], kind="math")
        other.join()
        assert [r.correct for r in out] == [True, False]
        assert len(pool.worker_pids()) == 2
        assert _grader_children() - before == set(pool.worker_pids())
    finally:
        pool.close()
    assert _grader_children() - before == set()


def test_closing_a_pool_while_it_starts_in_the_background_leaves_no_worker():
    from eval.grading_pool import GradingPool

    before = _grader_children()
    for _ in range(3):
        pool = GradingPool(processes=2)
        pool.start_background()
        pool.close()  # waits for the start in the background, then stops what it started
        assert pool.worker_pids() == []
        assert _grader_children() - before == set()
    pool.start_background()  # a closed pool starts again, as after close()
    try:
        assert pool.grade_many([("\\boxed{1}", "1")], kind="math")[0].correct
    finally:
        pool.close()
