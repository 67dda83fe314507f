"""Tool mode with an interpreter error injected into the first cell (eval/modes/tool.py,
``inject_first_cell``): the failure replaces the cell's run in a real sandbox session, and two
models evaluated with the same seed meet the same failure on the same sample of the same
problem, whatever code they write."""

import asyncio

import pytest

from eval.benchmarks import get
from eval.modes import Run, build_mode
from eval.modes.tool import injected_failure
from eval.runner import EvalConfig, evaluate
from pipelines.llm import ChatResult, LLMClient, SamplingParams
from pipelines.llm.testing import FakeLLMServer

# the four environment failures of MOSAIC (DeepTool §2.1, Φ_env), written out by hand
KINDS = ("timeout", "out_of_memory", "connection_reset", "kernel_restart")
# what each one shows the model, in the interpreter's own words
SHOWN = {
    "timeout": ["TimeoutError: the cell exceeded its wall-clock limit of"],
    "out_of_memory": ["MemoryError"],
    "connection_reset": ["ConnectionResetError: [Errno 104] Connection reset by peer"],
    "kernel_restart": ["KernelDied: the interpreter was killed by SIGKILL",
                       "[the interpreter was restarted; all variables were lost]"],
}


class _Replies:
    """Answers each chat call with the next scripted reply."""

    def __init__(self, replies):
        self.replies = list(replies)

    async def chat(self, messages, params, **kwargs):
        return [ChatResult(self.replies.pop(0), "stop", 1, 1, 0.0, False)]


def _interpreter_blocks(transcript: str) -> list[str]:
    return [part.split("</interpreter>")[0].strip()
            for part in transcript.split("<interpreter>")[1:]]


@pytest.mark.parametrize("kind", KINDS)
def test_the_first_cell_is_not_run_and_shows_the_failure(kind):
    from pipelines.sandbox import Limits, SandboxPool

    replies = ["<think>a</think><code>print(6 * 7)\nx = 5</code>",
               "<think>again</think><code>y = 2 + 3\nprint('SECOND', y)</code>",
               "<think>done</think><answer>\\boxed{5}</answer>"]
    with SandboxPool(workers=1, limits=Limits(timeout_s=5.0)) as pool:
        session = pool.session()
        try:
            out = asyncio.run(build_mode(mode="tool", inject_first_cell=True).solve(
                Run(_Replies(replies)), session, "q", SamplingParams(max_tokens=64),
                sample_index=0, inject=kind))
        finally:
            session.close()
    first, second = _interpreter_blocks(out["output"])
    assert "42" not in first  # what the cell would have printed: it did not run
    for line in SHOWN[kind]:
        assert line in first
    if kind == "timeout":  # it quotes the session's own limit
        assert "limit of 5 s" in first
    assert second == "SECOND 5"  # the later cell really ran
    assert (out["injected_failure"], out["cells"], out["tool_errors"]) == (kind, 2, 1)
    assert out["graded_text"].strip() == "\\boxed{5}"


def test_a_sample_without_a_cell_meets_no_failure_and_nothing_is_injected_by_default():
    mode = build_mode(mode="tool", inject_first_cell=True)
    out = asyncio.run(mode.solve(Run(_Replies(["<think>x</think><answer>4</answer>"])), None, "q",
                                 SamplingParams(max_tokens=64), sample_index=0,
                                 inject="timeout"))
    assert (out["injected_failure"], out["cells"], out["tool_errors"]) == (None, 0, 0)
    assert build_mode(mode="tool").inject_first_cell is False
    with pytest.raises(ValueError, match="inject_first_cell must be true or false"):
        build_mode(mode="tool", inject_first_cell="yes")


def test_the_failure_depends_on_the_seed_and_problem_only():
    draws = {(seed, f"p{i}"): injected_failure(seed, f"p{i}") for seed in range(3)
             for i in range(40)}
    assert set(draws.values()) == set(KINDS)  # every kind is drawn
    assert all(injected_failure(s, p) == k for (s, p), k in draws.items())  # reproducible
    # another seed moves some problems to another kind
    assert any(draws[(0, f"p{i}")] != draws[(1, f"p{i}")] for i in range(40))


PROBLEMS = [{"problem_id": f"q{i}", "source": "gsm8k", "problem": f"What is {i} plus 10?",
             "answer": str(i + 10), "meta": "{}"} for i in range(10)]


def _arm_responder(body, index):
    """Two models that write different code: ``arm-a`` one line per cell, ``arm-b`` a
    function; ``arm-b`` answers q0 without any cell. Both run their cell twice, then answer."""
    messages, model = body["messages"], body["model"]
    problem = messages[1]["content"]
    i = int(problem.split()[2])
    cells = sum(1 for m in messages if m["role"] == "assistant")
    if model == "arm-b" and i == 0:
        return "<think>easy</think><answer>\\boxed{10}</answer>"
    if cells == 2:
        return f"<think>done</think><answer>\\boxed{{{i + 10}}}</answer>"
    if model == "arm-a":
        return f"<think>add</think><code>print({i} + 10)</code>"
    return (f"<think>a function</think><code>def add(a, b):\n    return a + b\n"
            f"print(add({i}, 10))</code>")


def _evaluate(server, model, seed, pool, tmp_path):
    async def go():
        client = LLMClient(server.base_url, model, cache_path=tmp_path / f"{model}.sqlite",
                           max_concurrency=4)
        try:
            cfg = EvalConfig(mode=build_mode(mode="tool", max_turns=4, inject_first_cell=True),
                             k=2, temperature=0.7, seed=seed)
            return await evaluate(client, get("gsm8k"), PROBLEMS, cfg, model_label=model,
                                  sandbox=pool)
        finally:
            await client.aclose()

    return {(r["problem_id"], r["sample_index"]): r for r in asyncio.run(go()).samples}


def test_two_models_meet_the_same_failure_on_the_same_sample(tmp_path):
    from pipelines.sandbox import SandboxPool

    with FakeLLMServer(models=("arm-a", "arm-b"), responder=_arm_responder) as server, \
            SandboxPool(workers=2) as pool:
        a = _evaluate(server, "arm-a", 0, pool, tmp_path)
        b = _evaluate(server, "arm-b", 0, pool, tmp_path)
        b_other_seed = _evaluate(server, "arm-b", 7, pool, tmp_path)
    assert set(a) == set(b) and len(a) == 20
    met = [key for key in a if b[key]["injected_failure"] is not None]
    assert len(met) == 18  # arm-b wrote no cell on q0
    for key in met:
        kind = a[key]["injected_failure"]
        assert b[key]["injected_failure"] == kind
        for row in (a[key], b[key]):  # each shows that failure first, and reran for real
            first, second = _interpreter_blocks(row["output"])[:2]
            assert all(line in first for line in SHOWN[kind])
            assert second.strip().endswith(str(int(key[0][1:]) + 10))
    assert len({a[key]["injected_failure"] for key in met}) > 1  # not one kind for all
    for sample in (0, 1):
        assert b[("q0", sample)]["injected_failure"] is None and b[("q0", sample)]["cells"] == 0
        assert a[("q0", sample)]["injected_failure"] is not None
    assert all(row["correct"] for row in [*a.values(), *b.values()])
    # the seed draws the failures: another seed gives another pattern
    assert any(b_other_seed[key]["injected_failure"] != b[key]["injected_failure"] for key in met)
