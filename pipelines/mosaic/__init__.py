"""MOSAIC: manager/actor synthesis of tool-integrated trajectories with adversarial failure
injection, the single-actor baseline, and the step-wise decomposition of expert trajectories
into process-supervised training instances.

:func:`synthesize_mosaic` and :func:`synthesize_baseline` build one
:class:`TrajectoryRecord` per problem (:func:`synthesize_many` for a batch), with the LLM roles
:class:`LLMManager`, :class:`LLMActor` and :class:`LLMBaselineActor` and sandbox sessions from
:func:`session_factory`; :func:`label_records` grades them and :func:`summarize_records`
gives the figures. :func:`expert_trajectories` turns stored rows back into expert
trajectories and :func:`decompose` / :func:`decompose_many` turn those into
:class:`StepInstance` rows. Each module's docstring says what it guarantees.

Modules:

- ``synthesize``: the MOSAIC loop (Algorithm 1), the baseline loop and the sandbox adapter.
- ``agents``: the manager and actor roles (protocols, LLM versions, prompt files, the
  navigation card and its rules, parsing actor replies).
- ``inject``: code mutations and synthetic environment failures.
- ``records``: problem inputs, configuration, step and trajectory records, labelling, summary
  figures and the trajectory tables' checks.
- ``decomposition``: expert trajectories -> one training instance per step.

Import public names from ``pipelines.mosaic``; the submodules import each other directly.
"""

from __future__ import annotations

from pipelines.mosaic.agents import (
    ACTOR_STOP,
    MANAGER_MAX_TOKENS,
    LLMActor,
    LLMBaselineActor,
    LLMManager,
)
from pipelines.mosaic.decomposition import (
    StepInstance,
    decompose,
    decompose_many,
    summarize_instances,
    validate_instance_rows,
)
from pipelines.mosaic.records import (
    COMPLETE,
    FAIL_ACTOR_FORMAT,
    FAIL_ENDPOINT,
    FAIL_MANAGER_JSON,
    FAIL_MAX_STEPS,
    FAIL_SANDBOX,
    FAILED,
    FAILURE_REASONS,
    METHOD_BASELINE,
    METHOD_MOSAIC,
    SIDE_BY_SIDE,
    MosaicConfig,
    ProblemInput,
    StepRecord,
    TrajectoryRecord,
    expert_trajectories,
    label_records,
    select_rows,
    side_by_side,
    summarize_records,
    training_mask,
    validate_trajectory_rows,
)
from pipelines.mosaic.synthesize import (
    CodeSession,
    SessionFactory,
    TrackedSession,
    inject_environment_failure,
    session_factory,
    synthesize_baseline,
    synthesize_many,
    synthesize_mosaic,
)

__all__ = [
    "ACTOR_STOP", "COMPLETE", "FAILED", "FAILURE_REASONS", "FAIL_ACTOR_FORMAT", "FAIL_ENDPOINT",
    "FAIL_MANAGER_JSON", "FAIL_MAX_STEPS", "FAIL_SANDBOX", "MANAGER_MAX_TOKENS",
    "METHOD_BASELINE", "METHOD_MOSAIC", "SIDE_BY_SIDE", "CodeSession", "LLMActor",
    "LLMBaselineActor", "LLMManager", "MosaicConfig", "ProblemInput", "SessionFactory",
    "StepInstance", "StepRecord", "TrackedSession", "TrajectoryRecord", "decompose",
    "decompose_many", "expert_trajectories", "inject_environment_failure", "label_records",
    "select_rows", "session_factory", "side_by_side", "summarize_instances", "summarize_records", "synthesize_baseline",
    "synthesize_many", "synthesize_mosaic", "training_mask", "validate_instance_rows",
    "validate_trajectory_rows",
]
