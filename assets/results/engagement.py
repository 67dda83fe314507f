"""Result assets of the Engagement Process paper's toy experiments (§5.1): Table 1
(urgency-aware deliberation) and Table 2 (hierarchical patrol). The experiments are cheap
simulations, so each asset runs its arms itself (``eval.engagement.claims``) and needs no
upstream asset; the paper's own configurations fit a CPU, so both scales use them and differ
only in the number of training seeds."""


import dagster as dg

from assets.resources import WarehouseResource
from assets.results.core import Experiment, ResultConfig, record_claims

DELIBERATION = Experiment(
    name="ep_deliberation_claim",
    paper="Engagement Process",
    description="Engagement Process Table 1: EP-trained vs step-trained deliberation under "
                "real-time evaluation (single and sequential tasks).",
    scales={"cpu": {"ep_deliberation_claim": {"config": {"training_seeds": 3}}},
            "paper": {"ep_deliberation_claim": {"config": {"training_seeds": 5}}}},
)
PATROL = Experiment(
    name="ep_patrol_claim",
    paper="Engagement Process",
    description="Engagement Process Table 2: EP vs Loop (module level) and vs PatchPro (state "
                "level, phase depths 2 and 3) on hierarchical patrol with interruptions.",
    scales={"cpu": {"ep_patrol_claim": {"config": {"training_seeds": 3}}},
            "paper": {"ep_patrol_claim": {"config": {"training_seeds": 5}}}},
)


class ToyClaimConfig(ResultConfig):
    training_seeds: int = 3  # learned policies trained once per seed; pairs = (seed, episode)
    train_episodes: int | None = None  # None: the paper configuration's
    eval_episodes: int | None = None  # None: the paper configuration's
    n_boot: int = 5000


@dg.asset(name=DELIBERATION.name, group_name="results", kinds={"python"},
          description=DELIBERATION.description)
def ep_deliberation_claim(context: dg.AssetExecutionContext, config: ToyClaimConfig,
                          warehouse: WarehouseResource) -> dg.MaterializeResult:
    from eval.engagement.claims import deliberation_claims

    def compute():
        rows = []
        for setting in ("single", "sequential"):
            context.log.info(f"Table 1, {setting} task: training EP and step agents on "
                             f"{config.training_seeds} seed(s) ...")
            rows += deliberation_claims(setting, training_seeds=config.training_seeds,
                                        train_episodes=config.train_episodes,
                                        eval_episodes=config.eval_episodes, n_boot=config.n_boot)
        return rows

    return record_claims(context, warehouse.get(), DELIBERATION, config.scale, compute,
                         config.model_dump())


@dg.asset(name=PATROL.name, group_name="results", kinds={"python"},
          description=PATROL.description)
def ep_patrol_claim(context: dg.AssetExecutionContext, config: ToyClaimConfig,
                    warehouse: WarehouseResource) -> dg.MaterializeResult:
    from eval.engagement.claims import PATROL_SETTINGS, patrol_claims

    def compute():
        rows = []
        for setting in PATROL_SETTINGS:
            context.log.info(f"Table 2, {setting}: training EP on {config.training_seeds} "
                             "seed(s) ...")
            rows += patrol_claims(setting, training_seeds=config.training_seeds,
                                  train_episodes=config.train_episodes,
                                  eval_episodes=config.eval_episodes, n_boot=config.n_boot)
        return rows

    return record_claims(context, warehouse.get(), PATROL, config.scale, compute,
                         config.model_dump())


EXPERIMENTS = [DELIBERATION, PATROL]
ASSETS = [ep_deliberation_claim, ep_patrol_claim]
