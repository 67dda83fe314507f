"""The `results` asset group: one asset per paper claim, each with its own job
(``<claim>_job``, configured by ``scale: cpu | paper``); see :mod:`assets.results.core`."""

from assets.results import engagement, learning, mosaic, sxs, tandem, training_claims
from assets.results.core import SCALES, Experiment, claim_job

EXPERIMENTS: list[Experiment] = [*engagement.EXPERIMENTS, *training_claims.EXPERIMENTS,
                                  *sxs.EXPERIMENTS, *mosaic.EXPERIMENTS, *tandem.EXPERIMENTS,
                                  *learning.EXPERIMENTS]
RESULT_ASSETS = [*engagement.ASSETS, *training_claims.ASSETS, *sxs.ASSETS, *mosaic.ASSETS,
                 *tandem.ASSETS, *learning.ASSETS]
RESULT_JOBS = [claim_job(e) for e in EXPERIMENTS]

__all__ = ["EXPERIMENTS", "RESULT_ASSETS", "RESULT_JOBS", "SCALES", "Experiment", "claim_job"]
