"""Trainer callbacks that record a run: ``train_metrics`` and ``checkpoints`` tables, Pipes progress.

:class:`RunRecorder` is a ``transformers.TrainerCallback``. On every logged training step it
adds one ``train_metrics`` row (loss, reward mean/std, KL, completion length, filtered-group
share, seconds per step and its split, tokens generated, learning rate, grad norm, and every
logged value as JSON) and rewrites the run's partition (partition = checkpoint id), so a run
started from the shell records the same rows as one started from Dagster. Each save writes the
run's ``checkpoints`` row (status ``partial``); :meth:`RunRecorder.finish` writes the final one.
On resume, rows for steps after the restored step are dropped (they will be logged again).

Only the main process (``state.is_world_process_zero``) writes. Not guaranteed: rows for steps
logged after the last save of a run that was killed are kept, and will be replaced when the
resumed run logs those steps again.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from transformers import TrainerCallback

from training.pipes import Reporter
from warehouse import Lineage, Warehouse
from warehouse.schema import LINEAGE_COLUMNS, TABLES

TRAIN_METRICS = "train_metrics"
CHECKPOINTS = "checkpoints"

# Both tables are declared in warehouse/schema.py (typed views before any run); the rows this
# module builds carry the declared columns without the lineage ones, which the warehouse stamps.
TRAIN_METRICS_SCHEMA = pa.schema([f for f in TABLES[TRAIN_METRICS] if f.name not in LINEAGE_COLUMNS])
CHECKPOINTS_SCHEMA = pa.schema([f for f in TABLES[CHECKPOINTS] if f.name not in LINEAGE_COLUMNS])

# train_metrics column <- the first of these log keys present (TRL/transformers names).
LOG_KEYS: dict[str, tuple[str, ...]] = {
    "loss": ("loss",),
    "reward_mean": ("reward",),
    "reward_std": ("reward_std",),
    "kl": ("kl",),
    "completion_length": ("completions/mean_length",),
    "filtered_group_share": ("filtered_group_share",),
    "learning_rate": ("learning_rate",),
    "grad_norm": ("grad_norm",),
    "entropy": ("entropy",),
}
# Sums over the logging window, added to the logs by training.grpo_trainer.
TIMING_KEYS = ("timing/generation_s", "timing/reward_s", "timing/scoring_s")
TOKENS_KEY = "tokens_generated"


def _number(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def metrics_row(logs: Mapping[str, Any], *, checkpoint_id: str, kind: str, step: int,
                epoch: float | None, step_seconds: float | None, steps: int) -> dict[str, Any]:
    """One ``train_metrics`` row from a log dict. ``step_seconds`` is the wall time of the
    ``steps`` optimizer steps in the window; the phase timings in the logs are window sums."""
    row: dict[str, Any] = {"checkpoint_id": checkpoint_id, "kind": kind, "step": int(step),
                           "epoch": _number(epoch)}
    for column, keys in LOG_KEYS.items():
        row[column] = next((_number(logs[k]) for k in keys if k in logs), None)
    steps = max(1, steps)
    row["seconds_per_step"] = step_seconds / steps if step_seconds is not None else None
    phases = {key: _number(logs.get(key)) for key in TIMING_KEYS}
    row["generation_s"] = None if phases["timing/generation_s"] is None else phases["timing/generation_s"] / steps
    row["reward_s"] = None if phases["timing/reward_s"] is None else phases["timing/reward_s"] / steps
    row["scoring_s"] = None if phases["timing/scoring_s"] is None else phases["timing/scoring_s"] / steps
    if row["seconds_per_step"] is not None and row["generation_s"] is not None:
        inside = row["generation_s"] + (row["reward_s"] or 0.0) + (row["scoring_s"] or 0.0)
        row["optimisation_s"] = max(0.0, row["seconds_per_step"] - inside)
    else:
        row["optimisation_s"] = row["seconds_per_step"] if row["generation_s"] is None else None
    tokens = _number(logs.get(TOKENS_KEY))
    row["tokens_generated"] = int(tokens) if tokens is not None else None
    row["logs_json"] = json.dumps({k: v for k, v in logs.items()}, default=str, sort_keys=True)
    return row


class RunRecorder(TrainerCallback):
    """Writes ``train_metrics`` and ``checkpoints`` rows and sends progress through Pipes."""

    def __init__(self, *, checkpoint_id: str, kind: str, lineage: Lineage,
                 checkpoint_info: Mapping[str, Any], warehouse: Warehouse | None = None,
                 reporter: Reporter | None = None, progress_every: int = 1):
        self.checkpoint_id = checkpoint_id
        self.kind = kind
        self.lineage = lineage
        self.info = dict(checkpoint_info)
        self.warehouse = warehouse or Warehouse()
        self.reporter = reporter or Reporter()
        self.progress_every = max(1, progress_every)
        self.rows: list[dict[str, Any]] = []
        self.summary: dict[str, Any] = {}
        self._mark: float | None = None
        self._window_seconds = 0.0
        self._window_steps = 0

    # ---- callback hooks ------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            done = state.global_step
            try:
                earlier = self.warehouse.read(TRAIN_METRICS, partition=self.checkpoint_id).to_pylist()
            except Exception:  # noqa: BLE001 - an unreadable old partition is replaced
                earlier = []
            self.rows = [{k: r.get(k) for k in TRAIN_METRICS_SCHEMA.names} for r in earlier
                         if r.get("step") is not None and r["step"] <= done]
            if done:
                self.reporter.log(f"{self.checkpoint_id}: resumed at step {done}")
        self._mark = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        if self._mark is not None:
            self._window_seconds += now - self._mark
            self._window_steps += 1
        self._mark = now

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        if "train_runtime" in logs:
            self.summary = dict(logs)
            return
        if any(str(k).startswith("eval_") for k in logs):
            return
        row = metrics_row(logs, checkpoint_id=self.checkpoint_id, kind=self.kind,
                          step=state.global_step, epoch=state.epoch,
                          step_seconds=self._window_seconds if self._window_steps else None,
                          steps=self._window_steps)
        self._window_seconds, self._window_steps = 0.0, 0
        self.rows = [r for r in self.rows if r["step"] != row["step"]] + [row]
        self._write_metrics()
        if state.global_step % self.progress_every == 0 or state.global_step == state.max_steps:
            shown = {k: row[k] for k in ("loss", "reward_mean", "kl", "seconds_per_step",
                                         "filtered_group_share") if row.get(k) is not None}
            self.reporter.progress({"checkpoint_id": self.checkpoint_id, "step": row["step"],
                                    "max_steps": state.max_steps, **shown})
            self.reporter.log(f"{self.checkpoint_id} step {row['step']}/{state.max_steps}: "
                              + ", ".join(f"{k}={v:.4g}" for k, v in shown.items()))

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            path = f"{args.output_dir}/checkpoint-{state.global_step}"
            self.write_checkpoint(status="partial", path=path, global_step=state.global_step)

    # ---- tables ---------------------------------------------------------------------------
    def _write_metrics(self) -> None:
        rows = sorted(self.rows, key=lambda r: r["step"])
        table = pa.Table.from_pylist(rows, schema=TRAIN_METRICS_SCHEMA)
        self.warehouse.write(TRAIN_METRICS, table, lineage=self.lineage, partition=self.checkpoint_id)

    def write_checkpoint(self, *, status: str, path: str, global_step: int) -> dict[str, Any]:
        row = {
            "checkpoint_id": self.checkpoint_id, "kind": self.kind, "status": status,
            "path": str(path), "global_step": int(global_step),
            "train_loss": _number(self.summary.get("train_loss")),
            "train_runtime_s": _number(self.summary.get("train_runtime")),
            **{k: self.info.get(k) for k in ("base_model", "recipe", "parent_checkpoint",
                                             "dataset_fingerprints", "config_json")},
        }
        table = pa.Table.from_pylist([row], schema=CHECKPOINTS_SCHEMA)
        self.warehouse.write(CHECKPOINTS, table, lineage=self.lineage, partition=self.checkpoint_id)
        return row


class SaveOnSignal(TrainerCallback):
    """Save a checkpoint at the end of the step that is running when ``signum`` (SIGUSR1)
    arrives: a Slurm job's batch script forwards the ``--signal=B:USR1@<s>`` warning that its
    time limit is near (``pipelines.slurm.script``), so the run can resume from that step
    instead of from the last ``save_steps`` checkpoint. The handler only sets a flag (the
    callback acts at the step's end, where the trainer can save); it is installed when
    training begins, in the main thread only, and the previous handler is put back when
    training ends."""

    def __init__(self, reporter: Reporter | None = None, signum: int | None = None) -> None:
        import signal

        self.reporter = reporter
        self.signum = signal.SIGUSR1 if signum is None else signum
        self.pending = False
        self.saves = 0
        self._previous: Any = None
        self._installed = False

    def _handle(self, signum: int, frame: Any) -> None:
        self.pending = True

    def on_train_begin(self, args, state, control, **kwargs):
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(self.signum, self._handle)
            self._installed = True

    def on_step_end(self, args, state, control, **kwargs):
        if self.pending:
            self.pending = False
            self.saves += 1
            control.should_save = True
            if self.reporter is not None:
                self.reporter.log(f"step {state.global_step}: saving a checkpoint (signal "
                                  f"{self.signum}: the job's time limit is near)")
        return control

    def on_train_end(self, args, state, control, **kwargs):
        import signal

        if self._installed:
            signal.signal(self.signum, self._previous)
            self._installed = False
