"""The verdict rule, case by case against hand-worked intervals, and ``judge`` on data whose
difference is known in closed form."""

import pytest

from eval.claims import (
    INCONCLUSIVE,
    NOT_REPRODUCED,
    REPRODUCED,
    Claim,
    ClaimError,
    combine,
    judge,
    row_judgement,
    row_verdict,
    verdict,
)
from eval.claims.readers import rejudge, results_table


def better(higher=True):
    return Claim(paper="P", section="Table 1", statement="method beats baseline", metric="acc",
                 reference="base", treatment="method", higher_is_better=higher)


def no_worse(margin=0.05, higher=True):
    return Claim(paper="P", section="§4", statement="method keeps accuracy", metric="acc",
                 reference="base", treatment="method", kind="no_worse", margin=margin,
                 higher_is_better=higher)


@pytest.mark.parametrize("lo, hi, expected", [
    (0.01, 0.30, REPRODUCED),        # CI entirely above 0
    (-0.10, 0.30, INCONCLUSIVE),     # straddles 0
    (-0.30, 0.0, NOT_REPRODUCED),    # no positive effect in the CI
    (0.0, 0.0, NOT_REPRODUCED),      # exactly no difference (every pair tied)
    (-0.30, -0.01, NOT_REPRODUCED),  # significantly the wrong way
    (0.0, 0.2, INCONCLUSIVE),        # touches 0: not excluded
])
def test_better_claim(lo, hi, expected):
    assert verdict(better(), lo, hi) == expected


@pytest.mark.parametrize("lo, hi, expected", [
    # a lower-is-better metric (tokens): the method must make it smaller
    (-120.0, -10.0, REPRODUCED),
    (-50.0, 40.0, INCONCLUSIVE),
    (5.0, 90.0, NOT_REPRODUCED),
])
def test_better_claim_on_a_lower_is_better_metric(lo, hi, expected):
    assert verdict(better(higher=False), lo, hi) == expected


@pytest.mark.parametrize("lo, hi, expected", [
    (-0.04, 0.06, REPRODUCED),       # a drop of 0.05 is ruled out
    (-0.049, -0.001, NOT_REPRODUCED),  # significantly lower, even if by less than the margin
    (-0.08, 0.06, INCONCLUSIVE),     # a drop of 0.05 or more is still possible
    (-0.05, 0.02, INCONCLUSIVE),     # the margin itself is not ruled out
    (0.01, 0.09, REPRODUCED),        # better is also "no worse"
    (-0.30, -0.10, NOT_REPRODUCED),
])
def test_no_worse_claim(lo, hi, expected):
    assert verdict(no_worse(), lo, hi) == expected


def test_no_worse_on_a_lower_is_better_metric():
    # latency may rise by at most 2 tokens: +1.5 at most is fine, a CI reaching +3 is not settled
    claim = no_worse(margin=2.0, higher=False)
    assert verdict(claim, -1.0, 1.5) == REPRODUCED
    assert verdict(claim, -1.0, 3.0) == INCONCLUSIVE
    assert verdict(claim, 0.5, 3.0) == NOT_REPRODUCED


def test_claims_that_cannot_be_judged_are_refused():
    with pytest.raises(ClaimError, match="needs a margin"):
        Claim(paper="P", section="§4", statement="s", metric="acc", reference="a",
              treatment="b", kind="no_worse")
    with pytest.raises(ClaimError, match="no_worse claims only"):
        Claim(paper="P", section="§4", statement="s", metric="acc", reference="a",
              treatment="b", margin=0.1)
    with pytest.raises(ClaimError, match="kind must be one of"):
        Claim(paper="P", section="§4", statement="s", metric="acc", reference="a",
              treatment="b", kind="faster")
    with pytest.raises(ClaimError, match="two different arms"):
        Claim(paper="P", section="§4", statement="s", metric="acc", reference="a", treatment="a")
    with pytest.raises(ClaimError, match="not an interval"):
        verdict(better(), 0.2, 0.1)
    with pytest.raises(ClaimError, match="not an interval"):
        verdict(better(), float("nan"), 0.1)


@pytest.mark.parametrize("parts, expected", [
    ([REPRODUCED, REPRODUCED], REPRODUCED),
    ([REPRODUCED, INCONCLUSIVE], INCONCLUSIVE),
    ([REPRODUCED, INCONCLUSIVE, NOT_REPRODUCED], NOT_REPRODUCED),
    ([INCONCLUSIVE], INCONCLUSIVE),
])
def test_combine(parts, expected):
    assert combine(parts) == expected


def test_combine_refuses_nothing_and_unknown_words():
    with pytest.raises(ClaimError):
        combine([])
    with pytest.raises(ClaimError, match="unknown verdicts"):
        combine(["yes"])


def test_judge_on_a_constant_shift():
    # every problem gains exactly 0.25: the mean difference is 0.25 and no resample can move it
    reference = {f"p{i}": (i % 4) / 4 for i in range(40)}
    treatment = {k: v + 0.25 for k, v in reference.items()}
    row = judge(better(), reference, treatment, n_boot=500)
    assert row["n"] == 40
    assert row["diff"] == pytest.approx(0.25)
    assert (row["diff_ci_low"], row["diff_ci_high"]) == pytest.approx((0.25, 0.25))
    assert row["reference_value"] == pytest.approx(sum(reference.values()) / 40)
    assert row["treatment_value"] == pytest.approx(sum(treatment.values()) / 40)
    assert row["verdict"] == REPRODUCED
    assert row["p_value"] < 0.01


def test_judge_pairs_by_problem_id_and_reads_the_sign():
    # ids in different orders: pairing by id makes every difference exactly -1 (all lost)
    ids = "abcdefgh"
    reference = {i: 1.0 for i in ids}
    treatment = {i: 0.0 for i in reversed(ids)}
    row = judge(better(), reference, treatment, n_boot=200)
    assert row["diff"] == pytest.approx(-1.0)
    assert row["n_discordant"] == 8
    assert row["verdict"] == NOT_REPRODUCED and row["inconclusive_reason"] is None


def test_judge_no_worse_p_value_is_against_a_drop_of_the_margin():
    # differences of exactly -0.02 on every problem: significantly lower, by less than δ = 0.05
    reference = [0.5] * 30
    treatment = [0.48] * 30
    row = judge(no_worse(0.05), reference, treatment, n_boot=200)
    assert row["verdict"] == NOT_REPRODUCED
    # H0 "worse by 0.05 or more" is clearly rejected (the drop is 0.02): p at its floor
    assert row["p_value"] == pytest.approx(1 / 201)


@pytest.mark.parametrize("claim", [better(), better(higher=False), no_worse(0.05),
                                   no_worse(0.05, higher=False)], ids=str)
@pytest.mark.parametrize("level", [0.0, 1.0, 37.5])
def test_both_arms_at_one_point_is_inconclusive_whatever_the_kind(claim, level):
    # 0 vs 0 accuracy on every problem: the CI [0, 0] alone would say "not reproduced" for a
    # better claim and "reproduced" for a no_worse one; neither is supported by the data
    row = judge(claim, [level] * 40, [level] * 40, n_boot=200)
    assert (row["diff_ci_low"], row["diff_ci_high"]) == (0.0, 0.0)
    assert row["verdict"] == INCONCLUSIVE and row["inconclusive_reason"] == "no_variation"
    # one problem solved in one arm is variation, but one unit that differs is too few
    moved = judge(claim, [level] * 40, [level] * 39 + [level + 1], n_boot=200)
    assert moved["n_discordant"] == 1
    assert (moved["verdict"], moved["inconclusive_reason"]) == (INCONCLUSIVE,
                                                                "few_discordant_units")
    # both arms constant but at different levels is a clear difference, not a floor
    apart = judge(claim, [level] * 40, [level + 1] * 40, n_boot=200)
    assert apart["verdict"] == verdict(claim, 1.0, 1.0)
    assert apart["inconclusive_reason"] is None


def test_row_verdict_reads_a_stored_row_like_judge():
    import random

    rng = random.Random(7)
    for trial in range(60):
        claim = [better(), better(False), no_worse(0.1), no_worse(0.1, False)][trial % 4]
        ref = [rng.choice([0.0, 1.0]) for _ in range(30)]
        treat = [min(1.0, max(0.0, r + rng.choice([-1, 0, 0, 1]))) for r in ref]
        row = judge(claim, ref, treat, n_boot=300, seed=trial)
        assert row_verdict(row) == row["verdict"]
        assert row_judgement(row) == (row["verdict"], row["inconclusive_reason"])
        differ = sum(r != t for r, t in zip(ref, treat))
        assert row["n_discordant"] == differ
        if len(set(ref) | set(treat)) > 1 and differ >= 6:
            assert row["inconclusive_reason"] is None
            assert row["verdict"] == verdict(claim, row["diff_ci_low"], row["diff_ci_high"])


# ---- the Results table from a real warehouse -------------------------------------------------

def _row(experiment, claim, verdict_, diff, run_id):
    return {"experiment": experiment, "scale": "cpu", "paper": "DUET", "section": "Table 2",
            "claim": claim, "metric": "accuracy", "kind": "better", "higher_is_better": True,
            "margin": None, "reference": "grpo", "treatment": "duet",
            "reference_value": 0.5, "reference_ci_low": 0.4, "reference_ci_high": 0.6,
            "treatment_value": 0.5 + diff, "treatment_ci_low": 0.45 + diff,
            "treatment_ci_high": 0.55 + diff, "diff": diff, "diff_ci_low": diff - 0.05,
            "diff_ci_high": diff + 0.05, "p_value": 0.01, "n": 48, "verdict": verdict_,
            "paper_value": "+2.1 points", "config_json": "{}"}


def test_latest_claims_and_the_results_table_from_the_warehouse(weft_home, capsys):
    import time

    from eval.claims.__main__ import main
    from eval.claims.readers import latest_claims, results_table
    from warehouse import Lineage, Warehouse

    wh = Warehouse()
    assert latest_claims(wh) == []
    assert main([]) == 1
    assert "no claims recorded yet" in capsys.readouterr().err

    wh.write("claims", [_row("duet_claim", "old run", INCONCLUSIVE, 0.01, "r1")],
             lineage=Lineage(run_id="r1", asset="duet_claim", partition="duet_claim"))
    time.sleep(0.01)
    # a re-run of the same experiment replaces it; another experiment keeps its own rows
    wh.write("claims", [_row("duet_claim", "new | run", REPRODUCED, 0.12, "r2")],
             lineage=Lineage(run_id="r2", asset="duet_claim", partition="duet_claim"))
    wh.write("claims", [_row("tandem_claim", "tandem", NOT_REPRODUCED, -0.2, "r3")],
             lineage=Lineage(run_id="r3", asset="tandem_claim", partition="tandem_claim"))
    rows = latest_claims(wh)
    assert [(r["experiment"], r["claim"], r["verdict"]) for r in rows] == [
        ("duet_claim", "new | run", REPRODUCED), ("tandem_claim", "tandem", NOT_REPRODUCED)]

    table = results_table(rows)
    lines = table.splitlines()
    assert len(lines) == 4 and lines[0].count("|") == 11
    assert "new \\| run" in lines[2]                      # a pipe in a cell is escaped
    assert "duet: 0.620 [0.570, 0.670]" in lines[2]
    assert "+0.120 [+0.070, +0.170]" in lines[2]
    assert "**reproduced**" in lines[2] and "**not reproduced**" in lines[3]

    assert main([]) == 0
    assert capsys.readouterr().out.strip() == table
    # one experiment by name; an unknown one says which are recorded
    assert main(["tandem_claim"]) == 0
    assert capsys.readouterr().out.strip() == results_table(rows[1:])
    assert main(["ep_patrol_claim"]) == 1
    assert ("no claims of ep_patrol_claim in this warehouse; recorded experiments: duet_claim, "
            "tandem_claim") in capsys.readouterr().err


def test_history_keeps_every_run_and_names_the_verdicts_that_moved(weft_home, capsys):
    import time

    from eval.claims.__main__ import main
    from eval.claims.readers import claim_history, history_table, keep_history
    from warehouse import Lineage, Warehouse

    wh = Warehouse()
    assert keep_history(wh, "duet_claim") == 0  # nothing written yet
    assert main(["--history"]) == 1
    assert "no claim history" in capsys.readouterr().err

    def run(run_id, rows):  # what a result asset does: keep, replace, keep
        keep_history(wh, "duet_claim")
        wh.write("claims", rows, lineage=Lineage(run_id=run_id, asset="duet_claim",
                                                 partition="duet_claim"))
        return keep_history(wh, "duet_claim")

    # a warehouse written before the history existed: its one run is kept when replaced
    wh.write("claims", [_row("duet_claim", "tokens", INCONCLUSIVE, 0.01, "r1"),
                        _row("duet_claim", "speed", REPRODUCED, 0.2, "r1")],
             lineage=Lineage(run_id="r1", asset="duet_claim", partition="duet_claim"))
    time.sleep(0.01)
    assert run("r2", [dict(_row("duet_claim", "tokens", REPRODUCED, 0.12, "r2"),
                           config_json='{"seed": 1}'),
                      _row("duet_claim", "speed", REPRODUCED, 0.3, "r2")]) == 2
    assert keep_history(wh, "duet_claim") == 0  # already kept: not copied twice
    wh.write("claims", [_row("tandem_claim", "drift", NOT_REPRODUCED, -0.2, "r3")],
             lineage=Lineage(run_id="r3", asset="tandem_claim", partition="tandem_claim"))
    keep_history(wh, "tandem_claim")

    assert sorted(wh.partitions("claim_history")) == ["duet_claim/r1", "duet_claim/r2",
                                                      "tandem_claim/r3"]
    rows = claim_history(wh, ["duet_claim"])
    assert [(r["claim"], r["run_id"], r["verdict"]) for r in rows] == [
        ("speed", "r1", REPRODUCED), ("speed", "r2", REPRODUCED),
        ("tokens", "r1", INCONCLUSIVE), ("tokens", "r2", REPRODUCED)]
    assert {r["partition"] for r in rows} == {"duet_claim"}  # the rows keep their lineage
    assert wh.read("claims").num_rows == 3  # claims itself still holds the newest runs only
    assert len(claim_history(wh)) == 5

    table = history_table(rows)
    lines = table.splitlines()
    assert lines[0].count("|") == 8 and len(lines) == 2 + 4 + 3
    assert "+0.120 [+0.070, +0.170]" in lines[5] and "(r2, seed 1)" in lines[5]
    assert "(r1)" in lines[4]  # a run whose config names no seed shows none
    assert lines[-2] == "Verdicts that differ between runs of the same experiment:"
    assert lines[-1] == f"- duet_claim Table 2 accuracy: {INCONCLUSIVE} -> {REPRODUCED}"
    assert main(["--history", "duet_claim"]) == 0
    assert capsys.readouterr().out.strip() == table
    assert main(["--history", "no_such_claim"]) == 1


def test_claim_svg_is_inline_sized_and_places_each_arm_on_one_axis():
    import re
    import xml.etree.ElementTree as ET

    from eval.claims.draw import INLINE_MARKDOWN_LIMIT, claim_svg, inline_svg

    row = {"claim": "c", "metric": "generated tokens per step", "verdict": NOT_REPRODUCED,
           "reference": "GRPO full budget with a long name", "reference_value": 0.2,
           "reference_ci_low": 0.0, "reference_ci_high": 0.4, "treatment": "DUET b=0.5",
           "treatment_value": 0.8, "treatment_ci_low": 0.6, "treatment_ci_high": 1.0,
           "diff": 0.6, "diff_ci_low": 0.3, "diff_ci_high": 0.9}
    svg = claim_svg(row)
    ET.fromstring(svg)  # well-formed
    md = inline_svg(svg)
    assert md is not None and len(md) <= INLINE_MARKDOWN_LIMIT
    # the axis runs from the lowest CI end (0.0) to the highest (1.0) over x = 150 .. 408
    xs = [int(x) for x in re.findall(r'cx="(\d+)"', svg)]
    assert xs == [round(150 + 0.2 * 258), round(150 + 0.8 * 258)]
    assert re.findall(r'd="M(\d+) \d+H(\d+)"', svg)[1] == (str(round(150 + 0.6 * 258)), "408")
    assert inline_svg("<svg>" + "x" * 2000 + "</svg>") is None  # too long: not inline


def test_rejudge_rewrites_only_rows_whose_verdict_moved(weft_home, capsys):
    from eval.claims.__main__ import main
    from warehouse import Lineage, Warehouse

    wh = Warehouse()
    floor = dict(_row("sxs_claim", "accuracy", NOT_REPRODUCED, 0.0, "r1"),
                 reference_value=0.0, reference_ci_low=0.0, reference_ci_high=0.0,
                 treatment_value=0.0, treatment_ci_low=0.0, treatment_ci_high=0.0,
                 diff_ci_low=0.0, diff_ci_high=0.0)
    good = _row("sxs_claim", "latency", REPRODUCED, 0.12, "r1")
    other = _row("duet_claim", "tokens", INCONCLUSIVE, 0.01, "r2")
    wh.write("claims", [floor, good], lineage=Lineage(run_id="r1", partition="sxs_claim"))
    wh.write("claims", [other], lineage=Lineage(run_id="r2", partition="duet_claim"))
    before = {r["claim"]: r for r in wh.read("claims").to_pylist()}
    [duet_file] = [f for f in wh.files("claims") if "duet_claim" in str(f)]
    duet_stamp = duet_file.stat().st_mtime_ns

    assert rejudge(wh) == [("sxs_claim", "Table 2", "accuracy", NOT_REPRODUCED, INCONCLUSIVE,
                            "both arms score one value on every unit")]
    after = {r["claim"]: r for r in wh.read("claims").to_pylist()}
    assert after["accuracy"]["verdict"] == INCONCLUSIVE
    assert after["accuracy"]["inconclusive_reason"] == "no_variation"
    for name, row in before.items():        # everything else, run id and time included, kept
        keep = {k: v for k, v in row.items() if k not in ("verdict", "inconclusive_reason")}
        assert {k: v for k, v in after[name].items()
                if k not in ("verdict", "inconclusive_reason")} == keep
    assert after["latency"]["verdict"] == REPRODUCED
    assert after["tokens"]["verdict"] == INCONCLUSIVE
    assert duet_file.stat().st_mtime_ns == duet_stamp   # an unchanged experiment is not rewritten
    assert rejudge(wh) == []                # idempotent

    wh.write("claims", [floor], lineage=Lineage(run_id="r1", partition="sxs_claim"))
    assert main(["--rejudge"]) == 0
    captured = capsys.readouterr()
    assert ("rejudged sxs_claim Table 2 accuracy: not reproduced -> inconclusive (both arms "
            "score one value on every unit)") in captured.err
    assert "**inconclusive (both arms score one value on every unit)**" in captured.out


def test_results_table_shows_no_negative_zero():
    row = {"paper": "P", "section": "§1", "claim": "c", "metric": "m", "reference": "r",
           "treatment": "t", "reference_value": -0.5, "reference_ci_low": -0.5,
           "reference_ci_high": -0.5, "treatment_value": -0.5, "treatment_ci_low": -0.5,
           "treatment_ci_high": -0.5, "diff": -1e-17, "diff_ci_low": -2e-17,
           "diff_ci_high": 1e-17, "n": 16, "verdict": "inconclusive"}
    line = results_table([row]).splitlines()[-1]
    assert "+0.000 [+0.000, +0.000]" in line and "-0.000" not in line
    assert "r: -0.500 [-0.500, -0.500]" in line


def test_rejudge_and_the_table_read_files_written_before_the_new_columns(weft_home, capsys):
    import pyarrow.parquet as pq

    from eval.claims.__main__ import main
    from warehouse import Lineage, Warehouse

    wh = Warehouse()
    floor = dict(_row("sxs_claim", "accuracy", NOT_REPRODUCED, 0.0, "r1"),
                 reference_value=0.0, reference_ci_low=0.0, reference_ci_high=0.0,
                 treatment_value=0.0, treatment_ci_low=0.0, treatment_ci_high=0.0,
                 diff_ci_low=0.0, diff_ci_high=0.0)
    wh.write("claims", [floor, _row("sxs_claim", "latency", REPRODUCED, 0.12, "r1")],
             lineage=Lineage(run_id="r1", partition="sxs_claim"))
    # drop the columns an older writer did not have from the stored file itself
    [path] = wh.files("claims")
    new = ("inconclusive_reason", "n_discordant", "role", "bound_low", "bound_high")
    table = pq.read_table(path)
    pq.write_table(table.drop_columns([c for c in new if c in table.column_names]), path)
    assert not set(new) & set(wh.read("claims").column_names)

    assert main(["--rejudge"]) == 0
    captured = capsys.readouterr()
    assert "not reproduced -> inconclusive (both arms score one value" in captured.err
    assert "**reproduced**" in captured.out  # the latency row: a claim, CI above 0
    rows = {r["claim"]: r for r in wh.read("claims").to_pylist()}
    assert rows["accuracy"]["inconclusive_reason"] == "no_variation"
    assert rows["latency"]["inconclusive_reason"] is None
    assert rows["latency"]["verdict"] == REPRODUCED  # no n_discordant stored: rule 4 not applied
