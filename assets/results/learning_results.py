"""Result asset of weft's own learning check (the end of `make demo`): did SFT then GRPO make
the embedded model better on problems it never trained on?

``learning_claim`` takes the latest ``sft_checkpoint`` and ``grpo_checkpoint`` (the GRPO run must
have started from that SFT checkpoint), draws held-out one-digit arithmetic problems that no
checkpoint of the lineage trained on (``training.heldout``), evaluates the base model, the SFT
checkpoint and the trained checkpoint on them through the one recorded-evaluation path (their
``eval_samples``, ``eval_scores``, ``runs`` and ``llm_calls`` rows land under benchmark
``arith1_heldout``) and judges two claims from those samples: the trained model beats the base
model, and GRPO improves on its SFT start (per-problem avg@k, paired bootstrap).

There is no paper setup: the job ``learning_claim_job`` runs at ``scale: cpu`` only.
"""

import dagster as dg

from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.results.experiments import Experiment, ResultConfig, evaluate_models, record_claims
from assets.sampling import SamplingConfig
from assets.training import latest_checkpoint
from eval.metrics import correct_by_problem
from eval.recorded import Evaluation
from training.heldout import (
    DEMO_SFT_RECIPE,
    HELDOUT_MAX_TOKENS,
    HELDOUT_TEMPERATURE,
    LEARNING_PAPER,
    checkpoint_chain,
    checkpoint_problems,
    heldout_arith,
    heldout_benchmark,
    learning_claims,
)
from training.model_path import serving_spec

DEMO_GRPO_RECIPE = "demo_grpo"
LEARNING = Experiment(
    name="learning_claim",
    paper=LEARNING_PAPER,
    description="The demo's learning check: base vs SFT vs SFT+GRPO on held-out one-digit "
                "arithmetic (avg@k, paired over problems).",
    upstream=("sft_checkpoint", "grpo_checkpoint"),
    scales={"cpu": {"sft_checkpoint": {"config": {"recipe": DEMO_SFT_RECIPE}},
                    "grpo_checkpoint": {"config": {"recipe": DEMO_GRPO_RECIPE}}}},
    scale_names=("cpu",),
    limits={"cpu": "135M embedded model, a few CPU steps: the CI is wide"},
)
ARMS = ("base", "sft", "sft+grpo")


class LearningClaimConfig(ResultConfig):
    heldout_n: int = 48  # held-out problems (no checkpoint of the lineage trained on them)
    # avg@k at the GRPO sampling temperature, as long as GRPO's completions
    sampling: SamplingConfig = SamplingConfig(k=2, temperature=HELDOUT_TEMPERATURE, top_p=1.0,
                                              max_tokens=HELDOUT_MAX_TOKENS)
    max_concurrency: int = 8
    n_boot: int = 10_000


def _arms(context: dg.AssetExecutionContext, wh, config: LearningClaimConfig):
    """({arm: ModelSpec}, held-out rows) of the latest SFT and GRPO checkpoints."""
    _, sft_id = latest_checkpoint(context, "sft_checkpoint")
    trained_path, trained_id = latest_checkpoint(context, "grpo_checkpoint")
    try:
        chain = checkpoint_chain(wh, trained_id)
        if sft_id not in [r["checkpoint_id"] for r in chain]:
            raise ValueError(f"the latest grpo_checkpoint ({trained_id}) was not trained from "
                             f"the latest sft_checkpoint ({sft_id}); materialize both again")
        sft = next(r for r in chain if r["checkpoint_id"] == sft_id)
        specs = {"base": serving_spec(chain[-1]["base_model"] or "embedded"),
                 "sft": serving_spec(sft["path"], sft_id),
                 "sft+grpo": serving_spec(trained_path, trained_id)}
        rows = heldout_arith(config.heldout_n, exclude=checkpoint_problems(chain))
    except ValueError as exc:
        raise dg.Failure(description=str(exc)) from exc
    return specs, rows


@dg.asset(name=LEARNING.name, group_name="results", deps=list(LEARNING.upstream),
          kinds={"python"}, description=LEARNING.description)
def learning_claim(context: dg.AssetExecutionContext, config: LearningClaimConfig,
                   warehouse: WarehouseResource, llm: LLMResource,
                   grader: GraderResource) -> dg.MaterializeResult:
    wh = warehouse.get()
    specs, rows = _arms(context, wh, config)
    cfg = config.sampling.eval_config()
    evaluations = [Evaluation(specs[a].model_id, cfg, a, checkpoint_id=specs[a].checkpoint_id
                              or None) for a in ARMS]
    done = evaluate_models(context, specs, evaluations, heldout_benchmark(), rows,
                           config.model_dump(), wh, llm, grader,
                           max_tokens=cfg.max_tokens, max_concurrency=config.max_concurrency)
    scores = {a: correct_by_problem(d.result.samples) for a, d in zip(ARMS, done)}
    models = {a: specs[a].model_id for a in ARMS}
    return record_claims(
        context, wh, LEARNING, config.scale,
        lambda: learning_claims(scores["base"], scores["sft"], scores["sft+grpo"], k=cfg.k,
                                temperature=cfg.temperature, n_boot=config.n_boot),
        {**config.model_dump(), "models": models, "heldout_problems": len(rows)},
        derived=("models", "heldout_problems"))


EXPERIMENTS = [LEARNING]
ASSETS = [learning_claim]
