"""The recorder callback: train_metrics rows, checkpoints rows, resume trimming, Pipes no-op."""

import json
from types import SimpleNamespace

from training.callbacks import CHECKPOINTS, TRAIN_METRICS, RunRecorder, metrics_row
from training.pipes import Reporter, open_reporter
from warehouse import Lineage, Warehouse


def test_metrics_row_maps_trl_names_and_splits_time():
    logs = {"loss": 0.5, "reward": 0.25, "reward_std": 0.1, "kl": 0.01,
            "completions/mean_length": 30.0, "filtered_group_share": 0.5, "learning_rate": 1e-5,
            "grad_norm": 2.0, "entropy": 1.5, "timing/generation_s": 6.0, "timing/reward_s": 1.0,
            "timing/scoring_s": 1.0, "tokens_generated": 240, "clip_ratio/low_min": None}
    row = metrics_row(logs, checkpoint_id="c", kind="grpo", step=4, epoch=0.5, step_seconds=20.0,
                      steps=2)
    assert (row["loss"], row["reward_mean"], row["kl"], row["completion_length"]) == (0.5, 0.25, 0.01, 30.0)
    assert row["seconds_per_step"] == 10.0 and row["generation_s"] == 3.0
    assert row["reward_s"] == 0.5 and row["scoring_s"] == 0.5 and row["optimisation_s"] == 6.0
    assert row["tokens_generated"] == 240 and row["filtered_group_share"] == 0.5
    assert json.loads(row["logs_json"])["kl"] == 0.01
    sft = metrics_row({"loss": float("nan")}, checkpoint_id="c", kind="sft", step=1, epoch=None,
                      step_seconds=3.0, steps=1)
    assert sft["loss"] is None and sft["optimisation_s"] == 3.0 and sft["reward_mean"] is None


def _state(step, max_steps=4, zero=True):
    return SimpleNamespace(global_step=step, max_steps=max_steps, epoch=step / max_steps,
                           is_world_process_zero=zero)


class FakeReporter(Reporter):
    def __init__(self):
        self.messages = []

    def log(self, message):
        self.messages.append(("log", message))

    def progress(self, payload):
        self.messages.append(("progress", dict(payload)))


def test_recorder_writes_rows_and_trims_on_resume(weft_home):
    wh = Warehouse()
    info = {"base_model": "m", "recipe": "r", "parent_checkpoint": "p",
            "dataset_fingerprints": "{}", "config_json": "{}"}
    reporter = FakeReporter()
    rec = RunRecorder(checkpoint_id="run-1", kind="sft", lineage=Lineage("shell", "a", "run-1", "h"),
                      checkpoint_info=info, warehouse=wh, reporter=reporter)
    args = SimpleNamespace(output_dir=str(weft_home / "ck"))
    rec.on_train_begin(args, _state(0), None)
    for step in (1, 2, 3):
        rec.on_step_end(args, _state(step), None)
        rec.on_log(args, _state(step), None, logs={"loss": 1.0 / step})
    rec.on_save(args, _state(3), None)
    rec.on_log(args, _state(3), None, logs={"train_runtime": 9.0, "train_loss": 0.6})
    rec.on_log(args, _state(3), None, logs={"eval_loss": 0.1})
    rec.on_log(args, _state(3, zero=False), None, logs={"loss": 7.0})
    rows = wh.read(TRAIN_METRICS, partition="run-1").to_pylist()
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[1]["loss"] == 0.5
    assert all(r["seconds_per_step"] is not None and r["run_id"] == "shell" for r in rows)
    (ck,) = wh.read(CHECKPOINTS, partition="run-1").to_pylist()
    assert ck["status"] == "partial" and ck["path"].endswith("checkpoint-3") and ck["global_step"] == 3
    final = rec.write_checkpoint(status="complete", path="/x/final", global_step=3)
    assert final["train_loss"] == 0.6 and final["parent_checkpoint"] == "p"
    assert wh.read(CHECKPOINTS, partition="run-1").to_pylist()[0]["status"] == "complete"
    assert any(kind == "progress" and m["step"] == 3 for kind, m in reporter.messages)
    # a resumed run restored at step 2 drops step 3 and logs it again
    again = RunRecorder(checkpoint_id="run-1", kind="sft", lineage=Lineage(partition="run-1"),
                        checkpoint_info=info, warehouse=wh)
    again.on_train_begin(args, _state(2), None)
    assert [r["step"] for r in again.rows] == [1, 2]
    again.on_step_end(args, _state(3), None)
    again.on_log(args, _state(3), None, logs={"loss": 0.25})
    rows = wh.read(TRAIN_METRICS, partition="run-1").to_pylist()
    assert [(r["step"], r["loss"]) for r in rows] == [(1, 1.0), (2, 0.5), (3, 0.25)]
    got = wh.sql("SELECT count(*) AS n FROM train_metrics WHERE checkpoint_id = 'run-1'")
    assert got.column("n")[0].as_py() == 3


def test_reporter_is_a_silent_no_op_by_hand(monkeypatch, recwarn):
    for var in ("DAGSTER_PIPES_CONTEXT", "DAGSTER_PIPES_MESSAGES"):
        monkeypatch.delenv(var, raising=False)
    with open_reporter() as reporter:
        assert not reporter.active and reporter.run_id is None
        reporter.log("x")
        reporter.progress({"a": 1})
        reporter.materialization({"b": 2})
    assert not [w for w in recwarn if "pipes" in str(w.message).lower()]
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("DAGSTER_PIPES_CONTEXT", "x")
    with open_reporter() as reporter:  # non-zero ranks never talk to Dagster
        assert not reporter.active
