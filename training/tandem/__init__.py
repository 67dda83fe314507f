"""Tandem RL ("Tandem Reinforcement Learning with Verifiable Rewards"), as one package:

- :mod:`training.tandem.core`: lockstep senior/junior rollouts (§3.3, App. A.1): the word- and
  step-level handoff decoders, seeded draws (``RolloutSeeder``), ``TandemSettings`` (a recipe's
  ``tandem`` mapping). Plain torch/transformers.
- :mod:`training.tandem.config`: ``TandemGRPOConfig``, the GRPO config of a ``tandem`` recipe.
- :mod:`training.tandem.trainer`: ``TandemGRPOTrainer``, the senior-only loss (§3.4, Eq. 1).
- :mod:`training.tandem.study`: the evaluation protocol and the headline claim (§4.2-4.5,
  §5.3): which evaluations, where their rows live, the claim's four parts.

The metrics themselves (legibility, drift, per-problem statistics, paired tests) are in
``eval.tandem_metrics``; the handoff team in ``eval.handoff_team``. Nothing is imported here, so
importing one module does not load the others (the core and the trainer load torch).
"""
