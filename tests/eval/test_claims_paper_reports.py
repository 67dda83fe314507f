"""What the papers report, per claim part (eval.claims.paper_reports): every Claim the code builds
carries its entry's text, every entry names where in the paper it comes from, and, where the
papers' text is at hand, every quoted phrase and every number in an entry is in the paper."""

import re
from pathlib import Path

import pytest

from eval.claims import CHECK, Claim
from eval.claims.paper_reports import (
    LOCATION,
    PAPER_FILES,
    PAPER_REPORTS,
    PaperReport,
    paper_report,
    paper_value,
)

REPO = Path(__file__).resolve().parents[2]


def _built_parts() -> dict[tuple[str, str], Claim]:
    """Every paper claim part the code builds, keyed as its paper_value is looked up."""
    from eval.engagement.claims import (
        PATROL_SETTINGS,
        assistant_parts,
        deliberation_parts,
        kitchen_part,
        patrol_part,
    )
    from eval.mosaic_claims import recovery_claim, synthesis_parts
    from eval.sxs_claims import ACCURACY_PART, LATENCY_PARTS
    from training.duet.budget_claim import claim_parts as duet_parts
    from training.ep_budget_claims import table5_part
    from training.tandem.study import claim_parts as tandem_parts

    parts: dict[tuple[str, str], Claim] = {}
    for budget in (1.0, 0.5, 0.25):
        for name, claim in duet_parts(budget).items():
            parts[("duet_budget_claim", f"{name} b={budget:g}")] = claim
    for name, claim in LATENCY_PARTS:
        parts[("sxs_latency_claim", name)] = claim
    parts[("sxs_latency_claim", "accuracy")] = ACCURACY_PART
    accuracy, turns = synthesis_parts("gsm8k")
    parts[("mosaic_synthesis_claim", "accuracy")] = accuracy
    parts[("mosaic_synthesis_claim", "turns")] = turns
    parts[("mosaic_recovery_claim", "recovery")] = recovery_claim()
    for setting in ("single", "sequential"):
        ret, timeout = deliberation_parts(setting)
        parts[("ep_deliberation_claim", f"{setting} return")] = ret
        parts[("ep_deliberation_claim", f"{setting} timeout")] = timeout
    for setting in PATROL_SETTINGS:
        parts[("ep_patrol_claim", setting)] = patrol_part(setting)
    for setting in ("single", "milestones"):
        utility, timeout = assistant_parts(setting, "llm")
        parts[("ep_assistant_claim", f"{setting} utility")] = utility
        parts[("ep_assistant_claim", f"{setting} timeout")] = timeout
        for scripted in assistant_parts(setting, "scripted"):  # checks quote the same figures
            assert scripted.role == CHECK
            assert scripted.paper_value in (utility.paper_value, timeout.paper_value)
    for setting in ("one", "multi"):
        parts[("ep_kitchen_claim", setting)] = kitchen_part(setting, "llm")
    for arm in ("rlvr", "rlvr_x2"):
        parts[("ep_budget_claim", arm)] = table5_part(arm, "BS@16")
    for name, claim in tandem_parts(4).items():
        parts[("tandem_claim", name)] = claim
    return parts


def test_every_claim_part_carries_its_entry_and_every_entry_is_used():
    parts = _built_parts()
    assert set(parts) == set(PAPER_REPORTS)
    for key, claim in parts.items():
        report = PAPER_REPORTS[key]
        assert claim.paper_value == report.text, key
        assert claim.paper == report.paper, key


def test_claims_are_built_only_where_the_list_covers_them():
    # a new Claim(...) in the code must take its paper_value from PAPER_REPORTS (or be weft's
    # own demo, which has no paper): these are the modules that build them
    builders = set()
    for folder in ("assets", "eval", "training"):
        for path in (REPO / folder).rglob("*.py"):
            if re.search(r"(?<![\w.])Claim\(", path.read_text(encoding="utf-8")):
                builders.add(path.relative_to(REPO).as_posix())
    assert builders == {"eval/claims/__init__.py", "eval/sxs_claims.py", "eval/mosaic_claims.py",
                        "eval/engagement/claims.py", "training/duet/budget_claim.py",
                        "training/ep_budget_claims.py", "training/tandem/study.py",
                        "training/heldout.py"}


def test_the_demo_is_weft_own_and_quotes_no_paper():
    from training.heldout import LEARNING_PAPER, learning_claims

    rows = learning_claims({"a": 0.0, "b": 1.0}, {"a": 0.5, "b": 0.5}, {"a": 1.0, "b": 1.0},
                           k=2, temperature=1.0, n_boot=50)
    assert LEARNING_PAPER not in PAPER_FILES
    assert all(r["paper"] == LEARNING_PAPER and r["paper_value"] == "" for r in rows)


def test_every_entry_names_where_in_the_paper_it_comes_from():
    for key, report in PAPER_REPORTS.items():
        assert report.where, key
        for place in report.where:
            assert LOCATION.match(place) and place in report.text, (key, place)
    with pytest.raises(ValueError, match="must be a table, figure, section"):
        PaperReport("DUET", ("somewhere",), "somewhere: 1.0")
    with pytest.raises(ValueError, match="must be a table, figure, section"):
        PaperReport("DUET", ("Table 9",), "Table 1: 1.0")
    with pytest.raises(ValueError, match="unknown paper"):
        PaperReport("Nope", ("Table 1",), "Table 1")
    with pytest.raises(KeyError, match="it has"):
        paper_report("duet_budget_claim", "latency b=0.5")


def test_the_entries_state_the_papers_direction():
    # SxS Table 1: SxS SFT is *below* standard-CoT SFT right after SFT
    from eval.sxs_claims import ACCURACY_PART

    assert (ACCURACY_PART.treatment, ACCURACY_PART.reference) == ("standard-CoT SFT", "SxS SFT")
    assert ACCURACY_PART.kind == "better" and ACCURACY_PART.higher_is_better
    assert "62.9 vs SxS Interleaved (SFT) 38.3" in ACCURACY_PART.paper_value
    # DUET Table 1: half-budget DUET above full-budget GRPO on MATH-500 (62.1 vs 56.8)
    text = paper_value("duet_budget_claim", "accuracy b=0.5")
    assert "62.1" in text and "56.8" in text and "matches or exceeds" in text
    assert "within" not in text
    # Engagement Process Table 1, sequential task: EP times out 3.7% of the time, not never
    text = paper_value("ep_deliberation_claim", "sequential timeout")
    assert "3.7%" in text and "no timeout" not in text


def _papers_dir() -> Path | None:
    """The plain-text papers: a ``papers/`` folder beside the data directory, if there."""
    from pipelines.settings import data_dir

    data = data_dir()
    folder = data.parent / "papers" if data is not None else None
    ok = folder is not None and all((folder / f).is_file() for f in PAPER_FILES.values())
    return folder if ok else None


def _normal(text: str) -> str:
    text = text.replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"')
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("key", sorted(PAPER_REPORTS), ids="/".join)
def test_quotes_and_numbers_are_in_the_paper(key):
    folder = _papers_dir()
    if folder is None:
        pytest.skip("the papers' text is not here (a papers/ folder beside the data directory)")
    report = PAPER_REPORTS[key]
    paper = _normal((folder / PAPER_FILES[report.paper]).read_text(encoding="utf-8"))
    quotes = re.findall(r'"([^"]+)"', report.text)
    for quote in quotes:
        assert _normal(quote) in paper, f"{key}: not verbatim in the paper: {quote!r}"
    for number in re.findall(r"\d+(?:[.,]\d+)*", report.text):
        assert number in paper, f"{key}: {number} is not a number the paper prints"
