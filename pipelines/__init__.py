"""Dagster-free data synthesis for weft and the runtime clients it needs.

Nothing in this package imports ``dagster``; the asset layer in ``assets/`` wires these
plain functions and classes into the graph.
"""
