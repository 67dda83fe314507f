"""Code RL data and recipes: the built-in task generator (its reference solutions pass their own
tests in the real sandbox, and the tests tell a constant answer apart), the `mbpp:` loader on
local files in MBPP and MBPP+ shape (conversion, decontamination against MBPP+, rejects), the
code_grpo recipes, and one real GRPO run of code_grpo.cpu on the embedded model."""

import json
import time
from pathlib import Path

import pytest

from training import rewards as R
from training.code_tasks import (
    CODE_TASKS_SIZE,
    FAMILIES,
    _reference,
    all_generated_problems,
    builtin_code_tasks,
    code_problem_from_record,
    description_key,
    split_assertions,
)
from training.config import load_config
from training.data import load_dataset, load_rows, parse_spec
from training.errors import DatasetError, DatasetMissing


@pytest.fixture(scope="module")
def reward():
    fn = R.get_code_reward(timeout_s=5.0, workers=2)
    yield fn
    fn.close()


# ---------------------------------------------------------------------------------------------
# generator


def test_generator_rows_are_eval_prompts_and_stable_ids():
    from eval.benchmarks import get

    rows = builtin_code_tasks(n=CODE_TASKS_SIZE, seed=0)
    assert CODE_TASKS_SIZE == sum(len(f.params) for f in FAMILIES) >= 50
    assert len({r["problem_id"] for r in rows}) == CODE_TASKS_SIZE
    reordered = builtin_code_tasks(n=CODE_TASKS_SIZE, seed=3)
    assert [r["problem_id"] for r in reordered] != [r["problem_id"] for r in rows]
    assert {r["problem_id"]: r for r in reordered} == {r["problem_id"]: r for r in rows}
    for row in rows:
        problem = json.loads(row["code_problem"])
        (message,) = row["prompt"]
        assert message["role"] == "user"
        text = message["content"]
        assert text.startswith(get("mbppplus").render("")[:40])
        assert f"assert {problem['entry_point']}(" in text  # the example shows the signature
        assert problem["canonical_solution"] not in text
        assert len(problem["base_input"]) >= 4
    assert load_rows("builtin:code_tasks?n=5&seed=3") == reordered[:5]
    with pytest.raises(DatasetError, match="between 1 and"):
        builtin_code_tasks(n=CODE_TASKS_SIZE + 1)


def test_generated_tests_tell_answers_apart():
    """Every task's inputs give at least two different reference outputs (so no constant
    answer passes), and the prompt's example is one of the tests."""
    for pid, text, problem in all_generated_problems():
        ref = _reference(problem["canonical_solution"], problem["entry_point"])
        outputs = [ref(*json.loads(json.dumps(args))) for args in problem["base_input"]]
        assert len({json.dumps(o, sort_keys=True) for o in outputs}) >= 2, pid
        assert any(f"{problem['entry_point']}({', '.join(map(repr, args))}) ==" in text
                   for args in problem["base_input"]), pid


def test_generated_reference_solutions_pass_in_the_sandbox(reward):
    problems = all_generated_problems()
    fenced = [f"```python\n{p['canonical_solution']}```" for _, _, p in problems]
    constant = [f"def {p['entry_point']}(*args):\n    return 0\n" for _, _, p in problems]
    columns = [json.dumps(p) for _, _, p in problems]
    assert reward(completions=fenced, code_problem=columns) == [1.0] * len(problems)
    assert reward(completions=constant, code_problem=columns) == [0.0] * len(problems)


# ---------------------------------------------------------------------------------------------
# MBPP / MBPP+ loading


MBPP_ROWS = [
    {"task_id": 9001, "text": "Write a function to return the last digit of a non-negative "
     "integer.", "code": "def last_digit(n):\n    return n % 10\n",
     "test_list": ["assert last_digit(123) == 3", "assert last_digit(0) == 0",
                   "assert last_digit(47) == 7"], "test_setup_code": "", "challenge_test_list": []},
    {"task_id": 9002, "text": "Write a function to find the common elements of two tuples, "
     "sorted.", "code": "def common(a, b):\n    return tuple(sorted(set(a) & set(b)))\n",
     "test_list": ["assert common((1, 2, 3), (2, 3, 4)) == (2, 3)",
                   "assert set(common((5,), (5, 6))) == {5}"], "test_setup_code": ""},
    {"task_id": 9003, "text": "Write a function to compute the area of a circle of radius r.",
     "code": "import math\ndef circle_area(r):\n    return math.pi * r * r\n",
     "test_list": ["assert math.isclose(circle_area(2), 12.566, rel_tol=0.001)",
                   "assert circle_area(0) == 0"], "test_setup_code": "import math"},
    # MBPP+ evaluates task 2: removed by its number, whatever the wording
    {"task_id": 2, "text": "Reworded task.", "code": "def f(x):\n    return x\n",
     "test_list": ["assert f(1) == 1"]},
    # the text of an MBPP+ task under another number: removed by its text
    {"task_id": 9004, "text": "Write a python function to identify non-prime numbers.",
     "code": "def is_not_prime(n):\n    return n < 2\n", "test_list": ["assert is_not_prime(1)"]},
    # rejected with a reason: code that does not parse, no tests, tests calling nothing defined
    {"task_id": 9005, "text": "Broken.", "code": "def f(:\n", "test_list": ["assert f(1) == 1"]},
    {"task_id": 9006, "text": "No tests.", "code": "def f(x):\n    return x\n", "test_list": []},
    {"task_id": 9007, "text": "Calls nothing.", "code": "def f(x):\n    return x\n",
     "test_list": ["assert g(1) == 1"]},
]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{not json\n")
    return path


def test_split_assertions_keeps_what_the_host_cannot_compare():
    inputs, kept = split_assertions([
        "assert f(1, [2, 3]) == 4",
        "assert f('a', {'k': 1}) == 'b'",
        "assert f((1, 2)) == 3",  # a tuple would arrive as a list: kept as an assertion
        "assert math.isclose(f(2), 3.0)",
        "assert f(x=1) == 2",
        "assert g(1) == 2",
        "assert f(1) != 2",
        "assert f(1 +",
    ], "f")
    assert inputs == [[1, [2, 3]], ["a", {"k": 1}]]
    assert len(kept) == 6


def test_mbpp_file_becomes_decontaminated_code_rows(tmp_path, shared_data, reward, caplog):
    path = _write_jsonl(tmp_path / "mbpp_train.jsonl", MBPP_ROWS)
    with caplog.at_level("WARNING", logger="training.code_tasks"):
        data = load_dataset(f"mbpp:{path}")
    assert [r["problem_id"] for r in data.rows] == ["mbpp-9001", "mbpp-9002", "mbpp-9003"]
    for reason in ("does not parse", "needs 'test_list'", "no function of the reference",
                   "not valid JSON"):
        assert reason in caplog.text
    problems = [json.loads(r["code_problem"]) for r in data.rows]
    last, common, area = problems
    assert last["entry_point"] == "last_digit" and last["base_input"] == [[123], [0], [47]]
    assert last["assertion"] == ""  # every assertion became a host-compared input
    assert common["base_input"] == [] and "assert set(common((5,), (5, 6)))" in common["assertion"]
    assert area["base_input"] == [[0]] and area["assertion"].startswith("import math\n")
    assert "assert last_digit(123) == 3" in data.rows[0]["prompt"][0]["content"]
    assert load_rows(f"mbpp:{path}", limit=2) == data.rows[:2]  # usable rows, not raw records

    good = [p["canonical_solution"] for p in problems]
    wrong = ["def last_digit(n):\n    return n // 10\n",
             "def common(a, b):\n    return tuple(set(a) | set(b))\n",
             "def circle_area(r):\n    return 3 * r * r\n"]
    columns = [r["code_problem"] for r in data.rows]
    assert reward(completions=good + wrong, code_problem=columns * 2) == [1.0] * 3 + [0.0] * 3


def test_mbppplus_shaped_file_is_removed_unless_asked(tmp_path, shared_data, reward):
    from eval.code_grader import load_benchmark

    rows = load_benchmark("mbppplus")[:2]
    path = _write_jsonl(tmp_path / "extra.jsonl", rows)
    with pytest.raises(DatasetMissing, match="2 removed as MBPP\\+ tasks"):
        load_rows(f"mbpp:{path}")  # the same tasks by text, even without MBPP task numbers
    kept = load_rows(f"mbpp:{path}?decontaminate=none")
    assert [json.loads(r["code_problem"])["task_id"] for r in kept] == ["Mbpp/2", "Mbpp/3"]
    out = reward(completions=[r["canonical_solution"] for r in rows],
                 code_problem=[r["code_problem"] for r in kept])
    assert out == [1.0, 1.0]


def test_mbpp_spec_errors(tmp_path):
    assert parse_spec("mbpp:google-research-datasets/mbpp?config=full&split=train") == (
        "mbpp", "google-research-datasets/mbpp", {"config": "full", "split": "train"})
    with pytest.raises(DatasetMissing, match="no file"):
        load_rows(f"mbpp:{tmp_path / 'missing.jsonl'}")
    path = _write_jsonl(tmp_path / "x.jsonl", MBPP_ROWS[:1])
    with pytest.raises(DatasetError, match="unknown parameters"):
        load_rows(f"mbpp:{path}?splitt=train")
    with pytest.raises(DatasetError, match="decontaminate must be"):
        load_rows(f"mbpp:{path}?decontaminate=maybe")


def test_mbpp_hub_id_fails_fast_offline(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    start = time.monotonic()
    with pytest.raises(DatasetMissing, match="google-research-datasets/mbpp"):
        load_rows("mbpp:google-research-datasets/mbpp?config=full&split=train")
    assert time.monotonic() - start < 30


@pytest.mark.parametrize("record, match", [
    ({"code": "def f(x):\n    return x\n", "base_input": [[1]], "prompt": "p"}, "entry_point"),
    ({"entry_point": "f", "base_input": [[1]], "prompt": "p"}, "reference solution"),
    ({"entry_point": "f", "code": "x", "base_input": "1", "prompt": "p"}, "list of argument"),
    ([1, 2], "JSON object"),
])
def test_bad_records_say_why(record, match):
    with pytest.raises(ValueError, match=match):
        code_problem_from_record(record)


def test_description_key_matches_mbpp_and_mbppplus_wording():
    plus = '"""\nWrite a python function to identify non-prime numbers.\nassert f(2) == False\n"""\n'
    assert description_key(plus) == description_key("Write a python function to identify "
                                                     "non-prime numbers.")


# ---------------------------------------------------------------------------------------------
# recipes


def test_code_recipes_load_and_match_their_data(weft_home):
    from training.grpo import check_reward_columns

    cpu = load_config("code_grpo.cpu")
    assert cpu.use_cpu and cpu.torch_threads == 1 and cpu.dataset == "builtin:code_tasks"
    specs = cpu.reward_specs()
    assert [s.name for s in specs] == ["code_tests", "code"]
    assert R.correctness_reward_index(specs) == 1  # the pass/fail verdict, at weight 0
    funcs, weights = R.build_rewards(specs, num_generations=cpu.num_generations)
    assert weights == [1.0, 0.0] and [f.__name__ for f in funcs] == ["code_tests", "code"]
    rows = load_dataset(cpu.dataset, limit=cpu.dataset_limit).rows
    check_reward_columns(funcs, set(rows[0]))
    assert load_config("code_grpo.cpu", {"drop_degenerate_groups": True}).drop_degenerate_groups

    gpu = load_config("code_grpo", {"bf16": False})
    assert gpu.model_name_or_path != "embedded" and gpu.num_generations == 8
    assert parse_spec(gpu.dataset)[0] == "mbpp"
    assert dict(gpu.reward_specs()[0].args)["workers"] >= 2


# ---------------------------------------------------------------------------------------------
# a real GRPO run


@pytest.mark.slow
def test_code_grpo_cpu_trains_on_sandboxed_rewards(weft_home, embedded_model_dir):
    from safetensors.torch import load_file

    from training.grpo import run_grpo
    from warehouse import Warehouse

    # Seed 57306 puts four tasks first that the untrained model solved in 1 of 4 samples when
    # measured (the sum_multiples family, count_longer_than_4, is_palindrome), so groups with
    # right and wrong programs, and so a gradient, are likely within 2 steps of 2 prompts each.
    config = load_config("code_grpo.cpu", {
        "max_steps": 2, "save_strategy": "no", "dataset": "builtin:code_tasks?seed=57306",
        "dataset_limit": 4, "per_device_train_batch_size": 8})
    start = time.monotonic()
    result = run_grpo(config)
    seconds = time.monotonic() - start
    trained = load_file(str(Path(result.path) / "model.safetensors"))
    base = load_file(str(embedded_model_dir / "model.safetensors"))
    assert any(not trained[k].equal(base[k]) for k in base)
    rows = Warehouse().read("train_metrics", partition=result.checkpoint_id).to_pylist()
    assert [r["step"] for r in rows] == [1, 2]
    logs = [json.loads(r["logs_json"]) for r in rows]
    shares = [log["rewards/code_tests/mean"] for log in logs]
    rewards = [log["rewards/code/mean"] for log in logs]  # the pass rate, logged at weight 0
    assert all(0.0 <= r <= 1.0 for r in shares + rewards)
    assert max(r["reward_std"] for r in rows) > 0  # some group had right and wrong programs
    print(f"code_grpo.cpu: 2 steps in {seconds:.0f}s; per step, share of tests passed "
          f"{shares}, pass rate {rewards}")
