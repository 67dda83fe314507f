"""The Engagement Process paper's claims of §5.1 (toys) and §5.2 (LLM workflows) as ``claims``
rows (``eval.claims.judge``); each part's Claim comes from a ``*_part(s)`` function, with the
paper's figures from ``eval.claims.paper_reports``.

Table 1 (urgency-aware deliberation): under real-time EP evaluation, the policy trained in EP
timing earns a higher return and times out less than the policy trained with the step
abstraction (deliberation free of time), in the single-task and the sequential setting.

Table 2 (hierarchical patrol): EP beats Loop when checkpoint handling can be interrupted at
module level (Table 2a), and beats the strongest hand-written baseline, PatchPro, at state
level with phase depths 2 and 3 (Table 2b: "EP performs best, followed by PatchPro").

Table 3 (digital assistant, §5.2.1): EP earns more utility and misses fewer email deadlines than
AgentLoop. Run with scripted policies (the CPU scale) both parts are setup checks, not claims:
no model makes a choice, EP opens each email as it arrives and the scripted triage handles it,
so the outcome follows from the script (:data:`SCRIPTED_CHECK`). Table 4 (kitchen, §5.2.2): EP
earns more utility than ReflexPatch, with an LLM controller only (scripted, the two interfaces
are the same rule and the claim refuses to run).

Unit: the training seed. The learned policies are trained once per training seed and every
policy is evaluated on the same evaluation episodes (the same seeds, so the same tasks or alarm
streams as long as the policies act alike). What was randomized is the training seed, so each
arm's score of a seed is its mean over that seed's evaluation episodes, and the arms are paired
by seed (:func:`seed_means`): the CI resamples seeds. Resampling (seed, episode) pairs as if
independent understated the spread: with a between-seed sd of 5, an episode sd of 40 and 3 seeds
x 300 episodes, that CI covered the true difference in about 58% of simulated runs. Ten seeds
or more (:data:`MIN_SEEDS` is the least the rule accepts; the experiments run 10).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from eval.claims import CHECK, CLAIM, Claim, judge
from eval.claims.paper_reports import paper_value
from eval.engagement import deliberation as D
from eval.engagement import patrol as P
from pipelines.progress import report

PAPER = "Engagement Process"
SHARE = (0.0, 1.0)  # the bounds of a timeout share
# why a Table 3 part run with scripted policies is a setup check, not a claim: no model decides
SCRIPTED_CHECK = ("setup check: scripted triage and main-task outputs stand in for the LLM, and "
                  "EP opens each email as it arrives, so the script, not a model, sets the "
                  "outcome")


MIN_SEEDS = 2  # a paired comparison over seeds needs two; the experiments run 10


def _seeds(base: int, n: int) -> list[int]:
    if n < MIN_SEEDS:
        raise ValueError(f"training seeds: the CI resamples training seeds (the unit that was "
                         f"randomized), so at least {MIN_SEEDS} are needed (10 or more for a "
                         f"verdict worth reading); got {n}")
    return [base + 1000 * j for j in range(n)]


def seed_means(values: dict[tuple[int, int], float]) -> dict[int, float]:
    """Each training seed's mean over its evaluation episodes, from ``{(seed, episode):
    value}``: one unit per seed."""
    sums: dict[int, list[float]] = {}
    for (seed, _), value in values.items():
        sums.setdefault(seed, []).append(float(value))
    return {seed: sum(v) / len(v) for seed, v in sums.items()}


def deliberation_claims(setting: str, *, training_seeds: int = 10,
                        train_episodes: int | None = None, eval_episodes: int | None = None,
                        n_boot: int = 5000) -> list[dict[str, Any]]:
    """Table 1, one setting (``single`` or ``sequential``): EP-trained vs step-trained, both
    evaluated in EP timing; rows for the return (higher is better) and the share of tasks
    that time out (lower is better)."""
    if setting not in ("single", "sequential"):
        raise ValueError(f"deliberation setting must be single or sequential, got {setting!r}")
    base = D.SINGLE_TASK if setting == "single" else D.SEQUENTIAL
    returns: dict[str, dict[tuple[int, int], float]] = {D.EP: {}, D.STEP: {}}
    timeouts: dict[str, dict[tuple[int, int], float]] = {D.EP: {}, D.STEP: {}}
    seeds = _seeds(base.seed, training_seeds)
    for k, seed in enumerate(seeds):
        cfg = replace(base, seed=seed)
        for j, timing in enumerate(D.TIMINGS):
            report(f"Table 1 {setting}: training seed {seed}, {timing} agent",
                   done=k * len(D.TIMINGS) + j, total=len(seeds) * len(D.TIMINGS))
            agent = D.train(cfg, timing, train_episodes)
            res = D.evaluate(cfg, agent, D.EP, eval_episodes)
            for i, (ret, tout, tasks) in enumerate(zip(res.returns, res.timeouts, res.tasks,
                                                       strict=True)):
                returns[timing][(seed, i)] = float(ret)
                timeouts[timing][(seed, i)] = float(tout / tasks) if tasks else 0.0
    claims = deliberation_parts(setting)
    return [judge(claims[0], seed_means(returns[D.STEP]), seed_means(returns[D.EP]),
                  n_boot=n_boot),
            judge(claims[1], seed_means(timeouts[D.STEP]), seed_means(timeouts[D.EP]),
                  n_boot=n_boot)]


def deliberation_parts(setting: str) -> tuple[Claim, Claim]:
    """Table 1's two parts for ``setting`` (``single`` or ``sequential``): return (higher is
    better) and timeout share (lower is better, bounded by 0 and 1)."""
    section = f"Table 1 ({setting} task)"
    return (
        Claim(paper=PAPER, section=section, metric="return",
              statement="EP-trained beats step-trained under real-time evaluation",
              reference="step-trained", treatment="EP-trained",
              paper_value=paper_value("ep_deliberation_claim", f"{setting} return")),
        Claim(paper=PAPER, section=section, metric="timeout share", higher_is_better=False,
              bounds=SHARE,
              statement="EP-trained times out less under real-time evaluation",
              reference="step-trained", treatment="EP-trained",
              paper_value=paper_value("ep_deliberation_claim", f"{setting} timeout")),
    )


PATROL_SETTINGS = {
    # name: (config, reference method, section)
    "module": (lambda: P.MODULE_LEVEL, "loop", "Table 2a (module level)"),
    "state2": (lambda: P.STATE_LEVEL[2], "patchpro", "Table 2b (state level, depth 2)"),
    "state3": (lambda: P.STATE_LEVEL[3], "patchpro", "Table 2b (state level, depth 3)"),
}


def patrol_claims(setting: str, *, training_seeds: int = 10, train_episodes: int | None = None,
                  eval_episodes: int | None = None, n_boot: int = 5000) -> list[dict[str, Any]]:
    """Table 2, one setting (``module``, ``state2``, ``state3``): EP's episode return against
    the strongest baseline of that table (Loop at module level, PatchPro at state level)."""
    if setting not in PATROL_SETTINGS:
        raise ValueError(f"patrol setting must be one of {sorted(PATROL_SETTINGS)}, got "
                         f"{setting!r}")
    make, reference, _ = PATROL_SETTINGS[setting]
    base = make()
    ep: dict[tuple[int, int], float] = {}
    ref: dict[tuple[int, int], float] = {}
    seeds = _seeds(base.seed, training_seeds)
    for k, seed in enumerate(seeds):
        report(f"Table 2 {setting}: training seed {seed}", done=k, total=len(seeds))
        cfg = replace(base, seed=seed)
        policies = P.policies(cfg, train_episodes)
        for store, name in ((ep, "ep"), (ref, reference)):
            result = P.evaluate(cfg, policies[name], eval_episodes)
            for i, value in enumerate(np.asarray(result.returns, dtype=float)):
                store[(seed, i)] = float(value)
    return [judge(patrol_part(setting), seed_means(ref), seed_means(ep), n_boot=n_boot)]


def patrol_part(setting: str) -> Claim:
    """Table 2's part for ``setting``: EP's episode return against that table's strongest
    baseline."""
    _, reference, section = PATROL_SETTINGS[setting]
    return Claim(paper=PAPER, section=section, metric="episode return",
                 statement=f"EP beats {reference} on patrol with interruptions",
                 reference=reference, treatment="EP",
                 paper_value=paper_value("ep_patrol_claim", setting))


# ---- the LLM environments of §5.2: assistant (Table 3) and kitchen (Table 4) -----------------

def _pairs(rows, value) -> dict[tuple, float]:
    """Per-episode values keyed by what identifies an episode across methods (seed, episode,
    case): every method runs the same seeds, episodes and cases."""
    out = {}
    for r in rows:
        key = (r.get("seed"), r.get("episode"), r.get("case_id"))
        if key in out:
            raise ValueError(f"two episodes share the key {key}: cannot pair methods")
        out[key] = float(value(r))
    return out


def assistant_parts(setting: str, policy: str, reference: str = "agentloop"
                    ) -> tuple[Claim, Claim]:
    """Table 3's two parts for ``setting`` (``single`` or ``milestones``) and ``policy``:
    utility (higher is better) and email timeout share (lower is better, bounded by 0 and 1),
    EP against AgentLoop (the paper's figures are against AgentLoop; another ``reference`` is
    a ValueError). With the ``scripted`` policy both parts are setup checks
    (:data:`SCRIPTED_CHECK`): they show the pipeline runs, not that an LLM controller does
    better with EP."""
    if reference != "agentloop":
        raise ValueError(f"Table 3's claim is EP against AgentLoop (the paper's figures are "
                         f"relative to it); got reference {reference!r}")
    role = CHECK if policy == "scripted" else CLAIM
    why = f" ({SCRIPTED_CHECK})" if role == CHECK else ""
    section = f"Table 3 ({setting}, {policy})"
    utility = Claim(paper=PAPER, section=section, metric="utility", reference=reference,
                    treatment="EP", role=role,
                    statement=f"EP earns more utility than {reference}{why}",
                    paper_value=paper_value("ep_assistant_claim", f"{setting} utility"))
    timeout = Claim(paper=PAPER, section=section, metric="email timeout share",
                    higher_is_better=False, reference=reference, treatment="EP", role=role,
                    bounds=SHARE,
                    statement=f"EP misses fewer email deadlines than {reference}{why}",
                    paper_value=paper_value("ep_assistant_claim", f"{setting} timeout"))
    return utility, timeout


def assistant_claims(comp: Any, reference: str = "agentloop",
                     n_boot: int = 5000) -> list[dict[str, Any]]:
    """Table 3 from an ``llm_runs.run_comparison("assistant", ...)``: EP's utility and
    timeout share per episode against ``reference`` (AgentLoop: the paper's main contrast);
    setup checks when the comparison ran scripted policies (:func:`assistant_parts`)."""
    by = {m: [r for r in comp.episodes if r["method"] == m] for m in ("ep", reference)}
    if not by["ep"] or not by[reference]:
        raise ValueError(f"the comparison needs methods ep and {reference}; it has "
                         f"{sorted({r['method'] for r in comp.episodes})}")
    utility, timeout = assistant_parts(comp.setting, comp.policy, reference)

    def share(r):
        return r["timeouts"] / r["scored"] if r["scored"] else 0.0

    return [judge(utility, _pairs(by[reference], lambda r: r["utility"]),
                  _pairs(by["ep"], lambda r: r["utility"]), n_boot=n_boot),
            judge(timeout, _pairs(by[reference], share), _pairs(by["ep"], share),
                  n_boot=n_boot)]


def kitchen_claims(comp: Any, reference: str = "reflexpatch",
                   n_boot: int = 5000) -> list[dict[str, Any]]:
    """Table 4 from an ``llm_runs.run_comparison("kitchen", client=...)``: EP's utility per
    case against ``reference`` (ReflexPatch, the strongest baseline). Scripted runs are
    refused: the scripted controller makes EP and ReflexPatch the same rule, so they can only
    tie, which says nothing about the claim."""
    if comp.policy == "scripted":
        raise ValueError("the kitchen claim needs the LLM controller: with the scripted "
                         "controller EP and ReflexPatch are the same rule (a pipeline check, not "
                         "a result); run it with policy: llm")
    by = {m: [r for r in comp.episodes if r["method"] == m] for m in ("ep", reference)}
    if not by["ep"] or not by[reference]:
        raise ValueError(f"the comparison needs methods ep and {reference}")
    claim = kitchen_part(comp.setting, comp.policy, reference)
    return [judge(claim, _pairs(by[reference], lambda r: r["utility"]),
                  _pairs(by["ep"], lambda r: r["utility"]), n_boot=n_boot)]


def kitchen_part(setting: str, policy: str, reference: str = "reflexpatch") -> Claim:
    """Table 4's part for ``setting`` (``one`` or ``multi``): EP's utility against ReflexPatch
    (the paper's figures compare those two; another ``reference`` is a ValueError)."""
    if reference != "reflexpatch":
        raise ValueError(f"Table 4's claim is EP against ReflexPatch (the strongest baseline the "
                         f"paper compares it with); got reference {reference!r}")
    return Claim(paper=PAPER, section=f"Table 4 ({setting}, {policy})", metric="utility",
                 reference=reference, treatment="EP",
                 statement=f"EP earns more utility than {reference} in the kitchen",
                 paper_value=paper_value("ep_kitchen_claim", setting))
