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

*The errors both arms meet.* Counting the errors each arm runs into would compare unlike
units: the ρ = 0.1 arm is trained to imitate injected steps, so it writes failing cells more
often, and which samples err is then caused by the treatment. Instead the evaluation injects
the errors itself (``inject_first_cell``): the first code cell of every sample is not run and
gets the observation of one of MOSAIC's environment failures (Φ_env, §2.1 Eq. 4, through the
synthesis loop's own injection code), drawn from the sample's seed and problem, so both arms
meet the same failure on the same sample of the same problem. A sample *recovers* when its
final answer is still correct (MOSAIC's records call a trajectory ``recovered`` when it is
correct despite a perturbation). The unit is the held-out problem, paired across the arms; its
score is the share of its k samples that recovered, over ALL k samples: a sample that wrote no
cell never met the error and scores 0, so the denominator (k samples of every held-out
problem) is fixed before either arm is trained. How many samples met the error, wrote no cell,
or ran a later cell without an error (the other reading of "recovery") is in the metadata.

*The task.* At ``scale: cpu`` both arms learn two-digit arithmetic with a Python cell
(``source``/``benchmark`` ``builtin:arith``: "What is 47 times 23?", ``training.data``): the
training and the held-out problems are disjoint slices of one draw seeded by the claim's
``seed``. On GSM8K the 135M student almost never wrote a working program (1 of 160 samples
right per arm), so no recovery could show; after the SFT here it writes a cell and answers
most held-out problems right when nothing is injected (pilot numbers in ``RECOVERY.limits``).
MOSAIC's scripted agents (``pipelines.mosaic.scripted``) synthesize both arms' data from the
problems' worked solutions; with ρ = 0.1 about one problem in ten holds an injected failure
followed by the manager's correction and a rerun of the cell.

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
from pipelines.mosaic import METHOD_BASELINE, METHOD_MOSAIC, ProblemInput
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


ARITH = "builtin:arith"  # two-digit arithmetic (training.data.builtin_arith), drawn per seed
ARITH_LABEL = "arith"  # its partitions' and benchmark's name


class RecoveryClaimConfig(ResultConfig):
    """The recovery experiment, end to end: synthesis of both arms' data, SFT, evaluation.
    ``seed`` is the draw's one seed (the built-in problems, synthesis, training and the
    evaluation's sampling and injected failures; the nested ``sampling.seed`` must be left
    unset or equal it). ``source`` and ``benchmark`` are MOSAIC sources / benchmarks of the
    warehouse, or ``builtin:arith``: the first ``limit`` problems of one seeded draw train,
    the next ``eval_limit`` are held out."""

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
            # two-digit arithmetic with a Python cell, which the 135M student learns in a few
            # SFT steps (on GSM8K it wrote almost no working program: 1 of 160 samples right
            # per arm). The embedded model cannot synthesize (3 of 32 GSM8K problems complete,
            # none with an injected failure): the scripted agents play manager and actor, so
            # the arms' data differ only where MOSAIC's own injection fired. Training and
            # held-out problems are disjoint slices of one draw seeded by `seed`.
            "source": ARITH, "benchmark": ARITH, "synthesis_agents": "scripted",
            # (sizes for about 12 minutes on an idle 2-core machine: ~9 s per SFT step of 4
            # rows on one thread, ~35 s to start each arm's server; one sample per problem,
            # so the unit count is the problem count; six turns leave room for a failing
            # rerun of the cell after the injected failure)
            "limit": 128, "synthesis_max_steps": 6, "only_correct": True,
            "recipe": "tir_sft_preserved.cpu", "train_steps": 20,
            "eval_limit": 80, "sampling": {"k": 1, "temperature": 0.7, "max_tokens": 96},
            "max_turns": 6}}},
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
            "cpu": "the task is two-digit arithmetic with one Python cell, not competition "
                   "math: on GSM8K the 135M student answered 1 of 160 tool-mode samples right "
                   "per arm, so no recovery could show. The data comes from scripted agents "
                   "(a manager that walks each worked solution's calculation, an actor that "
                   "codes it), not from an LLM. At rho 0.1 with one cell per problem about "
                   "one training problem in ten holds an injected failure and its correction "
                   "(5 of 96 in a pilot), and 20 SFT steps of 4 rows see only a few of them. "
                   "The injected evaluation errors are MOSAIC's environment failures only "
                   "(a generation anomaly mutates the model's own code, so two models could "
                   "not be given the same one). Pilot of one arm (rho 0.1, 32 steps) without "
                   "injection: a cell in 24 of 24 held-out samples, 23 right"},
)


def arith_problems(n_train: int, n_eval: int, seed: int
                   ) -> tuple[list[ProblemInput], list[dict[str, Any]]]:
    """(training problems, held-out problems): the first ``n_train`` and the next ``n_eval``
    problems of one draw of ``training.data.builtin_arith`` with ``seed`` (its problems are
    distinct, so the slices share no problem); the worked solution is MOSAIC's reference."""
    from training.data import builtin_arith

    rows = builtin_arith(n_train + n_eval, seed)
    train = [ProblemInput(r["problem_id"], ARITH_LABEL, r["problem"], r["answer"], r["solution"])
             for r in rows[:n_train]]
    return train, [dict(r, source=ARITH_LABEL) for r in rows[n_train:]]


def _counts(config: RecoveryClaimConfig) -> tuple[int, int]:
    """How many built-in problems train and how many are held out (0 where the warehouse's
    problems are used); dg.Failure when a built-in side has no number."""
    sizes = []
    for field, name, used in (("limit", config.source, config.source == ARITH),
                              ("eval_limit", config.benchmark, config.benchmark == ARITH)):
        value = getattr(config, field)
        if used and (value is None or value < 1):
            raise dg.Failure(f"{field} must be a number of problems (>= 1) with {name}, got "
                             f"{value!r}")
        sizes.append(value if used else 0)
    return sizes[0], sizes[1]


def _training_inputs(config: RecoveryClaimConfig) -> tuple[str, list[ProblemInput] | None]:
    """(the synthesis' source name, its problems): the built-in training slice, or None to
    read ``config.source`` from the warehouse."""
    if config.source != ARITH:
        return config.source, None
    n_train, n_eval = _counts(config)
    return ARITH_LABEL, arith_problems(n_train, n_eval, config.seed)[0]


def _heldout(config: RecoveryClaimConfig, wh: Any) -> tuple[Any, list[dict[str, Any]]]:
    """(benchmark, problems) of the held-out evaluation."""
    from eval.benchmarks import MATH_INSTRUCTION, Benchmark
    from eval.benchmarks import get as get_benchmark

    if config.benchmark == ARITH:
        n_train, n_eval = _counts(config)
        bench = Benchmark(ARITH_LABEL, ARITH_LABEL, "math", MATH_INSTRUCTION)
        return bench, arith_problems(n_train, n_eval, config.seed)[1]
    bench = get_benchmark(config.benchmark)
    problems = wh.read("problems", partition=bench.source).to_pylist()
    if not problems:
        raise dg.Failure(f"no problems for {bench.name}: materialize `{bench.source}_problems` "
                         "and `problems` first")
    return bench, problems


def _synthesis_config(config: RecoveryClaimConfig, rho: float) -> MosaicSynthesisConfig:
    return MosaicSynthesisConfig(limit=config.limit, split=config.split,
                                 max_steps=config.synthesis_max_steps, rho=rho, seed=config.seed,
                                 concurrency=config.concurrency, agents=config.synthesis_agents)


def _eval_config(config: RecoveryClaimConfig) -> Any:
    """The held-out evaluation's ``EvalConfig``: tool mode with the arms' rendering and an
    environment failure injected into each sample's first cell, sampled by ``config.sampling``
    with the draw's one seed (which also draws the failures)."""
    from eval.modes import build_mode

    if config.sampling.seed not in (0, config.seed):
        raise dg.Failure(f"sampling.seed ({config.sampling.seed}) differs from seed "
                         f"({config.seed}): the claim samples with its one seed; set `seed`")
    try:
        mode = build_mode(mode="tool", context_policy=config.rendering,
                          max_turns=config.max_turns, inject_first_cell=True)
    except ValueError as exc:
        raise dg.Failure(description=f"bad evaluation settings: {exc}") from exc
    sampling = config.sampling.model_copy(update={"seed": config.seed})
    return sampling.eval_config(mode=mode, limit=config.eval_limit)


def _evaluate(context: dg.AssetExecutionContext, config: RecoveryClaimConfig, ck: str,
              path: str, wh: Any, llm: LLMResource, grader: GraderResource,
              sandbox: SandboxResource) -> list[dict[str, Any]]:
    """Serve one arm's checkpoint and evaluate it in tool mode, with injected failures, on
    the held-out slice through the one recorded-evaluation path (rows under
    ``<benchmark>|<checkpoint>``)."""
    from functools import partial

    from eval.models import ModelSpec
    from eval.recorded import Evaluation, evaluate_recorded

    bench, problems = _heldout(config, wh)
    cfg = _eval_config(config)
    spec = ModelSpec(model_id=ck, kind="local", path=path, served_model=ck, checkpoint_id=ck)
    n = min(len(problems), config.eval_limit or len(problems))
    context.log.info(f"evaluating {ck} in tool mode, first cells failing, on {n} {bench.name} "
                     f"problems x {cfg.k}")
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
    source, inputs = _training_inputs(config)
    synthesized = {}
    for rho in (config.rho, REFERENCE_RHO):
        rows, summary, _ = synthesize_source(context, _synthesis_config(config, rho), llm, wh,
                                             grader, sandbox, METHOD_MOSAIC, source,
                                             partition_suffix=suffix, inputs=inputs)
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
        _counts(config)
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
    facts.update(training_source=config.source, heldout_benchmark=config.benchmark,
                 shared_training_problems=len(data.shared),
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
