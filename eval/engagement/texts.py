"""Built-in texts for the LLM experiments of §5.2: main tasks, email pool, tutoring problems
and the online tutor's messages (App. E, "Online tutor-generation subsystem").

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

@dataclass(frozen=True)
class TutorProblem:
    """A mathematics tutoring problem of the kitchen task (§5.2.2, App. E): what the helper
    explains to the student, with guidance on how to explain it."""

    label: str
    title: str
    brief: str
    guidance: str


TUTOR_PROBLEMS: tuple[TutorProblem, ...] = (
    TutorProblem("odd_sum", "Sum of two odd numbers",
                 "Explain why the sum of two odd numbers is always even.",
                 "Write odd numbers as 2a + 1 and 2b + 1, add them, and show the result is "
                 "twice a whole number; try one numeric example first."),
    TutorProblem("linear_eq", "Solving a linear equation",
                 "Show how to solve 3x + 7 = 22 and check the answer.",
                 "Undo the operations in reverse order, one step per line, then substitute "
                 "the answer back into the original equation."),
    TutorProblem("primes", "What a prime number is",
                 "Explain what a prime number is, with three examples and one non-example.",
                 "Define a prime by its divisors, say why 1 is not prime, and show the "
                 "non-example as a product of smaller factors."),
    TutorProblem("triangle_area", "Area of a triangle",
                 "Explain how to find the area of a triangle from its base and height.",
                 "Start from a rectangle cut along its diagonal, then work one example with "
                 "numbers and units."),
    TutorProblem("fractions", "Adding fractions",
                 "Show how to add the fractions 1/3 and 1/4.",
                 "Find a common denominator, rewrite both fractions, add the numerators, and "
                 "check that the result cannot be simplified."),
    TutorProblem("power_zero", "Any number to the power zero",
                 "Explain why any number to the power zero equals one.",
                 "Use the pattern of dividing by the base each time the exponent drops by "
                 "one, and mention why zero to the power zero is a special case."),
)
TUTOR_PROMPTS: tuple[str, ...] = tuple(p.brief for p in TUTOR_PROBLEMS)

TUTOR_SYSTEM = (
    "You are a patient mathematics tutor writing an explanation for a student. Write only the "
    "tutoring text itself: plain explanatory prose and worked steps. Do not mention any "
    "simulation, kitchen, cooking, timers, markup tags, or that your writing was paused or "
    "resumed.")


def tutor_problem(index: int) -> TutorProblem:
    """The built-in problem for a kitchen case's ``index``-th tutoring problem (cycling)."""
    if index < 0:
        raise ValueError(f"a tutoring problem index is >= 0, got {index}")
    return TUTOR_PROBLEMS[index % len(TUTOR_PROBLEMS)]


def _tail(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:].lstrip()


def tutor_messages(problem: TutorProblem, budget_tokens: int, transcript: str = "",
                   context: str = "", transcript_chars: int = 800,
                   context_chars: int = 300) -> list[dict[str, str]]:
    """The online tutor's chat messages (App. E): a system message asking for tutoring prose
    only; a user message with the problem's label, title and brief, the target length, whether
    this is a fresh explanation or a continuation (a non-empty ``transcript``), the guidance,
    the last ``transcript_chars`` characters of the transcript so far, the last
    ``context_chars`` characters of the recent shared context; and a closing instruction to
    keep to the mathematics even if that context mentions other events."""
    if budget_tokens < 1:
        raise ValueError(f"budget_tokens must be >= 1 (the segment's target length in tokens), "
                         f"got {budget_tokens}")
    if transcript_chars < 1 or context_chars < 1:
        raise ValueError("transcript_chars and context_chars must be >= 1")
    continuing = bool(transcript.strip())
    lines = [f"Problem {problem.label}: {problem.title}", f"Task: {problem.brief}",
             f"Target length: about {budget_tokens} tokens for this part.",
             "Status: " + ("continuation - carry on from where the text below stops; do not "
                           "restart or repeat it." if continuing else
                           "fresh explanation - begin from the start."),
             f"Guidance: {problem.guidance}"]
    if continuing:
        lines += ["", "Your explanation so far (its end):", _tail(transcript, transcript_chars)]
    if context.strip():
        lines += ["", "Recent shared context (for orientation only):",
                  _tail(context, context_chars)]
    lines += ["", ("Continue the tutoring text now. Stay on the mathematics, even if the "
                   "context above mentions other events.")]
    return [{"role": "system", "content": TUTOR_SYSTEM},
            {"role": "user", "content": "\n".join(lines)}]


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
