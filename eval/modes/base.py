"""The protocol every generation mode implements, the mode registry and the flat constructor.

A mode is one class (a frozen dataclass of its own settings) derived from :class:`Mode` and
registered under its name with :func:`register_mode`. The runner (``eval.runner.generate``)
drives every mode the same way, one evaluation being one :class:`Run`:

1. ``plan(problems, k)`` -- the jobs (one per problem x sample, times whatever the mode varies);
2. ``prepare(run, jobs)`` -- run-level setup before any request (a decoding limit, a tokenizer,
   a check that the run has what the mode needs), kept in ``run.state``;
3. per job: ``messages(bench, job)`` -- the conversation; ``max_tokens(run, job, max_tokens)``
   -- its generation limit; ``generate(run, job, messages, params)`` -- the completion: the
   ``output`` text, token counts, latency, finish reason and error (plus any column the mode
   fills while generating, e.g. ``graded_text`` when it extracts the answer itself);
   ``graded_text(output)`` -- the answer region the grader reads (when ``generate`` did not
   give one); ``sample_fields(run, job, row)`` -- the mode's extra per-sample columns;
4. ``run_extra(rows)`` -- entries for ``EvalResult.extra`` (e.g. the budgeted run's limit).

Every default does what the plain ``single`` mode does, so a new mode overrides only what
differs. ``eval.modes.build.build_mode`` builds a mode from flat settings (the ``eval_samples`` Dagster
config has one field per setting of every mode): the settings of the named mode go to its
class, ``thinking_caps`` wraps it in the thinking-cap sweep, and a setting of another mode is
refused with the name of the mode that takes it -- unless it is left at that mode's default
(the asset passes every field whatever the mode). ``tokenizer_path`` is the exception: the
asset fills it with the model's folder for every mode, so modes that measure no latency
ignore it, as they always have.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from pipelines.formats import BOXED, answer_region

# Tokens a chat template may add around the messages (role markers, a default system prompt);
# part of the prompt-size bound used to keep a decoding limit inside the model's context.
TEMPLATE_TOKENS = 128


@dataclass
class Job:
    """One generation to run: a problem, a sample index and what the mode varies per job
    (``budget`` and ``cap`` are columns of every ``eval_samples`` row, None when unused)."""

    problem: dict[str, Any]
    index: int
    budget: int | None = None
    cap: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def variant(self) -> int:
        """The LLM cache's sample index: distinct for distinct budgets/caps of one sample."""
        return self.index + 1000 * (self.budget or 0) + 7 * (self.cap or 0)


ChatFn = Callable[..., Awaitable[Any]]


async def plain_chat(client: Any, messages: list[dict[str, Any]], params: Any, *, tag: str,
                     sample_index: int) -> Any:
    """One completion (a ``pipelines.llm.ChatResult``) for ``messages``."""
    return (await client.chat(messages, params, tag=tag, sample_index=sample_index))[0]


def _no_context_window() -> int | None:
    return None


@dataclass(frozen=True)
class Run:
    """One evaluation as its mode sees it.

    ``client`` answers chat requests (``pipelines.llm.LLMClient`` or anything with its ``chat``
    and ``map``); ``context_window`` asks the endpoint for the model's context length (None
    when unknown; blocking, call it in a thread); ``state`` holds what ``Mode.prepare`` computed
    for the whole run; ``chat`` is how one completion is requested -- the thinking-cap sweep
    swaps in a capped one (``eval.modes.capped``), so a mode that calls :meth:`complete` is
    capped without knowing it.
    """

    client: Any
    bench: Any = None
    sandbox: Any | None = None
    tag: str = "eval"
    context_window: Callable[[], int | None] = _no_context_window
    state: dict[str, Any] = field(default_factory=dict)
    chat: ChatFn = plain_chat

    async def complete(self, messages: list[dict[str, Any]], params: Any, *,
                       sample_index: int) -> Any:
        """One completion through this run's ``chat`` (a ``ChatResult``)."""
        return await self.chat(self.client, messages, params, tag=self.tag,
                               sample_index=sample_index)


def completion_fields(result: Any) -> dict[str, Any]:
    """The ``eval_samples`` columns of one ``ChatResult``."""
    return {
        "output": result.text or "",
        "prompt_tokens": int(result.prompt_tokens or 0),
        "completion_tokens": int(result.completion_tokens or 0),
        "latency_s": float(result.latency_s or 0.0),
        "finish_reason": result.finish_reason,
        "gen_error": result.error,
    }


class Mode:
    """A generation mode: subclass it as a frozen dataclass of the mode's settings, set
    ``name`` (the registry key and the rows' ``mode`` value) and ``answer_format`` (the
    ``pipelines.formats`` format whose answer region is graded, as the RL reward of that format
    reads it), override what differs from a plain single answer, and decorate it with
    :func:`register_mode`. Validation of the settings belongs in ``__post_init__``.

    ``cappable``: the mode's answers (or turns) open with one ``<think>`` block that a thinking
    cap can limit (``eval.modes.capped.ThinkingCaps``). ``measures_latency``: its rows can get
    the content-latency metrics (SxS Table 1).
    """

    name: ClassVar[str] = ""
    answer_format: ClassVar[str] = BOXED
    cappable: ClassVar[bool] = False
    measures_latency: ClassVar[bool] = False

    @property
    def mode(self) -> str:
        """The mode's name (what ``build_mode(mode=...)`` took)."""
        return self.name

    def plan(self, problems: Sequence[dict[str, Any]], k: int) -> list[Job]:
        """The jobs of a run: by default ``k`` samples of every problem, problem by problem."""
        return [Job(p, i) for p in problems for i in range(k)]

    def messages(self, bench: Any, job: Job) -> list[dict[str, str]]:
        """The conversation that asks for one sample: by default the benchmark's prompt."""
        return [{"role": "user", "content": bench.render(job.problem)}]

    async def prepare(self, run: Run, jobs: list[Job]) -> None:
        """Run-level setup before the first request; results go in ``run.state``."""

    def max_tokens(self, run: Run, job: Job, max_tokens: int) -> int:
        """The generation limit of one job's answer (``EvalConfig.max_tokens`` by default)."""
        return max(1, max_tokens)

    async def generate(self, run: Run, job: Job, messages: list[dict[str, Any]],
                       params: Any) -> dict[str, Any]:
        """One job's completion: ``output``, ``prompt_tokens``, ``completion_tokens``,
        ``latency_s``, ``finish_reason``, ``gen_error``, and any column the mode fills while
        generating. A failed request is returned with its error, never raised."""
        return completion_fields(await run.complete(messages, params,
                                                    sample_index=job.variant))

    def graded_text(self, output: str) -> str:
        """The answer region of one output in the mode's format, the text the grader reads;
        "" when the output has none (so nothing else is graded instead)."""
        region = answer_region(output or "", self.answer_format)
        return "" if region is None else region

    def sample_fields(self, run: Run, job: Job, row: Mapping[str, Any]) -> dict[str, Any]:
        """The mode's extra columns of one generated row (``graded_text`` is already set)."""
        return {}

    def run_extra(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Entries the mode adds to ``EvalResult.extra`` (the asset's metadata)."""
        return {}


_REGISTRY: dict[str, type[Mode]] = {}
# name -> mode class, read-only (register with register_mode)
MODES: Mapping[str, type[Mode]] = MappingProxyType(_REGISTRY)


def register_mode(cls: type[Mode]) -> type[Mode]:
    """Class decorator: make ``cls`` the mode called ``cls.name`` (``build_mode(mode=...)``).

    A name already taken by another class is refused; re-registering the same class (or the
    same class from a reloaded module) replaces it."""
    if not (isinstance(cls, type) and issubclass(cls, Mode)):
        raise TypeError(f"register_mode takes a subclass of eval.modes.Mode, got {cls!r}")
    name = cls.name
    if not isinstance(name, str) or not name:
        raise ValueError(f"{cls.__qualname__} needs a class attribute `name` (the mode's name, "
                         "e.g. name = \"single\")")
    taken = _REGISTRY.get(name)
    if taken is not None and (taken.__module__, taken.__qualname__) != (cls.__module__,
                                                                        cls.__qualname__):
        raise ValueError(f"mode name {name!r} is taken by {taken.__module__}.{taken.__qualname__}; "
                         f"give {cls.__qualname__} another name")
    _REGISTRY[name] = cls
    return cls


def mode_class(name: str) -> type[Mode]:
    """The registered mode class called ``name``."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"mode must be one of {tuple(_REGISTRY)}, got {name!r}") from None


def plan_jobs(problems: Sequence[dict[str, Any]], k: int, mode: Mode) -> list[Job]:
    """The jobs of one run of ``mode`` (``Mode.plan``)."""
    return mode.plan(problems, k)


def messages_for(bench: Any, job: Job, mode: Mode) -> list[dict[str, str]]:
    """The conversation that asks for one sample in ``mode`` (``Mode.messages``)."""
    return mode.messages(bench, job)


def prompt_token_bound(messages: Sequence[dict[str, Any]]) -> int:
    """An upper bound on the prompt's tokens without a tokenizer: UTF-8 bytes of the contents
    (a byte-level BPE token covers at least one byte) plus :data:`TEMPLATE_TOKENS`."""
    return sum(len(str(m.get("content") or "").encode()) for m in messages) + TEMPLATE_TOKENS
