"""Digital assistant with asynchronous emails (eval/engagement/assistant.py, paper §5.2.1).

Scripted timelines with answers worked out by hand from App. D's durations (check 0.1, open
0.1, triage 0.2, handle 1.0, resume 0.1 time units; 20 ticks per unit) and Table 19's scoring.
"""

from __future__ import annotations

import pytest

from eval.engagement import assistant as A
from eval.engagement.core import run_episode

# Two milestones of 100 tokens each: unit boundaries at ticks 100 and 200 when uninterrupted.
OUTPUT = A.MainOutput("t", (("first part", 100), ("second part", 100)))
CFG = A.AssistantConfig(horizon_units=20.0, poll_interval=2.5, n_seeds=1, episodes_per_seed=1)


def episode(method: str, stream, cfg: A.AssistantConfig = CFG):
    env = A.AssistantEnv(cfg, [OUTPUT], method, stream=stream)
    agent = A.AssistantAgent(cfg, method)
    ep = run_episode(env, agent, seed=0, horizon=cfg.horizon)
    return env, ep


def test_agentloop_sees_an_email_only_after_the_current_unit_finishes():
    env, _ = episode(A.AGENTLOOP, [(30, "high", 330)])
    # unit 1 ends at tick 100; check_inbox (2 ticks) shows the email at 102
    assert env.emails[0].seen == 102
    assert env.emails[0].opened == 102


def test_periodic_poll_sees_an_email_only_at_a_poll_tick():
    env, _ = episode(A.POLL, [(30, "high", 330)])
    # poll period 2.5 units = 50 ticks: generation stops at 50, the check shows it at 52
    assert env.emails[0].seen == 52
    # period 40 ticks: stop at 40, check -> 42, open -> 44, triage -> 48, handle -> 68,
    # resume -> 70; the poll ticks stay on the clock, so generation stops again at 80 (not
    # 40 ticks after resuming) and the email of tick 75 shows at 82
    cfg = A.AssistantConfig(horizon_units=20.0, poll_interval=2.0)
    env, _ = episode(A.POLL, [(30, "high", 330), (75, "high", 330)], cfg)
    assert [e.seen for e in env.emails] == [42, 82]


def test_an_email_handled_on_its_deadline_tick_is_on_time():
    # EP: arrival 30, open 30-32, triage 32-36, handle 36-56
    env, _ = episode(A.EP, [(30, "high", 56)])
    assert env.emails[0].handled == 56 and not env.emails[0].timed_out
    env, ep = episode(A.EP, [(30, "high", 55)])
    assert env.emails[0].timed_out and env.metrics()["on_time"] == 0
    assert sum(ep.utilities) == pytest.approx(4 * 0.4 + 0.8 - 0.5 - 2 * 0.005 - 0.005)


def test_ep_sees_an_email_at_its_arrival_tick_and_opens_it_then():
    env, ep = episode(A.EP, [(30, "high", 330)])
    assert env.emails[0].seen == 30
    assert env.emails[0].opened == 30
    names_at_30 = [r.name for r in ep.timeline if r.tick == 30 and r.kind == "intervention"]
    assert names_at_30 == ["interrupt", "open"]


def test_ep_resumes_the_partial_output_instead_of_restarting():
    env, _ = episode(A.EP, [(30, "high", 330)])
    m = env.metrics()
    assert env.tokens_done == 200  # every token generated exactly once
    assert (m["main"], m["resumptions"], m["interruptions"]) == (1.0, 1.0, 1.0)
    # handled at 30 + open 2 + triage 4 + handle 20 = 56
    assert env.emails[0].handled == 56


def test_utility_follows_table_19_for_hand_worked_episodes():
    progress, bonus, on_time, timeout, switch, interrupt = 0.4, 0.8, 0.4, 0.5, 0.005, 0.005
    # EP: all 4 progress units, completion, one on-time email, 2 switches, 1 interruption
    _, ep = episode(A.EP, [(30, "high", 330)])
    assert sum(ep.utilities) == pytest.approx(4 * progress + bonus + on_time - 2 * switch
                                              - interrupt)
    # AgentLoop with a tight deadline (tick 80): the email is first seen at 102, after it
    # timed out, and is never opened (latency censored at the horizon, tick 400); switches:
    # check at 100, resume, and the first idle check after the main task.
    env, ep = episode(A.AGENTLOOP, [(30, "high", 80)])
    assert env.emails[0].timed_out
    assert sum(ep.utilities) == pytest.approx(4 * progress + bonus - timeout - 3 * switch)
    m = env.metrics()
    assert m["timeouts"] == 1 and m["email"] == 0.0
    assert m["balanced"] == pytest.approx(0.6 * 1.0 + 0.4 * 0.0 - 0.5 * 1.0)
    assert env.emails[0].seen == 102 and env.emails[0].opened is None
    assert m["latency_sum"] == pytest.approx((400 - 30) / 20)


def test_email_score_is_urgency_weighted():
    # EP handles the high one (arrives 10) on time, busy until 10 + 2 + 4 + 20 = 36; the low
    # one (arrives 12, deadline 20) waits behind it and times out at 20.
    env, _ = episode(A.EP, [(10, "high", 300), (12, "low", 20)])
    m = env.metrics()
    assert env.emails[1].timed_out and not env.emails[0].timed_out
    assert m["email"] == pytest.approx(1.2 / (1.2 + 0.1))


def test_methods_share_the_email_stream_and_seeded_replay_is_identical():
    cfg = A.AssistantConfig(n_seeds=1, episodes_per_seed=1)
    outputs = A.scripted_outputs(cfg)
    streams = []
    for method in A.METHODS:
        env = A.AssistantEnv(cfg, outputs, method)
        run_episode(env, A.AssistantAgent(cfg, method), seed=7, horizon=cfg.horizon)
        streams.append([(e.arrival, e.urgency, e.deadline) for e in env.emails])
    assert streams[0] == streams[1] == streams[2] and len(streams[0]) > 5
    a = A.run_method(cfg, outputs, A.EP, log=True)
    b = A.run_method(cfg, outputs, A.EP, log=True)
    assert a.rows == b.rows and a.timelines == b.timelines


def test_visibility_rules_hold_on_random_streams():
    cfg = A.AssistantConfig(setting=A.MILESTONES, n_seeds=1, episodes_per_seed=1)
    outputs = A.scripted_outputs(cfg)
    period = cfg.ticks(cfg.poll_interval)
    for method in A.METHODS:
        env = A.AssistantEnv(cfg, outputs, method)
        ep = run_episode(env, A.AssistantAgent(cfg, method), seed=3, horizon=cfg.horizon)
        checks = {r.tick for r in ep.timeline if r.name == "check_inbox"}
        for e in env.emails:
            if e.seen is None:
                continue
            if method == A.EP:
                assert e.seen == e.arrival
            else:  # only through an inbox check that ended 2 ticks after it started
                assert e.seen - 2 in checks and e.seen > e.arrival
        if method == A.POLL:
            gen_ends = {r.tick for r in ep.timeline if r.name == "done"
                        and '"generate"' in r.payload}
            # every check during the main task starts at a poll tick or a unit boundary
            for tick in checks:
                if tick <= max(gen_ends):
                    assert tick in gen_ends
                    stopped = [r for r in ep.timeline if r.tick == tick and r.name == "done"]
                    assert tick % period == 0 or '"unit_complete": true' in stopped[0].payload


def test_scripted_comparison_matches_the_direction_of_table_3():
    cfg = A.AssistantConfig(setting=A.SINGLE, n_seeds=4, episodes_per_seed=2)
    s = {m: r.summary() for m, r in A.compare(cfg).items()}
    assert s["ep"]["utility"].value > s["poll"]["utility"].value > s["agentloop"]["utility"].value
    assert s["ep"]["timeout"].value < s["poll"]["timeout"].value < s["agentloop"]["timeout"].value
    assert s["ep"]["latency"].value < s["poll"]["latency"].value < s["agentloop"]["latency"].value
    assert s["agentloop"]["main"].value >= s["ep"]["main"].value


def test_bad_inputs_get_clear_errors():
    with pytest.raises(ValueError, match="method must be one of"):
        A.AssistantEnv(CFG, [OUTPUT], "step")
    with pytest.raises(ValueError, match="setting must be"):
        A.AssistantConfig(setting="both")
    with pytest.raises(ValueError, match="arrival tick <= deadline"):
        A.AssistantEnv(CFG, [OUTPUT], A.EP, stream=[(50, "high", 10)])
    env = A.AssistantEnv(CFG, [OUTPUT], A.EP)
    env.reset(0)
    env.tick([A.Intervention("generate")])
    with pytest.raises(ValueError, match="busy"):
        env.tick([A.Intervention("check_inbox")])
