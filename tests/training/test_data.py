"""Dataset specs, built-in sets and the conversion to TRL's row formats."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from training import data as D
from training.errors import DatasetError, DatasetMissing
from training.rewards import get_action_process_reward, get_format_reward, get_outcome_reward


@pytest.mark.parametrize("spec, expected", [
    ("builtin:arith", ("builtin", "arith", {})),
    ("builtin:arith?n=8&seed=3", ("builtin", "arith", {"n": "8", "seed": "3"})),
    ("warehouse:tir_sft_dataset?rendering=state_discarded",
     ("warehouse", "tir_sft_dataset", {"rendering": "state_discarded"})),
    ("warehouse:problems/gsm8k_train", ("warehouse", "problems/gsm8k_train", {})),
    ("problems:gsm8k_train", ("problems", "gsm8k_train", {})),
    ("/data/x.parquet", ("parquet", "/data/x.parquet", {})),
    ("rows.jsonl", ("jsonl", "rows.jsonl", {})),
])
def test_parse_spec(spec, expected):
    assert D.parse_spec(spec) == expected


@pytest.mark.parametrize("spec, message", [
    ("", "empty"),
    ("data.csv", "has no kind"),
    ("s3:bucket/x", "unknown kind 's3'"),
    ("builtin:", "names no builtin target"),
    ("builtin:nope", "no built-in set 'nope'"),
])
def test_parse_spec_errors(spec, message):
    with pytest.raises(DatasetError, match=message):
        D.parse_spec(spec)


def test_builtins_are_deterministic_and_well_formed():
    a = D.load_rows("builtin:arith?n=16&seed=1")
    assert a == D.load_rows("builtin:arith?n=16&seed=1") != D.load_rows("builtin:arith?n=16&seed=2")
    assert len(a) == 16 and len({r["problem"] for r in a}) == 16
    for row in a:
        assert get_outcome_reward("boxed")(completions=[row["solution"]], answer=[row["answer"]]) == [1.0]
    for row in D.load_rows("builtin:sxs_sft", limit=4):
        text = row["completion"][0]["content"]
        assert get_format_reward("sxs")(completions=[text]) == [1.0]
        assert get_outcome_reward("sxs")(completions=[text], answer=[text.split("{")[-1].split("}")[0]]) == [1.0]
    preserved = D.load_rows("builtin:tir_sft_preserved?n=2")
    discarded = D.load_rows("builtin:tir_sft_discarded?n=2")
    assert len(preserved) == len(discarded) == 4  # two steps per problem
    second_p, second_d = preserved[1]["prompt"], discarded[1]["prompt"]
    assert "<think>" in second_p[2]["content"] and "<think>" not in second_d[2]["content"]
    for row in preserved:
        assert get_format_reward("tir")(completions=[row["completion"]]) == [1.0]
    steps = D.load_rows("builtin:step_instances?n=3")
    assert len(steps) == 6 and [r["is_last_step"] for r in steps[:2]] == [False, True]
    fn = get_action_process_reward()
    perfect = [r["reference_output"] for r in steps]
    assert fn(completions=perfect, reference_action=[r["reference_action"] for r in steps],
              reference_kind=[r["reference_kind"] for r in steps],
              is_last_step=[r["is_last_step"] for r in steps]) == [1.0] * 6
    with pytest.raises(DatasetError, match="only n and seed"):
        D.load_rows("builtin:arith?size=3")


def test_arith1_is_every_one_digit_problem_once_with_right_answers():
    everything = D.load_rows("builtin:arith1?n=207&seed=0")
    # Independent count: 9 x 9 sums, 9 x 9 products and the 45 differences a - b with a >= b.
    assert len(everything) == 81 + 81 + 45
    assert len({r["problem"] for r in everything}) == len({r["problem_id"] for r in everything}) == 207
    for row in everything:
        _, _, a, word, b = row["problem"].rstrip("?").split()
        a, b = int(a), int(b)
        assert 1 <= a <= 9 and 1 <= b <= 9
        value = {"plus": a + b, "minus": a - b, "times": a * b}[word]
        assert value >= 0 and row["answer"] == str(value)
        assert row["problem_id"] == f"arith1-{a}{'+-*'[['plus', 'minus', 'times'].index(word)]}{b}"
        assert get_outcome_reward("boxed")(completions=[row["solution"]],
                                           answer=[row["answer"]]) == [1.0]
    # the spec's limit picks the first rows of a seeded order; other seeds, other orders
    first = D.load_rows("builtin:arith1?seed=2", limit=96)
    assert first == D.load_rows("builtin:arith1?seed=2&n=207")[:96]
    assert first != D.load_rows("builtin:arith1?seed=1", limit=96)
    assert len(D.load_rows("builtin:arith1")) == 64  # the built-ins' default size
    for bad in ("builtin:arith1?n=208", "builtin:arith1?n=0"):
        with pytest.raises(DatasetError, match="207 distinct problems; ask for n"):
            D.load_rows(bad)


def test_files_and_filters(tmp_path):
    rows = [{"prompt": "p1", "completion": "c1", "split": "a"},
            {"prompt": "p2", "completion": "c2", "split": "b"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "x.parquet")
    (tmp_path / "x.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    assert D.load_rows(f"parquet:{tmp_path / 'x.parquet'}") == rows
    assert D.load_rows(f"{tmp_path / 'x.jsonl'}?split=b") == rows[1:]
    with pytest.raises(DatasetError, match="cannot filter on 'nope'"):
        D.load_rows(f"{tmp_path / 'x.jsonl'}?nope=1")
    with pytest.raises(DatasetMissing, match="no file"):
        D.load_rows(f"parquet:{tmp_path / 'missing.parquet'}")
    (tmp_path / "bad.jsonl").write_text('{"a": 1}\nnot json\n')
    with pytest.raises(DatasetError, match="bad.jsonl:2: not JSON"):
        D.load_rows(str(tmp_path / "bad.jsonl"))


def test_warehouse_spec_and_fallback(weft_home):
    from warehouse import Lineage, Warehouse

    with pytest.raises(DatasetMissing, match="materialize the `sxs_sft_dataset` asset"):
        D.load_rows("warehouse:sxs_sft_dataset")
    loaded = D.load_dataset("warehouse:sxs_sft_dataset", fallback="builtin:sxs_sft", limit=5)
    assert loaded.fallback_from == "warehouse:sxs_sft_dataset" and loaded.spec == "builtin:sxs_sft"
    assert len(loaded.rows) == 5 and loaded.describe()["rows"] == 5
    # message lists, as assets/mosaic.py writes them (warehouse/schema.py declares the type)
    rows = [{"prompt": [{"role": "user", "content": f"q{i}"}],
             "completion": [{"role": "assistant", "content": f"a{i}"}],
             "rendering": "state_preserved" if i % 2 else "state_discarded"} for i in range(4)]
    Warehouse().write("tir_sft_dataset", rows, lineage=Lineage(partition="all"))
    got = D.load_dataset("warehouse:tir_sft_dataset?rendering=state_preserved")
    assert got.fallback_from is None and len(got.rows) == 2
    assert "run_id" not in got.rows[0]  # lineage columns are not training data
    examples = D.sft_examples(got.rows)
    assert examples[0] == {"prompt": [{"role": "user", "content": "q1"}],
                           "completion": [{"role": "assistant", "content": "a1"}]}
    assert got.fingerprint == D.load_dataset("warehouse:tir_sft_dataset?rendering=state_preserved").fingerprint
    with pytest.raises(DatasetMissing):
        D.load_dataset("warehouse:nothing_here")


def test_sft_examples_formats_and_errors():
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a"}]
    assert D.sft_examples([{"messages": msgs}]) == [{"prompt": msgs[:2], "completion": msgs[2:]}]
    assert D.sft_examples([{"prompt": "p", "completion": "c"}]) == [{"prompt": "p", "completion": "c"}]
    boxed = D.sft_examples([{"problem": "1+1?", "solution": "\\boxed{2}"}])[0]
    assert boxed["prompt"][0]["role"] == "system" and boxed["completion"][0]["content"] == "\\boxed{2}"
    for rows, message in [
        ([{"question": "q"}], "need prompt\\+completion"),
        ([{"prompt": "p", "completion": [{"role": "assistant", "content": "c"}]}], "both be text"),
        ([{"messages": msgs[:2]}], "ending with an assistant"),
        ([{"prompt": "p", "completion": "  "}], "empty completion"),
        ([{"prompt": [{"role": "user"}], "completion": "c"}], "needs string 'role' and 'content'"),
        ([{"prompt": 5, "completion": "c"}], "expected text or a non-empty list"),
        ([], "no SFT rows"),
    ]:
        with pytest.raises(DatasetError, match=message):
            D.sft_examples(rows)


def test_grpo_examples_and_budgets():
    rows = D.grpo_examples(D.load_rows("builtin:arith?n=8"), "sxs")
    from pipelines.formats import SXS_SYSTEM_PROMPT

    assert rows[0]["prompt"][0] == {"role": "system", "content": SXS_SYSTEM_PROMPT}
    assert rows[0]["prompt"][1]["content"].startswith("What is")
    assert "answer" in rows[0] and "solution" in rows[0]
    kept = D.grpo_examples([{"prompt": "p", "answer": "1", "x": 2}], keep=["answer"])
    assert kept == [{"prompt": "p", "answer": "1"}]
    with pytest.raises(DatasetError, match="'prompt' or a 'problem'"):
        D.grpo_examples([{"question": "q"}])
    budgeted = D.add_budgets(rows, [100, 200], seed=0)
    assert sorted(r["budget"] for r in budgeted) == [100] * 4 + [200] * 4
    # default: the Engagement paper's wordless urgency instructions (App. F), most urgent first
    words = {100: "Now time is urgent, please give me an answer immediately.",
             200: "Now there is a lot of time for you to think, please think carefully and give "
                  "me an answer."}
    for row in budgeted:
        assert row["prompt"][-1]["content"].endswith("\n\n" + words[row["budget"]])
    assert rows[0]["prompt"][-1]["content"].startswith("What is")  # input rows untouched
    assert "50" in D.add_budgets([{"prompt": "plain"}], [50], style="numeric")[0]["prompt"]
    with pytest.raises(DatasetError, match="positive integers"):
        D.add_budgets(rows, [0])
    with pytest.raises(DatasetError, match="no user message"):
        D.add_budgets([{"prompt": [{"role": "system", "content": "s"}]}], [5])


def test_builtin_chain_answers_follow_the_words_and_lengths_vary():
    """Each chain problem is re-read from its words and evaluated left to right, independently
    of the generator; ids are unique and step counts span 2..5."""
    import re

    from training.data import builtin_chain, builtin_chain_sft, load_dataset

    rows = builtin_chain(300, seed=3)
    assert len({r["problem_id"] for r in rows}) == 300
    for r in rows:
        m = re.fullmatch(r"Start with (\d)\. (.*)\. What number do you get\?", r["problem"])
        value = int(m.group(1))
        steps = m.group(2).split(", then ")
        for step in steps:
            word, x = step.lower().rsplit(" ", 1)
            x = int(x)
            value = {"add": value + x, "subtract": value - x, "multiply by": value * x}[word]
            assert 0 <= value <= 99
        assert r["answer"] == str(value) and r["steps"] == len(steps)
        assert r["solution"].endswith(f"\\boxed{{{value}}}$.")
        assert r["solution"].count("\n\n") == len(steps)
    assert {r["steps"] for r in rows} == {2, 3, 4, 5}
    sft = builtin_chain_sft(4, seed=3)
    assert sft[0]["completion"][0]["content"] == rows[0]["solution"]
    assert load_dataset("builtin:chain?n=5&seed=3").rows[0]["problem"] == rows[0]["problem"]
