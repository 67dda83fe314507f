"""What SFT and GRPO runs share: run folders, resume, the base model, the final checkpoint.

A run's training state lives in ``config.output_dir`` (default
``WEFT_HOME/checkpoints/<checkpoint_id>``: TRL's ``checkpoint-N`` folders). The finished model
(weights, tokenizer, chat template and ``weft-checkpoint.json``) goes to
``WEFT_HOME/models/<checkpoint_id>``, next to the embedded model: a folder the local model
server can serve, under the checkpoint id as its model name, so evaluation rows name the
checkpoint. Re-running the same config resumes from the last ``checkpoint-N``; a run whose
final folder exists is not trained again (set ``overwrite: true`` to start over).
:func:`finish` writes the ``checkpoints`` row and reports the materialization through Pipes;
:func:`prepare_run` resolves the base model (``training.model_path.resolve_model``);
:func:`command_line` is the shared ``main()`` of ``training.sft`` and ``training.grpo``
(``--print-config`` prints ``training.config_base.describe_config``: YAML, one field a line,
the help of weft's and the method's fields as comments).

Not guaranteed: resuming onto a changed dataset (the checkpoint id changes with the config, not
with the data) or onto a different number of processes than the run was saved with; with
``overwrite`` under several processes, rank 0 deletes the old folder without waiting for the
others.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.callbacks import RunRecorder
from training.config import load_config
from training.config_base import config_summary, describe_config
from training.config_recipes import RecipeError
from training.data import LoadedData
from training.errors import DatasetError
from training.model_path import resolve_model
from training.pipes import Reporter, json_value, md, open_reporter, path_value
from warehouse import Lineage, config_hash

log = logging.getLogger(__name__)

FINAL_MARKER = "weft-checkpoint.json"
TABLE_COLUMNS = ("step", "loss", "reward_mean", "reward_std", "kl", "completion_length",
                 "filtered_group_share", "seconds_per_step")


@dataclass
class RunResult:
    """What a finished (or already complete) run produced."""

    checkpoint_id: str
    kind: str
    path: str
    global_step: int
    base_model: str
    parent_checkpoint: str = ""
    reused: bool = False
    last_metrics: dict[str, Any] = field(default_factory=dict)
    dataset: dict[str, Any] = field(default_factory=dict)


def apply_threads(config: Any) -> None:
    """``torch.set_num_threads(config.torch_threads)`` when set."""
    if getattr(config, "torch_threads", None):
        import torch

        torch.set_num_threads(int(config.torch_threads))


def final_dir(config: Any) -> Path:
    """``WEFT_HOME/models/<checkpoint_id>``: where the finished model is saved."""
    from pipelines.settings import models_dir

    return models_dir() / config.checkpoint_id


def last_checkpoint(config: Any) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    folder = Path(config.output_dir)
    if not folder.is_dir():
        return None
    return get_last_checkpoint(str(folder))


def prepare_output_dir(config: Any) -> str | None:
    """Honour ``overwrite``/``resume``; returns the checkpoint to resume from, if any."""
    from training.pipes import process_rank

    folder = Path(config.output_dir)
    if config.overwrite and process_rank() == 0:
        for old in (folder, final_dir(config)):
            if old.exists():
                shutil.rmtree(old)
    folder.mkdir(parents=True, exist_ok=True)
    return last_checkpoint(config) if config.resume else None


def run_lineage(reporter: Reporter, kind: str, config: Any) -> Lineage:
    run_id = reporter.run_id or "shell-" + dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    asset = reporter.asset_key or f"training.{kind}"
    return Lineage(run_id=run_id, asset=asset, partition=config.checkpoint_id,
                   config_hash=config_hash(config_summary(config)))


def checkpoint_info(config: Any, base_model: str, datasets: dict[str, LoadedData]) -> dict[str, Any]:
    return {
        "base_model": base_model,
        "recipe": config.recipe,
        "parent_checkpoint": config.parent_checkpoint,
        "dataset_fingerprints": json.dumps({k: v.describe() for k, v in datasets.items()},
                                           sort_keys=True),
        "config_json": json.dumps(config_summary(config), sort_keys=True, default=str),
    }


def make_recorder(config: Any, kind: str, reporter: Reporter, base_model: str,
                  datasets: dict[str, LoadedData]) -> RunRecorder:
    return RunRecorder(checkpoint_id=config.checkpoint_id, kind=kind,
                       lineage=run_lineage(reporter, kind, config),
                       checkpoint_info=checkpoint_info(config, base_model, datasets),
                       reporter=reporter)


def completed_run(config: Any, kind: str) -> RunResult | None:
    """The result of an earlier complete run with this checkpoint id, unless overwriting."""
    marker = final_dir(config) / FINAL_MARKER
    if config.overwrite or not marker.is_file():
        return None
    data = json.loads(marker.read_text())
    return RunResult(checkpoint_id=data["checkpoint_id"], kind=data.get("kind", kind),
                     path=str(final_dir(config)), global_step=int(data.get("global_step", 0)),
                     base_model=data.get("base_model", ""),
                     parent_checkpoint=data.get("parent_checkpoint", ""), reused=True,
                     last_metrics=data.get("last_metrics", {}), dataset=data.get("dataset", {}))


def reuse_completed(config: Any, kind: str, reporter: Reporter) -> RunResult | None:
    """An earlier complete run of this checkpoint, reported again; None when training is needed."""
    done = completed_run(config, kind)
    if done is not None:
        reporter.log(f"{config.checkpoint_id} is already complete; reusing {done.path}")
        report(done, reporter)
    return done


def prepare_run(config: Any) -> tuple[str | None, str]:
    """(checkpoint to resume from, base model path): output folder ready, torch threads set."""
    resume_from = prepare_output_dir(config)
    apply_threads(config)
    return resume_from, resolve_model(config.model_name_or_path)


def _metrics_md(rows: list[dict[str, Any]], limit: int = 12) -> str:
    shown = rows[-limit:]
    head = "| " + " | ".join(TABLE_COLUMNS) + " |\n|" + "---|" * len(TABLE_COLUMNS) + "\n"

    def cell(v: Any) -> str:
        return "" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)

    return head + "".join("| " + " | ".join(cell(r.get(c)) for c in TABLE_COLUMNS) + " |\n"
                          for r in shown)


def report(result: RunResult, reporter: Reporter, rows: list[dict[str, Any]] | None = None) -> None:
    """Send the final checkpoint and its key metrics to Dagster (no-op outside Pipes)."""
    metadata: dict[str, Any] = {
        "checkpoint_id": result.checkpoint_id,
        "checkpoint_path": path_value(result.path),
        "kind": result.kind,
        "global_step": result.global_step,
        "base_model": result.base_model,
        "parent_checkpoint": result.parent_checkpoint,
        "reused_existing": result.reused,
        "dataset": json_value(result.dataset),
        "serve_with": md(f"`LLMResource(local_model_path=\"{result.path}\")`"),
    }
    for key, value in result.last_metrics.items():
        if isinstance(value, (int, float)) and value is not None:
            metadata[f"last_{key}"] = float(value)
    if rows:
        metadata["train_metrics"] = md(_metrics_md(rows))
    reporter.materialization(metadata)
    reporter.log(f"checkpoint {result.checkpoint_id} at {result.path}")


def finish(trainer: Any, recorder: RunRecorder, config: Any, kind: str, base_model: str,
           dataset: LoadedData, reporter: Reporter) -> RunResult:
    """Save the final model, write the complete ``checkpoints`` row and report through Pipes."""
    out = final_dir(config)
    trainer.save_model(str(out))
    last = {k: v for k, v in (recorder.rows[-1] if recorder.rows else {}).items()
            if k in TABLE_COLUMNS and k != "step" and v is not None}
    result = RunResult(checkpoint_id=config.checkpoint_id, kind=kind, path=str(out),
                       global_step=int(trainer.state.global_step), base_model=base_model,
                       parent_checkpoint=config.parent_checkpoint, last_metrics=last,
                       dataset=dataset.describe())
    if trainer.is_world_process_zero():
        (out / FINAL_MARKER).write_text(json.dumps({
            "checkpoint_id": result.checkpoint_id, "kind": kind, "global_step": result.global_step,
            "base_model": base_model, "parent_checkpoint": config.parent_checkpoint,
            "recipe": config.recipe, "last_metrics": last, "dataset": result.dataset,
        }, indent=2, sort_keys=True))
        recorder.write_checkpoint(status="complete", path=str(out), global_step=result.global_step)
        report(result, reporter, recorder.rows)
    return result


def _ensure_field_index() -> None:
    """Write the field index the fast command-line check reads (``training.precheck``) when
    this install has none yet; a failure to write it only costs speed."""
    from training.precheck import field_index, write_field_index

    if field_index() is None:
        try:
            write_field_index()
        except OSError as exc:
            logging.getLogger(__name__).warning(f"could not write the config field index: {exc}")


def command_line(kind: str, run: Callable[[Any, Reporter], RunResult],
                 argv: list[str] | None = None) -> int:
    """``python -m training.<kind> --recipe NAME [key=value ...] [--print-config]``."""
    parser = argparse.ArgumentParser(prog=f"python -m training.{kind}",
                                     description=f"Run a weft {kind.upper()} recipe.")
    parser.add_argument("--recipe", required=True, help="recipe name in training/recipes or a path")
    parser.add_argument("--print-config", action="store_true",
                        help="check the recipe, print the resolved config as YAML (the help of "
                             "weft's and the method's fields as comments) and exit")
    parser.add_argument("overrides", nargs="*", help="config overrides as key=value (YAML values)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with open_reporter() as reporter:
        try:
            config = load_config(args.recipe, args.overrides, expect_kind=kind)
        except RecipeError as exc:
            reporter.log(f"bad recipe: {exc}")
            print(f"error: {exc}", file=sys.stderr)
            return 2
        _ensure_field_index()
        if args.print_config:
            print(describe_config(config), end="")
            return 0
        try:
            result = run(config, reporter)
        except DatasetError as exc:
            reporter.log(f"bad dataset: {exc}")
            print(f"error: {exc}", file=sys.stderr)
            return 2
    print(json.dumps({"checkpoint_id": result.checkpoint_id, "path": result.path,
                      "global_step": result.global_step, "reused": result.reused}))
    return 0
