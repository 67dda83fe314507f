"""The `results` asset group: one asset per paper claim, each with its own job
(``<claim>_job``, configured by ``scale: cpu | paper``); see :mod:`assets.results.experiments`."""

from assets.results import (
    budget_results,
    engagement_results,
    learning_results,
    mosaic_results,
    sxs_results,
    tandem_results,
)
from assets.results.experiments import SCALES, Experiment, claim_job

MODULES = (engagement_results, budget_results, sxs_results, mosaic_results, tandem_results,
           learning_results)
EXPERIMENTS: list[Experiment] = [e for m in MODULES for e in m.EXPERIMENTS]
RESULT_ASSETS = [a for m in MODULES for a in m.ASSETS]
RESULT_JOBS = [claim_job(e) for e in EXPERIMENTS]

__all__ = ["EXPERIMENTS", "RESULT_ASSETS", "RESULT_JOBS", "SCALES", "Experiment", "claim_job"]
