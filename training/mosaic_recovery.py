"""The training side of the MOSAIC recovery experiment (DeepTool §1, §2.1, §3.6: injected
failures during synthesis are meant to teach the fine-tuned model to rectify errors rather
than stop): the two TIR SFT arms' data and overrides.

From ONE start, two SFT arms with the same recipe, seed and step count train on MOSAIC
trajectories of the SAME problems, synthesized with ρ > 0 (treatment; §3.1's SFT setting is
0.1) and with ρ = 0 (reference). :func:`paired_sft_rows` keeps the problems where both arms
synthesized a usable trajectory and renders both arms' SFT rows (injected steps are targets,
DeepTool §2.2); :func:`training_data` adds the check that the treatment's data really holds an
injected failure; :func:`arm_overrides` and :func:`arm_data_file` give each arm its recipe
overrides and JSONL data; :func:`check_same_start` checks both arms start from one model.

Settings that make the arms unlike or the experiment empty raise :class:`RecoveryDesignError`
(a ValueError); a missing pairing raises ``eval.claims.ClaimError``. The claim itself is judged
by ``eval.mosaic_claims.recovery_claim_row``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval.claims import ClaimError
from pipelines.mosaic import expert_trajectories
from pipelines.settings import weft_home
from pipelines.tir import RENDERINGS, sft_rows
from training.data import fingerprint


class RecoveryDesignError(ValueError):
    """The recovery experiment's settings or data cannot give two arms that differ only in
    the injection."""


def check_settings(rendering: str, rho: float) -> None:
    """RecoveryDesignError unless ``rendering`` is a TIR rendering and the treatment's ``rho``
    is in (0, 1] (the reference arm is ρ = 0)."""
    if rendering not in RENDERINGS:
        raise RecoveryDesignError(f"rendering must be state_preserved or state_discarded, got "
                                  f"{rendering!r}")
    if not 0.0 < rho <= 1.0:
        raise RecoveryDesignError(f"rho must be in (0, 1] (the reference arm is rho = 0), got "
                                  f"{rho!r}")


def paired_sft_rows(treatment_rows: Sequence[Mapping[str, Any]],
                    reference_rows: Sequence[Mapping[str, Any]], *, rendering: str,
                    only_correct: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                 list[str]]:
    """Both arms' SFT rows (TRL prompt/completion, ``pipelines.tir.sft_rows``) from the
    problems where BOTH arms synthesized a usable trajectory (valid; correct too with
    ``only_correct``), so the arms train on the same problems: (treatment rows, reference
    rows, the shared problem ids). Injected steps are targets (DeepTool §2.2). Raises
    ClaimError when no problem is shared."""
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


@dataclass(frozen=True)
class RecoveryData:
    """Both arms' SFT rows on the ``shared`` problems, and the injected steps in the
    treatment's trajectories of those problems."""

    treatment_rows: list[dict[str, Any]]
    reference_rows: list[dict[str, Any]]
    shared: list[str]
    injected: int


def injected_steps(rows: Sequence[Mapping[str, Any]], problems: Sequence[str]) -> int:
    """Perturbed steps in the trajectories of ``problems``."""
    wanted = set(problems)
    return sum(int(r.get("perturbed_steps") or 0) for r in rows
               if str(r["problem_id"]) in wanted)


def training_data(treatment: Sequence[Mapping[str, Any]], reference: Sequence[Mapping[str, Any]],
                  *, rho: float, rendering: str, only_correct: bool) -> RecoveryData:
    """The arms' data from their synthesized trajectory rows (:func:`paired_sft_rows`);
    RecoveryDesignError when the treatment's trajectories of the shared problems hold no
    injected failure (the arms would not differ in what the claim is about)."""
    treat_rows, ref_rows, shared = paired_sft_rows(treatment, reference, rendering=rendering,
                                                   only_correct=only_correct)
    injected = injected_steps(treatment, shared)
    if injected == 0:
        raise RecoveryDesignError(
            f"the rho={rho:g} trajectories of the {len(shared)} shared problems hold no "
            "injected failure, so the arms would not differ in what the claim is about: "
            "synthesize more problems (limit)")
    return RecoveryData(treat_rows, ref_rows, shared, injected)


def arm_data_file(rows: Sequence[Mapping[str, Any]], experiment: str, label: str) -> Path:
    """The arm's SFT rows as a JSONL file under ``WEFT_HOME/experiments/<experiment>`` (named
    by content), for the recipe's ``dataset: jsonl:<path>``."""
    folder = weft_home() / "experiments" / experiment
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{label}-{fingerprint(rows)}.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return path


def arm_overrides(overrides: Sequence[str], dataset: Path, *, train_steps: int,
                  seed: int) -> list[str]:
    """One arm's recipe overrides: the shared ``overrides``, then its data, steps and seed
    (only the dataset differs between the arms)."""
    return [*overrides, f"dataset=jsonl:{dataset}", "dataset_fallback=''",
            "dataset_limit=null", f"max_steps={train_steps}", f"seed={seed}"]


def check_same_start(configs: Mapping[str, Any]) -> None:
    """RecoveryDesignError unless every arm's resolved config starts from one model."""
    starts = {str(cfg.model_name_or_path) for cfg in configs.values()}
    if len(starts) != 1:
        raise RecoveryDesignError(f"the arms would start from different models {sorted(starts)}")
