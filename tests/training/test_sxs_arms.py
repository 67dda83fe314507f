"""The two SFT arms of SxS's latency claim (training/sxs_arms.py): their overrides differ in
the data only, settings that would make them train unlike are named, and both variants' rows
must be the same traces in the same order."""

from types import SimpleNamespace

import pytest

from training.sxs_arms import arm_overrides, same_traces, unlike_settings
from warehouse import Warehouse


def test_arm_overrides_put_the_shared_settings_first_and_never_fall_back():
    out = arm_overrides("sxs", ["learning_rate=1e-5"], seed=3, max_steps=8, dataset_limit=16)
    assert out == ["learning_rate=1e-5", 'dataset="warehouse:sxs_sft_dataset?variant=sxs"',
                   'dataset_fallback=""', "seed=3", "max_steps=8", "dataset_limit=16"]
    # None: the recipe's steps and all the data
    assert arm_overrides("standard", seed=0) == [
        'dataset="warehouse:sxs_sft_dataset?variant=standard"', 'dataset_fallback=""', "seed=0"]


def test_unlike_settings_ignore_the_data_and_what_follows_it():
    def cfg(**kw):
        base = {"dataset": "d", "output_dir": "o", "run_name": "r", "learning_rate": 1e-5,
                "seed": 0, "_private": object()}
        return SimpleNamespace(**{**base, **kw})

    alike = {"standard": cfg(dataset="a", output_dir="oa", checkpoint_id="x"),
             "sxs": cfg(dataset="b", output_dir="ob", checkpoint_id="y")}
    assert unlike_settings(alike) == []
    unlike = {"standard": cfg(), "sxs": cfg(learning_rate=2e-5, seed=1)}
    assert unlike_settings(unlike) == ["learning_rate", "seed"]


def test_arms_must_train_on_the_same_traces(weft_home):
    wh = Warehouse()
    rows = [{"trace_id": t, "problem_id": t, "source": "s", "variant": v, "prompt": "[]",
             "completion": "[]", "n_visible_segments": 1}
            for t, v in (("a", "sxs"), ("a", "standard"), ("b", "sxs"), ("c", "standard"))]
    wh.write("sxs_sft_dataset", rows)
    assert same_traces(dataset_limit=1, seed=0) == ["a"]
    with pytest.raises(ValueError, match="not the same traces"):
        same_traces(dataset_limit=2, seed=0)
