"""The toy-experiment tables of the paper (Table 1 / Tables 8–9, Table 2 / Table 14) and the
kitchen table (Table 4 / Tables 20, 22) as rows.

Each function trains what it needs, evaluates on the shared evaluation seeds and returns plain
dict rows whose metric cells are ``"mean ± half-width"`` of the bootstrap 95% interval
(App. C); :func:`format_table` renders rows as fixed-width text. Percentages are in %.
Not guaranteed: the paper's numbers (our configurations differ where the paper's were lost).
"""

from __future__ import annotations

from typing import Any

from eval.engagement import deliberation as D
from eval.engagement import kitchen as K
from eval.engagement import patrol as P


def deliberation_rows(cfg: D.DeliberationConfig, train_episodes: int | None = None,
                      eval_episodes: int | None = None,
                      agents: dict[str, D.QAgent] | None = None) -> list[dict[str, Any]]:
    """Cross-evaluation (training x evaluation timing), Tables 8–9 layout."""
    rows = []
    results = D.cross_evaluate(cfg, train_episodes, eval_episodes, agents)
    for (trained, evaluated), res in results.items():
        s = res.summary(seed=cfg.seed)
        rows.append({"training": trained.upper(), "eval": evaluated.upper(),
                     "return": s["return"].fmt(), "success %": s["success"].fmt(100, 1),
                     "timeout %": s["timeout"].fmt(100, 1), "mode 5 %": s["mode5"].fmt(100, 1)})
    return rows


def mode_distribution(cfg: D.DeliberationConfig, train_episodes: int | None = None,
                      eval_episodes: int | None = None,
                      agents: dict[str, D.QAgent] | None = None) -> list[dict[str, Any]]:
    """Figures 3–4 as numbers: chosen-mode shares per urgency level under EP evaluation."""
    rows = []
    for trained in D.TIMINGS:
        agent = agents[trained] if agents else D.train(cfg, trained, train_episodes)
        res = D.evaluate(cfg, agent, D.EP, eval_episodes)
        levels = sorted({D.urgency_bin(cfg, s) for s, _, _, _ in res.decisions})
        for level in levels:
            modes = [m for s, _, m, _ in res.decisions if D.urgency_bin(cfg, s) == level]
            row: dict[str, Any] = {"training": trained.upper(), "urgency": level,
                                   "decisions": len(modes)}
            for m in range(cfg.n_modes):
                row[f"mode {m + 1} %"] = f"{100 * modes.count(m) / max(len(modes), 1):.1f}"
            rows.append(row)
    return rows


def patrol_rows(cfg: P.PatrolConfig, train_episodes: int | None = None,
                eval_episodes: int | None = None) -> list[dict[str, Any]]:
    """Table 2 / Table 14 layout: one row per method."""
    rows = []
    for name, policy in P.policies(cfg, train_episodes).items():
        s = P.evaluate(cfg, policy, eval_episodes).summary(seed=cfg.seed)
        rows.append({"method": name, "return": s["return"].fmt(1, 1),
                     "resolve %": s["resolve"].fmt(100, 1), "expire %": s["expire"].fmt(100, 1),
                     "ticks/alarm": s["ticks_per_alarm"].fmt(1, 1),
                     "latency": s["latency"].fmt(1, 1),
                     "interrupt cost": s["interrupt_cost"].fmt(1, 1)})
    return rows


def kitchen_rows(results: dict[str, K.KitchenResult], seed: int = 42) -> list[dict[str, Any]]:
    """Table 4 layout (Tables 20 / 22 cells), one row per interface, each labelled with its
    controller; a scripted row also carries :data:`eval.engagement.kitchen.SCRIPTED_NOTE`, so a
    scripted EP-ReflexPatch tie is never printed as a result."""
    rows = []
    for method, res in results.items():
        s = res.summary(seed=seed)
        rows.append({"method": method, "controller": res.controller,
                     "episodes": len(res.rows), "utility": s["utility"].fmt(1, 3),
                     "dish %": s["dish"].fmt(100, 1), "critical %": s["critical"].fmt(100, 1),
                     "soft quality": s["soft_quality"].fmt(1, 3),
                     "visibility delay": s["visibility_delay"].fmt(1, 1),
                     "finish delay": s["finish_delay"].fmt(1, 1), "note": res.note})
    return rows


def format_table(rows: list[dict[str, Any]], title: str = "") -> str:
    if not rows:
        return f"{title}\n(no rows)"
    cols = list(rows[0])
    width = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    lines = [title] if title else []
    lines.append("  ".join(c.ljust(width[c]) for c in cols))
    lines.append("  ".join("-" * width[c] for c in cols))
    lines.extend("  ".join(str(r[c]).ljust(width[c]) for c in cols) for r in rows)
    return "\n".join(lines)
