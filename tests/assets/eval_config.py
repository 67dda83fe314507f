"""Run config of ``eval_samples`` for tests that pass its settings as keywords: the sampling
settings (``k``, ``temperature``, ``top_p``, ``max_tokens``, ``seed``) go under ``sampling``,
the rest stays at the top, as the asset's config is laid out."""

from typing import Any

SAMPLING_KEYS = ("k", "temperature", "top_p", "max_tokens", "seed")


def eval_samples_config(**config: Any) -> dict[str, Any]:
    sampling = {k: config.pop(k) for k in SAMPLING_KEYS if k in config}
    return {**config, "sampling": sampling} if sampling else config
