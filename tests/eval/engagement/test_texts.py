"""The kitchen task's tutoring texts and online tutor messages (eval/engagement/texts.py,
paper §5.2.2 and App. E "Online tutor-generation subsystem")."""

from __future__ import annotations

import pytest

from eval.engagement import texts as T

KITCHEN_WORDS = ("dish", "kitchen", "cook", "signal", "stove", "<tutor", "interrupt")


def test_every_problem_has_its_texts_and_a_unique_label():
    labels = [p.label for p in T.TUTOR_PROBLEMS]
    assert len(set(labels)) == len(labels) == 6
    for p in T.TUTOR_PROBLEMS:
        assert p.title and p.brief.endswith(".") and len(p.guidance.split()) >= 10
        text = f"{p.title} {p.brief} {p.guidance}".lower()
        assert not any(w in text for w in KITCHEN_WORDS)
    assert T.TUTOR_PROMPTS[1] == "Show how to solve 3x + 7 = 22 and check the answer."


def test_problem_index_cycles_and_refuses_negatives():
    assert T.tutor_problem(0) is T.TUTOR_PROBLEMS[0]
    assert T.tutor_problem(7) is T.TUTOR_PROBLEMS[1]
    with pytest.raises(ValueError, match=">= 0"):
        T.tutor_problem(-1)


def test_fresh_messages_state_problem_budget_and_status():
    system, user = T.tutor_messages(T.TUTOR_PROBLEMS[4], 120)
    assert system["role"] == "system" and user["role"] == "user"
    # the system message forbids talking about the simulator and the interruptions
    for word in ("simulation", "kitchen", "markup", "paused"):
        assert word in system["content"]
    lines = user["content"].splitlines()
    assert lines[:3] == ["Problem fractions: Adding fractions",
                         "Task: Show how to add the fractions 1/3 and 1/4.",
                         "Target length: about 120 tokens for this part."]
    assert lines[3].startswith("Status: fresh explanation")
    assert "so far" not in user["content"] and "shared context" not in user["content"]


def test_continuation_carries_the_clipped_transcript_tail_and_context():
    transcript = "".join(f"step {i}. " for i in range(200))  # 1,790 characters
    context = "x" * 50 + " dish 2 signal fired at tick 310"
    _, user = T.tutor_messages(T.TUTOR_PROBLEMS[0], 40, transcript, context,
                               transcript_chars=30, context_chars=32)
    text = user["content"]
    assert "Status: continuation" in text
    # exactly the last 30 / 32 characters, marked as clipped
    assert "..." + transcript.strip()[-30:].lstrip() in text
    assert "step 0." not in text
    assert "...dish 2 signal fired at tick 310" in text and "x" * 10 not in text
    assert text.endswith("even if the context above mentions other events.")


def test_bad_budget_is_refused_with_what_to_pass():
    with pytest.raises(ValueError, match="budget_tokens must be >= 1"):
        T.tutor_messages(T.TUTOR_PROBLEMS[0], 0)
    with pytest.raises(ValueError, match="transcript_chars"):
        T.tutor_messages(T.TUTOR_PROBLEMS[0], 5, transcript_chars=0)
