"""Training data: where rows come from (dataset specs), built-in toy sets, and TRL row formats.

A dataset spec is one string:

- ``builtin:<name>[?n=64&seed=0]`` — small deterministic sets made here (see :data:`BUILTINS`):
  arithmetic problems with gold answers (two-digit ``arith``, one-digit ``arith1``), and prompt/completion SFT rows in the boxed, SxS and
  tool-integrated (both renderings) formats, and MOSAIC-style step instances. They exist so
  that tests and the demo need no other asset; they teach a format, not mathematics.
- ``warehouse:<table>[/<partition>][?column=value&...]`` — rows of a weft warehouse table
  (e.g. ``sxs_sft_dataset``, ``tir_sft_dataset?rendering=state_discarded``, ``step_instances``,
  ``problems/gsm8k_train``), filtered on string equality of the given columns.
- ``problems:<source>`` — a registered ingestion source read through ``pipelines.ingest``.
- ``parquet:<path>``, ``jsonl:<path>`` or a bare path ending in ``.parquet``/``.jsonl``.
- ``mbpp:<hub id or file>[?config=...&split=train&decontaminate=mbppplus]`` — MBPP or MBPP+
  shaped programming tasks as code RL rows (``training.code_tasks``: a chat ``prompt`` and a
  ``code_problem`` JSON column), decontaminated against MBPP+; ``builtin:code_tasks`` is the
  offline generator of such tasks.

:func:`sft_examples` turns rows into TRL's prompt/completion format (loss on the completion
only); :func:`grpo_examples` turns rows into prompts plus the columns the rewards read.

Not guaranteed: that a table written by another asset has the columns a recipe expects; the
converters raise :class:`DatasetError` naming the row and column instead of guessing.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from pipelines.formats import BOXED_SYSTEM_PROMPT, budget_instruction
from pipelines.formats import system_prompt as _format_system_prompt
from training import code_tasks
from training.errors import DatasetError, DatasetMissing

LINEAGE_COLUMNS = ("run_id", "asset", "partition", "config_hash", "created_at")


@dataclass(frozen=True)
class LoadedData:
    """Rows plus where they came from; ``fallback_from`` is the spec that was missing."""

    rows: list[dict[str, Any]]
    spec: str
    fingerprint: str
    fallback_from: str | None = None

    def describe(self) -> dict[str, Any]:
        return {"spec": self.spec, "rows": len(self.rows), "fingerprint": self.fingerprint,
                "fallback_from": self.fallback_from}


# ---------------------------------------------------------------------------------------------
# Built-in sets


def _arith_items(n: int, seed: int) -> list[tuple[int, str, int, int]]:
    rng = random.Random(seed)
    seen, items = set(), []
    while len(items) < n:
        a, b, op = rng.randint(10, 99), rng.randint(2, 99), rng.choice("+-*")
        if (a, op, b) in seen:
            continue
        seen.add((a, op, b))
        value = a + b if op == "+" else a - b if op == "-" else a * b
        items.append((value, op, a, b))
    return items


_OP_WORD = {"+": "plus", "-": "minus", "*": "times"}
_OP_SIGN = {"+": "+", "-": "-", "*": "\\times"}


def builtin_arith(n: int = 64, seed: int = 0) -> list[dict[str, Any]]:
    """Problems with gold answers: ``problem_id, problem, answer, solution``."""
    rows = []
    for i, (value, op, a, b) in enumerate(_arith_items(n, seed)):
        rows.append({
            "problem_id": f"arith-{seed}-{i:04d}",
            "problem": f"What is {a} {_OP_WORD[op]} {b}?",
            "answer": str(value),
            "solution": f"We compute ${a} {_OP_SIGN[op]} {b} = {value}$.\n\n"
                        f"The answer is $\\boxed{{{value}}}$.",
        })
    return rows


ARITH1_SIZE = 207  # a, b in 1..9: 81 sums, 81 products, 45 differences with a >= b


def builtin_arith1(n: int = 64, seed: int = 0) -> list[dict[str, Any]]:
    """One-digit problems (``a + b``, ``a - b`` with ``a >= b``, ``a * b``; ``a, b`` in 1..9;
    :data:`ARITH1_SIZE` exist), the first ``n`` of them in a seeded order, worded and formatted
    like :func:`builtin_arith`; ids are ``arith1-<a><op><b>``, the same for every seed, so sets
    drawn with different seeds can be compared or made disjoint. Two-digit problems are nearly
    always beyond the embedded model; these are right some of the time after a format SFT,
    which is what GRPO needs (groups with right and wrong answers)."""
    if not 1 <= n <= ARITH1_SIZE:
        raise DatasetError(f"builtin:arith1 has {ARITH1_SIZE} distinct problems; ask for n (or "
                           f"dataset_limit) between 1 and {ARITH1_SIZE}, got {n}")
    pool = [(a, op, b) for op in "+-*" for a in range(1, 10) for b in range(1, 10)
            if op != "-" or a >= b]
    random.Random(seed).shuffle(pool)
    rows = []
    for a, op, b in pool[:n]:
        value = a + b if op == "+" else a - b if op == "-" else a * b
        rows.append({
            "problem_id": f"arith1-{a}{op}{b}",
            "problem": f"What is {a} {_OP_WORD[op]} {b}?",
            "answer": str(value),
            "solution": f"We compute ${a} {_OP_SIGN[op]} {b} = {value}$.\n\n"
                        f"The answer is $\\boxed{{{value}}}$.",
        })
    return rows


def builtin_arith_sft(n: int = 64, seed: int = 0) -> list[dict[str, Any]]:
    """Boxed-answer SFT rows (conversational prompt/completion)."""
    return [{"prompt": boxed_prompt(r["problem"]),
             "completion": [{"role": "assistant", "content": r["solution"]}]}
            for r in builtin_arith(n, seed)]


CHAIN_STEPS = (2, 5)  # operations per chain problem, inclusive


def _chain_items(n: int, seed: int) -> list[tuple[int, tuple[tuple[str, int], ...]]]:
    """``n`` distinct chains ``(start, ((op, operand), ...))``: a one-digit start, then 2 to 5
    one-digit operations, every intermediate value between 0 and 99."""
    rng = random.Random(seed)
    seen, items = set(), []
    tries = 0
    while len(items) < n:
        tries += 1
        if tries > 200 * n + 1000:
            raise DatasetError(f"builtin:chain: could not draw {n} distinct chains; ask for fewer")
        value = start = rng.randint(1, 9)
        ops: list[tuple[str, int]] = []
        for _ in range(rng.randint(*CHAIN_STEPS)):
            choices = [op for op, ok in (("+", value + 9 <= 99), ("-", value >= 2),
                                         ("*", 2 * value <= 99)) if ok]
            op = rng.choice(choices)
            operand = rng.randint(1, min(9, value) if op == "-" else
                                  min(9, 99 // value) if op == "*" and value else 9)
            if op == "*":
                operand = max(operand, 2)
            value = value + operand if op == "+" else value - operand if op == "-" else value * operand
            ops.append((op, operand))
        key = (start, tuple(ops))
        if key in seen:
            continue
        seen.add(key)
        items.append(key)
    return items


_CHAIN_WORD = {"+": "add {}", "-": "subtract {}", "*": "multiply by {}"}


def _chain_row(start: int, ops: Sequence[tuple[str, int]]) -> dict[str, Any]:
    words = [_CHAIN_WORD[op].format(x) for op, x in ops]
    problem = (f"Start with {start}. " + ", then ".join(words).capitalize()
               + ". What number do you get?")
    lines, value = [], start
    for op, x in ops:
        new = value + x if op == "+" else value - x if op == "-" else value * x
        lines.append(f"${value} {_OP_SIGN[op]} {x} = {new}$.")
        value = new
    tag = "".join(f"{op}{x}" for op, x in ops)
    return {"problem_id": f"chain-{start}{tag}", "problem": problem, "answer": str(value),
            "solution": "\n\n".join(lines) + f"\n\nThe answer is $\\boxed{{{value}}}$.",
            "steps": len(ops)}


def builtin_chain(n: int = 64, seed: int = 0) -> list[dict[str, Any]]:
    """Multi-step problems: a one-digit start and 2 to 5 one-digit operations (``Start with 3.
    Add 4, then multiply by 2. What number do you get?``), gold answer and a worked solution with
    one step per paragraph (blank-line separated), so answers are several reasoning steps long
    and their length varies with the number of operations (``steps``). Ids (``chain-3+4*2``)
    depend on the problem only, so sets drawn with different seeds can be made disjoint."""
    return [_chain_row(start, ops) for start, ops in _chain_items(n, seed)]


def builtin_chain_sft(n: int = 64, seed: int = 0) -> list[dict[str, Any]]:
    """Boxed-answer SFT rows of :func:`builtin_chain` problems (one step per paragraph)."""
    return [{"prompt": boxed_prompt(r["problem"]),
             "completion": [{"role": "assistant", "content": r["solution"]}]}
            for r in builtin_chain(n, seed)]


def builtin_sxs_sft(n: int = 64, seed: int = 0) -> list[dict[str, Any]]:
    """Think/speak SFT rows built with ``pipelines.sxs_align.sft_row`` (the real dataset's format)."""
    from pipelines.formats import SPEAK, THINK
    from pipelines.sxs_align import Segment, sft_row

    rows = []
    for value, op, a, b in _arith_items(n, seed):
        word, sign = _OP_WORD[op], _OP_SIGN[op]
        segments = [  # short on purpose: CPU GRPO recipes generate only 64 tokens
            Segment(THINK, (f"{a} {word} {b}: work it out.",)),
            Segment(SPEAK, (f"${a} {sign} {b}$",)),
            Segment(THINK, (f"that is {value}",)),
            Segment(SPEAK, (f"$= \\boxed{{{value}}}$",)),
        ]
        rows.append(sft_row(f"What is {a} {word} {b}?", segments))
    return rows


def _arith_trajectory(value: int, op: str, a: int, b: int) -> list[Any]:
    from pipelines.tir import KIND_ANSWER, KIND_CODE, Step

    expr = f"{a} {op} {b}"
    return [
        Step(f"I will let Python compute {expr}.", KIND_CODE, f"result = {expr}\nprint(result)",
             str(value)),
        Step(f"The interpreter printed {value}, so that is the result.", KIND_ANSWER,
             f"\\boxed{{{value}}}"),
    ]


def _builtin_tir_sft(rendering: str, n: int, seed: int) -> list[dict[str, Any]]:
    from pipelines.tir import sft_rows

    rows = []
    for value, op, a, b in _arith_items(n, seed):
        for row in sft_rows(f"What is {a} {_OP_WORD[op]} {b}?", _arith_trajectory(value, op, a, b),
                            rendering):
            rows.append({"prompt": row["prompt"], "completion": row["completion"]})
    return rows


def builtin_tir_sft_preserved(n: int = 32, seed: int = 0) -> list[dict[str, Any]]:
    return _builtin_tir_sft("state_preserved", n, seed)


def builtin_tir_sft_discarded(n: int = 32, seed: int = 0) -> list[dict[str, Any]]:
    return _builtin_tir_sft("state_discarded", n, seed)


def builtin_step_instances(n: int = 32, seed: int = 0) -> list[dict[str, Any]]:
    """Step instances in ``pipelines.mosaic.decomposition`` row format (two steps per problem)."""
    from pipelines.mosaic import decompose
    from pipelines.tir import Trajectory

    rows = []
    for i, (value, op, a, b) in enumerate(_arith_items(n, seed)):
        problem = f"What is {a} {_OP_WORD[op]} {b}?"
        traj = Trajectory(f"builtin-{seed}-{i:04d}", f"arith-{seed}-{i:04d}", "builtin", problem,
                          str(value), tuple(_arith_trajectory(value, op, a, b)))
        rows.extend(inst.to_row() for inst in decompose(traj))
    return rows


def builtin_code_tasks(n: int = 64, seed: int = 0) -> list[dict[str, Any]]:
    """Generated MBPP+-style function-writing tasks (``training.code_tasks``)."""
    return code_tasks.builtin_code_tasks(n=n, seed=seed)


BUILTINS: dict[str, Callable[..., list[dict[str, Any]]]] = {
    "arith": builtin_arith,
    "arith1": builtin_arith1,
    "arith_sft": builtin_arith_sft,
    "chain": builtin_chain,
    "chain_sft": builtin_chain_sft,
    "sxs_sft": builtin_sxs_sft,
    "tir_sft_preserved": builtin_tir_sft_preserved,
    "tir_sft_discarded": builtin_tir_sft_discarded,
    "step_instances": builtin_step_instances,
    "code_tasks": builtin_code_tasks,
}


# ---------------------------------------------------------------------------------------------
# Specs


def parse_spec(spec: str) -> tuple[str, str, dict[str, str]]:
    """``(kind, target, params)`` of a dataset spec; raises DatasetError for a malformed one."""
    if not isinstance(spec, str) or not spec.strip():
        raise DatasetError("dataset spec is empty; use e.g. builtin:arith, warehouse:<table>, "
                           "problems:<source> or a .parquet/.jsonl path")
    spec = spec.strip()
    base, _, query = spec.partition("?")
    params = dict(parse_qsl(query, keep_blank_values=True)) if query else {}
    kind, sep, target = base.partition(":")
    if not sep:
        if base.endswith((".parquet", ".jsonl")):
            return ("parquet" if base.endswith(".parquet") else "jsonl"), base, params
        raise DatasetError(f"dataset spec {spec!r} has no kind; write builtin:<name>, "
                           "warehouse:<table>, problems:<source>, parquet:<path> or jsonl:<path>")
    if kind not in ("builtin", "warehouse", "problems", "parquet", "jsonl", "mbpp"):
        raise DatasetError(f"dataset spec {spec!r}: unknown kind {kind!r}; use builtin, warehouse, "
                           "problems, parquet, jsonl or mbpp")
    if not target:
        raise DatasetError(f"dataset spec {spec!r} names no {kind} target")
    if kind == "builtin" and target not in BUILTINS:
        raise DatasetError(f"dataset spec {spec!r}: no built-in set {target!r}; built-ins are "
                           f"{sorted(BUILTINS)}")
    return kind, target, params


def _filter(rows: list[dict[str, Any]], params: Mapping[str, str], spec: str) -> list[dict[str, Any]]:
    if not params or not rows:
        return rows
    for column in params:
        if column not in rows[0]:
            raise DatasetError(f"dataset {spec!r}: cannot filter on {column!r}, the rows have "
                               f"columns {sorted(rows[0])}")
    return [r for r in rows if all(str(r.get(c)) == v for c, v in params.items())]


def load_rows(spec: str, *, limit: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """Rows of a spec (at most ``limit``); raises DatasetMissing when the data is not there."""
    kind, target, params = parse_spec(spec)
    if kind == "builtin":
        extra = {k: v for k, v in params.items() if k not in ("n", "seed")}
        if extra:
            raise DatasetError(f"dataset {spec!r}: built-in sets take only n and seed, got {sorted(extra)}")
        try:
            n = int(params.get("n", limit or 64))
            seed = int(params.get("seed", seed))
        except ValueError as exc:
            raise DatasetError(f"dataset {spec!r}: n and seed must be integers") from exc
        rows = BUILTINS[target](n=n, seed=seed)
    elif kind == "warehouse":
        from warehouse import Warehouse

        table, _, partition = target.partition("/")
        try:
            arrow = Warehouse().read(table, partition=partition or None)
        except ValueError as exc:
            raise DatasetError(f"dataset {spec!r}: {exc}") from exc
        rows = [{k: v for k, v in r.items() if k not in LINEAGE_COLUMNS} for r in arrow.to_pylist()]
        rows = _filter(rows, params, spec)
        if not rows:
            where = f"partition {partition!r} of " if partition else ""
            raise DatasetMissing(f"dataset {spec!r}: {where}warehouse table {table!r} has no "
                                 f"matching rows; materialize the `{table}` asset first (or set "
                                 "dataset_fallback to a builtin: set for a smoke run)")
    elif kind == "problems":
        from pipelines.ingest import load_source

        try:
            result = load_source(target, limit=limit, seed=seed)
        except KeyError as exc:
            raise DatasetError(f"dataset {spec!r}: {exc.args[0]}") from exc
        except FileNotFoundError as exc:
            raise DatasetMissing(f"dataset {spec!r}: {exc}") from exc
        except RuntimeError as exc:  # ingest errors (no local file and no hub) are runtime errors
            raise DatasetMissing(f"dataset {spec!r}: {exc}") from exc
        rows = _filter([p.to_row() for p in result.problems], params, spec)
    elif kind == "mbpp":
        rows = code_tasks.load_code_rows(target, params, limit=limit)
    else:
        path = Path(target).expanduser()
        if not path.is_file():
            raise DatasetMissing(f"dataset {spec!r}: no file at {path}")
        if kind == "parquet":
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
        else:
            rows = []
            with open(path, encoding="utf-8") as fh:
                for number, line in enumerate(fh, 1):
                    if line.strip():
                        try:
                            rows.append(json.loads(line))
                        except json.JSONDecodeError as exc:
                            raise DatasetError(f"{path}:{number}: not JSON ({exc.msg})") from exc
        rows = _filter([{k: v for k, v in r.items() if k not in LINEAGE_COLUMNS} for r in rows],
                       params, spec)
    if not rows:
        raise DatasetMissing(f"dataset {spec!r} has no rows")
    return rows[:limit] if limit is not None else rows


def fingerprint(rows: Sequence[Mapping[str, Any]]) -> str:
    """Content hash of rows (order matters), 16 hex chars."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update(json.dumps(row, sort_keys=True, default=str, ensure_ascii=False).encode())
        digest.update(b"\n")
    return digest.hexdigest()[:16]


def load_dataset(spec: str, *, fallback: str = "", limit: int | None = None,
                 seed: int = 0) -> LoadedData:
    """Rows of ``spec``, or of ``fallback`` when ``spec``'s data is missing (recorded)."""
    try:
        rows = load_rows(spec, limit=limit, seed=seed)
        return LoadedData(rows, spec, fingerprint(rows))
    except DatasetMissing:
        if not fallback:
            raise
        rows = load_rows(fallback, limit=limit, seed=seed)
        return LoadedData(rows, fallback, fingerprint(rows), fallback_from=spec)


# ---------------------------------------------------------------------------------------------
# Row formats


def system_prompt(answer_format: str) -> str:
    """The system message GRPO prompts start with, matching the SFT data of the same format."""
    return _format_system_prompt(answer_format)  # one home: pipelines.formats


def boxed_prompt(problem: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": BOXED_SYSTEM_PROMPT}, {"role": "user", "content": problem}]


def as_messages(value: Any, where: str) -> list[dict[str, str]] | str:
    """A prompt/completion value as a message list (from a list or JSON text) or plain text."""
    if isinstance(value, str):
        stripped = value.lstrip()
        if stripped.startswith("[{"):
            try:
                value = json.loads(stripped)
            except json.JSONDecodeError:
                return value
        else:
            return value
    if isinstance(value, Sequence) and value and all(isinstance(m, Mapping) for m in value):
        messages = []
        for i, m in enumerate(value):
            if not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise DatasetError(f"{where}: message {i} needs string 'role' and 'content', got "
                                   f"{ {k: type(v).__name__ for k, v in m.items()} }")
            messages.append({"role": m["role"], "content": m["content"]})
        return messages
    raise DatasetError(f"{where}: expected text or a non-empty list of chat messages, got "
                       f"{type(value).__name__}")


def sft_examples(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """TRL prompt/completion rows (loss on the completion only) from rows with
    ``prompt``+``completion``, ``messages`` (last one the assistant's) or ``problem``+``solution``."""
    out = []
    for index, row in enumerate(rows):
        where = f"row {index}"
        if "prompt" in row and "completion" in row:
            prompt = as_messages(row["prompt"], f"{where} prompt")
            completion = as_messages(row["completion"], f"{where} completion")
            if isinstance(prompt, str) != isinstance(completion, str):
                raise DatasetError(f"{where}: prompt and completion must both be text or both be "
                                   "chat messages")
        elif "messages" in row:
            messages = as_messages(row["messages"], f"{where} messages")
            if isinstance(messages, str) or len(messages) < 2 or messages[-1]["role"] != "assistant":
                raise DatasetError(f"{where}: 'messages' must be a chat ending with an assistant "
                                   "message (it becomes the completion)")
            prompt, completion = messages[:-1], messages[-1:]
        elif "problem" in row and "solution" in row:
            if not str(row["solution"] or "").strip():
                raise DatasetError(f"{where}: empty solution")
            prompt = boxed_prompt(str(row["problem"]))
            completion = [{"role": "assistant", "content": str(row["solution"])}]
        else:
            raise DatasetError(f"{where}: SFT rows need prompt+completion, messages, or "
                               f"problem+solution columns; got {sorted(row)}")
        if not (completion if isinstance(completion, str) else completion[-1]["content"]).strip():
            raise DatasetError(f"{where}: empty completion")
        out.append({"prompt": prompt, "completion": completion})
    if not out:
        raise DatasetError("no SFT rows")
    return out


def grpo_examples(rows: Sequence[Mapping[str, Any]], answer_format: str = "boxed",
                  keep: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """GRPO rows: ``prompt`` (kept if present, else built from ``problem`` with the system prompt
    of ``answer_format``) plus the other columns (rewards read them), or only ``keep``."""
    sys_prompt = system_prompt(answer_format)
    out = []
    for index, row in enumerate(rows):
        where = f"row {index}"
        if "prompt" in row:
            prompt = as_messages(row["prompt"], f"{where} prompt")
        elif "problem" in row:
            prompt = [{"role": "system", "content": sys_prompt},
                      {"role": "user", "content": str(row["problem"])}]
        else:
            raise DatasetError(f"{where}: GRPO rows need a 'prompt' or a 'problem' column; got "
                               f"{sorted(row)}")
        extra = {k: v for k, v in row.items() if k not in ("prompt", "completion", "messages")
                 and (keep is None or k in keep)}
        out.append({"prompt": prompt, **extra})
    if not out:
        raise DatasetError("no GRPO rows")
    return out


def add_budgets(rows: Sequence[Mapping[str, Any]], budgets: Sequence[int],
                seed: int = 0, style: str = "urgency") -> list[dict[str, Any]]:
    """Give every row one budget (cycling through ``budgets`` in a seeded order, so each budget
    gets an equal share) and append its instruction (``pipelines.formats.budget_instruction``:
    the paper's urgency words by default, ``style="numeric"`` states the budget) to the last
    user message."""
    if not budgets or any(isinstance(b, bool) or not isinstance(b, int) or b <= 0 for b in budgets):
        raise DatasetError(f"budgets must be positive integers, got {list(budgets)}")
    order = list(budgets)
    random.Random(seed).shuffle(order)
    out = []
    for index, row in enumerate(rows):
        budget = order[index % len(order)]
        instruction = budget_instruction(budget, budgets, style)
        prompt = row["prompt"]
        if isinstance(prompt, str):
            prompt = f"{prompt}\n\n{instruction}"
        else:
            prompt = [dict(m) for m in prompt]
            users = [i for i, m in enumerate(prompt) if m["role"] == "user"]
            if not users:
                raise DatasetError(f"row {index}: the prompt has no user message to add the "
                                   "budget instruction to")
            prompt[users[-1]]["content"] += f"\n\n{instruction}"
        out.append({**row, "prompt": prompt, "budget": budget})
    return out
