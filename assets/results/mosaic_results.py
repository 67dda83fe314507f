"""Result assets of the DeepTool paper's MOSAIC claims: Table 2 (synthesis) and the robustness
that failure injection is meant to teach (§2.1, §3.6).

``mosaic_synthesis_claim`` — DeepTool §3.6, Table 2: MOSAIC's synthetic trajectories are
correct more often than the baseline synthesizer's (standard prompting, no manager, no
injection) and take more turns. Each arm synthesizes one trajectory per problem of the same
deterministic slice of one source (``mosaic_trajectories`` at ρ = 0.1, the SFT setting of §3.1,
and ``mosaic_baseline_trajectories``), so the two are paired by problem: per problem, ``correct``
(0/1) and ``num_turns`` (steps of the attempt, a failed attempt counting its valid prefix —
every problem stays paired, and a synthesis that breaks early is charged for it). Both parts
are ``better`` claims.

*Why the result asset synthesizes its arms itself.* The two synthesis assets are partitioned
by source, and a claim's job (``assets.results.experiments.claim_job``) switches scale with a config
mapping, which Dagster refuses on a partitioned job (and a job cannot mix partitioned and
unpartitioned assets). So the result asset is unpartitioned and runs both arms itself for each
configured source, through the same code the assets run
(``assets.mosaic.synthesize_source``: one recorded run per arm, rows in the same tables under
the assets' partitions suffixed ``|mosaic_synthesis_claim``, so the assets' own rows are never
replaced), then judges each source: one pair of ``claims`` rows per source, section
``Table 2 (<source>)``, like Table 2's one column per dataset. ``synthesize: false`` judges
the newest rows the two assets wrote for those sources instead (materialize them per partition
first). The paper's five sets (OpenR1-Math-220k's Aops, CN contest, inequalities, number
theory, olympiads) are not weft sources; the claim is judged on weft's MOSAIC sources.

``mosaic_recovery_claim`` — DeepTool §1 and §3.6 claim that injected failures during synthesis
(Φ_gen / Φ_env with probability ρ, §2.1, Algorithm 1) teach the fine-tuned model to rectify
errors "through corrective reasoning rather than terminating upon failure". The paper gives no
number and no ρ ablation for this (its case study, App. A.3, compares with the w/o-thinking
model), so the experiment here is ours: from ONE start (the recipe's model), two TIR SFT arms
with the same recipe, seed and step count, trained on MOSAIC trajectories of the SAME problems
synthesized with ρ = 0.1 (treatment, §3.1's SFT setting) and with ρ = 0 (reference); both
evaluated in tool mode (``eval.modes.tool``) on the same held-out problems.

*Recovers after an interpreter error* (our operationalisation of §3.6's "rectifying errors
... rather than terminating upon failure", and of ``recovered`` in MOSAIC's own records:
correct despite a failure): a sample recovers when its run had at least one interpreter error
(``tool_errors >= 1`` in ``eval_samples``: an exception, a timeout or a memory limit in the
sandbox) and its final answer is still correct. Each arm's *recovery rate* is the ratio of
aggregates over the held-out problems: recovering samples / erroring samples, so a problem
weighs by how many erroring samples it has and a problem with none in an arm adds nothing to
that arm's rate (there is nothing to recover from) but stays in the resampling. The
difference of the two rates gets its CI from the paired bootstrap over problems
(``eval.claims.judge_ratio``: both arms' rates recomputed from the same resampled problems).
This uses every held-out problem; pairing only the problems that erred in both arms would
leave no pair at all when the arms err on different problems. An arm with no erroring
sample at all has no rate, and the asset fails and says so instead of inventing a value.

The claims are judged by ``eval.mosaic_claims``; the recovery arms' data and overrides come
from ``training.mosaic_recovery``; the held-out evaluation samples with ``sampling``
(``assets.sampling``).
"""

from typing import Any

import dagster as dg

from assets.mosaic import MOSAIC_SOURCES, MosaicSynthesisConfig, synthesize_source
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.results.experiments import (
    Experiment,
    ResultConfig,
    record_claims,
    require_paper_llm,
)
from assets.results.paper_setups import DEEPSEEK
from assets.sampling import SamplingConfig
from assets.sandbox_resource import SandboxResource
from assets.training import TrainerLauncher, check_recipe, launch_arm
from eval.mosaic_claims import PAPER, REFERENCE_RHO, SFT_RHO, recovery_claim_row, synthesis_claims
from pipelines.mosaic import METHOD_BASELINE, METHOD_MOSAIC
from training.mosaic_recovery import (
    RecoveryData,
    RecoveryDesignError,
    arm_data_file,
    arm_overrides,
    check_same_start,
    check_settings,
    training_data,
)
from warehouse.partitions import SEPARATOR

# ---- Table 2: synthesis -----------------------------------------------------------------------

SYNTHESIS = Experiment(
    name="mosaic_synthesis_claim",
    # plumbing at cpu scale: the statement needs a capable model (see limits["cpu"])
    plumbing={"cpu": ("*",)},
    paper=PAPER,
    description="DeepTool Table 2: MOSAIC (ρ = 0.1) vs the baseline synthesizer on the same "
                "problems of each source: synthetic trajectory accuracy and average turns, "
                "paired by problem.",
    scales={
        "cpu": {"mosaic_synthesis_claim": {"config": {
            "sources": ["gsm8k"], "limit": 24, "max_steps": 4, "concurrency": 4}}},
        "paper": {"mosaic_synthesis_claim": {"config": {
            # §3.1: 8k SFT instances sampled from OpenR1-Math-220k (Table 2's per-set size is
            # not stated: up to 8k per source here); App. A.1: DeepSeek-V3.2 synthesizes, so
            # point the `llm` resource (manager) and actor_base_url/actor_model at such an
            # endpoint. T_max and the sampling temperatures are not stated: weft's defaults.
            "sources": ["gsm8k", "math", "deepscaler", "dapo_math_17k", "reasoning_gym"],
            "limit": 8000, "max_steps": 6, "concurrency": 32}}},
    },
    paper_llm=DEEPSEEK, paper_llm_section="DeepTool App. A.1",
    limits={"cpu": "the embedded 135M model plays manager, actor and baseline on 24 gsm8k "
                   "problems: few of its trajectories are complete or correct, so accuracy "
                   "differences are small and the CIs wide; the paper's synthesizer is "
                   "DeepSeek-V3.2",
            "paper": "weft has no OpenR1-Math-220k source: the claim is judged on weft's "
                     "MOSAIC sources, not on Table 2's five sets; T_max and the synthesis "
                     "temperatures are not stated (weft's defaults); one endpoint serves the "
                     "manager and, unless actor_base_url is set, the actor"},
)


class SynthesisClaimConfig(ResultConfig):
    """Both arms synthesize the same problems (the slice ``limit`` of ``split`` of each
    source) with the same T_max, seed, actor and sampling (the synthesis assets' defaults);
    only MOSAIC has the manager and injection (ρ = ``rho``, DeepTool §3.1: 0.1 for the SFT
    data)."""

    sources: list[str] = ["gsm8k"]
    synthesize: bool = True  # false: judge the newest rows the synthesis assets wrote
    split: str = "train"
    limit: int | None = 24
    max_steps: int = 4
    rho: float = SFT_RHO
    seed: int = 0
    concurrency: int = 4
    actor_base_url: str = ""
    actor_model: str = ""
    n_boot: int = 10_000


def _synthesis_arms(context: dg.AssetExecutionContext, config: SynthesisClaimConfig, wh: Any,
                    llm: LLMResource, grader: GraderResource, sandbox: SandboxResource,
                    source: str) -> None:
    cfg = MosaicSynthesisConfig(limit=config.limit, split=config.split,
                                max_steps=config.max_steps, rho=config.rho, seed=config.seed,
                                concurrency=config.concurrency,
                                actor_base_url=config.actor_base_url,
                                actor_model=config.actor_model)
    for method in (METHOD_MOSAIC, METHOD_BASELINE):
        synthesize_source(context, cfg, llm, wh, grader, sandbox, method, source,
                          partition_suffix=f"{SEPARATOR}{SYNTHESIS.name}")


@dg.asset(name=SYNTHESIS.name, group_name="results", kinds={"python"},
          description=SYNTHESIS.description)
def mosaic_synthesis_claim(context: dg.AssetExecutionContext, config: SynthesisClaimConfig,
                           warehouse: WarehouseResource, llm: LLMResource,
                           grader: GraderResource,
                           sandbox: SandboxResource) -> dg.MaterializeResult:
    if config.synthesize:
        require_paper_llm(SYNTHESIS, config.scale, llm)
    wh = warehouse.get()
    unknown = [s for s in config.sources if s not in MOSAIC_SOURCES]
    if not config.sources or unknown:
        raise dg.Failure(f"sources must be a non-empty list of MOSAIC sources {MOSAIC_SOURCES}; "
                         f"got {list(config.sources)}")

    def compute() -> list[dict[str, Any]]:
        rows = []
        for source in config.sources:
            if config.synthesize:
                _synthesis_arms(context, config, wh, llm, grader, sandbox, source)
            suffix = f"{SEPARATOR}{SYNTHESIS.name}" if config.synthesize else ""
            rows += synthesis_claims(wh, source, config.rho, partition_suffix=suffix,
                                     n_boot=config.n_boot)
        return rows

    return record_claims(context, wh, SYNTHESIS, config.scale, compute, config.model_dump())


# ---- robustness: recovery after an interpreter error ------------------------------------------


class RecoveryClaimConfig(ResultConfig):
    """The recovery experiment, end to end: synthesis of both arms' data, SFT, evaluation.
    ``seed`` is the draw's one seed (synthesis, training and the evaluation's sampling; the
    nested ``sampling.seed`` must be left unset or equal it)."""

    # synthesis (both arms: the same problems, T_max, seed and agents; only ρ differs)
    source: str = "gsm8k"
    split: str = "train"
    limit: int | None = 32
    synthesis_max_steps: int = 4
    # who plays MOSAIC's manager and actor: "llm" (the `llm` resource, the paper's setting) or
    # "scripted" (pipelines.mosaic.scripted: rule-based agents that walk the reference's
    # calculations; the injection, sandbox and loop are the same)
    synthesis_agents: str = "llm"
    rho: float = SFT_RHO
    seed: int = 0
    concurrency: int = 4
    only_correct: bool = True  # SFT on trajectories with a correct answer only (as tir_sft_dataset)
    # SFT (both arms: the same recipe, start, seed and steps)
    recipe: str = "tir_sft_preserved.cpu"
    rendering: str = "state_preserved"
    train_steps: int = 8
    overrides: list[str] = []  # key=value for both arms
    # held-out evaluation in tool mode (both arms: the same problems, samples and decoding);
    # max_tokens is per turn
    benchmark: str = "gsm8k"
    eval_limit: int | None = 40
    sampling: SamplingConfig = SamplingConfig(k=4, temperature=0.7, top_p=1.0, max_tokens=256)
    max_turns: int = 4
    max_concurrency: int = 8
    n_boot: int = 10_000


RECOVERY = Experiment(
    name="mosaic_recovery_claim",
    paper=PAPER,
    description="DeepTool §2.1/§3.6 robustness: TIR SFT on MOSAIC trajectories with injected "
                "failures (ρ = 0.1) vs without (ρ = 0), same problems, start, seed and steps; "
                "recovery after an interpreter error on held-out problems in tool mode.",
    scales={
        "cpu": {"mosaic_recovery_claim": {"config": {
            # the embedded model cannot synthesize (3 of 32 problems complete, none with an
            # injected failure, in one run): the scripted agents play manager and actor, so
            # the arms differ only in the injection, which is MOSAIC's own
            "synthesis_agents": "scripted", "limit": 96, "synthesis_max_steps": 6,
            "only_correct": True, "recipe": "tir_sft_preserved.cpu", "train_steps": 32,
            "eval_limit": 40, "sampling": {"k": 4, "max_tokens": 256}, "max_turns": 4}}},
        "paper": {"mosaic_recovery_claim": {"config": {
            # §3.1: 8k SFT instances at ρ = 0.1 (OpenR1-Math-220k is not a weft source: the
            # source below stands in), synthesized by DeepSeek-V3.2 (App. A.1: the `llm`
            # resource); App. A.1 Table 3 (thinking SFT): Qwen2.5-7B-Instruct (§3.1), global
            # batch 64, lr 1e-5, cosine, warmup 0.1, max length 15,000; 5 epochs of ~8k
            # trajectories x ~4 steps / 64 ≈ 2,500 steps, fixed for both arms
            "source": "deepscaler", "limit": 8000, "synthesis_max_steps": 6,
            "only_correct": True, "concurrency": 32,
            "recipe": "tir_sft_preserved", "train_steps": 2500,
            "overrides": ["model_name_or_path=Qwen/Qwen2.5-7B-Instruct",
                          "per_device_train_batch_size=8", "gradient_accumulation_steps=8",
                          "learning_rate=1.0e-5", "lr_scheduler_type=cosine",
                          "warmup_steps=0.1", "max_length=15000"],
            # §3.1: MATH500 among the benchmarks, average@8; Table 4's 6,000-token completion
            # limit per turn; temperature and turn limit are not stated
            "benchmark": "math500", "eval_limit": None,
            "sampling": {"k": 8, "temperature": 0.7, "max_tokens": 6000}, "max_turns": 8,
            "max_concurrency": 64}}},
    },
    paper_llm=DEEPSEEK, paper_llm_section="DeepTool App. A.1",
    limits={"paper": "the paper reports no ρ ablation, so this experiment is weft's; "
                     "OpenR1-Math-220k is not a weft source (deepscaler stands in); the "
                     "evaluation temperature and turn limit are not stated (0.7 and 8 here); "
                     "one benchmark (MATH500) of §3.1's seven",
            "cpu": "the data comes from scripted agents (a manager that walks the gsm8k "
                   "reference's calculations, an actor that codes them), not from an LLM: "
                   "with the embedded model as manager and actor, 3 of 32 problems got a "
                   "complete trajectory and none held an injected failure. The student is the "
                   "135M model after 32 SFT steps, which rarely answers gsm8k right at all: "
                   "in each of two runs each arm answered 1 of 160 tool-mode samples right, "
                   "14 or 16 (rho 0.1) and 2 (rho 0) samples hit an interpreter error and none "
                   "recovered, so both recovery rates were 0"},
)


def _synthesis_config(config: RecoveryClaimConfig, rho: float) -> MosaicSynthesisConfig:
    return MosaicSynthesisConfig(limit=config.limit, split=config.split,
                                 max_steps=config.synthesis_max_steps, rho=rho, seed=config.seed,
                                 concurrency=config.concurrency, agents=config.synthesis_agents)


def _eval_config(config: RecoveryClaimConfig) -> Any:
    """The held-out evaluation's ``EvalConfig``: tool mode with the arms' rendering, sampled
    by ``config.sampling`` with the draw's one seed."""
    from eval.modes import build_mode

    if config.sampling.seed not in (0, config.seed):
        raise dg.Failure(f"sampling.seed ({config.sampling.seed}) differs from seed "
                         f"({config.seed}): the claim samples with its one seed; set `seed`")
    try:
        mode = build_mode(mode="tool", context_policy=config.rendering,
                          max_turns=config.max_turns)
    except ValueError as exc:
        raise dg.Failure(description=f"bad evaluation settings: {exc}") from exc
    sampling = config.sampling.model_copy(update={"seed": config.seed})
    return sampling.eval_config(mode=mode, limit=config.eval_limit)


def _evaluate(context: dg.AssetExecutionContext, config: RecoveryClaimConfig, ck: str,
              path: str, wh: Any, llm: LLMResource, grader: GraderResource,
              sandbox: SandboxResource) -> list[dict[str, Any]]:
    """Serve one arm's checkpoint and evaluate it in tool mode on the held-out slice through
    the one recorded-evaluation path (rows under ``<benchmark>@<checkpoint>``)."""
    from functools import partial

    from eval.benchmarks import get as get_benchmark
    from eval.models import ModelSpec
    from eval.recorded import Evaluation, evaluate_recorded

    bench = get_benchmark(config.benchmark)
    problems = wh.read("problems", partition=bench.source).to_pylist()
    if not problems:
        raise dg.Failure(f"no problems for {bench.name}: materialize `{bench.source}_problems` "
                         "and `problems` first")
    cfg = _eval_config(config)
    spec = ModelSpec(model_id=ck, kind="local", path=path, served_model=ck, checkpoint_id=ck)
    n = min(len(problems), config.eval_limit or len(problems))
    context.log.info(f"evaluating {ck} in tool mode on {n} {bench.name} problems x {cfg.k}")
    (done,) = evaluate_recorded(
        {ck: spec}, [Evaluation(ck, cfg, ck, checkpoint_id=ck)], bench=bench, problems=problems,
        wh=wh, run_id=context.run_id, config=config.model_dump(),
        make_client=partial(llm.client_for, max_tokens=cfg.max_tokens,
                            requests=n * cfg.k * config.max_turns, progress=context.log.info,
                            max_concurrency=config.max_concurrency),
        pool_factory=grader.pool, sandbox=sandbox.get_pool(), progress=context.log.info)
    return done.result.samples


def _synthesized(context: dg.AssetExecutionContext, config: RecoveryClaimConfig, wh: Any,
                 llm: LLMResource, grader: GraderResource,
                 sandbox: SandboxResource) -> dict[float, list[dict[str, Any]]]:
    """Both arms' MOSAIC trajectories (ρ = ``config.rho`` and ρ = 0) of the same problems,
    kept apart from the assets' rows; by ρ."""
    suffix = f"{SEPARATOR}{RECOVERY.name}"
    synthesized = {}
    for rho in (config.rho, REFERENCE_RHO):
        rows, summary, _ = synthesize_source(context, _synthesis_config(config, rho), llm, wh,
                                             grader, sandbox, METHOD_MOSAIC, config.source,
                                             partition_suffix=suffix)
        synthesized[rho] = rows
        context.log.info(f"rho={rho:g}: {summary['complete']} complete, {summary['correct']} "
                         f"correct, {summary['perturbed_steps']} perturbed steps")
    return synthesized


def _arms(config: RecoveryClaimConfig, data: RecoveryData) -> dict[str, list[str]]:
    """Each arm's overrides (treatment first), both checked to resolve from one start."""
    arms, configs = {}, {}
    for label, rows in ((f"rho{config.rho:g}", data.treatment_rows),
                        ("rho0", data.reference_rows)):
        arms[label] = arm_overrides(config.overrides, arm_data_file(rows, RECOVERY.name, label),
                                    train_steps=config.train_steps, seed=config.seed)
        configs[label] = check_recipe("sft", config.recipe, arms[label])
    try:
        check_same_start(configs)
    except RecoveryDesignError as exc:
        raise dg.Failure(str(exc)) from exc
    return arms


def run_recovery_experiment(context: dg.AssetExecutionContext, config: RecoveryClaimConfig,
                            wh: Any, llm: LLMResource, grader: GraderResource,
                            sandbox: SandboxResource, trainer: TrainerLauncher
                            ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Synthesize both arms' data, train both arms, evaluate both; (claims row, facts)."""
    try:
        check_settings(config.rendering, config.rho)
        _eval_config(config)  # bad evaluation settings fail before anything runs
        synthesized = _synthesized(context, config, wh, llm, grader, sandbox)
        data = training_data(synthesized[config.rho], synthesized[REFERENCE_RHO],
                             rho=config.rho, rendering=config.rendering,
                             only_correct=config.only_correct)
    except RecoveryDesignError as exc:
        raise dg.Failure(str(exc)) from exc
    samples = {}
    for label, overrides in _arms(config, data).items():
        context.log.info(f"SFT arm {label}: {config.recipe}, {config.train_steps} steps")
        ck, path, _ = launch_arm(context, trainer, wh, label, config.recipe, overrides,
                                 kind="sft")
        samples[label] = (ck, _evaluate(context, config, ck, path, wh, llm, grader, sandbox))
    (treat_ck, treat_samples), (ref_ck, ref_samples) = samples[f"rho{config.rho:g}"], \
        samples["rho0"]
    row, facts = recovery_claim_row(ref_samples, treat_samples, rho=config.rho,
                                    n_boot=config.n_boot)
    facts.update(shared_training_problems=len(data.shared),
                 injected_steps_in_treatment=data.injected,
                 sft_rows_treatment=len(data.treatment_rows),
                 sft_rows_reference=len(data.reference_rows),
                 treatment_checkpoint=treat_ck, reference_checkpoint=ref_ck)
    return row, facts


@dg.asset(name=RECOVERY.name, group_name="results", kinds={"python", "pytorch"},
          description=RECOVERY.description)
def mosaic_recovery_claim(context: dg.AssetExecutionContext, config: RecoveryClaimConfig,
                          warehouse: WarehouseResource, llm: LLMResource,
                          grader: GraderResource, sandbox: SandboxResource,
                          trainer: TrainerLauncher) -> dg.MaterializeResult:
    if config.synthesis_agents == "llm":
        require_paper_llm(RECOVERY, config.scale, llm)
    wh = warehouse.get()
    facts: dict[str, Any] = {}

    def compute() -> list[dict[str, Any]]:
        row, found = run_recovery_experiment(context, config, wh, llm, grader, sandbox, trainer)
        facts.update(found)
        return [row]

    result = record_claims(context, wh, RECOVERY, config.scale, compute, config.model_dump())
    return dg.MaterializeResult(metadata={**result.metadata,
                                          "pairing": dg.MetadataValue.json(facts)})


EXPERIMENTS = [SYNTHESIS, RECOVERY]
ASSETS = [mosaic_synthesis_claim, mosaic_recovery_claim]
