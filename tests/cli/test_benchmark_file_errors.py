"""A benchmarks file with mistakes: `weft` lists every problem, one line each, and exits 2 (no
traceback); nothing of the file is registered and the package still imports, so the UI loads."""

import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.ingest import BenchmarkFileError, read_benchmark_file

ROOT = Path(__file__).resolve().parents[2]
BAD = """benchmarks:
  - name: 9lives
    path: a.jsonl
    fields: {problem: q}
    grader: math
    k: 0
  - name: ok_one
    path: b.txt
    fields: {problem: q, answer: a}
    grader: code
"""


def test_every_problem_of_every_entry_is_reported(tmp_path):
    path = tmp_path / "benchmarks.yaml"
    path.write_text(BAD)
    with pytest.raises(BenchmarkFileError) as info:
        read_benchmark_file(path)
    fields = [line.split("field ")[1].split(":")[0] for line in info.value.problems]
    # by hand: entry 1 has a bad name, no answer field and k 0; entry 2 a bad suffix and grader
    assert fields == ["'name'", "'fields.answer'", "'k'", "'path'", "'grader'"]
    assert all(line.startswith(f"{path}, entry ") for line in info.value.problems)
    assert str(info.value).count("\n") == 4


def test_weft_prints_one_line_per_problem_and_exits_2(tmp_path, weft_home):
    path = tmp_path / "benchmarks.yaml"
    path.write_text(BAD)
    done = subprocess.run(
        [sys.executable, "-m", "cli.instance", "materialize", "--select", "problems"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={**__import__("os").environ, "WEFT_BENCHMARKS": str(path),
             "WEFT_HOME": str(weft_home)})
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("weft: ")]
    assert len(lines) == 5 and all(str(path) in line for line in lines)


def test_the_package_still_imports_and_names_the_problems(tmp_path):
    path = tmp_path / "benchmarks.yaml"
    path.write_text(BAD)
    code = ("import pipelines.ingest as i, eval.benchmarks as b\n"
            "print(len(i.CONFIG_PROBLEMS), 'ok_one' in i.SOURCES)\n"
            "try:\n    b.get('ok_one')\nexcept KeyError as e:\n    print('registered nothing' in str(e))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False,
                          env={**__import__("os").environ, "WEFT_BENCHMARKS": str(path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["5", "False", "True"]
