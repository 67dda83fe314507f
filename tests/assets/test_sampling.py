"""The one sampling config (assets/sampling.py): its conversion to ``EvalConfig`` and how a run
config reaches it when it is nested in an asset's config."""

import dagster as dg
import pytest

from assets.sampling import SAMPLED_TEMPERATURE, SamplingConfig
from eval.modes import SingleMode, build_mode


def test_defaults_sample_greedily_once_and_store_top_p_one():
    cfg = SamplingConfig().eval_config()
    # k None and the benchmark's default k 1: one greedy sample; greedy ignores nucleus
    # sampling, so the stored top_p is 1.0 although the field says 0.95
    assert (cfg.k, cfg.temperature, cfg.top_p) == (1, 0.0, 1.0)
    assert (cfg.max_tokens, cfg.seed, cfg.limit, cfg.extraction) == (512, 0, None, "strict")
    assert isinstance(cfg.mode, SingleMode)
    assert SamplingConfig().eval_config(default_k=1).temperature == 0.0


def test_several_samples_default_to_the_sampled_temperature():
    cfg = SamplingConfig(k=4).eval_config()
    assert (cfg.k, cfg.temperature, cfg.top_p) == (4, 0.6, 0.95) and SAMPLED_TEMPERATURE == 0.6
    # no k: the benchmark's default k decides, and with it the temperature
    by_default = SamplingConfig().eval_config(default_k=8)
    assert (by_default.k, by_default.temperature) == (8, 0.6)
    # an explicit temperature and the other settings pass through
    cfg = SamplingConfig(k=2, temperature=1.0, top_p=0.9, max_tokens=32, seed=7).eval_config(
        limit=5, extraction="flexible", mode=build_mode(mode="single"))
    assert (cfg.k, cfg.temperature, cfg.top_p, cfg.max_tokens, cfg.seed, cfg.limit,
            cfg.extraction) == (2, 1.0, 0.9, 32, 7, 5, "flexible")


@pytest.mark.parametrize("settings, extraction, word", [
    ({"k": 2, "temperature": 0.0}, "strict", "k"),  # k identical greedy samples
    ({"max_tokens": 0}, "strict", "max_tokens"),
    ({}, "lenient", "extraction"),
])
def test_bad_settings_are_a_failure_naming_the_setting(settings, extraction, word):
    with pytest.raises(dg.Failure, match=rf"bad sampling settings: .*\b{word}\b"):
        SamplingConfig(**settings).eval_config(extraction=extraction)


def test_a_nested_run_config_is_merged_over_the_assets_defaults():
    class ProbeConfig(dg.Config):
        sampling: SamplingConfig = SamplingConfig(k=4, temperature=0.7, top_p=1.0,
                                                  max_tokens=384)

    seen = []

    @dg.asset
    def probe(config: ProbeConfig) -> None:
        seen.append(config.sampling.eval_config())

    assert dg.materialize([probe], run_config={"ops": {"probe": {"config": {
        "sampling": {"k": 3}}}}}).success
    assert dg.materialize([probe]).success
    given, default = seen
    assert given.k == 3  # the run config's k; the asset's other defaults stay
    assert (given.temperature, given.top_p, given.max_tokens) == (0.7, 1.0, 384)
    assert (default.k, default.temperature, default.max_tokens) == (4, 0.7, 384)
