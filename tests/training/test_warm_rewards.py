"""A GRPO run's grading pool starts while the model loads (training.rewards.warm_rewards), not
inside the first reward call: after warm_rewards and before any reward is called, the shared
pool the rewards will use already has its workers."""

from eval.grading_pool import close_shared_pools, shared_pool
from training.rewards import RewardSpec, build_rewards, warm_rewards
from training.verdicts import item_limit_s


def test_warm_rewards_starts_the_pool_the_first_call_uses():
    close_shared_pools()
    try:
        funcs, _ = build_rewards([RewardSpec("outcome"), RewardSpec("format", 0.1,
                                                                    {"schema": "boxed"})],
                                 num_generations=2)
        verdicts = funcs[0].verdicts
        assert not hasattr(funcs[1], "verdicts")  # the format reward grades nothing
        assert warm_rewards(funcs) == ["grading pool"]  # one shared pool, started once
        pool = shared_pool(verdicts.processes, item_limit_s(5))
        assert len(pool.worker_pids()) == verdicts.processes  # before any reward call
        pids = set(pool.worker_pids())
        rewards = funcs[0](prompts=["q", "q"], completions=["\\boxed{4}", "\\boxed{5}"],
                           answer=["4", "4"])
        assert rewards == [1.0, 0.0]
        assert set(pool.worker_pids()) == pids  # the call used the warm workers
    finally:
        close_shared_pools()


def test_warm_rewards_without_grading_rewards_starts_nothing():
    funcs, _ = build_rewards([RewardSpec("format", 1.0, {"schema": "boxed"})],
                             num_generations=2)
    assert warm_rewards(funcs) == []
