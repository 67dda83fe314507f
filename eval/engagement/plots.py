"""Pictures of the §5.2 comparisons (matplotlib, Agg backend; no Dagster).

- :func:`plot_scores`: per method, the utility and the timeout rate (assistant) or
  critical-dish failure rate (kitchen) with their bootstrap 95% intervals as error bars.
- :func:`plot_timeline`: one episode as lanes over ticks: main work / tutoring segments,
  email or cooking-signal arrivals, interruptions and resumptions (the paper's Figure 7 idea).
Both write a PNG and return its path; the data come from plain rows (``ep_scores`` rows and
timeline rows of :meth:`eval.engagement.core.Episode.rows`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

RATE_METRIC = {"assistant": ("timeout", "timeout rate"),
               "kitchen": ("critical", "critical-dish failure rate")}


def plot_scores(scores: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """One row of two panels per environment present in ``scores``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = sorted({s["environment"] for s in scores})
    if not envs:
        raise ValueError("no score rows to plot: materialize ep_episodes first")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(len(envs), 2, figsize=(10, 3.2 * len(envs)), squeeze=False)
    for row, env in enumerate(envs):
        rate_name, rate_label = RATE_METRIC[env]
        for col, (metric, label) in enumerate((("utility", "utility"), (rate_name, rate_label))):
            ax = axes[row][col]
            cells = [s for s in scores if s["environment"] == env and s["metric"] == metric]
            groups = sorted({(s["setting"], s["policy"]) for s in cells})
            methods = sorted({s["method"] for s in cells})
            width = 0.8 / max(len(groups), 1)
            for g, group in enumerate(groups):
                xs, ys, err = [], [], [[], []]
                for m, method in enumerate(methods):
                    hit = [s for s in cells if (s["setting"], s["policy"]) == group
                           and s["method"] == method]
                    if not hit:
                        continue
                    s = hit[0]
                    flip = metric == "critical"  # success -> failure rate
                    v, lo, hi = ((1 - s["value"], 1 - s["high"], 1 - s["low"]) if flip
                                 else (s["value"], s["low"], s["high"]))
                    xs.append(m + g * width)
                    ys.append(v)
                    err[0].append(max(v - lo, 0.0))
                    err[1].append(max(hi - v, 0.0))
                ax.bar(xs, ys, width, yerr=err, capsize=3, label=f"{group[0]} / {group[1]}")
            ax.set_xticks([m + width * (len(groups) - 1) / 2 for m in range(len(methods))],
                          methods)
            ax.set_title(f"{env}: {label} (95% CI)")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


WORK = {"generate", "tutor"}
ARRIVALS = {"email", "reminder", "signal"}


def timeline_segments(rows: Sequence[Mapping[str, Any]]) -> dict[str, list]:
    """Work segments ``(start, end)`` from interventions and ``done`` events, arrival ticks,
    interruption ticks and resumption ticks (a work start after an interruption)."""
    segments, arrivals, interrupts, resumes = [], [], [], []
    start = None
    stopped = False
    for r in sorted(rows, key=lambda r: r["tick"]):
        kind, name, tick = r["kind"], r["name"], int(r["tick"])
        if kind == "intervention" and name in WORK:
            start = tick
            if stopped:
                resumes.append(tick)
                stopped = False
        elif kind == "intervention" and name == "interrupt" and start is not None:
            segments.append((start, tick))
            interrupts.append(tick)
            start, stopped = None, True
        elif kind == "event" and name == "done" and start is not None:
            payload = json.loads(r["payload"]) if isinstance(r["payload"], str) else r["payload"]
            if payload.get("activity") in WORK:
                segments.append((start, tick))
                partial = payload.get("unit_complete") is False or "stopped_by" in payload
                if partial:
                    interrupts.append(tick)
                start, stopped = None, stopped or partial
        elif kind == "event" and name in ARRIVALS:
            arrivals.append((tick, name))
    return {"segments": segments, "arrivals": arrivals, "interrupts": interrupts,
            "resumes": resumes}


def plot_timeline(rows: Sequence[Mapping[str, Any]], path: str | Path, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not rows:
        raise ValueError("no timeline rows to plot")
    parts = timeline_segments(rows)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(11, 2.6))
    ax.broken_barh([(a, b - a) for a, b in parts["segments"]], (2.6, 0.8), color="tab:blue")
    for tick, name in parts["arrivals"]:
        ax.plot([tick], [1.8], marker="v", color="tab:red" if name != "reminder" else "tab:orange")
    ax.plot(parts["interrupts"], [1.0] * len(parts["interrupts"]), "x", color="black")
    ax.plot(parts["resumes"], [0.4] * len(parts["resumes"]), "^", color="tab:green")
    ax.set_yticks([3.0, 1.8, 1.0, 0.4], ["main work", "arrivals", "interruptions", "resumptions"])
    ax.set_xlabel("tick")
    ax.set_ylim(0, 3.8)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
