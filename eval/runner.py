"""Evaluate one model endpoint on one benchmark: render, generate k samples, grade, score.

Generation goes through ``pipelines.llm.LLMClient`` (concurrent, cached, retried) in one of the
modes of ``eval.modes``; sample i of a problem uses seed ``seed + i`` so runs are reproducible
and each sample is its own cache entry. Math and multiple-choice answers are graded in a
process pool (``eval.grading_pool.GradingPool``; math-verify's timeouts need each worker's main
thread); code is run against the benchmark's tests in the sandbox (``eval.code_grader``).
Scores: avg@k, unbiased pass@k (k = 1, 2, 4, … ≤ n, and n), maj@k, each with a bootstrap 95%
CI over problems; per budget and per thinking cap when the mode has them.

Math answers are extracted by the evaluation's named rule (``EvalConfig.extraction``, a key of
``eval.extraction.EXTRACTION_RULES``): ``strict`` (default) credits only a stated final answer,
``flexible`` the last number in the text (lm-evaluation-harness's GSM8K "flexible-extract").
Every sample and score row of a math benchmark carries the rule in ``extraction_rule`` (NULL
for choice and code benchmarks, which the rule does not apply to). Generation speed is the
client's ``usage()`` (``pipelines.llm.Usage``): tokens the server generated over the time spent
generating them; cache hits are reported apart and never count as throughput.

Not guaranteed: identical outputs across different servers or hardware (sampling differs).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from eval import metrics
from eval.benchmarks import Benchmark
from eval.modes import Job, Mode, Run, SingleMode

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalConfig:
    """Sampling and size of one evaluation, and its generation mode (``eval.modes``).

    Greedy decoding ignores nucleus sampling: with ``temperature == 0`` the stored ``top_p``
    is 1.0 whatever was given, so the request, the cache key and the stored config say what
    was really done."""

    k: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 512  # per answer (per turn in tool mode); budgeted mode uses budget_limit
    seed: int = 0
    limit: int | None = None
    mode: Mode = field(default_factory=SingleMode)
    extraction: str = "strict"  # math answer extraction rule (eval.extraction.EXTRACTION_RULES)

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if self.k > 1 and self.temperature == 0.0:
            raise ValueError(
                "k > 1 with temperature 0 gives k identical samples; set temperature > 0 "
                "(e.g. 0.6) or k = 1"
            )
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not isinstance(self.mode, Mode):
            raise TypeError(f"EvalConfig.mode must be a generation mode (eval.modes.build_mode("
                            f"mode=...) or a Mode class), got {type(self.mode).__name__}")
        if self.temperature == 0:
            object.__setattr__(self, "top_p", 1.0)
        from eval.extraction import extraction_policy

        extraction_policy(self.extraction)  # ValueError naming the known rules


@dataclass
class EvalResult:
    samples: list[dict[str, Any]]
    scores: list[dict[str, Any]]
    generation_s: float = 0.0
    grading_s: float = 0.0
    completion_tokens: int = 0
    errors: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    # what generation cost: generated vs cached calls and tokens, time spent generating (None
    # when the client does not count it, e.g. a test double without ``usage``)
    usage: Any = None


def select_problems(problems: Iterable[Mapping[str, Any]], limit: int | None) -> list[dict]:
    """Deterministic slice: problems ordered by problem_id, first ``limit``."""
    rows = sorted((dict(p) for p in problems), key=lambda r: r["problem_id"])
    return rows[:limit] if limit else rows


def build_messages(bench: Benchmark, problem: Mapping[str, Any] | str) -> list[dict[str, str]]:
    return [{"role": "user", "content": bench.render(problem)}]


def served_context_window(client: Any) -> int | None:
    """The context length the server reports for the client's model (vLLM lists
    ``max_model_len`` in ``GET /models``); None when the server does not say or cannot be asked."""
    from pipelines.llm import EndpointUnreachable, get_models

    base_url, model = getattr(client, "base_url", None), getattr(client, "model", None)
    if not base_url or not model:
        return None
    try:
        # the client keeps its key private; the probe needs it for servers that check keys
        status, body = get_models(base_url, getattr(client, "_api_key", "") or "")
        if status != 200:
            return None
        for item in json.loads(body).get("data", []):
            if isinstance(item, dict) and item.get("id") == model:
                value = item.get("max_model_len")
                return int(value) if isinstance(value, int) and value > 0 else None
    except (EndpointUnreachable, ValueError, AttributeError):
        return None
    return None


@dataclass(frozen=True)
class Plan:
    """What one evaluation generates, decided once: the problems (``cfg.limit`` applied,
    :func:`select_problems`) and the mode's generation jobs for them (``Mode.plan``: problem x
    sample, x budget or cap where the mode varies them). Callers that size timeouts from the
    jobs pass the same plan on to :func:`evaluate`."""

    problems: list[dict[str, Any]]
    jobs: list[Any]


def plan_evaluation(problems: Iterable[Mapping[str, Any]], cfg: EvalConfig) -> Plan:
    """The :class:`Plan` of evaluating ``problems`` under ``cfg``."""
    chosen = select_problems(problems, cfg.limit)
    return Plan(chosen, cfg.mode.plan(chosen, cfg.k))


async def generate(client: Any, bench: Benchmark, problems: list[dict], cfg: EvalConfig,
                   *, model_label: str, sandbox: Any | None = None,
                   jobs: list[Any] | None = None) -> list[dict[str, Any]]:
    """One row per job of the mode (problem x sample, x budget or cap where the mode varies
    them) with the raw output and the graded text; not graded yet. Every mode goes through
    the same steps (``eval.modes.base``): plan (unless ``jobs`` is the plan already made for
    ``problems``), prepare, then per job messages, limit, generate, graded text and the mode's
    own columns."""
    from pipelines.llm import SamplingParams

    mode = cfg.mode
    jobs = mode.plan(problems, cfg.k) if jobs is None else jobs
    run = Run(client=client, bench=bench, sandbox=sandbox, tag=f"eval/{bench.name}/{mode.name}",
              context_window=lambda: served_context_window(client))
    await mode.prepare(run, jobs)

    async def one(job: Job) -> dict[str, Any]:
        params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p,
                                max_tokens=mode.max_tokens(run, job, cfg.max_tokens),
                                seed=cfg.seed + job.index, n=1)
        messages = mode.messages(bench, job)
        row = {
            "model": model_label, "benchmark": bench.name, "problem_id": job.problem["problem_id"],
            "sample_index": job.index, "prompt": "" if bench.private_text else messages[-1]["content"],
            "gold": job.problem["answer"], "seed": cfg.seed + job.index, "mode": mode.name,
            "budget": job.budget, "thinking_cap": job.cap,
        }
        row.update(await mode.generate(run, job, messages, params))
        if row.get("graded_text") is None:
            row["graded_text"] = mode.graded_text(row["output"])
        row.update(mode.sample_fields(run, job, row))
        return row

    return await client.map(one, jobs, desc=f"generate {bench.name} ({mode.name})")


def code_problem(problem: Mapping[str, Any]) -> dict[str, Any]:
    """The benchmark-file-shaped dict ``eval.code_grader`` expects, from a `problems` row."""
    meta = problem.get("meta") or "{}"
    meta = json.loads(meta) if isinstance(meta, str) else dict(meta)
    out = {"benchmark": problem["source"], "prompt": problem["problem"], "problem": problem["problem"],
           **meta}
    # `solution` keeps the code's leading indentation (`answer` is stripped at ingestion)
    reference = problem.get("solution") or (problem.get("answer") if problem.get("answer") != "<tests>" else "")
    if reference:
        out.setdefault("canonical_solution", reference)
    return out


def grade(rows: list[dict[str, Any]], bench: Benchmark, pool: Any | None = None, *,
          problems: Mapping[str, Mapping[str, Any]] | None = None,
          sandbox: Any | None = None, extraction: str = "strict") -> list[dict[str, Any]]:
    """Fill extracted / extraction_method / extraction_rule / correct / grade_error in place
    (and return rows). ``correct`` stays None for a failed generation (``gen_error`` set): it
    is not an answer. ``extraction`` names the math extraction rule
    (``eval.extraction.EXTRACTION_RULES``); rows of other graders get ``extraction_rule`` None.

    The graded text is ``graded_text`` when the mode produced one (speak projection, tool
    answer), else the raw output; the benchmark's normaliser is applied first. Answers are
    graded in ``pool`` or, without one, in the process-wide warm pool
    (``eval.grading_pool.shared_pool``): extraction and verification of each answer always run
    together under one per-item wall-clock limit, whatever the text holds (in a daemonic
    process, which cannot start workers, that limit is ``eval.graders.grade_many_serial``'s, in
    this process)."""
    texts = []
    for r in rows:
        text = r.get("graded_text")
        text = r.get("output", "") if text is None else text
        texts.append(bench.normalizer(text) if bench.normalizer else text)
    if bench.grader == "code":
        from eval.code_grader import extract_code, grade_code_many

        if problems is None:
            raise ValueError("code grading needs the problem rows (tests live in their meta)")
        shaped = [code_problem(problems[r["problem_id"]]) for r in rows]
        candidates = [extract_code(t, s.get("entry_point")) for t, s in zip(texts, shaped)]
        results = grade_code_many(candidates, shaped, pool=sandbox)
        for row, res in zip(rows, results):
            row["extracted"] = None
            row["extraction_method"] = "code_block"
            row["extraction_rule"] = None
            row["correct"] = None if row.get("gen_error") is not None else bool(res.passed)
            row["grade_error"] = None if res.passed else res.reason
        return rows
    from eval.extraction import extraction_policy
    from eval.graders import grade_many_serial

    kw: dict[str, Any] = {}
    rule = None
    if bench.grader == "math":
        rule, kw = extraction, {"policy": extraction_policy(extraction)}
    pairs = [(t, r["gold"]) for t, r in zip(texts, rows)]
    if pool is None and not multiprocessing.current_process().daemon:
        from eval.grading_pool import shared_pool

        pool = shared_pool()
    if pool is not None:
        results = pool.grade_many(pairs, kind=bench.grader, **kw)
    else:  # a daemonic process: in this process, under the pool's per-item limit
        results = grade_many_serial(pairs, kind=bench.grader, **kw)
    for row, res in zip(rows, results):
        row["extracted"] = res.extracted
        row["extraction_method"] = res.method
        row["extraction_rule"] = rule
        row["correct"] = None if row.get("gen_error") is not None else bool(res.correct)
        row["grade_error"] = res.error
    return rows


def score(rows: list[dict[str, Any]], *, model_label: str, benchmark: str,
          n_boot: int = 2000, seed: int = 0) -> list[dict[str, Any]]:
    """Aggregate graded rows into eval_scores rows: avg@n, pass@k, maj@n with bootstrap CIs.

    Rows of budgeted or capped runs are scored per budget / cap (metric names get a suffix,
    e.g. ``avg@k|budget=1000``). Failed generations (``gen_error`` set: no response) are not
    wrong answers: they are left out of every score and counted in each row's ``failed``;
    a problem whose samples all failed drops out of ``n_problems``, and a group in which every
    sample failed yields no score rows. With failures, problems have unequal sample counts:
    avg@k averages each problem's answered samples, pass@k uses each problem's own n (k up to
    the smallest), maj@k votes among the answered samples; ``k`` of avg@k / maj@k is the
    number of samples asked per problem.

    Each score row carries the rows' ``extraction_rule`` (None where they have none); rows
    graded by different rules cannot be scored together (ValueError)."""
    rules = {r.get("extraction_rule") for r in rows}
    if len(rules) > 1:
        raise ValueError(
            f"samples of {model_label} on {benchmark} were graded by different extraction rules "
            f"{sorted(rules, key=str)}; score each rule's samples on their own (re-grade them "
            "with one rule)")
    rule = next(iter(rules), None)
    groups: dict[str, list[dict]] = {}
    for r in rows:
        suffix = "".join(f"|{name}={r[name]}" for name in ("budget", "thinking_cap")
                         if r.get(name) is not None)
        groups.setdefault(suffix, []).append(r)
    out: list[dict[str, Any]] = []
    for suffix, group in sorted(groups.items()):
        out.extend(_score_group(group, suffix, model_label, benchmark, n_boot, seed))
    for row in out:
        row["extraction_rule"] = rule
    return out


def _score_group(rows, suffix, model_label, benchmark, n_boot, seed) -> list[dict[str, Any]]:
    asked: dict[str, int] = {}
    by_problem: dict[str, list[dict]] = {}
    failed = 0
    for r in rows:
        asked[r["problem_id"]] = asked.get(r["problem_id"], 0) + 1
        if r.get("gen_error") is not None:
            failed += 1
            continue
        by_problem.setdefault(r["problem_id"], []).append(r)
    if not by_problem:
        return []
    k_asked = max(asked.values())
    ids = sorted(by_problem)
    ordered = [sorted(by_problem[p], key=lambda s: s["sample_index"]) for p in ids]
    correct = [[bool(s["correct"]) for s in samples] for samples in ordered]
    answers = [[s.get("extracted") for s in samples] for samples in ordered]
    n_min = min(len(c) for c in correct)
    out: list[dict[str, Any]] = []

    def add(metric: str, k: int, per_problem: list[float]) -> None:
        mean, lo, hi = metrics.bootstrap_ci(per_problem, n_boot=n_boot, seed=seed)
        out.append({"model": model_label, "benchmark": benchmark, "metric": metric + suffix, "k": k,
                    "value": float(mean), "ci_low": float(lo), "ci_high": float(hi),
                    "n_problems": len(ids), "n_samples": sum(len(c) for c in correct),
                    "failed": failed})

    add("avg@k", k_asked, [sum(c) / len(c) for c in correct])
    for k in sorted({k for k in (1, 2, 4, 8, 16, 32, 64, n_min) if k <= n_min}):
        add("pass@k", k, [metrics.pass_at_k(len(c), sum(c), k) for c in correct])
    if k_asked > 1:
        add("maj@k", k_asked, [float(metrics.majority_correct(a, c)) for a, c in zip(answers, correct)])
    return out


async def evaluate(client: Any, bench: Benchmark, problems: Iterable[Mapping[str, Any]],
                   cfg: EvalConfig, *, model_label: str, pool: Any | None = None,
                   sandbox: Any | None = None, checkpoint_id: str | None = None,
                   progress: Callable[[str], None] | None = None,
                   heartbeat_s: float = 20.0, scored: bool = True,
                   plan: Plan | None = None) -> EvalResult:
    """Generate, grade and score (with ``scored=False``, generate and grade only:
    ``EvalResult.scores`` is empty, for a caller that scores the stored samples itself, as the
    ``eval_scores`` asset does, so that nothing is scored twice). Generation progress (done/total, failures, generated
    tokens/s, cache hits, ETA) goes where the client sends it (``LLMClient.progress``); the
    summary line after generation gives the tokens generated, the time spent generating them
    and the cache hits apart (``client_usage``), and ``EvalResult.usage`` keeps them; the
    grading phase logs its start, a heartbeat every ``heartbeat_s`` and its duration to
    ``progress`` (default: this module's logger, which reaches the Dagster run log or stderr,
    ``pipelines.progress``). Math answers are extracted by ``cfg.extraction``. ``plan`` is
    the :func:`plan_evaluation` of ``problems`` and ``cfg`` when the caller made it already."""
    from pipelines.progress import heartbeat

    emit = progress or log.info
    plan = plan or plan_evaluation(problems, cfg)
    chosen = plan.problems
    if not chosen:
        raise ValueError(
            f"no problems for benchmark {bench.name!r}: ingest its source {bench.source!r} first"
        )
    before = client_usage(client)
    t0 = time.perf_counter()
    rows = await generate(client, bench, chosen, cfg, model_label=model_label, sandbox=sandbox,
                          jobs=plan.jobs)
    t1 = time.perf_counter()
    after = client_usage(client)
    usage = None if before is None or after is None else after - before
    failed = sum(1 for r in rows if r.get("gen_error") is not None)
    speed = ("generation speed not measured: the client does not count usage" if usage is None
             else usage.describe())
    emit(f"generated {len(rows)} samples of {model_label} on {bench.name} in {t1 - t0:.1f}s "
         f"({failed} failed; {speed})")
    with heartbeat(f"grading {len(rows)} {bench.name} samples ({bench.grader} grader)", emit,
                   every_s=heartbeat_s):
        grade(rows, bench, pool, problems={p["problem_id"]: p for p in chosen}, sandbox=sandbox,
              extraction=cfg.extraction)
    t2 = time.perf_counter()
    for row in rows:
        row["checkpoint_id"] = checkpoint_id
        row.pop("graded_text", None)
    scores = (score(rows, model_label=model_label, benchmark=bench.name, seed=cfg.seed)
              if scored else [])
    return EvalResult(
        samples=rows, scores=scores, generation_s=t1 - t0, grading_s=t2 - t1,
        completion_tokens=sum(int(r.get("completion_tokens") or 0) for r in rows),
        errors=sum(1 for r in rows if r.get("gen_error")),
        extra=cfg.mode.run_extra(rows),
        usage=usage,
    )


def client_usage(client: Any) -> Any:
    """The ``pipelines.llm.Usage`` snapshot of ``client`` (its ``usage()``), summed over the
    distinct clients of a team that exposes ``clients()`` (``eval.handoff_team.HandoffTeam``); None
    when a client does not count usage."""
    clients = client.clients() if callable(getattr(client, "clients", None)) else [client]
    total = None
    for one in clients:
        usage = getattr(one, "usage", None)
        if not callable(usage):
            return None
        total = usage() if total is None else total + usage()
    return total
