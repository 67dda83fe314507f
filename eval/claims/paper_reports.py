"""What each paper reports for each part of weft's claims: the ``paper_value`` text shown beside a
verdict, with the table or section it comes from.

Every :class:`eval.claims.Claim` that a result experiment builds takes its ``paper_value`` from
:data:`PAPER_REPORTS` through :func:`paper_value`, keyed by ``(experiment, part)``: the
experiment is the result asset's name, the part names the comparison within it. Each entry's
``text`` states the paper's figures for that comparison and the direction the paper gives it;
words between double quotes are the paper's own, verbatim (up to line breaks and typographic
apostrophes), and every number in the text is one the paper prints. ``where`` lists the
tables, figures, sections or appendices the text draws on (each named in the text as well).
``tests/eval/test_claims_paper_reports.py`` checks both against the papers' text when a copy is at
hand.

Not guaranteed: that weft's run measures the paper's quantity on the paper's data (the CPU
scale does not: each experiment's ``limits`` say what differs); a figure lost from our text copy
of a paper is not given here (the text says when a comparison's other side is missing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# the paper names the claims use, and the plain-text copy of each paper (papers/<file>)
PAPER_FILES = {"DUET": "duet.txt", "SxS": "sxs.txt", "Tandem RL": "tandem.txt",
               "Engagement Process": "engagement.txt", "DeepTool": "deeptool.txt"}
LOCATION = re.compile(r"^(Table \d+[a-z]?(\([a-z]\))?|Figure \d+(\([a-z]\))?|§\d+(\.\d+)*"
                      r"|App\. [A-Z](\.\d+)*|abstract)$")


@dataclass(frozen=True)
class PaperReport:
    """One part's ``paper_value``: the ``paper`` (a key of :data:`PAPER_FILES`), ``where`` it
    is reported (each a table, figure, section, appendix or ``abstract``, each named in
    ``text``) and the ``text`` shown beside the verdict."""

    paper: str
    where: tuple[str, ...]
    text: str

    def __post_init__(self) -> None:
        if self.paper not in PAPER_FILES:
            raise ValueError(f"unknown paper {self.paper!r}; expected one of {sorted(PAPER_FILES)}")
        if not self.where:
            raise ValueError(f"{self.text[:40]!r}...: name the table or section it comes from")
        for place in self.where:
            if not LOCATION.match(place) or place not in self.text:
                raise ValueError(f"{place!r} must be a table, figure, section (§), appendix "
                                 f"(App.) or 'abstract' named in the text {self.text!r}")


_EP_TABLE3_TIMEOUT = PaperReport(
    "Engagement Process", ("Table 3", "§5.2.1"),
    'Table 3 (DeepSeek-V3.2 triage), §5.2.1: "Averaged over single and milestones, EP reduces '
    'timeout rate from 0.533 for AgentLoop to 0.310"')
_EP_PATROL_RANKING = '§5.1.2: "EP performs best, followed by PatchPro, Patch, and Loop"'

PAPER_REPORTS: dict[tuple[str, str], PaperReport] = {
    # ---- DUET (duet_budget_claim): DUET at budget b against full-budget GRPO, Qwen3-1.7B-base
    ("duet_budget_claim", "accuracy b=0.5"): PaperReport(
        "DUET", ("Table 1", "§4.2"),
        "Table 1 (Qwen3-1.7B-base, mean@4 %): MATH-500 62.1 for DUET (50% Budget) vs 56.8 for "
        'full-budget GRPO; §4.2: "At half rollout budget, DUET matches or exceeds full-budget '
        'GRPO on four of five benchmarks"'),
    ("duet_budget_claim", "tokens b=0.5"): PaperReport(
        "DUET", ("§4.1", "App. A.7"),
        '§4.1: "Halving this knob halves the per-step generated-token cost on our setup" '
        "(Figure 9, App. A.7: bars at 100/50/25% budget in a 4:2:1 ratio)"),
    ("duet_budget_claim", "wall b=0.5"): PaperReport(
        "DUET", ("Table 1", "Figure 3"),
        "Table 1 (Qwen3-1.7B-base): DUET (50% Budget) runs at 2.51x the speed of full-budget "
        "GRPO (1x); Figure 3 plots the per-step training time"),
    ("duet_budget_claim", "accuracy b=0.25"): PaperReport(
        "DUET", ("Table 6", "Table 1", "App. A.7"),
        "Table 6 (Qwen3-1.7B-base, mean@4 %): MATH-500 61.4 for DUET at 25% budget; Table 1: "
        '56.8 for full-budget GRPO; App. A.7: "MATH-500 dropping only 0.7%" from half budget'),
    ("duet_budget_claim", "tokens b=0.25"): PaperReport(
        "DUET", ("§4.1", "App. A.7"),
        '§4.1: "Halving this knob halves the per-step generated-token cost on our setup" '
        "(Figure 9, App. A.7: bars at 100/50/25% budget in a 4:2:1 ratio)"),
    ("duet_budget_claim", "wall b=0.25"): PaperReport(
        "DUET", ("Figure 3(b)",),
        "Figure 3(b): DUET at quarter budget reaches 3.4x the speed of full-budget GRPO"),
    ("duet_budget_claim", "accuracy b=1"): PaperReport(
        "DUET", ("Table 1", "§4.2"),
        "Table 1 (Qwen3-1.7B-base, mean@4 %): MATH-500 61.6 for DUET vs 56.8 for GRPO at the "
        'same budget; §4.2: "At full budget DUET leads four of five benchmarks at 1.7B"'),
    ("duet_budget_claim", "tokens b=1"): PaperReport(
        "DUET", ("App. A.7",),
        "App. A.7 (Figure 9): DUET 356k vs GRPO 676k generated tokens per step at full budget, "
        'a 47% reduction "at the same nominal rollout count"'),
    ("duet_budget_claim", "wall b=1"): PaperReport(
        "DUET", ("Table 1",),
        "Table 1 (Qwen3-1.7B-base): full-budget DUET runs at 1.62x the speed of GRPO (1x)"),
    # ---- SxS (sxs_latency_claim): Table 1's SFT rows, AIME25
    ("sxs_latency_claim", "abo"): PaperReport(
        "SxS", ("Table 1",),
        "Table 1 (SFT rows, AIME25 ABO in tokens): SxS Interleaved (SFT) 9,619 vs Standard CoT "
        "(SFT) 20,542 on Qwen3-4B; 8,819 vs 16,958 on Qwen3-30B-A3B"),
    ("sxs_latency_claim", "airw"): PaperReport(
        "SxS", ("Table 1",),
        "Table 1 (SFT rows, AIME25 AIRW in tokens): SxS Interleaved (SFT) 4,035 vs Standard CoT "
        "(SFT) 20,542 on Qwen3-4B; 3,522 vs 16,958 on Qwen3-30B-A3B"),
    ("sxs_latency_claim", "accuracy"): PaperReport(
        "SxS", ("Table 1", "§4.3"),
        "Table 1 (SFT rows, AIME25 Acc %): Standard CoT (SFT) 62.9 vs SxS Interleaved (SFT) 38.3 "
        'on Qwen3-4B, 76.9 vs 50.8 on Qwen3-30B-A3B; §4.3: "This distribution shift can reduce '
        'final-task accuracy immediately after SFT" (the alignment tax, recovered by RL)'),
    # ---- DeepTool (mosaic_synthesis_claim, mosaic_recovery_claim)
    ("mosaic_synthesis_claim", "accuracy"): PaperReport(
        "DeepTool", ("Table 2", "§3.6"),
        "Table 2 (Synthetic Trajectory Accuracy %, Aops / CN / Ineq / NT / Olym): Mosaic 65.5 / "
        '75.5 / 67.0 / 44.3 / 60.2 vs Baseline 61.5 / 71.8 / 65.8 / 39.5 / 51.6; §3.6: '
        '"consistently higher Synthetic Trajectory Accuracy (i.e., final answer correctness) '
        'across all datasets"'),
    ("mosaic_synthesis_claim", "turns"): PaperReport(
        "DeepTool", ("Table 2", "§3.6"),
        "Table 2 (Avg. Turns, Aops / CN / Ineq / NT / Olym): Mosaic 4.4 / 4.0 / 4.2 / 4.1 / 3.8 "
        'vs Baseline 2.8 / 2.1 / 3.0 / 3.0 / 2.1; §3.6: "The quantitative increase in average '
        'interaction turns"'),
    ("mosaic_recovery_claim", "recovery"): PaperReport(
        "DeepTool", ("§3.6", "§1", "App. A.3"),
        "no figure (the paper reports no rho ablation); §3.6: MOSAIC's synthesized policy is "
        '"capable of rectifying errors through corrective reasoning rather than terminating '
        'upon failure"; §1: "significantly enhancing the model\'s robustness and error-recovery '
        'capabilities"; case studies in App. A.3'),
    # ---- Engagement Process, Table 1 (ep_deliberation_claim): both evaluated in EP timing
    ("ep_deliberation_claim", "single return"): PaperReport(
        "Engagement Process", ("Table 1", "§5.1.1"),
        "Table 1 (single-task, EP evaluation): EP-trained mean return +0.800; §5.1.1: the "
        'step-trained agent\'s choice of mode 5 leads "to timeouts and negative return under EP '
        'evaluation"'),
    ("ep_deliberation_claim", "single timeout"): PaperReport(
        "Engagement Process", ("Table 1", "§5.1.1", "App. C"),
        "Table 1 (single-task, EP evaluation): EP-trained timeout rate 0.0% (§5.1.1: \"no "
        'timeouts when computation consumes real time"); App. C: the step-trained policy times '
        "out in 79.0% of EP evaluations"),
    ("ep_deliberation_claim", "sequential return"): PaperReport(
        "Engagement Process", ("Table 1", "App. C"),
        "Table 1 (sequential-task, EP evaluation): EP-trained mean return +10.07; App. C: "
        "step-trained -14.98"),
    ("ep_deliberation_claim", "sequential timeout"): PaperReport(
        "Engagement Process", ("Table 1", "App. C"),
        "Table 1 (sequential-task, EP evaluation): EP-trained timeout rate 3.7%; App. C: "
        "step-trained 88.9%"),
    # ---- Table 2 (ep_patrol_claim)
    ("ep_patrol_claim", "module"): PaperReport(
        "Engagement Process", ("Table 2(a)", "App. C"),
        "Table 2(a): EP mean return +896.6; App. C: EP resolves 90.9% of alarms, Loop 51.5%; "
        'Table 2 caption: "improving alarm handling and performance over loop-based and patched '
        'methods"'),
    ("ep_patrol_claim", "state2"): PaperReport(
        "Engagement Process", ("Table 2(b)", "§5.1.2"),
        f"Table 2(b), depth 2: EP mean return +175.1; {_EP_PATROL_RANKING}"),
    ("ep_patrol_claim", "state3"): PaperReport(
        "Engagement Process", ("Table 2(b)", "§5.1.2", "App. C"),
        f"Table 2(b), depth 3: EP mean return +143.3; {_EP_PATROL_RANKING}; App. C: \"EP still "
        'has the best return and the lowest expiration rate"'),
    # ---- Table 3 (ep_assistant_claim): EP against AgentLoop
    ("ep_assistant_claim", "single utility"): PaperReport(
        "Engagement Process", ("Table 3", "§5.2.1"),
        'Table 3 (DeepSeek-V3.2 triage): "EP obtains the highest utility and balanced score in '
        'both settings"; §5.2.1: relative to AgentLoop, "EP improves utility by 2.293 points in '
        'single"'),
    ("ep_assistant_claim", "milestones utility"): PaperReport(
        "Engagement Process", ("Table 3", "§5.2.1"),
        'Table 3 (DeepSeek-V3.2 triage): "EP obtains the highest utility and balanced score in '
        'both settings"; §5.2.1: relative to AgentLoop, EP improves utility by "1.522 points in '
        'milestones"'),
    ("ep_assistant_claim", "single timeout"): _EP_TABLE3_TIMEOUT,
    ("ep_assistant_claim", "milestones timeout"): _EP_TABLE3_TIMEOUT,
    # ---- Table 4 (ep_kitchen_claim): EP against ReflexPatch
    ("ep_kitchen_claim", "one"): PaperReport(
        "Engagement Process", ("Table 4", "App. E"),
        'Table 4; App. E (Table 20, one dish): "EP obtains the best overall one-dish utility", '
        'but "the margin over Periodic Polling and ReflexPatch should be interpreted as modest"'),
    ("ep_kitchen_claim", "multi"): PaperReport(
        "Engagement Process", ("Table 4", "App. E"),
        'Table 4; App. E (Table 22, multi-dish): "EP obtains the highest utility and '
        'critical-dish success, while ReflexPatch is very close in utility"'),
    # ---- Table 5 (ep_budget_claim): EP-aware against each RLVR arm, smallest budget
    ("ep_budget_claim", "rlvr"): PaperReport(
        "Engagement Process", ("Table 5", "§5.3"),
        "Table 5 (BS@1K): EP-aware 0.733 vs RLVR-8K 0.284; §5.3: \"EP-aware training reaches "
        '0.733 Budgeted Success with much shorter generations"'),
    ("ep_budget_claim", "rlvr_x2"): PaperReport(
        "Engagement Process", ("Table 5", "§5.3"),
        "Table 5 (BS@1K): EP-aware 0.733 vs RLVR-16K 0.037; §5.3: shorter training caps help "
        '"much less than directly optimizing the EP-aware budgeted objective"'),
    # ---- Tandem RL (tandem_claim): the Tandem-trained senior against plain GRPO's
    ("tandem_claim", "solo"): PaperReport(
        "Tandem RL", ("§4.2",),
        '§4.2 (Figure 2): the GRPO and TRL solo pass@k curves "track each other closely '
        'throughout", differences "within typical run-to-run variance and no consistent '
        'direction across benchmarks"'),
    ("tandem_claim", "handoff"): PaperReport(
        "Tandem RL", ("§4.3", "abstract", "App. B.2.1"),
        '§4.3 (Figure 3): "TRL leads on all three benchmarks, with the advantage most pronounced '
        'on AIME"; abstract: "up to +6.6 pass@8 points on AIME"; App. B.2.1 (Table 5, Qwen3-4B '
        "junior): AMC 74.1 vs 76.6, AIME 34.2 vs 40.0, Minerva 39.6 vs 39.8 (GRPO vs TRL)"),
    ("tandem_claim", "drift"): PaperReport(
        "Tandem RL", ("§4.4",),
        '§4.4 (Figure 4): "TRL\'s curve lies uniformly below Vanilla GRPO\'s at every '
        'threshold"; "TRL is 14% closer to the junior by KL"'),
    ("tandem_claim", "legibility"): PaperReport(
        "Tandem RL", ("§4.5", "App. B.2.2"),
        "§4.5 (Table 1): the junior's cross-entropy on TRL's chain-of-thought is lower, \"with "
        'clear gains on AMC and Minerva and a near match on AIME"; App. B.2.2 (Table 6, '
        "Qwen3-4B junior, avg.): GRPO 0.132 vs TRL 0.122 nats"),
}


def paper_report(experiment: str, part: str) -> PaperReport:
    """The entry of ``(experiment, part)``; KeyError naming the parts the experiment has."""
    try:
        return PAPER_REPORTS[(experiment, part)]
    except KeyError:
        known = sorted(p for e, p in PAPER_REPORTS if e == experiment)
        raise KeyError(f"no paper report for part {part!r} of {experiment!r}; it has "
                       f"{known or 'none'}: add the paper's figures for it to "
                       "eval.claims.paper_reports.PAPER_REPORTS") from None


def paper_value(experiment: str, part: str) -> str:
    """The ``paper_value`` text of ``(experiment, part)`` (:func:`paper_report`)."""
    return paper_report(experiment, part).text
