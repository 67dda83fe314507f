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
by source, and a claim's job (``assets.results.core.claim_job``) switches scale with a config
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
"""

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from assets.mosaic import (
    TABLE_BASELINE,
    TABLE_MOSAIC,
    MosaicSynthesisConfig,
    mosaic_partition,
    synthesize_source,
)
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.results.core import Experiment, ResultConfig, record_claims
from assets.sandbox_resource import SandboxResource
from assets.training import TrainerLauncher, check_recipe, launch_arm
from warehouse.partitions import SEPARATOR

PAPER = "DeepTool"
SFT_RHO = 0.1  # DeepTool §3.1 and App. A.1 Table 3: the SFT data is synthesized with ρ = 0.1
REFERENCE_RHO = 0.0  # the recovery claim's reference arm: no injected failure

# ---- Table 2: synthesis -----------------------------------------------------------------------

SYNTHESIS = Experiment(
    name="mosaic_synthesis_claim",
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
    limits={"cpu": "the embedded 135M model plays manager, actor and baseline on 24 gsm8k "
                   "problems: few of its trajectories are complete or correct, so accuracy "
                   "differences are small and the CIs wide; the paper's synthesizer is "
                   "DeepSeek-V3.2",
            "paper": "weft has no OpenR1-Math-220k source: the claim is judged on weft's "
                     "MOSAIC sources, not on Table 2's five sets"},
)


def newest_run_rows(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows of the run that wrote last (by ``created_at``, then ``run_id``)."""
    if not rows:
        return []
    newest = max(rows, key=lambda r: (str(r.get("created_at") or ""), str(r.get("run_id") or "")))
    return [r for r in rows if r.get("run_id") == newest.get("run_id")]


def _by_problem(rows: Sequence[Mapping[str, Any]], arm: str) -> dict[str, Mapping[str, Any]]:
    from eval.claims import ClaimError

    out: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        pid = str(row["problem_id"])
        if pid in out:
            raise ClaimError(f"the {arm} run holds problem {pid!r} twice; re-materialize it")
        out[pid] = row
    return out


def synthesis_claims(wh: Any, source: str, rho: float = SFT_RHO, *, partition_suffix: str = "",
                     n_boot: int = 10_000) -> list[dict[str, Any]]:
    """Table 2's two parts for ``source``: the newest MOSAIC run at ``rho`` against the newest
    baseline run (in the partitions the assets write, plus ``partition_suffix``), paired by
    problem. Raises ClaimError when an arm is missing, or when the two runs did not
    synthesize the same problems with the same T_max and seed."""
    from eval.claims import Claim, ClaimError, judge

    mosaic_rows = newest_run_rows(wh.read(
        TABLE_MOSAIC, partition=mosaic_partition(source, rho) + partition_suffix).to_pylist())
    baseline_rows = newest_run_rows(wh.read(TABLE_BASELINE, partition=source + partition_suffix)
                                    .to_pylist())
    if not mosaic_rows:
        raise ClaimError(f"no MOSAIC trajectories of {source!r} at rho={rho:g}: materialize "
                         f"mosaic_trajectories (partition {source}, rho {rho:g}) first")
    if not baseline_rows:
        raise ClaimError(f"no baseline trajectories of {source!r}: materialize "
                         f"mosaic_baseline_trajectories (partition {source}) first")
    mosaic, baseline = _by_problem(mosaic_rows, "MOSAIC"), _by_problem(baseline_rows, "baseline")
    if set(mosaic) != set(baseline):
        only_m, only_b = sorted(set(mosaic) - set(baseline)), sorted(set(baseline) - set(mosaic))
        raise ClaimError(f"the MOSAIC and baseline runs of {source!r} synthesized different "
                         f"problems ({len(only_m)} only in MOSAIC, e.g. {only_m[:3]}; "
                         f"{len(only_b)} only in the baseline, e.g. {only_b[:3]}): run both with "
                         "the same split and limit (the claim's job does)")
    for key in ("max_steps", "seed"):
        values = {r.get(key) for r in [*mosaic_rows, *baseline_rows]}
        if len(values) > 1:
            raise ClaimError(f"the MOSAIC and baseline runs of {source!r} used different {key} "
                             f"({sorted(values, key=str)}): run both with the same settings")
    common = {"paper": PAPER, "section": f"Table 2 ({source})", "reference": "baseline",
              "treatment": f"MOSAIC rho={rho:g}"}
    accuracy = Claim(**common, metric="synthetic trajectory accuracy",
                     statement="MOSAIC's synthesized trajectories end with the correct answer "
                               "more often than the baseline synthesizer's",
                     paper_value="higher on all 5 sets: +1.2 to +8.6 points (e.g. 60.2 vs 51.6 "
                                 "% on Olympiads)")
    turns = Claim(**common, metric="turns per trajectory",
                  statement="MOSAIC's synthesized trajectories take more tool-use turns than the "
                            "baseline's",
                  paper_value="3.8-4.4 vs 2.1-3.0 turns (+1.1 to +1.9 on each set)")

    def score(rows: Mapping[str, Mapping[str, Any]], column: str) -> dict[str, float]:
        if column == "correct":
            return {p: 1.0 if r.get("correct") else 0.0 for p, r in rows.items()}
        return {p: float(r.get(column) or 0) for p, r in rows.items()}

    return [judge(accuracy, score(baseline, "correct"), score(mosaic, "correct"), n_boot=n_boot),
            judge(turns, score(baseline, "num_turns"), score(mosaic, "num_turns"), n_boot=n_boot)]


class SynthesisClaimConfig(ResultConfig):
    """Both arms synthesize the same problems (the slice ``limit`` of ``split`` of each
    source) with the same T_max, seed, actor and sampling; only MOSAIC has the manager and
    injection (ρ = ``rho``, DeepTool §3.1: 0.1 for the SFT data)."""

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
    from pipelines.mosaic import METHOD_BASELINE, METHOD_MOSAIC

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
    from assets.mosaic import MOSAIC_SOURCES

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

def recovery_counts(samples: Sequence[Mapping[str, Any]]) -> tuple[dict[str, tuple[int, int]], int]:
    """Per problem, ``(recovering samples, erroring samples)``: the samples with at least one
    interpreter error (``tool_errors >= 1``) whose final answer is correct (a sample with no
    verdict counts as not correct), and all samples with such an error; every problem of
    ``samples`` is listed, ``(0, 0)`` when none of its samples erred. Returns (counts, the
    number of erroring samples). Raises ClaimError when a sample has no ``tool_errors`` (not a
    tool-mode evaluation)."""
    from eval.claims import ClaimError

    counts: dict[str, list[int]] = {}
    erring = 0
    for sample in samples:
        errors = sample.get("tool_errors")
        if errors is None:
            raise ClaimError(f"sample of problem {sample.get('problem_id')!r} has no tool_errors: "
                             "the recovery rate needs a tool-mode evaluation (mode: tool)")
        cell = counts.setdefault(str(sample["problem_id"]), [0, 0])
        if int(errors) >= 1:
            erring += 1
            cell[1] += 1
            cell[0] += 1 if sample.get("correct") else 0
    return {p: (c[0], c[1]) for p, c in counts.items()}, erring


def recovery_claim_row(reference_samples: Sequence[Mapping[str, Any]],
                       treatment_samples: Sequence[Mapping[str, Any]], *, rho: float = SFT_RHO,
                       n_boot: int = 10_000) -> tuple[dict[str, Any], dict[str, Any]]:
    """The recovery claim judged on two arms' tool-mode samples of the same held-out problems:
    (claims row, counts behind it). Each arm's rate is recovering / erroring samples over all
    problems evaluated in both arms (module docstring); raises ClaimError when an arm has no
    erroring sample (no rate; no value is made up)."""
    from eval.claims import Claim, ClaimError, judge_ratio

    ref, ref_errors = recovery_counts(reference_samples)
    treat, treat_errors = recovery_counts(treatment_samples)
    shared = sorted(set(ref) & set(treat))
    facts = {"problems": len(shared),
             "problems_in_one_arm_only": len(set(ref) ^ set(treat)),
             "erroring_samples_reference": ref_errors,
             "erroring_samples_treatment": treat_errors,
             "recovered_samples_reference": sum(ref[p][0] for p in shared),
             "recovered_samples_treatment": sum(treat[p][0] for p in shared),
             "problems_with_errors_reference": sum(1 for p in shared if ref[p][1]),
             "problems_with_errors_treatment": sum(1 for p in shared if treat[p][1]),
             "problems_with_errors_in_both": sum(1 for p in shared if ref[p][1] and treat[p][1])}
    for arm, counts in (("reference (rho=0)", ref), (f"treatment (rho={rho:g})", treat)):
        if not any(counts[p][1] for p in shared):
            raise ClaimError(
                f"the {arm} arm hit no interpreter error on any of the {len(shared)} held-out "
                "problems both arms answered, so it has no recovery rate (nothing to recover "
                f"from); counts: {facts}. Evaluate more problems or more samples per problem "
                "(eval_limit, k)")
    claim = Claim(paper=PAPER, section="§3.6 robustness (rho ablation)",
                  metric="recovery after an interpreter error (recovering / erroring samples)",
                  reference="SFT rho=0", treatment=f"SFT rho={rho:g}",
                  statement="SFT on trajectories with injected failures recovers from interpreter "
                            "errors more often than SFT on failure-free trajectories",
                  paper_value="qualitative (§1, §3.6, case study App. A.3); no rho ablation "
                              "reported")
    row = judge_ratio(claim, {p: ref[p] for p in shared}, {p: treat[p] for p in shared},
                      n_boot=n_boot)
    return row, facts


class RecoveryClaimConfig(ResultConfig):
    """The recovery experiment, end to end: synthesis of both arms' data, SFT, evaluation."""

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
    # held-out evaluation in tool mode (both arms: the same problems, samples and decoding)
    benchmark: str = "gsm8k"
    eval_limit: int | None = 40
    k: int = 4
    temperature: float = 0.7
    eval_max_tokens: int = 256  # per turn
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
            "eval_limit": 40, "k": 4, "eval_max_tokens": 256, "max_turns": 4}}},
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
            "benchmark": "math500", "eval_limit": None, "k": 8, "temperature": 0.7,
            "eval_max_tokens": 6000, "max_turns": 8, "max_concurrency": 64}}},
    },
    limits={"cpu": "the data comes from scripted agents (a manager that walks the gsm8k "
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


def paired_sft_rows(treatment_rows: Sequence[Mapping[str, Any]],
                    reference_rows: Sequence[Mapping[str, Any]], *, rendering: str,
                    only_correct: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                 list[str]]:
    """Both arms' SFT rows (TRL prompt/completion, ``pipelines.tir.sft_rows``) from the
    problems where BOTH arms synthesized a usable trajectory (valid; correct too with
    ``only_correct``), so the arms train on the same problems: (treatment rows, reference
    rows, the shared problem ids). Injected steps are targets (DeepTool §2.2). Raises
    ClaimError when no problem is shared."""
    from eval.claims import ClaimError
    from pipelines.mosaic import expert_trajectories
    from pipelines.tir import sft_rows

    def usable(rows):
        return {t.problem_id: (t, mask) for t, mask in expert_trajectories(
            rows, only_correct=only_correct, train_on_injected=True)}

    treat, ref = usable(treatment_rows), usable(reference_rows)
    shared = sorted(set(treat) & set(ref))
    if not shared:
        raise ClaimError(f"no problem has a usable trajectory in both arms ({len(treat)} "
                         f"treatment, {len(ref)} reference problems"
                         f"{', correct answers only' if only_correct else ''}): synthesize more "
                         "problems (limit) or set only_correct: false")

    def rows_of(chosen) -> list[dict[str, Any]]:
        out = []
        for pid in shared:
            trajectory, mask = chosen[pid]
            out += [{"prompt": r["prompt"], "completion": r["completion"]}
                    for r in sft_rows(trajectory.problem, trajectory.steps, rendering,
                                      train_on=mask)]
        return out

    return rows_of(treat), rows_of(ref), shared


def _write_jsonl(rows: Sequence[Mapping[str, Any]], label: str) -> Path:
    """The arm's SFT rows as a JSONL file under WEFT_HOME (named by content), for the
    recipe's ``dataset: jsonl:<path>``."""
    from pipelines.settings import weft_home
    from training.data import fingerprint

    folder = weft_home() / "experiments" / RECOVERY.name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{label}-{fingerprint(rows)}.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return path


def arm_overrides(config: RecoveryClaimConfig, dataset: Path) -> list[str]:
    """One arm's recipe overrides: only the dataset differs between the arms."""
    return [*config.overrides, f"dataset=jsonl:{dataset}", "dataset_fallback=''",
            "dataset_limit=null", f"max_steps={config.train_steps}", f"seed={config.seed}"]


def _evaluate(context: dg.AssetExecutionContext, config: RecoveryClaimConfig, ck: str,
              path: str, wh: Any, llm: LLMResource, grader: GraderResource,
              sandbox: SandboxResource) -> list[dict[str, Any]]:
    """Serve one arm's checkpoint and evaluate it in tool mode on the held-out slice through
    the one recorded-evaluation path (rows under ``<benchmark>@<checkpoint>``)."""
    from functools import partial

    from eval.benchmarks import get as get_benchmark
    from eval.models import ModelSpec
    from eval.modes import build_mode
    from eval.recorded import Evaluation, evaluate_recorded
    from eval.runner import EvalConfig

    bench = get_benchmark(config.benchmark)
    problems = wh.read("problems", partition=bench.source).to_pylist()
    if not problems:
        raise dg.Failure(f"no problems for {bench.name}: materialize `{bench.source}_problems` "
                         "and `problems` first")
    try:
        cfg = EvalConfig(k=config.k, temperature=config.temperature,
                         max_tokens=config.eval_max_tokens, seed=config.seed,
                         limit=config.eval_limit,
                         mode=build_mode(mode="tool", context_policy=config.rendering,
                                         max_turns=config.max_turns))
    except ValueError as exc:
        raise dg.Failure(description=f"bad evaluation settings: {exc}") from exc
    spec = ModelSpec(model_id=ck, kind="local", path=path, served_model=ck, checkpoint_id=ck)
    n = min(len(problems), config.eval_limit or len(problems))
    context.log.info(f"evaluating {ck} in tool mode on {n} {bench.name} problems x {config.k}")
    (done,) = evaluate_recorded(
        {ck: spec}, [Evaluation(ck, cfg, ck, checkpoint_id=ck)], bench=bench, problems=problems,
        wh=wh, run_id=context.run_id, config=config.model_dump(),
        make_client=partial(llm.client_for, max_tokens=config.eval_max_tokens,
                            requests=n * config.k * config.max_turns, progress=context.log.info,
                            max_concurrency=config.max_concurrency),
        pool_factory=grader.pool, sandbox=sandbox.get_pool(), progress=context.log.info)
    return done.result.samples


def run_recovery_experiment(context: dg.AssetExecutionContext, config: RecoveryClaimConfig,
                            wh: Any, llm: LLMResource, grader: GraderResource,
                            sandbox: SandboxResource, trainer: TrainerLauncher
                            ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Synthesize both arms' data, train both arms, evaluate both; (claims row, facts)."""
    from pipelines.mosaic import METHOD_MOSAIC

    if config.rendering not in ("state_preserved", "state_discarded"):
        raise dg.Failure(f"rendering must be state_preserved or state_discarded, got "
                         f"{config.rendering!r}")
    if not 0.0 < config.rho <= 1.0:
        raise dg.Failure(f"rho must be in (0, 1] (the reference arm is rho = 0), got "
                         f"{config.rho!r}")
    suffix = f"{SEPARATOR}{RECOVERY.name}"
    synthesized = {}
    for rho in (config.rho, REFERENCE_RHO):
        rows, summary, _ = synthesize_source(context, _synthesis_config(config, rho), llm, wh,
                                             grader, sandbox, METHOD_MOSAIC, config.source,
                                             partition_suffix=suffix)
        synthesized[rho] = rows
        context.log.info(f"rho={rho:g}: {summary['complete']} complete, {summary['correct']} "
                         f"correct, {summary['perturbed_steps']} perturbed steps")
    treat_rows, ref_rows, shared = paired_sft_rows(
        synthesized[config.rho], synthesized[REFERENCE_RHO], rendering=config.rendering,
        only_correct=config.only_correct)
    injected = sum(int(r.get("perturbed_steps") or 0) for r in synthesized[config.rho]
                   if str(r["problem_id"]) in set(shared))
    if injected == 0:
        raise dg.Failure(f"the rho={config.rho:g} trajectories of the {len(shared)} shared "
                         "problems hold no injected failure, so the arms would not differ in "
                         "what the claim is about: synthesize more problems (limit)")
    arms = {}
    for label, rows in ((f"rho{config.rho:g}", treat_rows), ("rho0", ref_rows)):
        overrides = arm_overrides(config, _write_jsonl(rows, label))
        arms[label] = (overrides, check_recipe("sft", config.recipe, overrides))
    starts = {str(cfg.model_name_or_path) for _, cfg in arms.values()}
    if len(starts) != 1:
        raise dg.Failure(f"the arms would start from different models {sorted(starts)}")
    samples = {}
    for label, (overrides, _) in arms.items():
        context.log.info(f"SFT arm {label}: {config.recipe}, {config.train_steps} steps")
        ck, path, _ = launch_arm(context, trainer, wh, label, config.recipe, overrides,
                                 kind="sft")
        samples[label] = (ck, _evaluate(context, config, ck, path, wh, llm, grader, sandbox))
    (treat_ck, treat_samples), (ref_ck, ref_samples) = samples[f"rho{config.rho:g}"], \
        samples["rho0"]
    row, facts = recovery_claim_row(ref_samples, treat_samples, rho=config.rho,
                                    n_boot=config.n_boot)
    facts.update(shared_training_problems=len(shared), injected_steps_in_treatment=injected,
                 sft_rows_treatment=len(treat_rows), sft_rows_reference=len(ref_rows),
                 treatment_checkpoint=treat_ck, reference_checkpoint=ref_ck)
    return row, facts


@dg.asset(name=RECOVERY.name, group_name="results", kinds={"python", "pytorch"},
          description=RECOVERY.description)
def mosaic_recovery_claim(context: dg.AssetExecutionContext, config: RecoveryClaimConfig,
                          warehouse: WarehouseResource, llm: LLMResource,
                          grader: GraderResource, sandbox: SandboxResource,
                          trainer: TrainerLauncher) -> dg.MaterializeResult:
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
