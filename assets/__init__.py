"""The Dagster layer: assets, checks, resources, schedules; ``definitions.py`` is the root."""
