"""One answer per sample: ``single`` (the benchmark's prompt) and ``interleaved`` (SxS).

- ``single``: one completion per sample for the benchmark's prompt (format ``boxed``). With a
  tokenizer (``tokenizer_path``) the content-latency metrics are computed too: a
  reason-then-answer output is one think and one speak block, which gives the single-mode rows
  of SxS Table 1.
- ``interleaved``: the think/speak instruction as system prompt (format ``sxs``); the output
  is parsed with the tolerant tag parser, the *speak* projection is what gets graded, and the
  content-latency metrics (ARI, ABO, AIRW, first substantive disclosure, filler rate) are
  computed per sample with the model's tokenizer (``tokenizer_path``, default the embedded
  model's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from eval.latency import latency_metrics
from eval.modes.base import Job, Mode, Run, register_mode
from pipelines.formats import BOXED, SXS, SXS_SYSTEM_PROMPT, parse_tagged

TOKENIZER = "tokenizer"  # run.state key of the tokenizer the latency metrics count with


class FastTokenizer:
    """A model folder's ``tokenizer.json`` through the ``tokenizers`` library: the same
    encoding as transformers' fast tokenizer built from that file, without importing
    transformers (which takes 10-40 s on a busy 2-core host, more than a cached evaluation).
    Only what the latency metrics use: ``encode(text, add_special_tokens=False)``."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self.path = path
        self._tokenizer = Tokenizer.from_file(str(path))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids


def load_tokenizer(path: str | None) -> Any:
    """The tokenizer of the model folder at ``path`` (default: the embedded model's): its
    ``tokenizer.json`` as a :class:`FastTokenizer` when the folder has one, else transformers'
    ``AutoTokenizer``."""
    from pipelines.models import convert

    folder = Path(path or str(convert()))
    if (folder / "tokenizer.json").is_file():
        return FastTokenizer(folder / "tokenizer.json")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def latency_fields(text: str, tokenizer: Any) -> dict[str, Any]:
    """The content-latency columns of one output (tolerant tag parse, ``eval.latency``); none
    for an output without segments."""
    segments = parse_tagged(text or "", strict=False)
    if not segments:
        return {}
    m = latency_metrics(segments, tokenizer)
    return {"ari": m.ari, "abo": m.abo, "airw": m.airw, "airw_between": m.airw_between,
            "first_disclosure": m.first_disclosure, "filler_rate": m.filler_rate,
            "reasoning_tokens": m.reasoning_tokens, "response_tokens": m.response_tokens}


@register_mode
@dataclass(frozen=True)
class SingleMode(Mode):
    """One answer to the benchmark's prompt; latency metrics when ``tokenizer_path`` is set."""

    name: ClassVar[str] = "single"
    answer_format: ClassVar[str] = BOXED
    cappable: ClassVar[bool] = True
    measures_latency: ClassVar[bool] = True

    tokenizer_path: str | None = None

    def __post_init__(self) -> None:
        if self.tokenizer_path is not None and not isinstance(self.tokenizer_path, str):
            raise ValueError(f"tokenizer_path must be a folder path or None, "
                             f"got {self.tokenizer_path!r}")

    @property
    def wants_tokenizer(self) -> bool:
        """Whether rows get content-latency metrics (single mode: only with a tokenizer path)."""
        return self.tokenizer_path is not None

    async def prepare(self, run: Run, jobs: list[Job]) -> None:
        if self.wants_tokenizer:
            run.state[TOKENIZER] = load_tokenizer(self.tokenizer_path)

    def sample_fields(self, run: Run, job: Job, row: Mapping[str, Any]) -> dict[str, Any]:
        tokenizer = run.state.get(TOKENIZER)
        return {} if tokenizer is None else latency_fields(row["output"], tokenizer)


@register_mode
@dataclass(frozen=True)
class InterleavedMode(SingleMode):
    """SxS think/speak answers: the speak projection is graded, latency always measured."""

    name: ClassVar[str] = "interleaved"
    answer_format: ClassVar[str] = SXS
    cappable: ClassVar[bool] = False

    @property
    def wants_tokenizer(self) -> bool:
        return True

    def messages(self, bench: Any, job: Job) -> list[dict[str, str]]:
        return [{"role": "system", "content": SXS_SYSTEM_PROMPT},
                {"role": "user", "content": bench.render(job.problem)}]
