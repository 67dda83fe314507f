"""Result asset of SxS's headline latency claim (SxS Table 1, §4.2-4.3): SFT on
entailment-aligned interleaved traces discloses content earlier than SFT on the same traces in
think-then-answer form.

``sxs_latency_claim`` trains two SFT arms from ONE start (the recipe's model) with the same
recipe, seed, step count and the same traces, in the same order: ``standard`` on the
``sxs_sft_dataset`` rows of variant ``standard`` (all reasoning, then the answer) and ``sxs``
on the rows of variant ``sxs`` (Algorithm 1's interleaving of the same blocks). Both arms are
evaluated in ``interleaved`` mode (the think/speak system prompt, the speak projection graded)
on the same held-out benchmark problems (those whose text is also a training trace's problem
are left out) with the same decoding, through ``eval.recorded.evaluate_recorded``. The claim's
parts, per problem (mean over its samples), paired by problem:

- ABO (SxS §4.2: mean position of each speak block's first token) lower -- ``better``;
- AIRW (SxS §4.2: mean think span before each speak block, the wait before the first one
  included, as Table 1's standard-CoT rows have AIRW = ABO; ``eval.latency``) lower --
  ``better``;
- accuracy in the paper's direction: standard-CoT SFT more accurate than SxS SFT -- ``better``
  with the arms swapped (``eval.sxs_claims.ACCURACY_PART``).

Lower ABO and AIRW mean earlier disclosure in both of §4.2's definitions, so both are judged
with ``higher_is_better=False``. The latency parts are measured from the outputs with one rule
for both arms (``eval.latency.disclosure_latency``): only text inside explicit ``<speak>`` tags
is shown to the user (SxS Eq. 8), so untagged text is generated but not shown; an output that
shows nothing -- cut while thinking, or ignoring the format -- scores a block after its whole
generation (SxS §2.3's convention k* = K+1: ABO = T + 1, AIRW = T, T its generated tokens).
Every problem both arms generated for is paired; none is dropped for showing nothing, so an arm
cannot gain by leaving the format. The asset stores, per arm, its output shapes (untagged and
malformed counts among them), how many outputs showed nothing, and the share that follows the
arm's own training format (standard CoT: one think block, then one speak block; SxS: a clean
think/speak stream), in the claim rows' config and on the page. That share is a figure, not a
setup check: a check compares the two arms and holds by construction, while this is a level
per arm that the run measures (no arm here is the reference for it). It is also the run's
validity rule (``eval.sxs_claims.FORMAT_FLOOR``, fixed before any run of this design): when an
arm writes its own format in fewer than half of its outputs, every part is ``inconclusive``
with reason ``invalid_arm`` naming the arm and its share, since that arm has not learned what
the comparison is about.

The paper's own SFT rows do not keep accuracy: Table 1 reports SxS SFT below standard-CoT SFT
(AIME25, Qwen3-4B 38.3 vs 62.9; Qwen3-30B-A3B 50.8 vs 76.9), the "alignment tax" that §4.3's
RL stage recovers. The paper claims no "keeps accuracy" after SFT, so the accuracy part states
what Table 1 reports: it is reproduced when standard-CoT SFT is significantly more accurate.

Alignments: at ``cpu`` scale the embedded model is too small to judge entailment, so
``sxs_alignments`` uses the scripted ``pipelines.sxs_judge.EvidenceJudge`` through the same
interface; at ``paper`` scale the ``llm`` resource judges (SxS App. A Table 3: GPT-OSS-120B;
point the resource at it). The judge's quality figures (its name, collapsed share, visible
segments, failed calls, values disclosed before the reasoning wrote them) are written with the
claim rows (``config_json``) and shown beside the verdict.

The claim's computation lives in ``eval.sxs_claims`` (parts, judge quality, held-out problems),
``eval.latency`` (each output's latency and shape, per-problem pairing) and
``training.sxs_arms`` (the arms' overrides and data); this module wires them to the trainer,
the ``llm`` resource and the grader. Both arms decode with ``sampling`` (``assets.sampling``).
"""

from collections.abc import Mapping
from functools import partial
from typing import Any

import dagster as dg

from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.results.experiments import Experiment, ResultConfig, record_claims
from assets.sampling import SamplingConfig
from assets.training import TrainerLauncher, check_recipe, launch_arm
from eval.claims import ClaimError
from eval.sxs_claims import (
    ACCURACY_PART,
    ARMS,
    LATENCY_PARTS,
    MODE,
    format_invalid_text,
    heldout_problems,
    judge_quality,
)
from training.sxs_arms import arm_overrides, same_traces, unlike_settings

SXS = Experiment(
    name="sxs_latency_claim",
    # at cpu scale the accuracy part is plumbing: the 135M model's GSM8K accuracy sits near
    # zero in both arms, so it cannot show an alignment tax (see limits["cpu"])
    plumbing={"cpu": ("accuracy",)},
    paper="SxS",
    description="SxS Table 1 (SFT rows): SFT on interleaved traces vs SFT on the same traces in "
                "think-then-answer form, from one start with the same steps and seed, both "
                "evaluated in interleaved mode on held-out problems (ABO and AIRW lower; "
                "accuracy lower, the alignment tax Table 1 reports).",
    upstream=("traces", "sxs_alignments", "sxs_sft_dataset"),
    scales={
        "cpu": {
            # Short traces: GSM8K's worked solutions (calculator notes as reasoning, the lines
            # as the answer; ``pipelines.ingest.traces.adapt_gsm8k_worked``), 240-560 tokens
            # per SFT example with the system prompt. The reasoning traces (620-1,010 tokens at
            # the shortest) were piloted first: in up to 64 steps neither arm wrote its own
            # format in half its outputs (15-55% per arm), the floor the latency parts need.
            # This design was fixed before its first run, and its first seed's format share
            # decided, with that same floor, whether seeds 1-2 ran.
            "traces": {"config": {"sources": ["gsm8k_worked"], "limit": 300}},
            "sxs_alignments": {"config": {"judge": "evidence"}},
            "sxs_sft_dataset": {"config": {"max_example_tokens": 512}},
            # max_length leaves room for the chat template's tokens; one epoch of 256 traces per
            # arm (32 steps of 8), evaluated at SxS Table 3's sampling (T 1.0, top-p 1.0) on 40
            # held-out GSM8K test problems
            "sxs_latency_claim": {"config": {
                "recipe": "sxs_sft.cpu", "max_steps": 32, "dataset_limit": 256,
                "overrides": ["max_length=576", "per_device_train_batch_size=8",
                              "save_steps=1000", "torch_threads=2"],
                "benchmark": "gsm8k", "eval_limit": 40,
                "sampling": {"k": 1, "temperature": 1.0, "max_tokens": 512}}},
        },
        "paper": {
            # SxS §4.1 / App. A Table 3: SFT corpus of (x, r, a) triples from DeepMath,
            # OpenMathReasoning and OpenThoughts (here: the trace sources, from the hub),
            # GPT-OSS-120B as entailment checker (the `llm` resource must serve it)
            "traces": {"config": {"sources": ["s1k", "limo", "openmathreasoning"],
                                  "limit": None, "prefer": "hub"}},
            "sxs_alignments": {"config": {"judge": "llm", "judge_max_tokens": 64,
                                          "max_concurrency": 64}},
            "sxs_sft_dataset": {"config": {"max_example_tokens": 32768,
                                           "tokenizer_path": "Qwen/Qwen3-4B"}},
            "sxs_latency_claim": {"config": {
                # §4.1: Qwen3-4B, post-trained checkpoint; Table 3: lr 2e-4, max sequence
                # 32,768 tokens; the SFT step count is not stated: one epoch of the corpus
                "recipe": "sxs_sft", "max_steps": None, "dataset_limit": None,
                "overrides": ["model_name_or_path=Qwen/Qwen3-4B", "learning_rate=2.0e-4",
                              "max_length=32768", "num_train_epochs=1"],
                # §4.2 and Table 3: AIME25, k = 16, temperature 1.0, top-p 1.0; generation
                # up to 39,000 tokens
                "benchmark": "aime25", "eval_limit": None,
                "sampling": {"k": 16, "temperature": 1.0, "top_p": 1.0, "max_tokens": 39000},
                "tokenizer_path": "Qwen/Qwen3-4B"}},
        },
    },
    limits={"cpu": "135M embedded model, one epoch (32 steps of 8) of 256 short traces made "
                   "from GSM8K's worked solutions (calculator notes as the reasoning, the "
                   "solution lines as the answer) aligned by the scripted evidence judge, 40 "
                   "held-out GSM8K problems at T 1.0: the reasoning is scratch arithmetic, not "
                   "an exploratory trace, and it is a few lines where the paper's run to "
                   "thousands of tokens, so the latency parts test whether SFT teaches a model "
                   "to place its visible blocks early, not the paper's magnitudes; accuracy is "
                   "near zero in both arms, so its part is a plumbing run",
            "paper": "the SFT corpus comes from weft's trace sources (s1K, LIMO, "
                     "OpenMathReasoning), not from DeepMath and OpenThoughts; the SFT step "
                     "count is not stated (one epoch here); the GPT-OSS-120B entailment judge "
                     "is whatever the `llm` resource serves: point it at GPT-OSS-120B"},
)


class SxsClaimConfig(ResultConfig):
    """Both arms: the same recipe, start, ``seed``, steps and traces; both evaluated alike
    (``sampling``: k, temperature, top_p, max_tokens). ``seed`` is the draw's one seed
    (training and the evaluation's sampling; ``sampling.seed`` must be left unset or equal
    it)."""

    recipe: str = "sxs_sft.cpu"  # an SFT recipe; both arms use it
    max_steps: int | None = 8  # None: the recipe's (epochs)
    seed: int = 0
    dataset_limit: int | None = 16  # traces per arm (the same ones); None: all
    overrides: list[str] = []  # key=value for both arms (e.g. "learning_rate=1e-5")
    benchmark: str = "gsm8k"  # held-out problems (math or multiple choice)
    eval_limit: int | None = 20  # problems (the first ones not among the training traces)
    sampling: SamplingConfig = SamplingConfig(k=1, temperature=0.0, top_p=1.0, max_tokens=512)
    tokenizer_path: str = ""  # counts the latency tokens; "": the embedded model's
    max_concurrency: int = 8
    n_boot: int = 10_000


# ---- the experiment: two SFT arms, one held-out evaluation ------------------------------------

def _overrides(config: SxsClaimConfig, variant: str) -> list[str]:
    return arm_overrides(variant, config.overrides, seed=config.seed,
                         max_steps=config.max_steps, dataset_limit=config.dataset_limit)


def checked_arms(config: SxsClaimConfig) -> dict[str, list[str]]:
    """Each arm's overrides, after checking both resolve (a bad recipe fails before anything is
    launched) and differ in their dataset only."""
    overrides = {variant: _overrides(config, variant) for variant in ARMS}
    resolved = {v: check_recipe("sft", config.recipe, o) for v, o in overrides.items()}
    unexpected = unlike_settings(resolved)
    if unexpected:
        raise dg.Failure(description=f"the two SFT arms would not train alike: {unexpected} "
                                     "differ")
    return overrides


def _sampling(config: SxsClaimConfig) -> SamplingConfig:
    """``config.sampling`` with the draw's one seed."""
    if config.sampling.seed not in (0, config.seed):
        raise dg.Failure(description=f"sampling.seed ({config.sampling.seed}) differs from "
                                     f"seed ({config.seed}): the claim samples with its one "
                                     "seed; set `seed`")
    return config.sampling.model_copy(update={"seed": config.seed})


def _eval_config(config: SxsClaimConfig) -> Any:
    """Interleaved mode (the think/speak prompt, the speak projection graded) with the arms'
    one decoding."""
    from eval.modes import build_mode

    try:
        mode = build_mode(mode=MODE, tokenizer_path=config.tokenizer_path or None)
    except (TypeError, ValueError) as exc:
        raise dg.Failure(description=f"bad evaluation settings: {exc}") from exc
    return _sampling(config).eval_config(mode=mode)


def _train(context: dg.AssetExecutionContext, trainer: TrainerLauncher, wh: Any,
           variant: str, recipe: str, overrides: list[str]) -> dict[str, Any]:
    """One SFT arm through the trainer launcher: its checkpoint id, path and last step."""
    context.log.info(f"SxS claim, arm {variant}: {recipe} {' '.join(overrides)}")
    ck, path, rows = launch_arm(context, trainer, wh, variant, recipe, overrides, kind="sft")
    steps = [r["step"] for r in rows if r.get("step") is not None]
    return {"checkpoint_id": ck, "path": path, "steps": max(steps, default=0)}


def evaluate_arms(context: dg.AssetExecutionContext, arms: Mapping[str, Mapping[str, Any]],
                  bench: Any, problems: list[dict[str, Any]], config: SxsClaimConfig, wh: Any,
                  llm: LLMResource, grader: GraderResource) -> None:
    """Serve both checkpoints and evaluate them in interleaved mode on the same problems with
    the same decoding (rows under ``<benchmark>@<checkpoint>``)."""
    from eval.models import ModelSpec
    from eval.recorded import Evaluation, evaluate_recorded

    cfg = _eval_config(config)
    specs, evaluations = {}, []
    for variant in ARMS:
        ck = str(arms[variant]["checkpoint_id"])
        specs[ck] = ModelSpec(model_id=ck, kind="local", path=str(arms[variant]["path"]),
                              served_model=ck, checkpoint_id=ck)
        evaluations.append(Evaluation(ck, cfg, ck, checkpoint_id=ck))
    context.log.info(f"evaluating both arms in {MODE} mode on {len(problems)} {bench.name} "
                     f"problems, k={cfg.k}")
    evaluate_recorded(
        specs, evaluations, bench=bench, problems=problems, wh=wh, run_id=context.run_id,
        config=config.model_dump(),
        make_client=partial(llm.client_for, max_tokens=cfg.max_tokens,
                            requests=len(problems) * cfg.k, progress=context.log.info,
                            max_concurrency=config.max_concurrency),
        pool_factory=grader.pool, progress=context.log.info)


def _training_traces(config: SxsClaimConfig, wh: Any
                     ) -> tuple[list[str], dict[str, dict[str, Any]], dict[str, Any]]:
    """(the trace ids both arms train on, every trace by id, the judge's quality figures on
    those traces' alignments)."""
    try:
        trace_ids = same_traces(dataset_limit=config.dataset_limit, seed=config.seed)
        traces = {r["trace_id"]: r for r in wh.read("traces").to_pylist()}
        used = set(trace_ids)
        alignments = [r for r in wh.read("sxs_alignments").to_pylist() if r["trace_id"] in used]
        return trace_ids, traces, judge_quality(alignments, traces)
    except ValueError as exc:
        raise dg.Failure(description=str(exc)) from exc


def _heldout(config: SxsClaimConfig, trace_problems: list[str]
             ) -> tuple[Any, list[dict[str, Any]], int]:
    try:
        return heldout_problems(config.benchmark, config.eval_limit, trace_problems)
    except ValueError as exc:
        raise dg.Failure(description=str(exc)) from exc


def _arm_latency(wh: Any, model: str, benchmark: str, tokenizer: Any) -> Any:
    """One arm's per-problem latency from its newest interleaved-mode samples (``eval.latency``:
    only explicit speak blocks are shown; nothing shown scores the full length)."""
    from eval.claims.readers import newest_samples
    from eval.latency import arm_latency

    samples = [s for s in newest_samples(wh, model, benchmark) if s.get("mode") == MODE]
    if not samples:
        raise ClaimError(f"no {MODE}-mode samples of {model!r} on {benchmark!r}: evaluate "
                         "that arm first")
    return arm_latency(samples, tokenizer)


def _latency_rows(wh: Any, arms: Mapping[str, Mapping[str, Any]], benchmark: str,
                  config: SxsClaimConfig) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The ABO and AIRW rows, paired over every problem both arms generated for (a problem
    whose output shows nothing scores the full length, in either arm), and the format counts
    per arm (``eval.latency``)."""
    from eval.claims import judge
    from eval.latency import paired_latency
    from eval.modes import load_tokenizer

    tokenizer = load_tokenizer(config.tokenizer_path or None)
    lat = {v: _arm_latency(wh, str(arms[v]["checkpoint_id"]), benchmark, tokenizer)
           for v in ARMS}
    rows = []
    for column, claim in LATENCY_PARTS:
        ref, treat = paired_latency(lat["standard"], lat["sxs"], column)
        if len(ref) < 2:
            raise ClaimError(f"{column.upper()}: only {len(ref)} held-out problem(s) with a "
                             "generated sample in both arms; check the evaluation's errors "
                             "(gen_error) and run it again")
        rows.append(judge(claim, ref, treat, n_boot=config.n_boot))
    formats = {v: lat[v].summary(v) for v in ARMS}
    formats["problems_paired"] = len(paired_latency(lat["standard"], lat["sxs"], "abo")[0])
    return rows, formats


def _judged(wh: Any, arms: Mapping[str, Mapping[str, Any]], benchmark: str,
            config: SxsClaimConfig
            ) -> tuple[list[dict[str, Any]], dict[str, Any], ClaimError | None]:
    """The claim's rows and each arm's output formats, or the ClaimError that stops them
    (judged before the claims run opens so that its config carries the counts; the error is
    re-raised inside ``record_claims``, which records the failed run)."""
    from eval.claims import judge, mark_invalid_arm
    from eval.claims.readers import problem_scores

    try:
        rows, formats = _latency_rows(wh, arms, benchmark, config)
        reference, treatment = (str(arms[v]["checkpoint_id"]) for v in ARMS)
        # arms swapped: the part's treatment is standard-CoT SFT (the paper's more accurate arm)
        rows.append(judge(ACCURACY_PART, problem_scores(wh, treatment, benchmark, mode=MODE),
                          problem_scores(wh, reference, benchmark, mode=MODE),
                          n_boot=config.n_boot))
        # the validity rule: an arm that has not learned its own format is no evidence
        invalid = format_invalid_text(formats)
        return [mark_invalid_arm(r, invalid) for r in rows], formats, None
    except ValueError as exc:  # ClaimError is one
        return [], {}, exc if isinstance(exc, ClaimError) else ClaimError(str(exc))


def _format_metadata(formats: Mapping[str, Any]) -> dict[str, Any]:
    """Per arm: the share of outputs in its own format, and the untagged and malformed
    counts (shown on the page beside the verdict)."""
    out: dict[str, Any] = {}
    for v in ARMS:
        arm = formats.get(v) or {}
        rate = arm.get("format_following")
        out[f"format_following_{v}"] = None if rate is None else round(float(rate), 3)
        out[f"untagged_outputs_{v}"] = arm.get("untagged")
        out[f"malformed_outputs_{v}"] = arm.get("malformed")
        out[f"outputs_showing_nothing_{v}"] = arm.get("without_shown_block")
    return {k: v for k, v in out.items() if v is not None}


@dg.asset(name=SXS.name, group_name="results", deps=["sxs_sft_dataset"],
          kinds={"pytorch", "python"}, description=SXS.description)
def sxs_latency_claim(context: dg.AssetExecutionContext, config: SxsClaimConfig,
                      trainer: TrainerLauncher, warehouse: WarehouseResource, llm: LLMResource,
                      grader: GraderResource) -> dg.MaterializeResult:
    wh = warehouse.get()
    _eval_config(config)  # bad evaluation settings fail before anything is trained
    overrides = checked_arms(config)
    trace_ids, traces, quality = _training_traces(config, wh)
    bench, problems, overlap = _heldout(
        config, [traces[t]["problem"] for t in trace_ids if t in traces])
    arms = {v: _train(context, trainer, wh, v, config.recipe, overrides[v]) for v in ARMS}
    if arms["sxs"]["steps"] != arms["standard"]["steps"]:
        raise dg.Failure(description=f"the arms trained different step counts: "
                                     f"{ {v: a['steps'] for v, a in arms.items()} }")
    evaluate_arms(context, arms, bench, problems, config, wh, llm, grader)
    rows, formats, error = _judged(wh, arms, bench.name, config)
    invalid = format_invalid_text(formats) if formats else None
    if invalid:
        context.log.warning(f"every part is inconclusive (invalid_arm): {invalid}; train more "
                            "steps so that both arms write their own format")

    def compute() -> list[dict[str, Any]]:
        if error is not None:
            raise error
        return rows

    details = {"arms": {v: {"checkpoint_id": a["checkpoint_id"], "steps": a["steps"]}
                        for v, a in arms.items()},
               "training_traces": len(trace_ids), "heldout_problems": len(problems),
               "heldout_left_out_as_training": overlap, "judge_quality": quality,
               "output_formats": formats}
    result = record_claims(context, wh, SXS, config.scale, compute,
                           {**config.model_dump(), **details}, derived=tuple(details))
    return dg.MaterializeResult(metadata={
        **(result.metadata or {}),
        "judge_quality": dg.MetadataValue.json(quality),
        "judge": ", ".join(quality["judge"]),
        "output_formats": dg.MetadataValue.json(formats),
        **_format_metadata(formats),
        "arms": dg.MetadataValue.json(details["arms"]),
        "training_traces": len(trace_ids), "heldout_problems": len(problems),
        "benchmark": bench.name,
    })


EXPERIMENTS = [SXS]
ASSETS = [sxs_latency_claim]
