"""Result asset of Tandem RL's headline claim (Tandem RL §4.2-4.5, §5.3): against plain GRPO
from the same start, a Tandem-trained senior keeps solo accuracy, is the stronger half of a
handoff team with the frozen junior, drifts less from the junior and is more legible to it.

``tandem_claim`` trains two arms from ONE start with one recipe, seed, prompts and step count
(``assets.training.launch_arm``): ``grpo`` (the recipe as it is, plain GRPO) and ``tandem``
(the same recipe with ``kind=tandem``: lockstep senior/junior rollouts, senior-only loss, the
junior the frozen start, Tandem RL §3.2-3.4). Both seniors are then evaluated on the same
held-out problems through ``eval.recorded.evaluate_recorded`` with the runs
``assets.tandem.tandem_evaluations`` lists (each senior alone, the junior alone once, each
senior with the junior in handoff mode, senior first and junior first, §4.3's ``alternate``
schedule), and the §4.4-4.5 statistics of each senior's solo outputs are computed by
``assets.tandem.legibility_and_drift`` and written like ``tandem_legibility`` writes them.
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

The CPU task (``heldout_arith`` > 0): the start is the demo's SFT checkpoint (recipe
``demo_sft``: format SFT on built-in two-digit arithmetic), the arms train on ``demo_grpo``'s
prompts (``builtin:arith1``), and the held-out problems are one-digit problems neither recipe
trains on (``training.heldout.heldout_arith``), prompted with the training prompt's instruction
(the boxed-answer instruction, then the problem, in the one user turn an evaluation sends).
The SFT data's solutions read ``We compute $a + b = v$.`` blank line ``The answer is
$\\boxed{v}$.``: two reasoning steps, so the alternate schedule (a handoff at every blank
line) has one handoff per answer: junior first, the junior computes and the senior boxes;
senior first, the other way round. Checked on the demo's SFT checkpoint before this module
was written: of 96 answers (24 held-out problems x 4 at temperature 1) under this prompt, 89%
wrote the blank line (80% exactly once) and 92% a boxed answer; under weft's standard math
instruction 86% wrote it. The handoff part is about that one handoff.

Not guaranteed: anything beyond the embedded 135M model at CPU scale (8 steps of each arm,
32-token answers: the senior moves little from the start, so every part may be inconclusive);
the jackknife treats the statistic as smooth in the counts (the token set is fixed; the
absolute value is not smooth at 0, which matters only for tokens whose log-ratio is ~0).
"""

import json
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import dagster as dg

from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.results.core import Experiment, ResultConfig, record_claims
from assets.training import TrainerLauncher, check_recipe, launch_arm

# Fixed before any run. Tandem RL §4.2 reads GRPO and TRL solo pass@k as tracking each other
# "within typical run-to-run variance"; weft's other claim on this task (DUET's accuracy part)
# calls a drop of less than 10 points of held-out accuracy "keeps", and the same margin is used
# here so that both read the same on one task and one held-out set.
TANDEM_SOLO_MARGIN = 0.10
ARMS = ("grpo", "tandem")  # reference, treatment
ARM_NAMES = {"grpo": "GRPO", "tandem": "Tandem RL"}
HELDOUT_BENCHMARK = "arith1_heldout"
PAPER = "Tandem RL"

TANDEM = Experiment(
    name="tandem_claim",
    paper=PAPER,
    description="Tandem RL §4.2-4.5: a Tandem-trained senior vs plain GRPO from one start "
                "(same recipe, prompts, seed and steps): solo accuracy within a margin, "
                "higher handoff pass@k with the frozen junior (both starts), less drift from "
                "the junior, lower junior cross-entropy, on the same held-out problems.",
    upstream=(),
    scales={
        # From the demo's SFT checkpoint (`make demo`, or sft_checkpoint with recipe
        # demo_sft). Estimate for an idle 2-core machine, about 23 min: two arms x 8 steps
        # about 9 min (demo: ~20 s per GRPO step on both cores; the tiny run of
        # tests/assets/test_results_tandem.py took 120 s for a GRPO step and 78 s for a Tandem
        # step at load 10-15 on one thread), three vLLM CPU servers about 3 min, 7 evaluations
        # of 96 problems x 2 samples (~35k tokens at the ~65 tokens/s the demo measured) about
        # 9 min, legibility and drift of 2 x 192 answers about 2 min. The tiny run (1 step per
        # arm, 4 problems x 2) took 742 s at load 5-15.
        "cpu": {"tandem_claim": {"config": {
            "start_from": "sft_checkpoint", "start_recipe": "demo_sft",
            "recipe": "demo_grpo", "max_steps": 8, "seed": 0,
            "overrides": ["torch_threads=2"],
            "heldout_arith": 96, "k": 2, "temperature": 1.0, "top_p": 1.0, "max_tokens": 32,
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
            "heldout_arith": 0, "benchmarks": ["amc23", "aime24", "aime25", "minerva_math"],
            # Table 4's validation temperature, top-p and samples per problem are illegible in
            # our copy: 16 samples at the model's recommended temperature 0.7 / top-p 0.8;
            # §4.3 reports handoff pass@k up to large k, tested at four k in §5.3: k = 1 here
            "k": 16, "temperature": 0.7, "top_p": 0.8, "max_tokens": 8192, "handoff_k": 1,
            "min_count": 20, "max_concurrency": 64}}},
    },
    limits={"cpu": "135M embedded model, 8 GRPO steps per arm on one-digit arithmetic from a "
                   "3-step format SFT, 32-token answers with one reasoning-step handoff, 96 "
                   "held-out problems x 2 samples: the arms move little from their start"},
)


class TandemClaimConfig(ResultConfig):
    # a checkpoint asset whose latest materialization both arms start from (and the junior
    # is, §3.2); "": the recipe's model (set it with a model_name_or_path override)
    start_from: str = "sft_checkpoint"
    start_recipe: str = "demo_sft"  # the start must have been trained with it ("": any)
    recipe: str = "demo_grpo"  # a plain GRPO recipe; the treatment adds kind=tandem
    max_steps: int = 8
    seed: int = 0
    overrides: list[str] = []  # key=value for both arms
    # > 0: this many held-out one-digit problems (the CPU task); 0: `benchmarks`
    heldout_arith: int = 96
    benchmarks: list[str] = []
    eval_limit: int | None = None  # problems per benchmark (deterministic slice); None: all
    k: int = 2  # samples per problem, solo and in each handoff start
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 32  # per answer; a handoff team shares it
    handoff_k: int = 1  # pass@k of the handoff part (<= k)
    schedule: str = "alternate"  # §4.3 (bernoulli: App. B.3)
    handoff_p: float = 0.5
    min_count: int = 20  # §4.4 "frequent": occurrences in the junior's own outputs
    smoothing: float = 0.5
    max_concurrency: int = 8
    n_boot: int = 10_000


# ---- the claim, from the warehouse ------------------------------------------------------------

def _claims(handoff_k: int) -> dict[str, Any]:
    from eval.claims import Claim

    common = {"paper": PAPER, "reference": ARM_NAMES["grpo"], "treatment": ARM_NAMES["tandem"]}
    return {
        "solo": Claim(**common, section="§4.2 (Figure 2)", metric="solo pass@1",
                      kind="no_worse", margin=TANDEM_SOLO_MARGIN,
                      statement="the Tandem-trained senior keeps plain GRPO's solo accuracy",
                      paper_value="GRPO and TRL pass@k curves within run-to-run variance"),
        "handoff": Claim(**common, section="§4.3 (Figure 3)",
                         metric=f"handoff pass@{handoff_k} (mean of both starts)",
                         statement="with the frozen junior, alternating at every reasoning "
                                   "step, the Tandem senior's team solves more",
                         paper_value="TRL leads on AMC, AIME and Minerva (App. B.2.1 Table 5, "
                                     "Qwen3-4B junior: 74.1→76.6, 34.2→40.0, 39.6→39.8)"),
        "drift": Claim(**common, section="§4.4 (Figure 4)",
                       metric="mean |log-ratio| to the junior on its frequent tokens "
                              "(survival-curve area, jackknife per problem)",
                       higher_is_better=False,
                       statement="the Tandem senior's token marginals drift less from the "
                                 "junior's",
                       paper_value="TRL's survival curve below GRPO's at every threshold; "
                                   "KL 14% lower"),
        "legibility": Claim(**common, section="§4.5 (Table 1)",
                            metric="junior cross-entropy (nats/token)", higher_is_better=False,
                            statement="the junior finds the Tandem senior's outputs more "
                                      "predictable",
                            paper_value="TRL lower (App. B.2.2 Table 6, Qwen3-4B junior: "
                                        "0.132 vs 0.122 nats)"),
    }


def _key(bench: str, problem_id: str) -> str:
    return f"{bench}/{problem_id}"


def solo_rows(wh: Any, model: str, bench: str) -> list[dict[str, Any]]:
    """The solo (mode ``single``) samples of the newest evaluation of ``model`` on ``bench``
    that generated an answer (the drift and legibility corpora)."""
    from eval.claims.readers import newest_samples

    return [r for r in newest_samples(wh, model, bench)
            if r.get("mode") in (None, "single") and r.get("gen_error") is None]


def handoff_scores(wh: Any, senior: str, junior: str, bench: str, *, k: int,
                   schedule: str = "alternate", p: float = 0.5) -> dict[str, dict[str, float]]:
    """Per-problem handoff pass@k of ``senior`` with ``junior`` on ``bench``, for each start
    (``{"senior": {...}, "junior": {...}}``; newest evaluation of each team)."""
    from eval.claims import ClaimError
    from eval.claims.readers import newest_samples
    from eval.handoff import handoff_label
    from eval.tandem_metrics import per_problem

    out = {}
    for starts in ("senior", "junior"):
        rows = newest_samples(wh, handoff_label(senior, junior, starts, schedule, p), bench)
        out[starts] = per_problem(rows, "pass@k", k)
        if not out[starts]:
            raise ClaimError(f"handoff pass@{k}: no problem of {bench} has {k} answered team "
                             f"samples of {senior} with {junior} ({starts} first); evaluate "
                             f"with k >= {k}")
    return out


def problem_counts(rows: Sequence[Mapping[str, Any]], tokenize: Callable[[str], list[int]],
                   vocab_size: int, bench: str) -> dict[str, Any]:
    """Token counts of each problem's outputs (``eval.tandem_metrics.token_counts``), keyed
    ``<bench>/<problem_id>``."""
    from eval.tandem_metrics import token_counts

    by_problem: dict[str, list[list[int]]] = {}
    for r in rows:
        by_problem.setdefault(_key(bench, r["problem_id"]), []).append(
            tokenize(r.get("output") or ""))
    return {p: token_counts(ids, vocab_size) for p, ids in by_problem.items()}


def tandem_claims(wh: Any, models: Mapping[str, str], junior: str, benchmarks: Sequence[str], *,
                  tokenize: Callable[[str], list[int]], vocab_size: int, handoff_k: int = 1,
                  schedule: str = "alternate", handoff_p: float = 0.5, min_count: int = 20,
                  smoothing: float = 0.5, n_boot: int = 10_000
                  ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The claim's four rows from the newest evaluations of the two seniors (``models``:
    ``{"grpo": model id, "tandem": model id}``) and ``junior`` on ``benchmarks`` (problems
    pooled over benchmarks, keyed ``<bench>/<problem_id>``), and the figures beside them
    (each start's handoff means, each arm's θ and the frequent tokens). Legibility rows are
    read from ``tandem_legibility`` (partition ``<bench>|<senior>|<junior>``)."""
    from assets.tandem import legibility_partition
    from eval.claims import ClaimError, judge
    from eval.claims.readers import problem_scores
    from eval.tandem_metrics import drift_by_problem, per_problem

    claims = _claims(handoff_k)
    solo: dict[str, dict[str, float]] = {a: {} for a in ARMS}
    team: dict[str, dict[str, float]] = {a: {} for a in ARMS}
    legible: dict[str, dict[str, float]] = {a: {} for a in ARMS}
    counts: dict[str, dict[str, Any]] = {a: {} for a in (*ARMS, "junior")}
    details: dict[str, Any] = {"handoff_by_start": {}}
    for bench in benchmarks:
        for arm in ARMS:
            model = models[arm]
            solo[arm].update({_key(bench, p): v for p, v in
                              problem_scores(wh, model, bench, mode="single").items()})
            starts = handoff_scores(wh, model, junior, bench, k=handoff_k, schedule=schedule,
                                    p=handoff_p)
            both = set(starts["senior"]) & set(starts["junior"])
            team[arm].update({_key(bench, p): (starts["senior"][p] + starts["junior"][p]) / 2
                              for p in both})
            details["handoff_by_start"][f"{bench}/{arm}"] = {
                s: sum(v.values()) / len(v) for s, v in starts.items()}
            leg = wh.read("tandem_legibility",
                          partition=legibility_partition(bench, model, junior)).to_pylist()
            if not leg:
                raise ClaimError(f"no tandem_legibility rows of {model} with junior {junior} on "
                                 f"{bench}: compute legibility for this arm first")
            legible[arm].update({_key(bench, p): v for p, v in
                                 per_problem(leg, "junior_ce_nats").items()})
            counts[arm].update(problem_counts(solo_rows(wh, model, bench), tokenize,
                                              vocab_size, bench))
        counts["junior"].update(problem_counts(solo_rows(wh, junior, bench), tokenize,
                                               vocab_size, bench))
    shared = sorted(set(counts["junior"]) & set(counts["grpo"]) & set(counts["tandem"]))
    drift, theta = {}, {}
    for arm in ARMS:
        drift[arm], theta[arm], frequent = drift_by_problem(
            counts[arm], counts["junior"], problems=shared, min_count=min_count,
            smoothing=smoothing)
    details.update({"drift_theta": theta, "drift_frequent_tokens": frequent,
                    "drift_problems": len(shared)})
    rows = [judge(claims["solo"], solo["grpo"], solo["tandem"], n_boot=n_boot),
            judge(claims["handoff"], team["grpo"], team["tandem"], n_boot=n_boot),
            judge(claims["drift"], drift["grpo"], drift["tandem"], n_boot=n_boot),
            judge(claims["legibility"], legible["grpo"], legible["tandem"], n_boot=n_boot)]
    return rows, details


# ---- the experiment: two arms from one start, one held-out evaluation ------------------------

def start_checkpoint(context: dg.AssetExecutionContext, config: TandemClaimConfig
                     ) -> tuple[str, str]:
    """(path, checkpoint id) of the shared start: the latest ``start_from`` materialization
    (trained with ``start_recipe`` when set), or ("", "") for the recipe's model."""
    if not config.start_from:
        return "", ""
    from assets.training import latest_checkpoint

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
                f"{config.start_recipe} (`make demo` does), or set start_recipe"))
    return path, checkpoint_id


def arm_overrides(config: TandemClaimConfig, start_path: str, start_id: str
                  ) -> dict[str, list[str]]:
    """Each arm's overrides (the shared ones, the start, seed and steps; ``kind=tandem`` for
    the treatment), after checking that both resolve, that the reference is plain GRPO and the
    treatment Tandem RL with the start as its junior, and that they differ in nothing else."""
    from assets.tandem import recipe_method

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
    values = {arm: {k: v for k, v in vars(cfg).items() if not k.startswith("_")}
              for arm, cfg in resolved.items()}
    differ = sorted(k for k in set(values["grpo"]) | set(values["tandem"])
                    if repr(values["grpo"].get(k)) != repr(values["tandem"].get(k)))
    unexpected = [k for k in differ if k not in ("tandem", "checkpoint_id", "output_dir",
                                                 "logging_dir", "run_name")]
    if unexpected:
        raise dg.Failure(description=f"the two arms would not train alike: {unexpected} differ")
    return out


def heldout_benchmark() -> Any:
    """The held-out one-digit arithmetic as a benchmark: the math grader, and the training
    prompt's instruction (``pipelines.formats.BOXED_SYSTEM_PROMPT``) then the problem in the
    user turn (evaluation modes send one user turn)."""
    from eval.benchmarks import Benchmark
    from pipelines.formats import BOXED_SYSTEM_PROMPT

    instruction = BOXED_SYSTEM_PROMPT.replace("{", "{{").replace("}", "}}")
    return Benchmark(HELDOUT_BENCHMARK, HELDOUT_BENCHMARK, "math",
                     instruction + "\n\n{problem}")


def heldout_sets(config: TandemClaimConfig, arm_args: list[str]
                 ) -> list[tuple[Any, list[dict[str, Any]]]]:
    """[(benchmark, problem rows)]: the held-out arithmetic (problems of the start's recipe and
    of the arms' recipe left out) or each of ``benchmarks``."""
    if config.heldout_arith > 0:
        from training.heldout import heldout_arith, training_problems

        seen = training_problems([(config.recipe, arm_args)]
                                 + ([(config.start_recipe, [])] if config.start_recipe else []))
        try:
            rows = heldout_arith(config.heldout_arith, exclude=seen)
        except ValueError as exc:
            raise dg.Failure(description=str(exc)) from exc
        return [(heldout_benchmark(), rows)]
    if not config.benchmarks:
        raise dg.Failure(description="no held-out problems: set heldout_arith > 0 or list "
                                     "benchmarks")
    from eval.benchmarks import get as get_benchmark
    from pipelines.ingest import load_source

    out = []
    for name in config.benchmarks:
        try:
            bench = get_benchmark(name)
        except KeyError as exc:
            raise dg.Failure(description=str(exc.args[0])) from exc
        if bench.grader != "math":
            raise dg.Failure(description=f"{name} is graded by {bench.grader}; the Tandem "
                                         "claim evaluates math benchmarks")
        rows = [p.to_row() for p in load_source(bench.source).problems]
        out.append((bench, rows[:config.eval_limit] if config.eval_limit else rows))
    return out


def _model_spec(model_id: str, path: str, checkpoint_id: str | None) -> Any:
    from eval.models import ModelSpec

    return ModelSpec(model_id=model_id, kind="local", path=path, served_model=model_id,
                     checkpoint_id=checkpoint_id)


def evaluate_arms(context: dg.AssetExecutionContext, specs: Mapping[str, Any], bench: Any,
                  problems: list[dict[str, Any]], config: TandemClaimConfig, wh: Any,
                  llm: LLMResource, grader: GraderResource) -> None:
    """Both seniors and the junior served together: each senior solo, the junior solo once,
    each senior with the junior in handoff mode from both starts (Tandem RL §4.2-4.3)."""
    from assets.tandem import tandem_evaluations
    from eval.recorded import evaluate_recorded

    decoding = {"k": config.k, "temperature": config.temperature, "top_p": config.top_p,
                "max_tokens": config.max_tokens, "seed": config.seed, "limit": None}
    evaluations = []
    try:
        for arm in ARMS:
            evaluations += tandem_evaluations(
                specs[arm], specs["junior"], decoding=decoding, schedule=config.schedule,
                handoff_p=config.handoff_p, solo_junior=arm == ARMS[0], senior_key=arm,
                junior_key="junior")
    except ValueError as exc:
        raise dg.Failure(description=f"bad handoff settings: {exc}") from exc
    context.log.info(f"evaluating on {len(problems)} {bench.name} problems x {config.k}: "
                     + ", ".join(e.label for e in evaluations))
    evaluate_recorded(
        specs, evaluations, bench=bench, problems=problems, wh=wh, run_id=context.run_id,
        config=config.model_dump(),
        make_client=partial(llm.client_for, max_tokens=config.max_tokens,
                            progress=context.log.info, max_concurrency=config.max_concurrency),
        pool_factory=grader.pool, progress=context.log.info)


def legibility_of_arms(context: dg.AssetExecutionContext, specs: Mapping[str, Any],
                       bench: Any, problems: list[dict[str, Any]], config: TandemClaimConfig,
                       wh: Any) -> Any:
    """§4.4-4.5 rows of each senior's solo outputs against the junior (written like
    ``tandem_legibility``'s); returns the tokenizer (the drift part counts tokens with it)."""
    from assets.common import now
    from assets.tandem import legibility_and_drift, write_legibility
    from eval.tandem_metrics import load_pair

    started = now()
    junior = specs["junior"]
    by_id = {p["problem_id"]: p for p in problems}
    junior_rows = solo_rows(wh, junior.model_id, bench.name)
    tok = None
    for arm in ARMS:
        senior = specs[arm]
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


@dg.asset(name=TANDEM.name, group_name="results", deps=["sft_checkpoint"],
          kinds={"pytorch", "python"}, description=TANDEM.description)
def tandem_claim(context: dg.AssetExecutionContext, config: TandemClaimConfig,
                 trainer: TrainerLauncher, warehouse: WarehouseResource, llm: LLMResource,
                 grader: GraderResource) -> dg.MaterializeResult:
    from eval.claims import ClaimError
    from eval.models import safe_model_id
    from training.model_path import resolve_model

    if not 1 <= config.handoff_k <= config.k:
        raise dg.Failure(description=f"handoff_k must be between 1 and k={config.k}, got "
                                     f"{config.handoff_k}")
    wh = warehouse.get()
    start_path, start_id = start_checkpoint(context, config)
    overrides = arm_overrides(config, start_path, start_id)
    sets = heldout_sets(config, overrides["grpo"])
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
    junior_path = start_path or resolve_model(
        check_recipe("grpo", config.recipe, overrides["grpo"]).model_name_or_path)
    junior_id = start_id or safe_model_id(junior_path.rstrip("/").rsplit("/", 1)[-1])
    specs = {arm: _model_spec(a["checkpoint_id"], a["path"], a["checkpoint_id"])
             for arm, a in arms.items()}
    specs["junior"] = _model_spec(junior_id, junior_path, start_id or None)
    tok = None
    for bench, problems in sets:
        evaluate_arms(context, specs, bench, problems, config, wh, llm, grader)
        tok = legibility_of_arms(context, specs, bench, problems, config, wh)
    rows: list[dict[str, Any]] = []
    details: dict[str, Any] = {}
    error: ClaimError | None = None
    try:
        rows, details = tandem_claims(
            wh, {a: specs[a].model_id for a in ARMS}, junior_id, [b.name for b, _ in sets],
            tokenize=lambda text: tok.encode(text, add_special_tokens=False),
            vocab_size=len(tok), handoff_k=config.handoff_k, schedule=config.schedule,
            handoff_p=config.handoff_p, min_count=config.min_count,
            smoothing=config.smoothing, n_boot=config.n_boot)
    except ClaimError as exc:
        error = exc

    def compute() -> list[dict[str, Any]]:
        if error is not None:
            raise error
        return rows

    details.update({"arms": {a: {"checkpoint_id": v["checkpoint_id"], "steps": v["steps"]}
                             for a, v in arms.items()},
                    "junior": junior_id, "heldout_problems": sum(len(p) for _, p in sets),
                    "benchmarks": [b.name for b, _ in sets]})
    result = record_claims(context, wh, TANDEM, config.scale, compute,
                           {**config.model_dump(), **details}, derived=tuple(details))
    return dg.MaterializeResult(metadata={
        **(result.metadata or {}),
        "arms": dg.MetadataValue.json(json.loads(json.dumps(details["arms"]))),
        "junior": junior_id,
        "details": dg.MetadataValue.json(json.loads(json.dumps(details, default=str))),
    })


EXPERIMENTS = [TANDEM]
ASSETS = [tandem_claim]
