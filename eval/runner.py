"""Evaluate one model endpoint on one benchmark: render, generate k samples, grade, score.

Generation goes through ``pipelines.llm.LLMClient`` (concurrent, cached, retried); sample i of
a problem uses seed ``seed + i`` so runs are reproducible and each sample is its own cache
entry. Grading runs in a process pool (``eval.graders.GradingPool``) because math-verify's
timeouts need each worker's main thread. Scores: avg@k, unbiased pass@k for k = 1..n (powers of
two and n), maj@k, each with a bootstrap 95% CI over problems.

Not guaranteed: identical outputs across different servers or hardware (sampling differs).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

from eval.benchmarks import Benchmark
from eval import metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalConfig:
    k: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 512
    seed: int = 0
    limit: int | None = None

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


@dataclass
class EvalResult:
    samples: list[dict[str, Any]]
    scores: list[dict[str, Any]]
    generation_s: float = 0.0
    grading_s: float = 0.0
    completion_tokens: int = 0
    errors: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def select_problems(problems: Iterable[Mapping[str, Any]], limit: int | None) -> list[dict]:
    """Deterministic slice: problems ordered by problem_id, first ``limit``."""
    rows = sorted((dict(p) for p in problems), key=lambda r: r["problem_id"])
    return rows[:limit] if limit else rows


def build_messages(bench: Benchmark, problem: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": bench.render(problem)}]


async def generate(client: Any, bench: Benchmark, problems: list[dict], cfg: EvalConfig,
                   *, model_label: str) -> list[dict[str, Any]]:
    """One row per (problem, sample) with the raw output; not graded yet."""
    from pipelines.llm import SamplingParams

    jobs = [(p, i) for p in problems for i in range(cfg.k)]

    async def one(job: tuple[dict, int]) -> dict[str, Any]:
        problem, index = job
        params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p,
                                max_tokens=cfg.max_tokens, seed=cfg.seed + index, n=1)
        messages = build_messages(bench, problem["problem"])
        result = (await client.chat(messages, params, tag=f"eval/{bench.name}", sample_index=index))[0]
        return {
            "model": model_label,
            "benchmark": bench.name,
            "problem_id": problem["problem_id"],
            "sample_index": index,
            "prompt": "" if bench.private_text else messages[-1]["content"],
            "output": result.text or "",
            "gold": problem["answer"],
            "prompt_tokens": int(result.prompt_tokens or 0),
            "completion_tokens": int(result.completion_tokens or 0),
            "latency_s": float(result.latency_s or 0.0),
            "finish_reason": result.finish_reason,
            "gen_error": result.error,
            "seed": cfg.seed + index,
        }

    return await client.map(one, jobs, desc=f"generate {bench.name}")


def grade(rows: list[dict[str, Any]], bench: Benchmark, pool: Any | None = None) -> list[dict[str, Any]]:
    """Fill extracted / extraction_method / correct / grade_error in place (and return rows)."""
    from eval.graders import grade as grade_one

    pairs = [(r["output"], r["gold"]) for r in rows]
    if pool is not None:
        results = pool.grade_many(pairs, kind=bench.grader)
    else:
        results = [grade_one(bench.grader, pred, gold) for pred, gold in pairs]
    for row, res in zip(rows, results):
        row["extracted"] = res.extracted
        row["extraction_method"] = res.method
        row["correct"] = bool(res.correct) and row.get("gen_error") is None
        row["grade_error"] = res.error
    return rows


def score(rows: list[dict[str, Any]], *, model_label: str, benchmark: str,
          n_boot: int = 2000, seed: int = 0) -> list[dict[str, Any]]:
    """Aggregate graded rows into eval_scores rows (avg@n, pass@k, maj@n) with bootstrap CIs."""
    by_problem: dict[str, list[dict]] = {}
    for r in rows:
        by_problem.setdefault(r["problem_id"], []).append(r)
    if not by_problem:
        return []
    n = min(len(v) for v in by_problem.values())
    ids = sorted(by_problem)
    correct = [[bool(s["correct"]) for s in sorted(by_problem[p], key=lambda s: s["sample_index"])[:n]]
               for p in ids]
    answers = [[s.get("extracted") for s in sorted(by_problem[p], key=lambda s: s["sample_index"])[:n]]
               for p in ids]
    out: list[dict[str, Any]] = []

    def add(metric: str, k: int, per_problem: list[float]) -> None:
        mean, lo, hi = metrics.bootstrap_ci(per_problem, n_boot=n_boot, seed=seed)
        out.append({"model": model_label, "benchmark": benchmark, "metric": metric, "k": k,
                    "value": float(mean), "ci_low": float(lo), "ci_high": float(hi),
                    "n_problems": len(ids), "n_samples": len(ids) * n})

    add("avg@k", n, [sum(c) / n for c in correct])
    ks = sorted({k for k in (1, 2, 4, 8, 16, 32, 64, n) if k <= n})
    for k in ks:
        add("pass@k", k, [metrics.pass_at_k(n, sum(c), k) for c in correct])
    if n > 1:
        add("maj@k", n, [float(_majority_correct(a, c)) for a, c in zip(answers, correct)])
    return out


def _majority_correct(answers: list[str | None], correct: list[bool]) -> bool:
    """Whether the majority extracted answer (``metrics.majority_vote``) was graded correct;
    a sample's correctness stands for every sample with the same (normalised) answer."""
    voted = metrics.majority_vote(answers)
    if voted is None:
        return False
    return next(c for a, c in zip(answers, correct) if a == voted)


async def evaluate(client: Any, bench: Benchmark, problems: Iterable[Mapping[str, Any]],
                   cfg: EvalConfig, *, model_label: str, pool: Any | None = None,
                   checkpoint_id: str | None = None) -> EvalResult:
    chosen = select_problems(problems, cfg.limit)
    if not chosen:
        raise ValueError(
            f"no problems for benchmark {bench.name!r}: ingest its source {bench.source!r} first"
        )
    t0 = time.perf_counter()
    rows = await generate(client, bench, chosen, cfg, model_label=model_label)
    t1 = time.perf_counter()
    grade(rows, bench, pool)
    t2 = time.perf_counter()
    for row in rows:
        row["checkpoint_id"] = checkpoint_id
    scores = score(rows, model_label=model_label, benchmark=bench.name, seed=cfg.seed)
    return EvalResult(
        samples=rows, scores=scores, generation_s=t1 - t0, grading_s=t2 - t1,
        completion_tokens=sum(r["completion_tokens"] for r in rows),
        errors=sum(1 for r in rows if r["gen_error"]),
        extra={"config": asdict(cfg)},
    )


def config_json(cfg: EvalConfig) -> str:
    return json.dumps(asdict(cfg), sort_keys=True)
