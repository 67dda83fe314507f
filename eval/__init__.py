"""Evaluation: benchmark registry, generation, graders (shared with RL rewards) and metrics.

Never imports ``dagster``.
"""
