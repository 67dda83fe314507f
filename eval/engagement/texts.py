"""Built-in texts for the LLM experiments of §5.2: main tasks, email pool, tutoring problems.

The paper replays main-task outputs and emails from cached databases that are not published
(App. D, Table 17 "Default cached email database"); these are our own small stand-ins, written
for this project. Main-task outputs themselves are generated (by the LLM, or by the scripted
stand-in of :func:`scripted_units`) from :data:`MAIN_TASKS`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TaskSpec:
    """A workplace main task and its milestone-level subtasks (the Milestones setting)."""

    task_id: str
    title: str
    brief: str
    milestones: tuple[str, ...]


MAIN_TASKS: tuple[TaskSpec, ...] = (
    TaskSpec("delivery_plan", "Delivery plan for the warehouse move",
             "Plan how a regional team moves stock and staff to a new warehouse in six weeks.",
             ("Scope and constraints", "Timeline with owners", "Risks and mitigations",
              "Communication plan")),
    TaskSpec("root_cause", "Root-cause analysis of the checkout outage",
             "Explain why the web shop's checkout failed for two hours last Tuesday.",
             ("Timeline of the incident", "Contributing factors", "Root cause",
              "Corrective actions")),
    TaskSpec("launch_readiness", "Launch-readiness document for the mobile app",
             "Decide whether version 3 of the mobile app is ready to ship next month.",
             ("Feature completeness", "Quality and test status", "Operational readiness",
              "Go / no-go recommendation")),
    TaskSpec("budget_review", "Quarterly budget review for the support team",
             "Review the support team's spending against plan and propose next quarter's budget.",
             ("Spending against plan", "Drivers of variance", "Savings options",
              "Proposed budget")),
)

HIGH, MEDIUM, LOW = "high", "medium", "low"
URGENCIES = (HIGH, MEDIUM, LOW)

EMAILS: dict[str, tuple[tuple[str, str], ...]] = {
    HIGH: (
        ("Server room temperature alarm", ("The cooling unit reports a fault. Please confirm who "
         "goes on site in the next few minutes.")),
        ("Customer escalation: invoices wrong", ("Our largest customer received duplicated "
         "invoices and threatens to cancel. They need an answer right away.")),
        ("Security: leaked password", ("A staff password was posted publicly. Approve the forced "
         "reset for the whole team now.")),
        ("Board call moved to now", ("The chair moved the call forward; send the three numbers "
         "for the summary before it starts.")),
    ),
    MEDIUM: (
        ("Review the hiring shortlist", ("Please rank the four candidates for the analyst role "
         "before the end of the afternoon.")),
        ("Vendor contract question", ("Legal asks whether the renewal clause should stay as is. "
         "A short yes or no with a reason is enough.")),
        ("Slides for Thursday", "Could you send the two slides on last month's results today?"),
        ("Travel approval", "Approve or decline the trip to the Lyon office next week."),
    ),
    LOW: (
        ("Team lunch poll", "Pick a date for the team lunch sometime this month."),
        ("Newsletter draft", "No rush: comments on the internal newsletter are welcome."),
        ("Parking spaces", "Facilities is reassigning parking spaces; reply if you care."),
        ("Book club", "The book club is choosing next month's title; votes close on Friday."),
    ),
}

TUTOR_PROMPTS: tuple[str, ...] = (
    "Explain why the sum of two odd numbers is always even.",
    "Show how to solve 3x + 7 = 22 and check the answer.",
    "Explain what a prime number is, with three examples and one non-example.",
    "Explain how to find the area of a triangle from its base and height.",
    "Show how to add the fractions 1/3 and 1/4.",
    "Explain why any number to the power zero equals one.",
)


def scripted_units(spec: TaskSpec, token_range: tuple[int, int], seed: int) -> list[tuple[str, int]]:
    """A scripted stand-in for an LLM main-task output: per milestone a placeholder text and a
    seeded token count in ``token_range`` (no model is called; the text says it is scripted)."""
    lo, hi = token_range
    rng = np.random.default_rng(seed)
    units = []
    for i, name in enumerate(spec.milestones):
        n = int(rng.integers(lo, hi + 1))
        units.append((f"[scripted output, {n} tokens] {spec.title}, part {i + 1}: {name}.", n))
    return units
