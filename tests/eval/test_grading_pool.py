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
