"""The demo's terminal holds its own story; library output goes to the log file it names.

The routing tests run a real process (a script under ``cli.console.run_logged``, as
``python -m cli.demo`` does) whose work starts real child processes and, for the failing
stage, a real Dagster run whose asset launches a script through Dagster Pipes, the way the
training assets launch ``training/`` scripts.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli.console import last_error_record, last_traceback, run_log_path, verbose_from_env
from cli.demo import AnswerDiagnosis, describe_answers, diagnose_answers, step_summary

ROOT = Path(__file__).resolve().parents[2]

# what Dagster's console logger writes for a step the training script reports through Pipes
DAGSTER_STEP = ("2026-01-02 03:04:05 +0000 - dagster - INFO - __ephemeral_asset_job__ - "
                "0f0e-run - grpo_checkpoint - demo_grpo-ab12cd34 step 2/8: loss=0.01234, "
                "reward_mean=0.625, kl=0.0003, seconds_per_step=31.5, filtered_group_share=0.5")

NOISY_CHILD = textwrap.dedent("""
    import sys, warnings
    print("child noise on stdout")
    print("child noise on stderr", file=sys.stderr)
    warnings.warn("child library warning: version 0.32 is not supported")
    sys.stderr.write("bar:  10%\\rbar: 100%\\n")
""")


def run_script(body: str, home: Path, *args: str, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess:
    script = home / "script.py"
    script.write_text(textwrap.dedent(body))
    environ = {k: v for k, v in os.environ.items() if k != "WEFT_VERBOSE"}
    environ.update({"WEFT_HOME": str(home), "PYTHONPATH": str(ROOT), **(env or {})})
    return subprocess.run([sys.executable, str(script), *args], cwd=ROOT, env=environ,
                          capture_output=True, text=True, timeout=240, check=False)


def test_terminal_shows_the_story_and_the_log_holds_the_library_lines(tmp_path):
    log = tmp_path / "logs" / "demo-test.log"
    body = f"""
        import logging, subprocess, sys, time, warnings
        from pathlib import Path
        from cli.console import run_logged, say, stage
        from cli.demo import follow_log

        def work():
            stage("[demo] stage one: a library that talks ...")
            subprocess.run([sys.executable, "-c", {NOISY_CHILD!r}], check=True)
            print("in-process print noise")
            logging.basicConfig(level=logging.WARNING)
            logging.getLogger("somelib").warning("in-process logging warning")
            warnings.warn("in-process library warning")
            print({DAGSTER_STEP!r}, file=sys.stderr, flush=True)
            time.sleep(2.0)  # the follower reads the log every 0.5 s
            say("[demo] stage one done: 3 problems")
            return 0

        status = run_logged(work, Path(sys.argv[1]), follow=follow_log)
        print("after the console: back on the terminal")
        sys.exit(status)
    """
    proc = run_script(body, tmp_path, str(log))
    assert proc.returncode == 0, proc.stderr
    step = ("[demo]   demo_grpo-ab12cd34 step 2/8  reward 0.625, dropped groups 0.5, "
            "loss 0.01234, kl 0.0003, s/step 31.5")
    assert proc.stdout.splitlines() == [
        (f"[demo] library output (Dagster events, subprocesses, warnings, progress bars) goes "
         f"to {log}; --verbose or WEFT_VERBOSE=1 shows it here"),
        "[demo] stage one: a library that talks ...",
        step,
        "[demo] stage one done: 3 problems",
        f"[demo] full log: {log}",
        "after the console: back on the terminal",
    ]
    assert proc.stderr == ""
    text = log.read_text()
    for line in ("child noise on stdout", "child noise on stderr",
                 "UserWarning: child library warning: version 0.32 is not supported",
                 "bar: 100%", "in-process print noise", "in-process logging warning",
                 "UserWarning: in-process library warning", DAGSTER_STEP,
                 "[demo] stage one: a library that talks ...", step,
                 "[demo] stage one done: 3 problems"):
        assert line in text, line
    assert "after the console" not in text


def test_verbose_keeps_library_output_on_the_terminal(tmp_path):
    body = f"""
        import subprocess, sys
        from cli.console import run_logged, say, verbose_from_env

        def work():
            say("[demo] stage one ...")
            subprocess.run([sys.executable, "-c", {NOISY_CHILD!r}], check=True)
            return 0

        assert verbose_from_env(False)
        sys.exit(run_logged(work, None))
    """
    proc = run_script(body, tmp_path, env={"WEFT_VERBOSE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[demo] stage one ...", "child noise on stdout"]
    assert "child noise on stderr" in proc.stderr and "child library warning" in proc.stderr
    assert not (tmp_path / "logs").exists()


FAILING_STAGE = """
    import sys
    from pathlib import Path
    import dagster as dg
    from cli.console import run_logged, stage

    CHILD = (
        "from dagster_pipes import open_dagster_pipes\\n"
        "with open_dagster_pipes() as pipes:\\n"
        "    pipes.log.info('training script started')\\n"
        "    print('noise before the error')\\n"
        "    raise ValueError('recipe field lr must be positive, got -1')\\n")

    @dg.asset
    def checkpoint(context: dg.AssetExecutionContext):
        client = dg.PipesSubprocessClient()
        return client.run(command=[sys.executable, "-c", CHILD], context=context).get_results()

    def work():
        stage("[demo] training ...")
        result = dg.materialize([checkpoint], raise_on_error=sys.argv[2] == "raise")
        return 0 if result.success else 1

    sys.exit(run_logged(work, Path(sys.argv[1])))
"""


@pytest.mark.parametrize("mode", ["raise", "status"])
def test_a_failing_stage_shows_its_error_and_the_log_on_the_terminal(tmp_path, mode):
    """A Pipes child that fails: its traceback reaches the terminal (stderr) with the log's
    path and the exit status is non-zero, whether the run raised or only reported failure."""
    log = tmp_path / "logs" / "demo-fail.log"
    proc = run_script(FAILING_STAGE, tmp_path, str(log), mode)
    assert proc.returncode == 1
    assert "ValueError: recipe field lr must be positive, got -1" in proc.stderr
    assert f"everything this run printed is in {log}" in proc.stderr
    assert "noise before the error" not in proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[1:] == ["[demo] training ..."]
    text = log.read_text()
    assert "noise before the error" in text and "training script started" in text
    assert "STEP_FAILURE" in text
    if mode == "status":  # no exception to show: Dagster's failed-step record is repeated
        assert "STEP_FAILURE" in proc.stderr


def test_step_summary_reads_the_step_line_dagster_writes():
    assert step_summary(DAGSTER_STEP) == (
        "[demo]   demo_grpo-ab12cd34 step 2/8  reward 0.625, dropped groups 0.5, loss 0.01234, "
        "kl 0.0003, s/step 31.5")
    # tqdm's carriage-return bars can precede the record on the same line
    assert step_summary(" 33%|###  | 1/3 [00:26<00:53]" + DAGSTER_STEP.replace(
        "reward_mean=0.625, kl=0.0003, ", "")).endswith("step 2/8  dropped groups 0.5, "
                                                        "loss 0.01234, s/step 31.5")
    assert step_summary("[demo]   demo_grpo-ab12cd34 step 2/8  reward 0.625") is None
    assert step_summary("Step 2/8 of something else") is None


def test_answer_diagnosis_counts_what_the_strict_rule_read():
    rows = [
        # a stated, wrong answer; its last number is wrong too
        {"output": "So 3 + 4 = 8. The answer is 8.", "gold": "7", "extraction_method":
         "answer_phrase", "correct": False, "finish_reason": "stop"},
        # a stated, right answer
        {"output": "The answer is \\boxed{7}", "gold": "7", "extraction_method": "boxed",
         "correct": True, "finish_reason": "stop"},
        # no stated answer, but the last number is right
        {"output": "We add 3 and 4 to get 7", "gold": "7", "extraction_method": "none",
         "correct": False, "finish_reason": "stop"},
        # cut off at the token limit with no number at all
        {"output": "Let us think about the apples and", "gold": "7", "extraction_method": "none",
         "correct": False, "finish_reason": "length"},
    ]
    d = diagnose_answers(rows)
    # flexible: rows 2 (last number 7) and 3 (7) are right; row 1's last number is 8
    assert d == AnswerDiagnosis(samples=4, stated=2, stated_right=1, unstated=2, cut_off=1,
                                flexible_right=2)


def test_answer_story_names_the_reason_the_counts_show():
    wrong = AnswerDiagnosis(samples=24, stated=16, stated_right=0, unstated=8, cut_off=2,
                            flexible_right=0)
    assert describe_answers(wrong, "gsm8k", 0.0, 384).splitlines() == [
        ("[demo] why the base model scores 0.000 on gsm8k: 16 of 24 answers state one "
        "(\\boxed{} or 'the answer is N'), 0 right;"),
        ("[demo]   8 state none (2 cut off at 384 tokens); the last number (flexible rule) is "
        "right in 0: its stated answers are wrong (the arithmetic fails, not the format).")]
    silent = AnswerDiagnosis(samples=4, stated=0, stated_right=0, unstated=4, cut_off=0,
                             flexible_right=3)
    assert describe_answers(silent, "gsm8k", 0.0, 384).endswith(
        "it never states a final answer the strict rule accepts: the score is about format.")
    mixed = AnswerDiagnosis(samples=4, stated=2, stated_right=1, unstated=2, cut_off=0,
                            flexible_right=3)
    assert describe_answers(mixed, "gsm8k", 0.25, 384).endswith(
        "part of the gap is format: the last numbers are right more often.")


def test_error_excerpts_find_the_last_traceback_and_error_record():
    log = textwrap.dedent("""\
        noise
        Traceback (most recent call last):
          File "a.py", line 1, in <module>
        KeyError: 'old'
        2026-01-02 03:04:05 +0000 - dagster - ERROR - job - run - step - STEP_FAILURE - failed.

        ValueError: new

        Stack Trace:
          File "b.py", line 2, in f
        2026-01-02 03:04:06 +0000 - dagster - ERROR - job - run - RUN_FAILURE - summary
        steps failed
        Traceback (most recent call last):
          File "c.py", line 3, in <module>
            raise ValueError("new")
        ValueError: new
        trailing noise
        """)
    assert last_traceback(log) == ["Traceback (most recent call last):",
                                   '  File "c.py", line 3, in <module>',
                                   '    raise ValueError("new")', "ValueError: new"]
    assert last_error_record(log) == [
        "2026-01-02 03:04:05 +0000 - dagster - ERROR - job - run - step - STEP_FAILURE - failed.",
        "", "ValueError: new", "", "Stack Trace:", '  File "b.py", line 2, in f']
    assert last_traceback("no error here") == [] == last_error_record("no error here")


def test_verbose_setting_and_log_names(tmp_path, monkeypatch):
    monkeypatch.setenv("WEFT_HOME", str(tmp_path))
    monkeypatch.setenv("WEFT_VERBOSE", "maybe")
    with pytest.raises(ValueError, match="WEFT_VERBOSE must be 1 or 0"):
        verbose_from_env()
    monkeypatch.setenv("WEFT_VERBOSE", "0")
    assert verbose_from_env() is False and verbose_from_env(True) is True
    monkeypatch.setenv("WEFT_VERBOSE", "yes")
    assert verbose_from_env() is True
    from datetime import datetime

    when = datetime(2026, 1, 2, 3, 4, 5)
    first = run_log_path("demo", when)
    assert first == tmp_path / "logs" / "demo-20260102-030405.log"
    first.parent.mkdir()
    first.write_text("")
    assert run_log_path("demo", when) == tmp_path / "logs" / "demo-20260102-030405-2.log"


def test_ingest_and_score_lines_read_the_warehouse(weft_home):
    from cli.demo import ingest_summary, score_line
    from warehouse import Lineage, Warehouse

    wh = Warehouse()
    for source, n in (("gsm8k", 3), ("math500", 2), ("old_source", 4)):
        wh.write("problems", [{"problem_id": f"{source}-{i}", "source": source, "split": "test",
                               "problem": f"q{i}", "answer": "1"} for i in range(n)],
                 lineage=Lineage(partition=source), partition=source)
    # old_source is in the table from an earlier run but not ingested by this one
    assert ingest_summary(["gsm8k", "math500"]) == [
        "[demo] ingested 5 problems from 2 sources (no rows rejected):",
        "[demo]   gsm8k 3, math500 2"]
    wh.write("eval_scores", [
        {"model": "m", "benchmark": "gsm8k", "metric": "pass@k", "k": 1, "value": 0.25,
         "ci_low": 0.0, "ci_high": 0.5, "n_problems": 12},
        {"model": "m", "benchmark": "gsm8k", "metric": "avg@k", "k": 2, "value": 0.125,
         "ci_low": 0.0, "ci_high": 0.3, "n_problems": 12},
        {"model": "other", "benchmark": "gsm8k", "metric": "pass@k", "k": 1, "value": 0.9,
         "ci_low": 0.8, "ci_high": 1.0, "n_problems": 12},
    ], lineage=Lineage(partition="gsm8k@m"), partition="gsm8k@m")
    assert score_line("gsm8k", "m", "base model") == (
        "[demo] base model on gsm8k (12 problems): pass@1 0.250 (95% CI 0.000-0.500), "
        "avg@2 0.125")
    assert score_line("math500", "m", "base model") == (
        "[demo] base model on math500: no scores were written")
