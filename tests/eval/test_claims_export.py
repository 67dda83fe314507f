"""The Results table as a committed file: ``--export`` writes the newest run of every claim with
its pooled-over-seeds figures, ``--render`` prints the Markdown of such a file, and the docs
page's table is exactly that rendering of the committed export."""

import re
from pathlib import Path

import numpy as np
import pytest

from eval.claims import Claim, judge
from eval.claims.__main__ import main
from eval.claims.export import COLUMNS, read_csv, render, write_csv
from eval.claims.readers import CHECKS_HEADING, PLUMBING_HEADING
from eval.replicates import pool, se_from_ci
from warehouse import Lineage, Warehouse

CLAIM = Claim(paper="P", section="S", statement="t beats r", metric="m", reference="r",
              treatment="t")


def _run(shift, seed, experiment="x", role="claim", n=30):
    rng = np.random.default_rng(seed + 17)
    ref = rng.normal(0.0, 1.0, n)
    row = judge(CLAIM, ref, ref + shift + rng.normal(0.0, 0.3, n), n_boot=400)
    return dict(row, experiment=experiment, scale="cpu", design="d1", seed=seed, role=role,
                config_json="{}")


def test_export_pools_seeds_and_renders_what_it_wrote(weft_home, tmp_path, capsys):
    wh = Warehouse()
    runs = {0: _run(0.5, 0), 1: _run(0.2, 1)}
    for seed, row in runs.items():
        lin = Lineage(run_id=f"r{seed}", asset="x", partition="x")
        wh.write("claim_history", [row], lineage=lin, folder=f"x/r{seed}")
    wh.write("claims", [runs[1]], lineage=Lineage(run_id="r1", asset="x", partition="x"))
    wh.write("claims", [_run(-0.1, 5, "y", role="plumbing")],
             lineage=Lineage(run_id="r9", asset="y", partition="y"))

    path = tmp_path / "claims.csv"
    assert main(["--export", str(path)]) == 0
    assert "wrote 2 claim parts (1 pooled over seeds)" in capsys.readouterr().out
    rows = {r["experiment"]: r for r in read_csv(path)}
    x, y = rows["x"], rows["y"]
    assert x["run_id"] == "r1" and x["seed"] == 1 and x["k"] == 2 and x["seeds"] == "0, 1"
    expected = pool([runs[s]["diff"] for s in (0, 1)],
                    [se_from_ci(runs[s]["diff_ci_low"], runs[s]["diff_ci_high"]) for s in (0, 1)])
    assert (x["pooled_diff"], x["pooled_diff_ci_low"], x["pooled_diff_ci_high"]) == pytest.approx(
        (expected.value, expected.ci_low, expected.ci_high))
    assert x["pooled_n"] == 30  # the same 30 units in both seeds, not 60
    assert x["diff"] == pytest.approx(runs[1]["diff"])  # the newest run is kept beside
    assert y["pooled_verdict"] is None and y["role"] == "plumbing"

    # a round trip keeps every value
    again = tmp_path / "again.csv"
    write_csv(read_csv(path), again)
    assert again.read_text() == path.read_text()

    assert main(["--render", str(path)]) == 0
    text = capsys.readouterr().out.strip()
    assert text == render(read_csv(path))
    claims, plumbing = text.split(PLUMBING_HEADING)
    assert CHECKS_HEADING not in text
    line = next(ln for ln in claims.splitlines() if ln.startswith("| P | S |"))
    assert f"{expected.value:+.3f} [{expected.ci_low:+.3f}, {expected.ci_high:+.3f}]" in line
    assert "| 2 pooled (0, 1) |" in line
    assert "| 1 (seed 5) |" in plumbing and "**plumbing run**" in plumbing


def test_render_refuses_a_file_that_is_not_an_export(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    assert main(["--render", str(bad)]) == 2
    assert "is not a claims export" in capsys.readouterr().err
    assert main(["--render", str(tmp_path / "missing.csv")]) == 2
    assert "--export" in capsys.readouterr().err


ROOT = Path(__file__).resolve().parents[2]
EXPORT = ROOT / "docs" / "results" / "claims.csv"
BEGIN = "<!-- claims table: rendered from docs/results/claims.csv -->"
END = "<!-- end of claims table -->"


def test_the_docs_table_is_the_rendering_of_the_committed_export():
    page = (ROOT / "docs" / "results.md").read_text()
    match = re.search(re.escape(BEGIN) + r"\n(.*?)\n" + re.escape(END), page, re.DOTALL)
    assert match, f"docs/results.md has no table between {BEGIN!r} and {END!r}"
    rows = read_csv(EXPORT)
    assert rows and set(rows[0]) == set(COLUMNS)
    assert match.group(1).strip() == render(rows).strip(), (
        "docs/results.md's table differs from `python -m eval.claims --render "
        "docs/results/claims.csv`: render the export again and paste it")
