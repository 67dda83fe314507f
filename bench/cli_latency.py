"""How long the command line takes to answer, side by side with its peers, alternated.

Each figure is the median wall time of ``--rounds`` runs of a fresh process, the commands of a
pair run one after the other in each round (order swapped every round), so load changes hit
both. Printed as one JSON line per pair and a summary:

- ``config_error``: ``python -m training.sft --recipe demo_sft max_stepz=3`` (a misspelled
  field: weft's fast check, :mod:`training.precheck`) against the full check the command ran
  before (building the config imports TRL, torch and transformers) and against importing TRL's
  own argument parser (what a TRL script pays before it can say anything);
- ``select_1``: ``python -m warehouse sql "SELECT 1"`` against plain DuckDB from Python
  (``duckdb.sql("SELECT 1")``), on the warehouse of ``WEFT_HOME``.

``--baseline-root OTHER`` adds ``select_1_before``: ``SELECT 1`` through another checkout (its
own ``.venv``), on a copy of the same warehouse folder (two checkouts would rebuild one catalog
in turn), alternated with this one's, so a change is measured side by side in one run.

``.venv/bin/python bench/cli_latency.py [--rounds 7] [--baseline-root ../old]``; the goals are
a config error in under 2 s and ``SELECT 1`` in under 0.5 s, on an idle machine and under load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable

PAIRS = {
    "config_error": {
        "weft": [PY, "-m", "training.sft", "--recipe", "demo_sft", "max_stepz=3"],
        "full_check_before": [PY, "-c", ("from training.config import load_config\n"
                                         "try:\n    load_config('demo_sft', ['max_stepz=3'], "
                                         "expect_kind='sft')\nexcept Exception as e:\n"
                                         "    print(e)")],
        "trl_parser_import": [PY, "-c", "from trl import TrlParser"],
    },
    "select_1": {
        "weft": [PY, "-m", "warehouse", "sql", "SELECT 1"],
        "duckdb_python": [PY, "-c", "import duckdb; print(duckdb.sql('SELECT 1').fetchall())"],
    },
}


def _time(cmd: list[str] | tuple[list[str], Path]) -> float:
    """Wall time of one command, run in this checkout (or in the folder paired with it)."""
    cmd, cwd = cmd if isinstance(cmd, tuple) else (cmd, ROOT)
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          check=False, timeout=600, text=True)
    took = time.perf_counter() - started
    if proc.returncode != 0 and "max_stepz" not in " ".join(cmd):
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-1000:]}")
    return took


def _baseline_pair(other: Path, scratch: Path) -> dict:
    """``SELECT 1`` through the checkout ``other``, on a copy of this warehouse folder."""
    from pipelines.settings import weft_home

    copy = scratch / "warehouse"
    source = weft_home() / "warehouse"
    if source.is_dir():
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns("catalog.duckdb*"))
    else:
        copy.mkdir()
    other_py = other / ".venv" / "bin" / "python"
    return {"weft": PAIRS["select_1"]["weft"],
            "duckdb_python": PAIRS["select_1"]["duckdb_python"],
            "weft_before": ([str(other_py), "-m", "warehouse", "--root", str(copy), "sql",
                             "SELECT 1"], other)}


def measure(name: str, commands: dict[str, list[str]], rounds: int) -> dict:
    times: dict[str, list[float]] = {k: [] for k in commands}
    loads = []
    for r in range(rounds):
        order = list(commands) if r % 2 == 0 else list(reversed(commands))
        for key in order:
            times[key].append(_time(commands[key]))
        loads.append(os.getloadavg()[0])
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {"bench": name, "rounds": rounds, "median_s": {k: round(v, 3) for k, v in med.items()},
           "load_1min": [round(x, 1) for x in (min(loads), max(loads))]}
    out["ratio_vs_weft"] = {k: round(v / med["weft"], 2) for k, v in med.items() if k != "weft"}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", choices=sorted(PAIRS), help="one pair only")
    parser.add_argument("--baseline-root", type=Path, default=None,
                        help="another checkout (with its .venv) to time SELECT 1 against")
    args = parser.parse_args(argv)
    # the fast check needs the field index of this install (make setup writes it)
    subprocess.run([PY, "-m", "training.precheck", "--index"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    results = [measure(n, c, args.rounds) for n, c in PAIRS.items()
               if not args.only or n == args.only]
    if args.baseline_root is not None:
        with tempfile.TemporaryDirectory() as scratch:
            pairs = _baseline_pair(args.baseline_root.resolve(), Path(scratch))
            for cmd in pairs.values():  # each side builds its catalog once, untimed
                _time(cmd)
            results.append(measure("select_1_before", pairs, args.rounds))
    for r in results:
        print(json.dumps(r))
    goals = {"config_error": 2.0, "select_1": 0.5, "select_1_before": 0.5}
    print(json.dumps({"summary": {r["bench"]: {"weft_s": r["median_s"]["weft"],
                                               "goal_s": goals[r["bench"]],
                                               "met": r["median_s"]["weft"] <= goals[r["bench"]]}
                                  for r in results}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
