"""The SxS latency claim's asset (assets/results/sxs_results.py): both scales' settings, the two arms'
settings and data, and one tiny real run (two SFT arms on the embedded model, served and
evaluated). The claim's parts are tested in tests/eval/test_sxs_claims.py, the arms' plain
helpers in tests/training/test_sxs_arms.py."""

import json

import dagster as dg
import pytest

from assets.results.experiments import claim_job
from assets.results.sxs_results import SXS, SxsClaimConfig, checked_arms
from training.sxs_arms import arm_overrides
from warehouse import Warehouse


def test_both_scales_configure_the_job_and_the_arms_differ_in_data_only():
    job = claim_job(SXS)
    assert job.name == "sxs_latency_claim_job"
    for scale in ("cpu", "paper"):
        ops = SXS.run_config(scale)["ops"]
        assert set(SXS.upstream) <= set(ops)
        config = SxsClaimConfig(**ops["sxs_latency_claim"]["config"])
        settings = {"seed": config.seed, "max_steps": config.max_steps,
                    "dataset_limit": config.dataset_limit}
        std = arm_overrides("standard", config.overrides, **settings)
        sxs = arm_overrides("sxs", config.overrides, **settings)
        differ = [(a, b) for a, b in zip(std, sxs) if a != b]
        assert len(std) == len(sxs) and differ == [
            ('dataset="warehouse:sxs_sft_dataset?variant=standard"',
             'dataset="warehouse:sxs_sft_dataset?variant=sxs"')]
        assert 'dataset_fallback=""' in std  # a missing table fails, never trains on other data
    assert SXS.run_config("cpu")["ops"]["sxs_alignments"]["config"]["judge"] == "evidence"
    paper = SXS.run_config("paper")["ops"]["sxs_latency_claim"]["config"]
    assert paper["benchmark"] == "aime25"
    assert paper["sampling"] == {"k": 16, "temperature": 1.0, "top_p": 1.0, "max_tokens": 39000}
    assert "k" not in paper and "temperature" not in paper  # one sampling config
    cpu = SxsClaimConfig(**SXS.run_config("cpu")["ops"]["sxs_latency_claim"]["config"])
    assert set(checked_arms(cpu)) == {"standard", "sxs"}  # the CPU recipe resolves for both


def test_the_scales_sample_as_configured_through_dagster():
    """A scale's partial ``sampling`` mapping is merged over the asset's defaults by Dagster
    (the cpu scale sets no top_p: the asset's 1.0 stays)."""
    seen = {}

    @dg.asset(name="sxs_latency_claim")
    def probe(config: SxsClaimConfig) -> None:
        seen["sampling"] = config.sampling

    for scale, expected in (("cpu", (1, 1.0, 1.0, 512)), ("paper", (16, 1.0, 1.0, 39000))):
        ops = SXS.run_config(scale)["ops"]
        assert dg.materialize([probe], run_config={"ops": {
            "sxs_latency_claim": ops["sxs_latency_claim"]}}).success
        s = seen["sampling"]
        assert (s.k, s.temperature, s.top_p, s.max_tokens) == expected


def test_a_conflicting_sampling_seed_fails_before_training(weft_home):
    from assets.resources import GraderResource, LLMResource, WarehouseResource
    from assets.results.sxs_results import sxs_latency_claim
    from assets.training import TrainerLauncher

    resources = {"trainer": TrainerLauncher(), "warehouse": WarehouseResource(),
                 "llm": LLMResource(), "grader": GraderResource(processes=1)}
    with pytest.raises(dg.Failure, match=r"sampling.seed \(3\) differs from seed \(0\)"):
        dg.materialize([sxs_latency_claim], resources=resources,
                       run_config={"ops": {"sxs_latency_claim": {"config": {
                           "sampling": {"seed": 3}}}}})


def _word_tokenizer(folder):
    """A tokenizer.json that makes one token of every whitespace-separated word."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel(vocab={"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    return str(folder)


def test_the_pairing_keeps_every_problem_and_counts_format_failures(weft_home, tmp_path):
    """The standard arm writes untagged text on 4 problems and never shows anything on 2: all
    12 problems are paired, each failure scored as its full length (hand-counted words)."""
    from assets.results.sxs_results import _judged
    from warehouse import Lineage

    def words(n):
        return " ".join(f"w{i}" for i in range(n))

    standard, sxs = {}, {}
    for i in range(12):
        if i < 4:  # untagged: 4 words, none shown -> ABO 5, AIRW 4
            standard[f"p{i}"] = ("the answer is 5", 5.0, 4.0)
        elif i < 6:  # thinks 20 words, never speaks -> ABO 21, AIRW 20
            standard[f"p{i}"] = (f"<think>{words(20)}</think>", 21.0, 20.0)
        else:  # 10 + i think words, then a 2-word answer -> ABO 11 + i, AIRW 10 + i
            standard[f"p{i}"] = (f"<think>{words(10 + i)}</think><speak>x y</speak>",
                                 11.0 + i, 10.0 + i)
        # i + 1 think words, 1 shown, 3 more think words, 1 shown: blocks at i+2 and i+6
        text = (f"<think>{words(i + 1)}</think><speak>s</speak><think>{words(3)}</think>"
                "<speak>t</speak>")
        sxs[f"p{i}"] = (text, i + 4.0, (i + 1 + 3) / 2)
    for model, arm, run in (("ck-std", standard, "r1"), ("ck-sxs", sxs, "r2")):
        Warehouse().write("eval_samples", [
            {"model": model, "benchmark": "gsm8k", "problem_id": p, "sample_index": 0,
             "mode": "interleaved", "correct": i % 3 == 0, "output": text, "gen_error": None}
            for i, (p, (text, _, _)) in enumerate(arm.items())],
            lineage=Lineage(run_id=run, asset="eval_samples", partition=f"gsm8k@{model}"))
    config = SxsClaimConfig(tokenizer_path=_word_tokenizer(tmp_path / "tok"), n_boot=500)
    arms = {"standard": {"checkpoint_id": "ck-std"}, "sxs": {"checkpoint_id": "ck-sxs"}}
    rows, formats, error = _judged(Warehouse(), arms, "gsm8k", config)
    assert error is None
    abo, airw, acc = rows
    for row, index in ((abo, 1), (airw, 2)):
        assert row["n"] == 12
        diffs = [sxs[p][index] - standard[p][index] for p in standard]
        assert row["diff"] == pytest.approx(sum(diffs) / 12)
        assert row["reference_value"] == pytest.approx(
            sum(v[index] for v in standard.values()) / 12)
    assert acc["n"] == 12
    assert formats["problems_paired"] == 12
    assert (formats["standard"]["untagged"], formats["standard"]["without_shown_block"]) == (4, 6)
    assert formats["standard"]["shapes"] == {"untagged": 4, "no_speak": 2, "think_then_speak": 6}
    assert formats["standard"]["format_following"] == 0.5
    assert formats["sxs"]["format_following"] == 1.0 and formats["sxs"]["untagged"] == 0
    # half in its own format is at the validity floor, not below it: the parts stand
    assert all(r["invalid_arm"] is None for r in rows)


def test_an_arm_that_has_not_learned_its_format_makes_every_part_inconclusive():
    from eval.claims import judge, mark_invalid_arm
    from eval.sxs_claims import ACCURACY_PART, FORMAT_FLOOR, LATENCY_PARTS, format_invalid_text

    assert FORMAT_FLOOR == 0.5
    formats = {"standard": {"format_following": 0.4, "untagged": 6, "malformed": 0},
               "sxs": {"format_following": 0.95, "untagged": 0, "malformed": 1}}
    text = format_invalid_text(formats)
    assert text == ("standard-CoT SFT writes its own format in 40% of its outputs (< 50%; "
                    "6 untagged, 0 malformed)")
    assert format_invalid_text({"standard": {"format_following": 0.5}, "sxs": {
        "format_following": 0.5}}) is None
    assert "SxS SFT has no measured output" in format_invalid_text(
        {"standard": {"format_following": 0.9}, "sxs": {"format_following": None}})
    # a part whose CI alone reads "reproduced" (SxS 20 tokens earlier on all 30 problems, with
    # spread) is inconclusive once the rule names an arm
    ref = [100.0 + (i % 7) for i in range(30)]
    treat = [v - 20.0 - (i % 3) for i, v in enumerate(ref)]
    (_, abo) = LATENCY_PARTS[0]
    row = judge(abo, ref, treat, n_boot=500)
    assert row["verdict"] == "reproduced"
    marked = mark_invalid_arm(dict(row), text)
    assert (marked["verdict"], marked["inconclusive_reason"]) == ("inconclusive", "invalid_arm")
    assert marked["invalid_arm"] == text
    assert mark_invalid_arm(dict(row), None)["verdict"] == "reproduced"
    acc = judge(ACCURACY_PART, [1.0] * 20 + [0.0] * 10, [0.0] * 30, n_boot=500)
    assert mark_invalid_arm(acc, text)["inconclusive_reason"] == "invalid_arm"


@pytest.mark.slow
def test_tiny_real_claim_job(weft_home, shared_data, embedded_model_dir):
    """Two real SFT arms (1 step each) on 2 real traces, both served on vLLM and evaluated in
    interleaved mode on 4 GSM8K problems; the claims rows (or, when an arm showed nothing, the
    failed run) come from those samples."""
    from assets.resources import GraderResource, LLMResource, WarehouseResource
    from assets.results.sxs_results import sxs_latency_claim
    from assets.sxs import sxs_alignments, sxs_sft_dataset, traces
    from assets.training import TrainerLauncher

    config = {"ops": {
        "traces": {"config": {"sources": ["openmathreasoning"], "limit": 2}},
        "sxs_alignments": {"config": {"judge": "evidence"}},
        "sxs_sft_dataset": {"config": {"max_example_tokens": 1000,
                                       "tokenizer_path": str(embedded_model_dir)}},
        "sxs_latency_claim": {"config": {
            "scale": "cpu", "recipe": "sxs_sft.cpu", "max_steps": 1, "dataset_limit": 2,
            "overrides": [f"model_name_or_path={embedded_model_dir}", "max_length=1100",
                          "per_device_train_batch_size=1", 'save_strategy="no"'],
            "benchmark": "gsm8k", "eval_limit": 4, "sampling": {"max_tokens": 48},
            "tokenizer_path": str(embedded_model_dir), "n_boot": 500}}}}
    resources = {"trainer": TrainerLauncher(), "warehouse": WarehouseResource(),
                 "llm": LLMResource(), "grader": GraderResource()}
    result = dg.materialize([traces, sxs_alignments, sxs_sft_dataset, sxs_latency_claim],
                            resources=resources, run_config=config, raise_on_error=False)
    wh = Warehouse()
    judged = wh.sql("SELECT DISTINCT judge_model FROM sxs_alignments").to_pylist()
    assert judged == [{"judge_model": "evidence"}]
    ckpts = wh.sql("SELECT DISTINCT model FROM eval_samples").to_pylist()
    assert len(ckpts) == 2  # both arms evaluated, nothing else
    per_model = wh.sql("SELECT model, count(*) AS n, count(DISTINCT problem_id) AS problems, "
                       "min(mode) AS lo, max(mode) AS hi FROM eval_samples GROUP BY model"
                       ).to_pylist()
    assert all((r["n"], r["problems"], r["lo"], r["hi"]) == (4, 4, "interleaved", "interleaved")
               for r in per_model)
    steps = wh.sql("SELECT checkpoint_id, max(step) AS s FROM train_metrics GROUP BY 1").to_pylist()
    assert sorted(r["s"] for r in steps) == [1, 1]
    if result.success:
        rows = wh.sql("SELECT * FROM claims").to_pylist()
        assert sorted(r["metric"] for r in rows) == ["ABO (tokens)", "AIRW (tokens)", "accuracy"]
        stored = json.loads(rows[0]["config_json"])
        assert stored["judge_quality"]["judge"] == ["evidence"]
        assert stored["judge_quality"]["share_early_blocks_unsupported"] == 0.0
        assert stored["output_formats"]["problems_paired"] == 4  # every problem paired
        meta = result.asset_materializations_for_node("sxs_latency_claim")[0].metadata
        assert meta["judge"].value == "evidence" and "output_formats" in meta
        assert "format_following_standard" in meta and "untagged_outputs_sxs" in meta
    else:  # a recorded, explained failure
        failed = wh.sql("SELECT status, error FROM runs WHERE asset = 'sxs_latency_claim'"
                        ).to_pylist()
        assert failed and failed[0]["status"] == "failed" and failed[0]["error"]
