"""The two SFT arms of SxS's latency claim (SxS Table 1, SFT rows): ``standard`` trains on the
``sxs_sft_dataset`` rows of variant ``standard`` (all reasoning, then the answer) and ``sxs``
on the rows of variant ``sxs`` (Algorithm 1's interleaving of the same blocks), from ONE start
with the same recipe, seed, step count and traces, in the same order.

:func:`arm_overrides` gives an arm's recipe overrides (no dataset fallback: a missing table
fails rather than training one arm on other data); :func:`unlike_settings` names the resolved
settings on which the arms would differ beyond their data; :func:`same_traces` checks both
variants' rows are the same traces in the same order. Problems raise ValueError saying what to
do. The claim is judged by ``eval.sxs_claims``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from eval.sxs_claims import ARMS, DATASET
from training.data import load_rows

# fields that follow the dataset (output folder, run name, ids): they may differ between arms
DERIVED_FIELDS = ("output_dir", "logging_dir", "run_name", "checkpoint_id", "hub_model_id")


def arm_overrides(variant: str, overrides: Sequence[str] = (), *, seed: int = 0,
                  max_steps: int | None = None, dataset_limit: int | None = None) -> list[str]:
    """The override list of one arm: the shared ``overrides``, then the arm's data (no
    fallback), its seed, steps (None: the recipe's) and data size (None: all)."""
    spec = f"warehouse:{DATASET}?variant={variant}"
    out = [*overrides, f"dataset={json.dumps(spec)}", 'dataset_fallback=""', f"seed={seed}"]
    if max_steps is not None:
        out.append(f"max_steps={max_steps}")
    if dataset_limit is not None:
        out.append(f"dataset_limit={dataset_limit}")
    return out


def unlike_settings(configs: Mapping[str, Any]) -> list[str]:
    """The settings on which the arms' resolved configs (by variant) differ, beyond the
    dataset and the fields that follow it (:data:`DERIVED_FIELDS`); empty when they train
    alike."""
    resolved = {v: {k: x for k, x in vars(cfg).items() if not k.startswith("_")}
                for v, cfg in configs.items()}
    treatment, reference = resolved[ARMS[1]], resolved[ARMS[0]]
    differ = sorted(k for k in treatment if k != "dataset"
                    and repr(treatment[k]) != repr(reference.get(k)))
    return [k for k in differ if k not in DERIVED_FIELDS]


def same_traces(*, dataset_limit: int | None, seed: int) -> list[str]:
    """The trace ids both arms train on, in order (``dataset_limit`` rows drawn with
    ``seed``, as the trainer draws them); ValueError when a variant's rows cannot be read or
    the two variants' rows are not the same traces in the same order."""
    ids = {}
    for variant in ARMS:
        rows = load_rows(f"warehouse:{DATASET}?variant={variant}", limit=dataset_limit,
                         seed=seed)
        ids[variant] = [r["trace_id"] for r in rows]
    if ids["sxs"] != ids["standard"]:
        raise ValueError(
            f"the sxs and standard rows of {DATASET} are not the same traces in the same order "
            f"({len(ids['sxs'])} vs {len(ids['standard'])} rows); re-materialize "
            f"{DATASET} (it writes both variants of every trace)")
    return ids["sxs"]
