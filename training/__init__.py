"""TRL training jobs (SFT, GRPO), their configs, recipes and reward functions.

Runnable from the shell, from Dagster (through Pipes) or under ``accelerate launch``; never
imports ``dagster`` except through the optional Pipes context in the scripts' entry points.
"""
