"""Tests for the MOSAIC synthesis loop, injection, agents and baseline.

Deterministic loop tests use a scripted manager and actor (the ``Manager``/``Actor`` protocols)
and a recording fake session; injection is also checked against the real sandbox (mutated code
really runs, a kernel restart really loses state, a synthetic timeout renders like a real one).
The LLM agents run over the real ``LLMClient`` against the in-process fake HTTP server, and the
whole loop against the real local model server (marker ``server``).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter

import pytest

from pipelines.mosaic import (
    ACTOR_STOP,
    COMPLETE,
    FAIL_ACTOR_FORMAT,
    FAIL_ENDPOINT,
    FAIL_MANAGER_JSON,
    FAIL_MAX_STEPS,
    FAIL_SANDBOX,
    FAILED,
    LLMActor,
    LLMBaselineActor,
    LLMManager,
    MosaicConfig,
    ProblemInput,
    TrackedSession,
    TrajectoryRecord,
    label_records,
    session_factory,
    side_by_side,
    summarize_records,
    synthesize_baseline,
    synthesize_many,
    synthesize_mosaic,
)
from pipelines.mosaic.agents import (
    MODE_CORRECTION,
    MODE_PROGRESS,
    REDACTED,
    STAGE_FINAL,
    STAGE_INTERMEDIATE,
    VERDICT_EXECUTION_ERROR,
    VERDICT_LOGICAL_DEVIATION,
    VERDICT_ON_TRACK,
    ActorView,
    AgentResult,
    ManagerView,
    NavigationCard,
    card_schema,
    correction_reason,
    enforce_card,
    parse_actor_reply,
    parse_card,
    redact_answer,
)
from pipelines.mosaic.inject import (
    BROKEN_INDENTATION,
    CONNECTION_RESET,
    DROPPED_BRACKET,
    DROPPED_COLON,
    ENVIRONMENT,
    ENVIRONMENT_KINDS,
    GENERATION,
    KERNEL_RESTART,
    MISSPELLED_KEYWORD,
    OUT_OF_MEMORY,
    TIMEOUT,
    WRONG_NAME,
    choose_mode,
    environment_failure,
    mutate,
)
from pipelines.prompts import load_prompt
from pipelines.sandbox.result import ExecError, ExecResult, render_observation
from pipelines.tir import KIND_ANSWER, KIND_CODE, Step, parse_trajectory, validate_steps

PROBLEM = ProblemInput("p1", "gsm8k", "Tom has 3 apples and buys 4 more. How many apples?",
                       "7", "3 + 4 = 7 apples. #### 7")
CODE_REPLY = "<think>\nstep {n}\n</think>\n<code>\nv{n} = {n}\nprint(v{n})\n</code>"
ANSWER_REPLY = "<think>\nthe outputs give it\n</think>\n<answer>\n\\boxed{7}\n</answer>"


# ---------------------------------------------------------------------------------------------
# Fakes


class FakeSession:
    """Records cells; answers with a scripted result when a cell contains a key, else prints."""

    def __init__(self, results: dict[str, ExecResult] | None = None, fail_on: str | None = None):
        self.results = results or {}
        self.fail_on = fail_on
        self.cells: list[str] = []
        self.restarts = 0
        self.closed = False

    def execute(self, cell: str) -> ExecResult:
        if self.fail_on is not None and self.fail_on in cell:
            raise RuntimeError("sandbox protocol broken")
        self.cells.append(cell)
        for key, result in self.results.items():
            if key in cell:
                return result
        return ExecResult(stdout=f"out{len(self.cells)}\n")

    def restart(self) -> None:
        self.restarts += 1

    def close(self) -> None:
        self.closed = True


class ScriptedManager:
    def __init__(self, cards=None, errors=None):
        self.cards = cards or (lambda view: NavigationCard(f"do part {view.step}", STAGE_INTERMEDIATE, MODE_PROGRESS))
        self.errors = errors or {}
        self.views: list[ManagerView] = []

    async def navigate(self, view: ManagerView) -> AgentResult:
        self.views.append(view)
        if view.step in self.errors:
            return self.errors[view.step]
        return AgentResult(value=self.cards(view))


class ScriptedActor:
    """Answers when answering is allowed and the card (if any) says Final, else writes code.
    ``script`` overrides per call number (1-based) with a fixed text."""

    def __init__(self, script=None, answer_at_baseline_step=3):
        self.script = script or {}
        self.views: list[ActorView] = []
        self.answer_at = answer_at_baseline_step

    async def act(self, view: ActorView) -> AgentResult:
        self.views.append(view)
        call = len(self.views)
        if call in self.script:
            value = self.script[call]
            return value if isinstance(value, AgentResult) else AgentResult(value=value)
        final = view.card.stage == STAGE_FINAL if view.card else len(view.history) + 1 >= self.answer_at
        if view.allow_answer and (final or not view.allow_code):
            return AgentResult(value=ANSWER_REPLY)
        return AgentResult(value=CODE_REPLY.format(n=len(view.history) + 1))


def _run(coro):
    return asyncio.run(coro)


def _mosaic(manager, actor, session=None, **config):
    session = session or FakeSession()
    cfg = MosaicConfig(**{"rho": 0.0, "max_steps": 4, **config})
    record = _run(synthesize_mosaic(PROBLEM, manager, actor, lambda: session, cfg))
    return record, session


# ---------------------------------------------------------------------------------------------
# The loop


def test_loop_runs_manager_actor_and_session_until_the_final_answer():
    cards = {1: STAGE_INTERMEDIATE, 2: STAGE_INTERMEDIATE, 3: STAGE_FINAL}
    manager = ScriptedManager(lambda v: NavigationCard(f"part {v.step}", cards[v.step], MODE_PROGRESS))
    actor = ScriptedActor()
    record, session = _mosaic(manager, actor, max_steps=5)
    assert record.status == COMPLETE and record.valid and record.failure_reason is None
    assert [s.step.kind for s in record.steps] == [KIND_CODE, KIND_CODE, KIND_ANSWER]
    assert session.cells == ["v1 = 1\nprint(v1)", "v2 = 2\nprint(v2)"] and session.closed
    assert [s.step.observation for s in record.steps[:2]] == ["out1", "out2"]
    assert [len(v.history) for v in manager.views] == [0, 1, 2]
    assert [v.steps_left for v in manager.views] == [5, 4, 3]
    assert all(v.reference == PROBLEM.reference for v in manager.views)
    assert [v.card.guide for v in actor.views] == ["part 1", "part 2", "part 3"]
    assert [(v.allow_code, v.allow_answer) for v in actor.views] == [(True, False), (True, False), (True, True)]
    assert record.final_answer == "\\boxed{7}" and record.num_turns == 3 and record.code_steps == 2
    assert parse_trajectory(record.to_trajectory().text()) == record.plain_steps


def test_the_last_step_is_forced_to_final_and_must_answer():
    manager = ScriptedManager()  # always Intermediate
    actor = ScriptedActor()
    record, _ = _mosaic(manager, actor, max_steps=3)
    assert record.status == COMPLETE and record.num_turns == 3
    last = record.steps[-1]
    assert last.card.stage == STAGE_FINAL and "forced_final" in last.card_overrides
    assert (actor.views[-1].allow_code, actor.views[-1].allow_answer) == (False, True)
    assert all("forced_final" not in s.card_overrides for s in record.steps[:-1])


def test_code_at_the_forced_final_step_gets_one_repair_then_fails_with_max_steps():
    actor = ScriptedActor(script={3: CODE_REPLY.format(n=3), 4: CODE_REPLY.format(n=3)})
    record, _ = _mosaic(ScriptedManager(), actor, max_steps=3)
    assert record.status == FAILED and record.failure_reason == FAIL_MAX_STEPS
    assert len(actor.views) == 4 and actor.views[3].previous_reply == CODE_REPLY.format(n=3)
    assert "<answer>" in actor.views[3].feedback
    assert record.num_turns == 2 and validate_steps(record.plain_steps)  # a valid prefix, not complete
    assert record.to_row()["text"] is None


def test_an_error_observation_switches_the_next_card_to_correction():
    failing = ExecResult(error=ExecError("NameError", "name 'q' is not defined"), exit_code=None)
    manager = ScriptedManager()
    record, _ = _mosaic(manager, ScriptedActor(), FakeSession({"v1 =": failing}), max_steps=4)
    assert record.steps[0].error_observed and record.steps[0].error_name == "NameError"
    assert record.steps[0].step.observation == "NameError: name 'q' is not defined"
    assert manager.views[1].last_failed and not manager.views[2].last_failed
    second = record.steps[1]
    assert second.card.mode == MODE_CORRECTION and "forced_correction" in second.card_overrides
    assert record.steps[2].card.mode == MODE_PROGRESS
    prompt = LLMManager(client=None).messages(manager.views[1])[1]["content"]
    assert "shows a failure" in prompt and "Correction" in prompt


def test_guides_that_give_away_the_gold_answer_are_redacted():
    manager = ScriptedManager(lambda v: NavigationCard("Check that the total is 7 apples.", STAGE_FINAL, MODE_PROGRESS))
    record, _ = _mosaic(manager, ScriptedActor())
    assert record.steps[0].card.guide == f"Check that the total is {REDACTED} apples."
    assert record.steps[0].guide_redacted


@pytest.mark.parametrize("guide, gold, problem, expected", [
    ("the result is 1,800 now", "1800", "x", f"the result is {REDACTED} now"),
    ("use 3 and 4", "7", "3 and 4", "use 3 and 4"),
    ("multiply 7 by 2", "7", "there are 7 boxes", "multiply 7 by 2"),
    ("compute 17 first", "7", "q", "compute 17 first"),
    ("show x^2+1", "x^2+1", "find f", f"show {REDACTED}"),
    ("it is -3", "-3", "find it", f"it is {REDACTED}"),
])
def test_redact_answer_table(guide, gold, problem, expected):
    assert redact_answer(guide, gold, problem)[0] == expected


@pytest.mark.parametrize("navigated, reason", [
    (AgentResult(error="not valid JSON: no object found"), FAIL_MANAGER_JSON),
    (AgentResult(error="request failed: HTTP 500", endpoint_error=True), FAIL_ENDPOINT),
])
def test_manager_failures_are_labelled(navigated, reason):
    record, session = _mosaic(ScriptedManager(errors={2: navigated}), ScriptedActor())
    assert record.status == FAILED and record.failure_reason == reason
    assert record.num_turns == 1 and session.closed and "step 2" in record.failure_detail


def test_actor_gets_one_repair_round_then_fails_with_a_format_error():
    actor = ScriptedActor(script={1: "I refuse to use tags.", 2: "Still no tags."})
    record, _ = _mosaic(ScriptedManager(), actor)
    assert record.failure_reason == FAIL_ACTOR_FORMAT and len(actor.views) == 2
    assert actor.views[1].previous_reply == "I refuse to use tags." and "<code>" in actor.views[1].feedback
    repaired = ScriptedActor(script={1: "no tags", 2: CODE_REPLY.format(n=1)})
    record, _ = _mosaic(ScriptedManager(), repaired)
    assert record.status == COMPLETE and record.steps[0].actor_attempts == 2


def test_actor_endpoint_error_and_sandbox_failures_are_labelled():
    actor = ScriptedActor(script={1: AgentResult(error="HTTP 503 (after 5 attempts)", endpoint_error=True)})
    assert _mosaic(ScriptedManager(), actor)[0].failure_reason == FAIL_ENDPOINT
    record, _ = _mosaic(ScriptedManager(), ScriptedActor(), FakeSession(fail_on="v2"))
    assert record.failure_reason == FAIL_SANDBOX and record.num_turns == 1

    def broken_factory():
        raise OSError("bwrap: no permission")

    record = _run(synthesize_mosaic(PROBLEM, ScriptedManager(), ScriptedActor(), broken_factory, MosaicConfig()))
    assert record.failure_reason == FAIL_SANDBOX and "bwrap" in record.failure_detail


# ---------------------------------------------------------------------------------------------
# DeepTool §2.1 control: Correction, deviation verdicts, early answers, expert data, figures


def test_correction_after_an_error_asks_for_code_even_when_the_manager_says_final():
    failing = ExecResult(error=ExecError("NameError", "name 'q' is not defined"), exit_code=None)
    stages = {1: STAGE_INTERMEDIATE, 2: STAGE_FINAL, 3: STAGE_FINAL}
    manager = ScriptedManager(lambda v: NavigationCard(f"part {v.step}", stages[v.step], MODE_PROGRESS))
    actor = ScriptedActor()
    record, _ = _mosaic(manager, actor, FakeSession({"v1 =": failing}), max_steps=4)
    fix = record.steps[1]
    assert (fix.card.stage, fix.card.mode) == (STAGE_INTERMEDIATE, MODE_CORRECTION)
    assert fix.card_overrides == ("forced_correction", "correction_intermediate")
    assert fix.correction_reason == "observed_error" and fix.step.kind == KIND_CODE
    assert (actor.views[1].allow_code, actor.views[1].allow_answer) == (True, False)
    assert "Do not give the final answer yet" in LLMActor(client=None).messages(actor.views[1])[-1]["content"]
    assert [s.step.kind for s in record.steps] == [KIND_CODE, KIND_CODE, KIND_ANSWER]
    assert record.steps[2].correction_reason is None and not record.early_answer


def test_a_deviation_verdict_leads_to_correction_with_a_recorded_reason():
    def cards(view):
        if view.step == 2:  # the manager judges a deviation but (inconsistently) says Progress
            return NavigationCard("set up 3 + 4, not 3 + 5", STAGE_FINAL, MODE_PROGRESS,
                                  VERDICT_LOGICAL_DEVIATION, "added 5 apples instead of 4")
        return NavigationCard(f"part {view.step}", STAGE_FINAL if view.step == 3 else STAGE_INTERMEDIATE,
                              MODE_PROGRESS)

    record, _ = _mosaic(ScriptedManager(cards), ScriptedActor(), max_steps=5)
    step = record.steps[1]
    assert (step.card.mode, step.card.stage) == (MODE_CORRECTION, STAGE_INTERMEDIATE)
    assert step.card_overrides == ("verdict_correction", "correction_intermediate")
    assert step.correction_reason == VERDICT_LOGICAL_DEVIATION and not step.error_observed
    saved = json.loads(record.to_row()["steps_json"])[1]
    assert saved["correction_reason"] == "logical_deviation"
    assert saved["card"]["reason"] == "added 5 apples instead of 4"
    row = record.to_row()
    assert (row["correction_steps"], row["deviation_corrections"]) == (1, 1)
    assert summarize_records([record])["deviation_corrections"] == 1


def test_a_deviation_verdict_from_the_llm_manager_over_the_fake_server(tmp_path):
    from pipelines.llm import LLMClient
    from pipelines.llm.testing import FakeLLMServer

    def responder(body, index):
        system, last = body["messages"][0]["content"], body["messages"][-1]["content"]
        if "navigation card" in system:
            step = int(last.split("This is step ")[1].split()[0])
            card = {"verdict": "on_track", "reason": "", "guide": "add the apples",
                    "stage": "Final" if step == 3 else "Intermediate", "mode": "Progress"}
            if step == 2:
                card.update(verdict="logical_deviation", reason="it added 5 apples, the problem says 4")
            return json.dumps(card)
        if "final step" in last:
            return "<think>\ndone\n</think>\n<answer>\n\\boxed{7}\n</answer>"
        return "<think>\nadd\n</think>\n<code>\nprint(3 + 5)\n</code>"

    with FakeLLMServer(responder=responder) as server:
        client = LLMClient(server.base_url, "fake-model", use_cache=False, json_mode="prompt")
        record = _run(synthesize_mosaic(PROBLEM, LLMManager(client), LLMActor(client), FakeSession,
                                        MosaicConfig(rho=0.0, max_steps=4)))
        sent = server.requests
    assert record.status == COMPLETE, record.failure_detail
    step = record.steps[1]
    assert step.card.mode == MODE_CORRECTION and step.correction_reason == VERDICT_LOGICAL_DEVIATION
    assert step.card.reason == "it added 5 apples, the problem says 4"
    manager_prompt = next(r for r in sent if "navigation card" in r["messages"][0]["content"])
    system = manager_prompt["messages"][0]["content"]
    assert "logical_deviation" in system and "reference" in system
    actor_prompts = [r for r in sent if "navigation card" not in r["messages"][0]["content"]]
    assert "(Correction)" in actor_prompts[1]["messages"][-1]["content"]


def test_an_answer_before_the_final_stage_ends_the_trajectory_and_is_counted_as_early():
    actor = ScriptedActor(script={2: ANSWER_REPLY})
    record, session = _mosaic(ScriptedManager(), actor, max_steps=6)  # always Intermediate
    assert record.status == COMPLETE and record.failure_reason is None and record.valid
    assert record.num_turns == 2 and len(actor.views) == 2  # no repair round, no more steps
    assert actor.views[1].allow_answer is False  # it was asked for code
    assert record.steps[1].early_answer and record.early_answer and record.final_answer == "\\boxed{7}"
    assert session.cells == ["v1 = 1\nprint(v1)"]
    assert record.to_row()["early_answer"] is True
    normal, _ = _mosaic(ScriptedManager(), ScriptedActor(), max_steps=3)  # answers when told to
    assert normal.status == COMPLETE and not normal.early_answer
    summary = summarize_records([record, normal])
    assert summary["early_answers"] == 1 and summary["complete"] == 2


def test_injected_generation_steps_are_sft_targets_by_default_and_masking_stays_available():
    from pipelines.mosaic import expert_trajectories
    from pipelines.tir import STATE_PRESERVED, sft_rows

    record, _ = _mosaic(ScriptedManager(), ScriptedActor(), max_steps=3, rho=1.0,
                        generation_share=1.0, generation_kinds=(DROPPED_BRACKET,))
    mutated = [s.step.action for s in record.steps[:2]]
    assert mutated == ["v1 = 1\nprint(v1", "v2 = 2\nprint(v2"]  # both code steps corrupted
    row = dict(record.to_row(), correct=True)
    [(trajectory, mask)] = expert_trajectories([row])
    assert mask == [True, True, True]
    completions = [r["completion"][0]["content"] for r in
                   sft_rows(trajectory.problem, trajectory.steps, STATE_PRESERVED, train_on=mask)]
    assert len(completions) == 3
    assert all(f"<code>\n{code}\n</code>" in completions[i] for i, code in enumerate(mutated))
    [(_, masked)] = expert_trajectories([row], train_on_injected=False)
    assert masked == [False, False, True]
    kept = sft_rows(trajectory.problem, trajectory.steps, STATE_PRESERVED, train_on=masked)
    assert [r["step_index"] for r in kept] == [3]


def test_expert_rows_are_selected_by_rho_and_run():
    from pipelines.mosaic import expert_trajectories, select_rows

    def row(rho, run, tid, created="2026-11-23 10:00"):
        record, _ = _mosaic(ScriptedManager(), ScriptedActor(), max_steps=2)
        return dict(record.to_row(), rho=rho, run_id=run, trajectory_id=tid, correct=True,
                    created_at=created)

    rows = [row(0.1, "a", "t1"), row(0.2, "b", "t2"), row(0.1, "c", "t3"), row(0.2 + 1e-12, "d", "t4")]
    assert [r["run_id"] for r in select_rows(rows, rho=0.1)] == ["a", "c"]
    assert [r["run_id"] for r in select_rows(rows, rho=0.2)] == ["b", "d"]
    assert [r["run_id"] for r in select_rows(rows, rho=0.1, run_ids=["c"])] == ["c"]
    assert [r["run_id"] for r in select_rows(rows, run_ids=["b", "d"])] == ["b", "d"]
    assert len(select_rows(rows)) == 4
    with pytest.raises(ValueError, match="rho"):
        select_rows(rows, rho=2.0)
    assert [t.trajectory_id for t, _ in expert_trajectories(rows, rho=0.2)] == ["t2", "t4"]
    twice = [row(0.1, "a", "t1", "2026-11-23 10:00"), row(0.1, "e", "t1", "2026-11-23 11:00")]
    assert len(expert_trajectories(twice)) == 1


def test_avg_turns_is_reported_over_all_attempts_and_over_completed_ones():
    from pipelines.mosaic import StepRecord

    cfg = MosaicConfig(max_steps=4)
    code = Step("t", KIND_CODE, "x = 1", "1")
    answer = Step("t", KIND_ANSWER, "\\boxed{7}")

    def record(n_code, finished, reason=None):
        r = TrajectoryRecord("mosaic", PROBLEM, cfg)
        r.steps = [StepRecord(code) for _ in range(n_code)] + ([StepRecord(answer)] if finished else [])
        return r.fail(reason, "x") if reason else r

    records = [record(1, True), record(2, True), record(4, False, FAIL_MAX_STEPS),
               record(0, False, FAIL_ACTOR_FORMAT)]
    assert [r.num_turns for r in records] == [2, 3, 4, 0]
    summary = summarize_records(records)
    assert summary["avg_turns"] == pytest.approx((2 + 3 + 4 + 0) / 4)
    assert summary["avg_turns_complete"] == pytest.approx((2 + 3) / 2)
    assert summarize_records(records[2:])["avg_turns_complete"] is None
    both = {r["metric"]: r for r in side_by_side(summary, summary)}
    assert both["avg_turns_complete"]["mosaic"] == pytest.approx(2.5)


# ---------------------------------------------------------------------------------------------
# Injection


def _perturbations(seed: int, rho: float, problems: int = 1):
    out = []
    for i in range(problems):
        problem = ProblemInput(f"q{i}", "gsm8k", PROBLEM.problem, "7", PROBLEM.reference)
        cfg = MosaicConfig(rho=rho, seed=seed, max_steps=6)
        record = _run(synthesize_mosaic(problem, ScriptedManager(), ScriptedActor(), FakeSession, cfg))
        out.append([(s.perturbation.mode, s.perturbation.kind) if s.perturbation else None for s in record.steps])
    return out


def test_injection_is_seeded_and_reproducible():
    first = _perturbations(seed=3, rho=0.5, problems=6)
    assert first == _perturbations(seed=3, rho=0.5, problems=6)
    assert first != _perturbations(seed=4, rho=0.5, problems=6)
    assert all(p is None for steps in _perturbations(seed=3, rho=0.0, problems=6) for p in steps)


def test_realized_injection_rate_and_mode_split_follow_rho():
    rng = random.Random(0)
    draws = [choose_mode(rng, 0.2) for _ in range(20000)]
    share = sum(d is not None for d in draws) / len(draws)
    assert 0.185 < share < 0.215
    modes = Counter(d for d in draws if d)
    assert 0.45 < modes[GENERATION] / sum(modes.values()) < 0.55
    with pytest.raises(ValueError, match="rho"):
        choose_mode(rng, 1.5)
    steps = [p for steps in _perturbations(seed=1, rho=0.2, problems=40) for p in steps[:-1]]
    assert 0.1 < sum(p is not None for p in steps) / len(steps) < 0.3


def test_environment_failures_are_not_executed_and_a_restart_restarts():
    actor = ScriptedActor(script={1: "<think>t</think><code>v1 = 1</code>", 2: "<think>t</think><code>v2 = 2</code>"})
    record, session = _mosaic(ScriptedManager(), actor, max_steps=3, rho=1.0, generation_share=0.0,
                              environment_kinds=(KERNEL_RESTART,))
    assert record.status == COMPLETE
    assert all(s.perturbation.mode == ENVIRONMENT for s in record.steps[:-1])
    assert session.cells == [] and session.restarts == 2
    assert "[the interpreter was restarted; all variables were lost]" in record.steps[0].step.observation


def test_generation_anomalies_record_the_original_code():
    record, session = _mosaic(ScriptedManager(), ScriptedActor(), max_steps=2, rho=1.0,
                              generation_share=1.0, generation_kinds=(DROPPED_BRACKET,))
    first = record.steps[0]
    assert first.perturbation.mode == GENERATION and first.perturbation.kind == DROPPED_BRACKET
    assert first.perturbation.original_code == "v1 = 1\nprint(v1)"
    assert first.step.action == "v1 = 1\nprint(v1" == session.cells[0]


MUTATION_CODE = "total = 0\nfor i in range(3):\n    total = total + i\nprint(total)\n"


@pytest.mark.parametrize("kind, error", [
    (MISSPELLED_KEYWORD, (SyntaxError, NameError)),
    (DROPPED_COLON, SyntaxError),
    (DROPPED_BRACKET, SyntaxError),
    (WRONG_NAME, NameError),
    (BROKEN_INDENTATION, IndentationError),
])
def test_each_mutation_kind_breaks_the_code(kind, error):
    for seed in range(15):
        mutated, perturbation = mutate(MUTATION_CODE, random.Random(seed), (kind,))
        assert perturbation.kind == kind and perturbation.original_code == MUTATION_CODE
        assert mutated != MUTATION_CODE and perturbation.detail
        with pytest.raises(error):
            exec(compile(mutated, "<test>", "exec"), {})  # noqa: S102 - fixed test snippet


def test_mutation_returns_none_when_nothing_applies():
    assert mutate("   ", random.Random(0)) is None
    assert mutate("x = 1", random.Random(0), (DROPPED_COLON,)) is None
    with pytest.raises(ValueError, match="unknown mutation"):
        mutate("x", random.Random(0), ("typo",))


@pytest.mark.parametrize("kind", ENVIRONMENT_KINDS)
def test_environment_failures_render_as_failures(kind):
    result = environment_failure(kind, "x = 1\ny = compute(x)", cell_number=4, timeout_s=7)
    assert not result.ok
    text = render_observation(result)
    expected = {TIMEOUT: "TimeoutError: the cell exceeded its wall-clock limit of 7 s",
                OUT_OF_MEMORY: "MemoryError", CONNECTION_RESET: "ConnectionResetError",
                KERNEL_RESTART: "restarted"}[kind]
    assert expected in text
    if kind in (TIMEOUT, OUT_OF_MEMORY):
        assert '  File "<cell-4>", line 2, in <module>\n    y = compute(x)' in text


# ---------------------------------------------------------------------------------------------
# Against the real sandbox


@pytest.fixture(scope="module")
def real_sessions():
    return session_factory(timeout_s=2, memory_mb=512)


def test_synthetic_timeout_renders_exactly_like_a_real_one(real_sessions):
    session = TrackedSession(real_sessions())
    try:
        session.execute("a = 1")
        code = "b = 2\nwhile True: pass"  # one line: the interruption can only land there
        real = render_observation(session.execute(code))
        synthetic = render_observation(environment_failure(TIMEOUT, code, cell_number=2, timeout_s=2))
        assert synthetic == real
        session.skip_cell()
        memory = render_observation(session.execute("c = 3\nd = bytearray(10**11)"))
        fake = render_observation(environment_failure(OUT_OF_MEMORY, "c = 3\nd = bytearray(10**11)",
                                                       cell_number=4, timeout_s=2))
        def drop_carets(text):
            return [ln for ln in text.splitlines() if set(ln.strip()) - set("^~")]

        assert drop_carets(memory) == drop_carets(fake)
    finally:
        session.close()


def test_mutated_code_really_runs_and_a_synthetic_restart_really_loses_state(real_sessions):
    actor = ScriptedActor(script={
        1: "<think>set</think><code>keep = 41\nprint(keep)</code>",
        2: "<think>use</think><code>print(keep + 1)</code>",
        3: "<think>again</think><code>print(keep)</code>",
    })
    manager = ScriptedManager()
    cfg = MosaicConfig(rho=0.0, max_steps=4)
    record = _run(synthesize_mosaic(PROBLEM, manager, actor, real_sessions, cfg))
    assert [s.step.observation for s in record.steps[:3]] == ["41", "42", "41"]

    # generation anomaly: the mutated code runs in the jail and the traceback is real
    cfg = MosaicConfig(rho=1.0, generation_share=1.0, max_steps=2, generation_kinds=(WRONG_NAME,))
    actor = ScriptedActor(script={1: "<think>set</think><code>keep = 41\nprint(keep)</code>"})
    record = _run(synthesize_mosaic(PROBLEM, ScriptedManager(), actor, real_sessions, cfg))
    step = record.steps[0]
    assert step.perturbation.mode == GENERATION and step.error_observed
    assert step.step.observation.startswith("Traceback (most recent call last):")
    assert f"NameError: name '{step.step.action.split('print(')[1].rstrip(')')}' is not defined" in step.step.observation
    assert step.step.action != step.perturbation.original_code

    # environment kernel restart: state set before it is gone after it
    actor = ScriptedActor(script={
        1: "<think>set</think><code>keep = 41\nprint(keep)</code>",
        2: "<think>break</think><code>print('never runs')</code>",
        3: "<think>use</think><code>print(keep)</code>",
    })
    # injection depends only on the seed and the number of code steps: find a seed that
    # perturbs exactly the second of three code steps (cheaply, with the fake session)
    def pattern(seed):
        cfg = MosaicConfig(rho=0.5, generation_share=0.0, max_steps=4, seed=seed,
                           environment_kinds=(KERNEL_RESTART,))
        rec = _run(synthesize_mosaic(PROBLEM, ScriptedManager(), ScriptedActor(), FakeSession, cfg))
        return cfg, [s.perturbation is not None for s in rec.steps[:3]]

    cfg = next(c for c, p in map(pattern, range(200)) if p == [False, True, False])
    record = _run(synthesize_mosaic(PROBLEM, ScriptedManager(), actor, real_sessions, cfg))
    assert [s.perturbation.kind if s.perturbation else None for s in record.steps[:3]] == [None, KERNEL_RESTART, None]
    assert record.steps[0].step.observation == "41"
    assert "NameError: name 'keep' is not defined" in record.steps[2].step.observation
    assert record.steps[2].card.mode == MODE_CORRECTION


# ---------------------------------------------------------------------------------------------
# Baseline


def test_baseline_is_a_plain_loop_without_manager_or_injection():
    actor = ScriptedActor(answer_at_baseline_step=3)
    session = FakeSession()
    cfg = MosaicConfig(rho=1.0, max_steps=5)
    record = _run(synthesize_baseline(PROBLEM, actor, lambda: session, cfg))
    assert record.method == "baseline" and record.status == COMPLETE and record.num_turns == 3
    assert record.perturbed_steps == 0 and session.cells == ["v1 = 1\nprint(v1)", "v2 = 2\nprint(v2)"]
    assert all(v.card is None for v in actor.views)
    messages = LLMBaselineActor(client=None).messages(actor.views[2])
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert messages[3]["content"] == "<interpreter>\nout1\n</interpreter>"
    assert PROBLEM.reference not in json.dumps(messages)
    record = _run(synthesize_baseline(PROBLEM, ScriptedActor(answer_at_baseline_step=99), FakeSession,
                                      MosaicConfig(max_steps=2)))
    assert record.failure_reason == FAIL_MAX_STEPS and record.num_turns == 2


# ---------------------------------------------------------------------------------------------
# Labelling and figures


def test_labels_summary_and_side_by_side():
    from eval.graders import grade_many_serial

    cfg = MosaicConfig(rho=1.0, max_steps=4, seed=2)
    problems = [ProblemInput(f"q{i}", "gsm8k", PROBLEM.problem, gold, "ref") for i, gold in enumerate(["7", "8", "7"])]
    records = _run(synthesize_many(problems, lambda p: synthesize_mosaic(
        p, ScriptedManager(), ScriptedActor(), FakeSession, cfg), concurrency=2))
    broken = TrajectoryRecord("mosaic", problems[0], cfg).fail(FAIL_ACTOR_FORMAT, "garbage")
    records.append(broken)
    label_records(records, lambda pairs: grade_many_serial(pairs))
    assert [r.correct for r in records] == [True, False, True, False]
    assert records[0].grade_method == "boxed" and broken.grade_method == "none"
    assert records[0].recovered and not records[1].recovered  # every code step was perturbed
    summary = summarize_records(records)
    assert summary["trajectories"] == 4 and summary["complete"] == 3 and summary["valid"] == 3
    assert summary["accuracy"] == pytest.approx(0.5)
    assert summary["perturbation_rate"] == pytest.approx(1.0)
    assert summary["recovery_rate"] == pytest.approx(2 / 3)
    assert summary["failures"] == {FAIL_ACTOR_FORMAT: 1}
    assert summary["avg_turns"] == pytest.approx((4 + 4 + 4 + 0) / 4)
    rows = {r["metric"]: r for r in side_by_side(summary, {"accuracy": 0.25, "failures": {}})}
    assert rows["accuracy"]["mosaic"] == 0.5 and rows["accuracy"]["baseline"] == 0.25
    assert rows[f"failed:{FAIL_ACTOR_FORMAT}"] == {"metric": f"failed:{FAIL_ACTOR_FORMAT}", "mosaic": 1, "baseline": 0}
    row = records[0].to_row()
    assert row["valid"] and row["text"] and json.loads(row["steps_json"])[0]["perturbation"]["mode"]
    assert row["perturbed_steps"] == row["perturbed_generation"] + row["perturbed_environment"] == 3


def test_problem_input_and_config_validation():
    row = {"problem_id": "a", "source": "gsm8k", "problem": "q?", "answer": "1", "solution": ""}
    assert "final answer is 1" in ProblemInput.from_row(row).reference
    with pytest.raises(ValueError, match="answer"):
        ProblemInput.from_row({**row, "answer": " "})
    for bad in ({"rho": 1.2}, {"max_steps": 0}, {"generation_kinds": ("typo",)}, {"environment_kinds": ()}):
        with pytest.raises(ValueError):
            MosaicConfig(**bad)


# ---------------------------------------------------------------------------------------------
# Cards and actor replies


def test_cards_parse_and_enforce():
    ok = {"verdict": "on_track", "reason": "", "guide": " g ", "stage": "Final", "mode": "Progress"}
    assert parse_card(ok) == NavigationCard("g", "Final", "Progress")
    assert parse_card({**ok, "verdict": "logical_deviation", "reason": " wrong sum "}) == NavigationCard(
        "g", "Final", "Progress", VERDICT_LOGICAL_DEVIATION, "wrong sum")
    assert parse_card({k: v for k, v in ok.items() if k != "reason"}).reason == ""
    for bad in ({**ok, "guide": ""}, {**ok, "stage": "final"}, {**ok, "mode": "Fix"},
                {**ok, "verdict": "fine"}, {k: v for k, v in ok.items() if k != "verdict"},
                {**ok, "reason": 3}, ["g"]):
        with pytest.raises((ValueError, TypeError)):
            parse_card(bad)
    card = NavigationCard("g", STAGE_INTERMEDIATE, MODE_PROGRESS)
    assert enforce_card(card, 3, False) == (card, [])
    forced, why = enforce_card(card, 1, True)
    assert (forced.stage, forced.mode, why) == (STAGE_FINAL, MODE_CORRECTION, ["forced_correction", "forced_final"])
    assert set(card_schema()["required"]) == {"verdict", "reason", "guide", "stage", "mode"}


def test_an_on_track_verdict_overrides_a_correction_mode():
    # Listing 1 rule 2, "If valid: Set reasoning_mode=Progress": the manager judged the step
    # valid and nothing failed, so its Correction is overridden and its Final stage stands
    card = NavigationCard("g", STAGE_FINAL, MODE_CORRECTION, VERDICT_ON_TRACK)
    enforced, why = enforce_card(card, 3, False)
    assert (enforced.stage, enforced.mode, why) == (STAGE_FINAL, MODE_PROGRESS,
                                                     ["verdict_progress"])
    assert correction_reason(enforced, False) is None
    with pytest.raises(ValueError, match="call enforce_card first"):
        correction_reason(card, False)


# Listing 1 ("Analysis Logic"), transcribed: an execution error (seen by the loop or judged by
# the manager) or a logical deviation means Correction, a valid step means Progress (the
# verdict decides, not the mode the manager wrote); "Correction -> Intermediate"; the last
# step (one step left) is Final, and there Final wins over Correction.
@pytest.mark.parametrize("stage, mode, verdict, steps_left, last_failed, expected", [
    (STAGE_FINAL, MODE_CORRECTION, VERDICT_ON_TRACK, 3, False, (STAGE_FINAL, MODE_PROGRESS)),
    (STAGE_INTERMEDIATE, MODE_CORRECTION, VERDICT_ON_TRACK, 3, False,
     (STAGE_INTERMEDIATE, MODE_PROGRESS)),
    (STAGE_FINAL, MODE_CORRECTION, VERDICT_ON_TRACK, 1, False, (STAGE_FINAL, MODE_PROGRESS)),
    (STAGE_FINAL, MODE_PROGRESS, VERDICT_ON_TRACK, 3, True, (STAGE_INTERMEDIATE, MODE_CORRECTION)),
    (STAGE_FINAL, MODE_PROGRESS, VERDICT_LOGICAL_DEVIATION, 2, False, (STAGE_INTERMEDIATE, MODE_CORRECTION)),
    (STAGE_INTERMEDIATE, MODE_PROGRESS, VERDICT_EXECUTION_ERROR, 4, False, (STAGE_INTERMEDIATE, MODE_CORRECTION)),
    (STAGE_FINAL, MODE_CORRECTION, VERDICT_LOGICAL_DEVIATION, 1, False, (STAGE_FINAL, MODE_CORRECTION)),
    (STAGE_INTERMEDIATE, MODE_PROGRESS, VERDICT_ON_TRACK, 1, True, (STAGE_FINAL, MODE_CORRECTION)),
    (STAGE_FINAL, MODE_PROGRESS, VERDICT_ON_TRACK, 2, False, (STAGE_FINAL, MODE_PROGRESS)),
    (STAGE_INTERMEDIATE, MODE_PROGRESS, VERDICT_ON_TRACK, 5, False, (STAGE_INTERMEDIATE, MODE_PROGRESS)),
])
def test_enforce_card_follows_listing_1(stage, mode, verdict, steps_left, last_failed, expected):
    # on_track is the default verdict: built without it, those cases test the stage rules alone
    extra = () if verdict == VERDICT_ON_TRACK else (verdict,)
    card = NavigationCard("g", stage, mode, *extra)
    card, _ = enforce_card(card, steps_left, last_failed)
    assert (card.stage, card.mode) == expected


@pytest.mark.parametrize("text, kwargs, kind, action, strict", [
    ("<think>\nt\n</think>\n<code>\nprint(1)\n</code>", {}, KIND_CODE, "print(1)", True),
    ("<think>t</think><answer>\\boxed{3}</answer>", {}, KIND_ANSWER, "\\boxed{3}", True),
    ("<think>t</think><code>\n    x = 1\n    print(x)", {}, KIND_CODE, "x = 1\nprint(x)", False),
    ("Plan.\n```python\nx = 2\n```\n", {}, KIND_CODE, "x = 2", False),
    ("<think>t</think><code>\n```python\nx = 3\n```\n</code>", {}, KIND_CODE, "x = 3", False),
    ("So it is \\boxed{12}.", {"allow_code": False}, KIND_ANSWER, "\\boxed{12}", False),
    ("<think>t</think><answer>The answer is $\\boxed{5}$.</answer>", {}, KIND_ANSWER, "\\boxed{5}", False),
    ("<think>t</think><answer>42</answer>", {}, KIND_ANSWER, "\\boxed{42}", False),
    ("<think>a</think><code>x=1</code><interpreter>1</interpreter><think>b</think><code>y</code>", {}, KIND_CODE, "x=1", False),
])
def test_parse_actor_reply_table(text, kwargs, kind, action, strict):
    reply = parse_actor_reply(text, **kwargs)
    assert reply.step is not None, reply.error
    assert (reply.step.kind, reply.step.action, reply.strict) == (kind, action, strict)


@pytest.mark.parametrize("text, kwargs, fragment", [
    ("", {}, "empty"),
    ("no tags at all", {}, "no <code> or <answer>"),
    ("<think>t</think><answer>\\boxed{3}</answer>", {"allow_answer": False}, "no <code> block"),
    ("<think>t</think><code>x = 1</code>", {"allow_code": False}, "no <answer> block"),
    ("<think>t</think><code>   </code>", {}, "empty"),
])
def test_parse_actor_reply_errors(text, kwargs, fragment):
    reply = parse_actor_reply(text, **kwargs)
    assert reply.step is None and fragment in reply.error


def test_prompt_files_load_and_the_actor_never_sees_the_reference():
    for name in ("mosaic_manager.md", "mosaic_actor.md", "mosaic_baseline.md"):
        prompt = load_prompt(f"pipelines/prompts/{name}")
        assert prompt.system and prompt.user
    view = ActorView(PROBLEM.problem, (Step("t", KIND_CODE, "x = 3", "3"),),
                     NavigationCard("add the numbers", STAGE_FINAL, MODE_PROGRESS), True, True)
    messages = LLMActor(client=None).messages(view)
    text = json.dumps(messages)
    assert PROBLEM.reference not in text and "add the numbers" in text and "<interpreter>\\n3" in text
    assert "<answer>" in messages[-1]["content"]
    manager_text = json.dumps(LLMManager(client=None).messages(ManagerView(
        PROBLEM.problem, PROBLEM.reference, "7", (), 1, 4, False)))
    assert PROBLEM.reference in manager_text and "4 step(s) left" in manager_text


# ---------------------------------------------------------------------------------------------
# LLM agents over the real client and the fake HTTP server


def _responder(body, index):
    system = body["messages"][0]["content"]
    if "navigation card" in system:
        step = int(body["messages"][-1]["content"].split("This is step ")[1].split()[0])
        stage = "Final" if step >= 2 else "Intermediate"
        return json.dumps({"verdict": "on_track", "reason": "", "guide": "add the apples",
                           "stage": stage, "mode": "Progress"})
    if "Answer now" in json.dumps(body["messages"]) or "final step" in body["messages"][-1]["content"]:
        return "<think>\ndone\n</think>\n<answer>\n\\boxed{7}\n</answer>"
    return "<think>\nadd\n</think>\n<code>\nprint(3 + 4)"  # stop sequence cut </code>


def test_llm_agents_over_the_real_client(tmp_path):
    from pipelines.llm import LLMClient
    from pipelines.llm.testing import FakeLLMServer

    with FakeLLMServer(responder=_responder) as server:
        client = LLMClient(server.base_url, "fake-model", cache_path=tmp_path / "c.sqlite", json_mode="prompt")
        record = _run(synthesize_mosaic(PROBLEM, LLMManager(client), LLMActor(client), FakeSession,
                                        MosaicConfig(rho=0.0, max_steps=4)))
        assert record.status == COMPLETE, record.failure_detail
        assert [s.step.kind for s in record.steps] == [KIND_CODE, KIND_ANSWER]
        assert record.steps[0].step.action == "print(3 + 4)" and "closed <code>" in record.steps[0].actor_repairs
        sent = server.requests
        assert any(r.get("stop") for r in sent)
        assert sum("navigation card" in r["messages"][0]["content"] for r in sent) == 2
        assert {c["tag"] for c in client.drain_records()} == {"mosaic/manager", "mosaic/actor"}

        server.responder = lambda body, index: "not json at all"
        fresh = LLMClient(server.base_url, "fake-model", use_cache=False, json_mode="prompt")
        record = _run(synthesize_mosaic(PROBLEM, LLMManager(fresh), LLMActor(fresh), FakeSession,
                                        MosaicConfig(rho=0.0, max_steps=4)))
        assert record.failure_reason == FAIL_MANAGER_JSON
        assert len([c for c in fresh.drain_records() if c["tag"] == "mosaic/manager"]) == 2  # one repair


# ---------------------------------------------------------------------------------------------
# Integration: the real local model server and the real sandbox


@pytest.mark.server
def test_real_server_and_sandbox_give_valid_labelled_trajectories(local_server, shared_data, weft_home):
    from eval.graders import grade_many_serial
    from pipelines.ingest import load_source
    from pipelines.llm import LLMClient, SamplingParams
    from warehouse import Lineage, Warehouse

    # two problems, two steps (one free, one forced final) and 192-token actor turns: every
    # branch of the loop is reached on a CPU server in a fraction of the default run's time
    problems = [ProblemInput.from_row(p.to_row()) for p in load_source("gsm8k_train", limit=2).problems]
    client = LLMClient(local_server.base_url, local_server.served_name, max_concurrency=4,
                       timeout_s=None)
    sessions = session_factory(timeout_s=5)
    cfg = MosaicConfig(rho=0.5, max_steps=2, seed=1)
    turn = SamplingParams(temperature=0.0, max_tokens=192, seed=0, stop=ACTOR_STOP)

    async def run():
        try:
            mosaic = await synthesize_many(problems, lambda p: synthesize_mosaic(
                p, LLMManager(client), LLMActor(client, params=turn), sessions, cfg),
                concurrency=2)
            baseline = await synthesize_many(problems, lambda p: synthesize_baseline(
                p, LLMBaselineActor(client, params=turn), sessions, cfg), concurrency=2)
            return mosaic, baseline
        finally:
            await client.aclose()

    mosaic, baseline = _run(run())
    records = mosaic + baseline
    label_records(records, lambda pairs: grade_many_serial(pairs))
    for record in records:
        assert record.status in (COMPLETE, FAILED)
        assert (record.failure_reason is None) == (record.status == COMPLETE)
        assert record.valid == (record.status == COMPLETE)
        assert record.correct is not None and 0 <= record.num_turns <= cfg.max_steps
        assert validate_steps(record.plain_steps) == [] or record.status == FAILED
        for step in record.steps:
            if step.step.kind == KIND_CODE:
                assert step.step.observation is not None
    assert all(r.perturbed_steps == 0 for r in baseline)
    wh = Warehouse()
    wh.write("mosaic_trajectories", [r.to_row() for r in mosaic], lineage=Lineage(partition="gsm8k"))
    assert wh.sql("SELECT count(*) AS n FROM mosaic_trajectories").to_pylist()[0]["n"] == 2
