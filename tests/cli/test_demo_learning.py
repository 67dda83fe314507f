"""`make demo`: what it ingests, the held-out set it measures learning on, its verdict lines, and
(real TRL, slow) that its training recipes give GRPO groups that are not all right or all wrong."""

import json
from pathlib import Path

import pytest

from cli.demo import DEMO_GRPO_RECIPE, demo_sources, describe_learning
from training.heldout import DEMO_SFT_RECIPE, heldout_arith, learning_claims, training_problems


def test_demo_ingests_every_shared_benchmark_file_and_no_training_pool(shared_data):
    sources = demo_sources()
    # Independent listing: the benchmark files on disk, named as the ingestion sources are.
    on_disk = {p.name for p in (shared_data / "benchmarks").iterdir()}
    expected = {"gsm8k": "gsm8k_test.jsonl", "math500": "math500.jsonl", "aime24": "aime24.jsonl",
                "aime25": "aime25.jsonl", "amc23": "amc23.jsonl",
                "minerva_math": "minerva_math.jsonl", "olympiadbench": "olympiadbench.jsonl",
                "gpqa_diamond": "gpqa_diamond.jsonl.gz", "humaneval": "humaneval.jsonl.gz",
                "mbppplus": "mbppplus.jsonl", "livecodebench": "livecodebench_279.json"}
    assert sources[0] == "reasoning_gym"
    assert set(sources[1:]) == {name for name, f in expected.items() if f in on_disk}
    assert {"humaneval", "mbppplus", "livecodebench"} <= set(sources)  # the code benchmarks
    assert not {"gsm8k_train", "math_train", "dapo_math_17k", "deepscaler"} & set(sources)


def test_demo_grpo_recipe_alone_trains_on_one_digit_problems_and_heldout_ones_are_disjoint(
        weft_home):
    from training.config import load_config
    from training.data import load_dataset

    config = load_config(DEMO_GRPO_RECIPE)
    assert config.dataset.startswith("builtin:arith1")  # the recipe alone is what the demo runs
    grpo_rows = load_dataset(config.dataset, limit=config.dataset_limit, seed=config.seed).rows
    trained_on = training_problems([(DEMO_SFT_RECIPE, []), (DEMO_GRPO_RECIPE, [])])
    assert {r["problem"] for r in grpo_rows} <= trained_on
    rows = heldout_arith(64, exclude=trained_on)
    assert len(rows) == 64 and len({r["problem_id"] for r in rows}) == 64
    assert not {r["problem"] for r in rows} & trained_on
    assert rows == heldout_arith(64, exclude=trained_on)  # deterministic
    for r in [*rows, *grpo_rows]:  # one-digit operands, no negative results, right gold answers
        _, _, a, word, b = r["problem"].rstrip("?").split()
        a, b = int(a), int(b)
        assert 1 <= a <= 9 and 1 <= b <= 9
        value = {"plus": a + b, "minus": a - b, "times": a * b}[word]
        assert value >= 0 and r["answer"] == str(value)
    left = 207 - len({r["problem"] for r in grpo_rows})
    assert len(heldout_arith(left, exclude=trained_on)) == left
    with pytest.raises(ValueError, match=f"only {left} one-digit problems are left"):
        heldout_arith(left + 1, exclude=trained_on)
    with pytest.raises(ValueError, match="at least 2"):
        heldout_arith(1)


def test_training_threads_use_every_core_only_when_they_are_idle(monkeypatch):
    from cli.demo import ENV_THREADS, idle_cores, training_threads

    monkeypatch.delenv(ENV_THREADS, raising=False)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    assert training_threads(idle=1.9) == 2
    assert training_threads(idle=1.2) == 1  # another process holds most of a core
    assert training_threads(idle=0.0) == 1
    assert training_threads(3, idle=0.0) == 3  # asked for: no probe
    monkeypatch.setenv(ENV_THREADS, "2")
    assert training_threads(idle=0.0) == 2
    monkeypatch.setenv(ENV_THREADS, "two")
    with pytest.raises(ValueError, match="WEFT_DEMO_THREADS must be a whole number"):
        training_threads()
    with pytest.raises(ValueError, match="at least 1"):
        training_threads(0)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    monkeypatch.delenv(ENV_THREADS)
    assert training_threads(idle=1.0) == 1  # one core: one thread
    import os

    assert 0.0 <= idle_cores(0.2) <= (os.cpu_count() or 1) + 1e-9


@pytest.mark.parametrize("argv, message", [
    (["--train-only", "--no-train"], "leave nothing to run"),
    (["--threads", "0"], "--threads needs at least 1 thread"),
    (["--heldout", "1"], "--heldout needs at least 2 problems"),
])
def test_demo_refuses_contradictory_options(argv, message, capsys):
    from cli.demo import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def _rows(base, sft, trained) -> list[dict]:
    ids = [f"p{i}" for i in range(len(base))]
    b, s, t = (dict(zip(ids, x)) for x in (base, sft, trained))
    return learning_claims(b, s, t, k=4, temperature=1.0, n_boot=2000)


def test_verdict_says_better_only_when_the_ci_is_above_zero():
    better = _rows([0.0] * 20, [0.5, 0.25] * 10, [0.75, 0.5] * 10)
    lines = describe_learning(better, 12, 0.3, 0.5)
    assert better[0]["verdict"] == "reproduced"
    assert "measured that it got better" in lines[-2]
    assert "improved on its SFT start" in lines[-1]
    assert "0.300 (first third) -> 0.500 (last third)" in "\n".join(lines)
    assert "avg@4 at T=1" in lines[0] and "(20 problems never trained on)" in lines[0]
    same = _rows([0.25, 0.5] * 10, [0.25, 0.5] * 10, [0.5, 0.25] * 10)
    lines = describe_learning(same, 12, None, None)
    assert "did NOT measure an improvement" in lines[-2]
    assert "no change measurable" in lines[-1]
    noisy = _rows([0.0] * 20, [0.0] * 20, [0.5] + [0.0] * 19)  # higher mean, CI reaches 0
    assert noisy[0]["diff"] > 0 and noisy[0]["diff_ci_low"] <= 0
    assert "did NOT measure an improvement" in describe_learning(noisy, 12, None, None)[-2]
    worse = _rows([0.5] * 20, [0.75] * 20, [0.25, 0.0] * 10)
    assert "worse than its SFT start" in describe_learning(worse, 12, None, None)[-1]


def test_learning_claims_compare_the_trained_model_with_base_and_sft_by_problem():
    """The difference and its paired CI against a direct computation of the mean per-problem
    difference (every problem moves by the same amount: the CI collapses onto it)."""
    base = [0.0, 0.5, 0.25, 1.0] * 5
    sft = [0.25, 0.5, 0.5, 0.75] * 5
    trained = [b + 0.25 if b < 1.0 else 1.0 for b in base]
    vs_base, vs_sft = _rows(base, sft, trained)
    expected = sum(t - b for t, b in zip(trained, base)) / len(base)
    assert vs_base["diff"] == pytest.approx(expected)
    assert vs_base["reference"] == "base" and vs_sft["reference"] == "sft"
    assert vs_sft["diff"] == pytest.approx(sum(t - s for t, s in zip(trained, sft)) / 20)
    assert vs_base["n"] == vs_sft["n"] == 20 and vs_base["metric"] == "avg@4"


@pytest.mark.slow
def test_demo_recipes_give_grpo_groups_with_mixed_outcomes(weft_home, embedded_model_dir):
    """Real TRL on the embedded model: the demo's SFT recipe teaches the boxed format well enough
    that the demo's GRPO recipe sees groups with right AND wrong answers in its first steps
    (the old demo chain dropped every group from its second step on)."""
    from training.config import load_config
    from training.grpo import run_grpo
    from training.sft import run_sft
    from warehouse import Warehouse

    sft = run_sft(load_config(DEMO_SFT_RECIPE, {"model_name_or_path": str(embedded_model_dir)}))
    grpo = run_grpo(load_config(DEMO_GRPO_RECIPE, {
        "model_name_or_path": sft.path, "max_steps": 2, "save_steps": 2}))
    rows = Warehouse().sql("SELECT step, filtered_group_share, reward_mean FROM train_metrics "
                           "WHERE checkpoint_id = $id ORDER BY step",
                           {"id": grpo.checkpoint_id}).to_pylist()
    assert [r["step"] for r in rows] == [1, 2]
    assert min(r["filtered_group_share"] for r in rows) < 1.0  # some group was kept
    assert any(0.0 < r["reward_mean"] < 1.0 for r in rows)  # right and wrong answers in a step
    meta = json.loads((Path(grpo.path) / "weft-checkpoint.json").read_text())
    assert meta["recipe"] == DEMO_GRPO_RECIPE


def test_the_demo_serves_each_measured_model_once_for_the_evaluations_after_it(
        tmp_path, weft_home, monkeypatch):
    """After training the demo starts one server per measured model (the base model and both
    checkpoints); the evaluations that follow find each through its record instead of
    starting it again, and the servers stop when the demo's stack closes."""
    from contextlib import ExitStack

    from cli import demo
    from eval.models import embedded_spec
    from pipelines import serving
    from pipelines.llm.testing import StandInServer
    from pipelines.models import embedded_model_dir
    from training.model_path import serving_spec

    folders = {"sft_checkpoint": tmp_path / "demo_sft-1", "grpo_checkpoint": tmp_path / "demo_grpo-2"}
    for folder in [*folders.values(), embedded_model_dir()]:
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
    monkeypatch.setattr(demo, "checkpoint_of",
                        lambda instance, asset: (str(folders[asset]), folders[asset].name))
    monkeypatch.setattr(serving, "LocalModelServer", StandInServer)
    specs = [embedded_spec(), *(serving_spec(str(f), f.name) for f in folders.values())]
    records = weft_home / "run"
    with ExitStack() as servers:
        demo.serve_measured_models(None, servers)
        urls = [spec.running_server() for spec in specs]
        assert None not in urls and len(set(urls)) == 3
        assert len(list(records.glob("server-*.json"))) == 3
        demo.serve_measured_models(None, servers)  # all three up: nothing more is started
        assert len(list(records.glob("server-*.json"))) == 3
        with specs[2].serve() as (base_url, served, _):
            assert (base_url, served) == (urls[2], "demo_grpo-2")
        assert specs[2].running_server() == urls[2]
    assert [spec.running_server() for spec in specs] == [None, None, None]
    assert list(records.glob("server-*.json")) == []
