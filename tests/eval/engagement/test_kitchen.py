"""Embodied scheduling (eval/engagement/kitchen.py, paper §5.2.2 and App. E).

A hand-worked case: one critical dish (prep 10, signal 50 ticks after prep, finish 5, window
20) and one 200-token tutoring problem, no jitter. The scripted controller preps at tick 0
(done at 10), tutors from 10, and the signal fires at 10 + 50 = 60, inside tutoring; the dish
is good if its finish completes by 60 + 20 = 80.
"""

from __future__ import annotations

import pytest

from eval.engagement import kitchen as K
from eval.engagement.core import run_episode

CFG = K.KitchenConfig(jitter_std=0.0, poll_interval=40)
CRITICAL = K.Dish(0, "critical_narrow", True, prep=10, offset=50, finish=5, window=20, keepwarm=0)
CASE = K.Case("hand", "critical_narrow", 1, (CRITICAL,), (200,))


def episode(method: str, case: K.Case = CASE):
    env = K.KitchenEnv(CFG, case, method)
    ep = run_episode(env, K.KitchenAgent(CFG, method), seed=0, horizon=CFG.time_budget)
    return env, ep


def test_each_interface_shows_the_signal_at_its_own_tick():
    seen = {}
    for method in K.METHODS:
        env, _ = episode(method)
        d = env.dishes[0]
        assert d["signal"] == 60
        seen[method] = (d["seen"], d["finish_start"], d["quality"])
    assert seen[K.EP] == (60, 60, 1.0)  # shown at the firing tick; controller finishes at once
    assert seen[K.REFLEX] == (60, 60, 1.0)  # the engine starts the finish at the signal
    assert seen[K.POLL] == (80, 80, 0.0)  # the next poll check is at tick 80: too late
    assert seen[K.AGENTLOOP] == (210, 210, 0.0)  # only when the 200-token problem ends


def test_utility_follows_the_app_e_formula():
    r, c_t, c_s = CFG.reward, CFG.time_cost, CFG.switch_cost
    env, ep = episode(K.EP)
    # prep 0-10, tutor 10-60, finish 60-65, tutor 65-215: T = 215, three kitchen/tutor switches
    assert (env.now, env.switches, env.interruptions) == (215, 3, 1)
    assert sum(ep.utilities) == pytest.approx(r * (1 + 1) - c_t * 215 - c_s * 3)
    env, ep = episode(K.AGENTLOOP)
    assert (env.now, env.switches) == (215, 2)
    assert sum(ep.utilities) == pytest.approx(r * (0 + 1) - c_t * 215 - c_s * 2)
    env, ep = episode(K.POLL)  # checks at 40 and 80 while tutoring, then 120, 160, 200
    assert env.checks == 5
    assert sum(ep.utilities) == pytest.approx(r * 1 - c_t * 215 - c_s * 3 - CFG.check_cost * 5)


def test_soft_dish_is_deferred_under_ep_and_keeps_its_quality():
    soft = K.Dish(0, "soft_keepwarm", False, prep=10, offset=50, finish=5, window=20,
                  keepwarm=150)
    env, _ = episode(K.EP, K.Case("soft", "soft_keepwarm", 1, (soft,), (200,)))
    d = env.dishes[0]
    assert d["seen"] == 60 and d["quality"] == 1.0
    assert d["finish_start"] > 60  # not finished at once: tutoring resumed first
    assert d["done"] <= 60 + 150


def test_tutoring_resumes_where_it_stopped():
    env, _ = episode(K.EP)
    assert env.completed == 1 and env.tutor_left == [0]
    assert env.now == 10 + 200 + 5  # no token tutored twice


def test_scripted_comparison_matches_the_direction_of_tables_4_and_22():
    cfg = K.KitchenConfig(setting=K.MULTI, cases_per_cell=1)
    s = {m: r.summary() for m, r in K.compare(cfg).items()}
    assert s["ep"]["critical"].value > s["poll"]["critical"].value > s["agentloop"]["critical"].value
    assert s["ep"]["utility"].value > s["poll"]["utility"].value > s["agentloop"]["utility"].value
    assert s["ep"]["visibility_delay"].value == 0.0 < s["poll"]["visibility_delay"].value


def test_cases_are_shared_and_seeded():
    cfg = K.KitchenConfig(setting=K.ONE, cases_per_cell=1)
    assert K.make_cases(cfg) == K.make_cases(cfg)
    assert len(K.make_cases(cfg)) == len(K.DISH_FAMILIES) * len(K.TUTOR_FAMILIES)
    a = K.run_method(cfg, K.EP, log=True)
    b = K.run_method(cfg, K.EP, log=True)
    assert a.rows == b.rows and a.timelines == b.timelines


def test_a_run_reports_progress_after_every_case(caplog):
    cfg = K.KitchenConfig(setting=K.ONE, cases_per_cell=1)
    n = len(K.make_cases(cfg))
    with caplog.at_level("INFO", logger="eval.engagement.kitchen"):
        result = K.run_method(cfg, K.EP)
    lines = [r.getMessage() for r in caplog.records if r.name == "eval.engagement.kitchen"]
    assert len(lines) == n == len(result.rows)
    assert lines[-1].startswith(f"kitchen ep (one, scripted): case {n}/{n}, utility "
                                f"{result.rows[-1]['utility']:.2f}")


def test_bad_inputs_get_clear_errors():
    with pytest.raises(ValueError, match="method must be one of"):
        K.KitchenEnv(CFG, CASE, "patch")
    env = K.KitchenEnv(CFG, CASE, K.EP)
    env.reset(0)
    with pytest.raises(ValueError, match="cannot be finished"):
        env.tick([K.Intervention("finish", {"dish": 0})])
    with pytest.raises(ValueError, match="setting must be"):
        K.KitchenConfig(setting="two")


class PreferenceClient:
    """A stand-in model for the LLM controller: picks the first listed option whose text
    contains the earliest word of ``order`` that appears (prep before tutor before finish)."""

    model = "preference"

    def __init__(self, order=("prep", "tutor", "finish", "wait")) -> None:
        self.order, self.calls = order, 0

    async def chat_json(self, messages, schema, params, **kw):
        from pipelines.llm import JsonResult

        self.calls += 1
        lines = messages[-1]["content"].split("Options:\n")[1].splitlines()
        options = [ln for ln in lines if ln[:1].isdigit()]
        for word in self.order:
            hit = [ln for ln in options if word in ln]
            if hit:
                choice = int(hit[0].split(":")[0])
                return JsonResult({"choice": choice}, [f'{{"choice": {choice}}}'], 1, None)
        return JsonResult(None, ["?"], 1, "no option")


def test_llm_controller_runs_every_interface_of_table_4_and_decides_under_ep():
    from eval.engagement.llm_policies import LLMController

    results = {m: K.run_method(CFG, m, LLMController(PreferenceClient(), m), [CASE])
               for m in K.METHODS}
    assert set(results) == {"agentloop", "poll", "reflexpatch", "ep"}
    assert {r.controller for r in results.values()} == {"llm:preference"}
    assert all(r.note == "" for r in results.values())
    # the model prefers resuming tutoring to finishing the ready dish: under EP its choice
    # stands and the critical dish (window 20 after the signal at about 60) is lost; under
    # ReflexPatch the engine finishes the dish before the controller is asked
    assert results["ep"].rows[0]["critical_success"] == 0
    assert results["reflexpatch"].rows[0]["critical_success"] == 1
    assert all(r.rows[0]["tutor_done"] == 1 for r in results.values())


def test_scripted_comparison_is_labelled_not_a_result():
    from eval.engagement.tables import kitchen_rows

    results = K.compare(K.KitchenConfig(setting=K.ONE, cases_per_cell=1), methods=(K.EP, K.REFLEX))
    rows = kitchen_rows(results)
    assert [r["method"] for r in rows] == [K.EP, K.REFLEX]
    assert all(r["controller"] == "scripted" and "not a result" in r["note"] for r in rows)
    # on critical dishes the scripted EP controller and the reflex make the same choice
    crit = {m: sum(r["critical_success"] for r in res.rows) for m, res in results.items()}
    assert crit[K.EP] == crit[K.REFLEX]
