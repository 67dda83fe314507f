"""Result asset of Tandem RL's headline claim (Tandem RL §4.2-4.5, §5.3): against plain GRPO
from the same start, a Tandem-trained senior keeps solo accuracy, is the stronger half of a
handoff team with the frozen junior, drifts less from the junior and is more legible to it.

``tandem_claim`` trains two arms from ONE start with one recipe, seed, prompts and step count
(``assets.training.launch_arm``): ``grpo`` (the recipe as it is, plain GRPO) and ``tandem``
(the same recipe with ``kind=tandem``: lockstep senior/junior rollouts, senior-only loss, the
junior the frozen start, Tandem RL §3.2-3.4). Both seniors are then evaluated on the same
held-out problems through ``eval.recorded.evaluate_recorded`` with the runs
``training.tandem.study.tandem_evaluations`` lists (each senior alone, the junior alone once, each
senior with the junior in handoff mode, senior first and junior first, §4.3's ``alternate``
schedule), and the §4.4-4.5 statistics of each senior's solo outputs are computed by
``eval.tandem_metrics.legibility_and_drift`` and written like ``tandem_legibility`` writes them.
The claim's four parts, each one ``claims`` row, paired by held-out problem:

1. solo accuracy (§4.2): per-problem pass@1 (the share of its k solo samples that are right),
   ``no_worse`` with margin :data:`TANDEM_SOLO_MARGIN`;
2. handoff robustness (§4.3): per-problem handoff pass@k (Chen et al.'s unbiased estimator
   over the team's samples), the mean of the senior-first and junior-first values, ``better``;
3. drift (§4.4): the mean ``|log q_senior(v) - log q_junior(v)|`` over the tokens frequent in
   the junior's own outputs, which is the area under §4.4's survival curve (the mean of a
   non-negative variable is the integral of its survival function), lower is ``better``. It
   is a corpus statistic (marginals pooled over every sample), so it has no value per problem;
   it is made one by the jackknife: problem ``i``'s value is the pseudo-value ``n·θ −
   (n−1)·θ₋ᵢ``, with ``θ₋ᵢ`` recomputed with problem ``i``'s samples of the senior AND of the
   junior left out, on the token set of the full corpus (so it does not jump with a left-out
   problem's counts). Pseudo-values average to the jackknife estimate of θ and their spread is
   the statistic's sampling spread over problems, so pairing them by left-out problem tests
   the difference of the two arms' survival-curve areas with problems as the unit, as every
   other part does. Chosen over the shared-support KL, whose plug-in value depends on how much
   of each corpus the shared support covers (``eval.tandem_metrics``), and over a per-problem
   KL, which small per-problem corpora make mostly estimator bias;
4. junior legibility (§4.5): per-problem junior cross-entropy on the senior's solo outputs,
   the mean over the problem's completion positions (§5.3 averages per-problem measurements
   before testing), lower is ``better``.

Validity of the drift and cross-entropy parts (fixed before any run;
``training.tandem.study.COLLAPSE_FRACTION``): an arm whose mean solo pass@1 on the held-out
problems is below half of its start's (the junior's solo pass@1, evaluated on the same
problems in the same run) has collapsed. Its token marginals and the junior's surprise at its
outputs then measure the collapse, not the drift of a working senior, so when either arm
collapsed both parts are ``inconclusive`` with reason ``invalid_arm`` and the row's
``invalid_arm`` column names the arm and its figures. Solo accuracy and handoff pass@k stay
judged: a senior that lost its accuracy is what they measure. The page shows the start's and
each arm's solo pass@1, the threshold and the arm ruled out (``solo_vs_start``,
``invalid_arm``), and the handoffs per team answer (``handoffs_per_team_answer``, by arm and
start in ``handoffs_by_team``).

The CPU task (``heldout_chain`` > 0): multi-step arithmetic chains (``builtin:chain``: a
one-digit start, then 2 to 5 one-digit operations; the worked solution writes one operation
per paragraph, then ``The answer is $\\boxed{v}$.``). The start is ``chain_sft_checkpoint``
(recipe ``chain_sft.cpu``: SFT on 128 chains of the seed-0 draw), the arms train with
``demo_grpo``'s settings on 64 chains of the seed-2 draw, and the held-out problems are chains
of the seed-3 draw whose text neither the arms nor the start's lineage trained on
(``training.heldout.heldout_chain``, seed ``HELDOUT_CHAIN_SEED``), prompted with the training prompt's instruction (the
boxed-answer instruction, then the problem, in the one user turn an evaluation sends). Each
paragraph is a reasoning step, so under the alternate schedule a team answer to a chain of m
operations has m handoffs when written the way the SFT data is (m operation steps and the
answer step): the senior and the junior take turns several times within one answer.
Checked on the chain SFT checkpoint before the first run of this design (a pilot through
this module's own evaluation path, one vLLM server of the start playing senior and junior, 24
held-out chains x 2 at temperature 1, 128 tokens): solo, 0.31 right, 57 tokens on average, 86
at most, none capped; as a team, 4.9 handoffs per answer on average (every answer at least 2,
38 of 48 between 2 and 5) and 0.21 right, with 12.5% of the team answers reaching 128 tokens. The
team loses accuracy against the same model alone because the handoff is at the text level: a
prefix that ends in a blank line is re-tokenized by the server into one two-newline token,
which the SFT data never has before a next step (mid-answer the two newlines are two tokens),
so the incoming model often writes a third newline or an empty step; 34 of the 48 team
answers have a triple newline, none of the solo ones. Both arms' teams go through the same
boundary with the same junior.

Not guaranteed: anything beyond the embedded 135M model at CPU scale (12 steps of each
arm: the senior may move little from the start, so every part may be inconclusive); the
jackknife treats the statistic as smooth in the counts (the token set is fixed; the absolute
value is not smooth at 0, which matters only for tokens whose log-ratio is ~0); the collapse
rule catches an arm that lost most of its accuracy, not one that degenerated in style while
staying accurate.
"""

import json
from collections.abc import Mapping
from typing import Any

import dagster as dg

from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.results.experiments import Experiment, ResultConfig, evaluate_models, record_claims
from assets.sampling import SamplingConfig
from assets.training import TrainerLauncher, check_recipe, latest_checkpoint, launch_arm
from eval.models import ModelSpec, safe_model_id
from pipelines.progress import heartbeat
from training.heldout import (
    checkpoint_chain,
    checkpoint_problems,
    heldout_arith,
    heldout_benchmark,
    training_problems,
)
from training.heldout import heldout_problems as heldout_draw
from training.model_path import resolve_model
from training.tandem.study import (
    ARM_NAMES,
    ARMS,
    COLLAPSE_PARTS,
    HELDOUT_CHAIN_SEED,
    PAPER,
    arm_differences,
    invalid_arm_text,
    recipe_method,
    solo_rows,
    tandem_claims,
    tandem_evaluations,
)

TANDEM = Experiment(
    name="tandem_claim",
    paper=PAPER,
    description="Tandem RL §4.2-4.5: a Tandem-trained senior vs plain GRPO from one start "
                "(same recipe, prompts, seed and steps): solo accuracy within a margin, "
                "higher handoff pass@k with the frozen junior (both starts), less drift from "
                "the junior, lower junior cross-entropy, on the same held-out problems.",
    upstream=(),
    scales={
        # From the chain SFT checkpoint (chain_sft_checkpoint, recipe chain_sft.cpu: answers
        # of one step per paragraph), both arms on chain problems of another draw than the
        # SFT's (builtin:chain?seed=2; demo_grpo's settings otherwise), evaluated on held-out
        # chains of a third draw. 12 steps of 4 prompts x 4 rollouts per arm (the earlier
        # one-digit design trained 8). Estimate for an idle 2-core machine, about 35 min, well
        # over the 12 min a seed was meant to take: chain answers are about 57 tokens (86 at
        # most) against about 20, rollouts decode about 90 steps, so a GRPO step is about 50 s
        # and a Tandem step (two lockstep models, bench/tandem.py: about 2.3x the generation)
        # about 85 s: 12 x 135 s = 27 min of training; vLLM servers about 2 min; 7 evaluations
        # of 64 chains x 1 sample, about 29k tokens (team answers about 71 tokens) at 80-100
        # tokens/s, 5-6 min; legibility under a minute. Measured in a pilot at load 10-17:
        # 41 tokens/s solo, 37 tokens/s as a team on one server.
        "cpu": {"tandem_claim": {"config": {
            "start_from": "chain_sft_checkpoint", "start_recipe": "chain_sft.cpu",
            "recipe": "demo_grpo", "max_steps": 12, "seed": 0,
            "overrides": ["torch_threads=2", "dataset=builtin:chain?seed=2",
                          "dataset_limit=64", "max_completion_length=96"],
            "heldout_chain": 64, "heldout_arith": 0,
            "sampling": {"k": 1, "temperature": 1.0, "top_p": 1.0, "max_tokens": 128},
            "handoff_k": 1, "min_count": 20}}},
        "paper": {"tandem_claim": {"config": {
            # §4.1 and App. A.2-A.3: Qwen3-4B-Instruct-2507 trained on DeepScaleR with the boxed
            # correctness reward, GRPO with the same settings as TRL; the junior is the same
            # base, frozen (§3.2); no KL term (Table 4)
            "start_from": "", "start_recipe": "", "recipe": "rlvr_grpo",
            "overrides": ["model_name_or_path=Qwen/Qwen3-4B-Instruct-2507",
                          'dataset="problems:deepscaler"'],
            # §5.1: the best checkpoints were at step 120 (TRL) and 200 (GRPO); this protocol
            # trains both arms for one step count, GRPO's
            "max_steps": 200, "seed": 0,
            # §4.1 / App. A.2: AMC 23-25, AIME 24-26 and Minerva Math (weft's amc23, aime24,
            # aime25 and minerva_math), pooled per problem as §5.3 pools benchmarks
            "heldout_chain": 0, "heldout_arith": 0,
            "benchmarks": ["amc23", "aime24", "aime25", "minerva_math"],
            # Table 4's validation temperature, top-p and samples per problem are illegible in
            # our copy: 16 samples at the model's recommended temperature 0.7 / top-p 0.8;
            # §4.3 reports handoff pass@k up to large k, tested at four k in §5.3: k = 1 here
            "sampling": {"k": 16, "temperature": 0.7, "top_p": 0.8, "max_tokens": 8192},
            "handoff_k": 1, "min_count": 20, "max_concurrency": 64}}},
    },
    limits={"cpu": "135M embedded model, 12 GRPO steps per arm on multi-step arithmetic "
                   "chains from a 16-step chain SFT (right on about 0.3 of held-out chains at "
                   "T = 1), answers of 3 to 6 paragraphs so a team answer has about 4 to 5 "
                   "handoffs; the text-level handoff re-tokenizes a trailing blank line, which "
                   "costs the team accuracy even with one model in both seats; 64 held-out "
                   "chains x 1 sample: the arms may move little from their start",
            "paper": "Table 4's batch size, group size, learning rate and validation "
                     "temperature are lost in our copy (the recipe's and the model's "
                     "recommended sampling stand in); both arms train for GRPO's best step "
                     "(200) instead of each arm's best checkpoint (§5.1: TRL's was 120); AIME "
                     "2026 and AMC 24-25 are not weft benchmarks; pass@k at large k is "
                     "reported at k = 1"},
)


class TandemClaimConfig(ResultConfig):
    # a checkpoint asset whose latest materialization both arms start from (and the junior
    # is, §3.2); "": the recipe's model (set it with a model_name_or_path override)
    start_from: str = "chain_sft_checkpoint"
    start_recipe: str = "chain_sft.cpu"  # the start must have been trained with it ("": any)
    recipe: str = "demo_grpo"  # a plain GRPO recipe; the treatment adds kind=tandem
    max_steps: int = 12
    seed: int = 0
    overrides: list[str] = []  # key=value for both arms
    # > 0: this many held-out multi-step chain problems (the CPU task) or one-digit problems;
    # both 0: `benchmarks`
    heldout_chain: int = 64
    heldout_arith: int = 0
    benchmarks: list[str] = []
    eval_limit: int | None = None  # problems per benchmark (deterministic slice); None: all
    # k samples per problem, solo and in each handoff start; max_tokens per answer, a handoff
    # team shares it
    sampling: SamplingConfig = SamplingConfig(k=1, temperature=1.0, top_p=1.0, max_tokens=128)
    handoff_k: int = 1  # pass@k of the handoff part (<= k)
    schedule: str = "alternate"  # §4.3 (bernoulli: App. B.3)
    handoff_p: float = 0.5
    min_count: int = 20  # §4.4 "frequent": occurrences in the junior's own outputs
    smoothing: float = 0.5
    max_concurrency: int = 8
    n_boot: int = 10_000


# ---- the experiment: two arms from one start, one held-out evaluation ------------------------

def start_checkpoint(context: dg.AssetExecutionContext, config: TandemClaimConfig
                     ) -> tuple[str, str]:
    """(path, checkpoint id) of the shared start: the latest ``start_from`` materialization
    (trained with ``start_recipe`` when set), or ("", "") for the recipe's model."""
    if not config.start_from:
        return "", ""
    path, checkpoint_id = latest_checkpoint(context, config.start_from)
    if config.start_recipe:
        event = context.instance.get_latest_materialization_event(
            dg.AssetKey(config.start_from))
        meta = event.asset_materialization.metadata  # type: ignore[union-attr]
        recipe = str(meta["recipe"].value) if "recipe" in meta else ""
        if recipe != config.start_recipe:
            raise dg.Failure(description=(
                f"the latest {config.start_from} was trained with recipe {recipe or '?'!r}, "
                f"not {config.start_recipe!r}: materialize {config.start_from} with recipe "
                f"{config.start_recipe}, or set start_recipe"))
    return path, checkpoint_id


def arm_overrides(config: TandemClaimConfig, start_path: str, start_id: str
                  ) -> dict[str, list[str]]:
    """Each arm's overrides (the shared ones, the start, seed and steps; ``kind=tandem`` for
    the treatment), after checking that both resolve, that the reference is plain GRPO and the
    treatment Tandem RL with the start as its junior, and that they differ in nothing else."""
    shared = list(config.overrides)
    if start_path:
        shared += [f"model_name_or_path={start_path}", f"parent_checkpoint={start_id}"]
    shared += [f"seed={config.seed}", f"max_steps={config.max_steps}"]
    out = {"grpo": shared, "tandem": [*shared, "kind=tandem"]}
    resolved = {arm: check_recipe("grpo", config.recipe, out[arm]) for arm in ARMS}
    if getattr(resolved["grpo"], "method", "grpo") != "grpo":
        raise dg.Failure(description=f"recipe {config.recipe!r} is not plain GRPO (method "
                                     f"{resolved['grpo'].method!r}); use a plain GRPO recipe "
                                     "such as demo_grpo or rlvr_grpo")
    try:
        method = recipe_method(resolved["tandem"])
    except ValueError as exc:
        raise dg.Failure(description=str(exc)) from exc
    if method != "tandem" or resolved["tandem"].tandem.junior:
        raise dg.Failure(description="the treatment must be Tandem RL with the start as its "
                                     "junior (§3.2); leave tandem.junior empty")
    unexpected = arm_differences(resolved["grpo"], resolved["tandem"])
    if unexpected:
        raise dg.Failure(description=f"the two arms would not train alike: {unexpected} differ")
    return out


def heldout_sets(config: TandemClaimConfig, arm_args: list[str], start_id: str, wh: Any
                 ) -> list[tuple[Any, list[dict[str, Any]]]]:
    """[(benchmark, problem rows)]: the held-out arithmetic (problems of the arms' recipe and
    of the start's lineage left out) or each of ``benchmarks``."""
    from eval.benchmarks import get as get_benchmark
    from pipelines.ingest import load_source
    try:
        if config.heldout_chain > 0 and config.heldout_arith > 0:
            raise ValueError("set one of heldout_chain and heldout_arith (the other 0): the "
                             "claim is evaluated on one held-out task")
        if config.heldout_chain > 0 or config.heldout_arith > 0:
            seen = training_problems([(config.recipe, arm_args)])
            if start_id:
                seen |= checkpoint_problems(checkpoint_chain(wh, start_id))
            if config.heldout_chain > 0:
                return [heldout_draw("chain", config.heldout_chain, seed=HELDOUT_CHAIN_SEED,
                                     exclude=seen)]
            return [(heldout_benchmark(), heldout_arith(config.heldout_arith, exclude=seen))]
        if not config.benchmarks:
            raise ValueError("no held-out problems: set heldout_chain or heldout_arith > 0, or "
                             "list benchmarks")
        out = []
        for name in config.benchmarks:
            bench = get_benchmark(name)
            if bench.grader != "math":
                raise ValueError(f"{name} is graded by {bench.grader}; the Tandem claim "
                                 "evaluates math benchmarks")
            rows = [p.to_row() for p in load_source(bench.source).problems]
            out.append((bench, rows[:config.eval_limit] if config.eval_limit else rows))
        return out
    except KeyError as exc:
        raise dg.Failure(description=str(exc.args[0])) from exc
    except ValueError as exc:
        raise dg.Failure(description=str(exc)) from exc


def _model_spec(model_id: str, path: str, checkpoint_id: str | None) -> ModelSpec:
    return ModelSpec(model_id=model_id, kind="local", path=path, served_model=model_id,
                     checkpoint_id=checkpoint_id or "")


def evaluate_arms(context: dg.AssetExecutionContext, specs: Mapping[str, Any], bench: Any,
                  problems: list[dict[str, Any]], config: TandemClaimConfig, wh: Any,
                  llm: LLMResource, grader: GraderResource) -> None:
    """Both seniors and the junior served together: each senior solo, the junior solo once,
    each senior with the junior in handoff mode from both starts (Tandem RL §4.2-4.3)."""
    cfg = config.sampling.eval_config()
    evaluations = []
    try:
        for arm in ARMS:
            evaluations += tandem_evaluations(
                specs[arm], specs["junior"], cfg=cfg, schedule=config.schedule,
                handoff_p=config.handoff_p, solo_junior=arm == ARMS[0], senior_key=arm,
                junior_key="junior")
    except ValueError as exc:
        raise dg.Failure(description=f"bad handoff settings: {exc}") from exc
    evaluate_models(context, specs, evaluations, bench, problems, config.model_dump(), wh, llm,
                    grader, max_tokens=cfg.max_tokens, max_concurrency=config.max_concurrency)


def legibility_of_arms(context: dg.AssetExecutionContext, specs: Mapping[str, Any],
                       bench: Any, problems: list[dict[str, Any]], config: TandemClaimConfig,
                       wh: Any) -> Any:
    """§4.4-4.5 rows of each senior's solo outputs against the junior (written like
    ``tandem_legibility``'s); returns the tokenizer (the drift part counts tokens with it)."""
    from assets.common import now
    from assets.tandem import write_legibility
    from eval.tandem_metrics import legibility_and_drift, load_pair

    started = now()
    junior = specs["junior"]
    by_id = {p["problem_id"]: p for p in problems}
    junior_rows = solo_rows(wh, junior.model_id, bench.name)
    tok = None
    for arm in ARMS:
        senior = specs[arm]
        # two forward passes per solo sample: minutes on CPU, so a beat every 20 s
        with heartbeat(f"legibility and drift of the {arm} arm against the junior",
                       context.log.info):
            pair = load_pair(senior.path, junior.path)
            tok = pair[0]
            leg, drift, summary = legibility_and_drift(
                pair, bench, by_id, solo_rows(wh, senior.model_id, bench.name), junior_rows,
                model=senior.model_id, junior=junior.model_id, max_samples=None,
                min_count=config.min_count, smoothing=config.smoothing)
        summary["checkpoint_id"] = senior.checkpoint_id
        write_legibility(context, wh, config.model_dump(), bench.name, leg, drift, summary,
                         started=started)
    return tok


def train_arms(context: dg.AssetExecutionContext, trainer: TrainerLauncher, wh: Any,
               config: TandemClaimConfig, overrides: Mapping[str, list[str]]
               ) -> dict[str, dict[str, Any]]:
    """Both arms trained (one Pipes launch each); {arm: checkpoint id, path, steps}."""
    arms: dict[str, dict[str, Any]] = {}
    for arm in ARMS:
        context.log.info(f"Tandem claim, arm {arm}: {config.recipe} {' '.join(overrides[arm])}")
        ck, path, metrics = launch_arm(context, trainer, wh, arm, config.recipe, overrides[arm])
        arms[arm] = {"checkpoint_id": ck, "path": path,
                     "steps": max((r["step"] for r in metrics if r.get("step") is not None),
                                  default=0)}
    if arms["grpo"]["steps"] != arms["tandem"]["steps"]:
        raise dg.Failure(description=f"the arms trained different step counts: "
                                     f"{ {a: v['steps'] for a, v in arms.items()} }")
    return arms


def arm_specs(config: TandemClaimConfig, arms: Mapping[str, Mapping[str, Any]],
              overrides: Mapping[str, list[str]], start_path: str, start_id: str
              ) -> dict[str, ModelSpec]:
    """The served specs of both seniors and of the junior (the shared start, §3.2)."""
    junior_path = start_path or resolve_model(
        check_recipe("grpo", config.recipe, overrides["grpo"]).model_name_or_path)
    junior_id = start_id or safe_model_id(junior_path.rstrip("/").rsplit("/", 1)[-1])
    specs = {arm: _model_spec(a["checkpoint_id"], a["path"], a["checkpoint_id"])
             for arm, a in arms.items()}
    specs["junior"] = _model_spec(junior_id, junior_path, start_id or None)
    return specs


def record_tandem_claim(context: dg.AssetExecutionContext, wh: Any, config: TandemClaimConfig,
                        specs: Mapping[str, ModelSpec], arms: Mapping[str, Mapping[str, Any]],
                        benchmarks: list[str], heldout_problems: int,
                        tok: Any) -> dg.MaterializeResult:
    """Judge the four parts (``training.tandem.study.tandem_claims``) and record them; a claim
    that cannot be judged is recorded as a failed run with its reason."""
    junior_id = specs["junior"].model_id
    details: dict[str, Any] = {}

    def compute() -> list[dict[str, Any]]:
        rows, found = tandem_claims(
            wh, {a: specs[a].model_id for a in ARMS}, junior_id, benchmarks,
            tokenize=lambda text: tok.encode(text, add_special_tokens=False),
            vocab_size=len(tok), handoff_k=config.handoff_k, schedule=config.schedule,
            handoff_p=config.handoff_p, min_count=config.min_count,
            smoothing=config.smoothing, n_boot=config.n_boot)
        details.update(found)
        return rows

    setup = {"arms": {a: {"checkpoint_id": v["checkpoint_id"], "steps": v["steps"]}
                      for a, v in arms.items()},
             "junior": junior_id, "heldout_problems": heldout_problems, "benchmarks": benchmarks}
    result = record_claims(context, wh, TANDEM, config.scale, compute,
                           {**config.model_dump(), **setup}, derived=tuple(setup))
    details.update(setup)
    return dg.MaterializeResult(metadata={
        **(result.metadata or {}),
        "arms": dg.MetadataValue.json(json.loads(json.dumps(setup["arms"]))),
        "junior": junior_id,
        **validity_metadata(details),
        "details": dg.MetadataValue.json(json.loads(json.dumps(details, default=str))),
    })


def validity_metadata(details: Mapping[str, Any]) -> dict[str, Any]:
    """The page's entries for the collapse rule (each arm's solo pass@1 against the start's,
    the threshold, which parts an invalid arm makes inconclusive) and the handoffs per team
    answer (how many times the junior and the senior changed hands, §4.3)."""
    check, handoffs = details["collapse"], details["handoffs_per_answer"]
    rule = (f"an arm whose mean solo pass@1 is below {check['fraction']:g} x the start's "
            f"(the junior's, same problems, same run) has collapsed; then the "
            f"{' and '.join(COLLAPSE_PARTS)} parts are inconclusive")
    records = [dg.TableRecord({"model": name, "solo pass@1": f"{value:.3f}",
                               "collapsed": "—" if name == "start (junior)" else
                               ("yes" if arm in check["collapsed"] else "no")})
               for arm, name, value in [("start", "start (junior)", check["start"]),
                                        *((a, ARM_NAMES[a], check["arms"][a]) for a in ARMS)]]
    all_handoffs = handoffs.get("all")
    return {
        "collapse_rule": rule,
        "collapse_threshold": float(check["threshold"]),
        "solo_vs_start": dg.MetadataValue.table(records=records, schema=dg.TableSchema(
            columns=[dg.TableColumn(c, "string")
                     for c in ("model", "solo pass@1", "collapsed")])),
        "invalid_arm": invalid_arm_text(check) or "none",
        "handoffs_per_team_answer": (float(all_handoffs) if all_handoffs is not None
                                     else "no answered team samples"),
        "handoffs_by_team": dg.MetadataValue.json(json.loads(json.dumps(handoffs))),
    }


@dg.asset(name=TANDEM.name, group_name="results", deps=["chain_sft_checkpoint"],
          kinds={"pytorch", "python"}, description=TANDEM.description)
def tandem_claim(context: dg.AssetExecutionContext, config: TandemClaimConfig,
                 trainer: TrainerLauncher, warehouse: WarehouseResource, llm: LLMResource,
                 grader: GraderResource) -> dg.MaterializeResult:
    if not 1 <= config.handoff_k <= config.sampling.eval_config().k:
        raise dg.Failure(description=f"handoff_k must be between 1 and k, got "
                                     f"{config.handoff_k}")
    wh = warehouse.get()
    start_path, start_id = start_checkpoint(context, config)
    overrides = arm_overrides(config, start_path, start_id)
    sets = heldout_sets(config, overrides["grpo"], start_id, wh)
    arms = train_arms(context, trainer, wh, config, overrides)
    specs = arm_specs(config, arms, overrides, start_path, start_id)
    tok = None
    for bench, problems in sets:
        evaluate_arms(context, specs, bench, problems, config, wh, llm, grader)
        tok = legibility_of_arms(context, specs, bench, problems, config, wh)
    return record_tandem_claim(context, wh, config, specs, arms, [b.name for b, _ in sets],
                               sum(len(p) for _, p in sets), tok)


EXPERIMENTS = [TANDEM]
ASSETS = [tandem_claim]
